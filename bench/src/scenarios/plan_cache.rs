//! `plan-cache`: play-start with plans from a warm PostgreSQL cache against plans named in the
//! request, in one run on one machine.

use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use clap::Args;
use rand::random_range;
use serde_json::json;

use super::common::{dur, median, round2};
use crate::api::{Api, DEVICE_KINDS, Play, PlayArgs};
use crate::client::HttpClient;
use crate::procs::{LimiterProc, LimiterSetup, RedisProc, free_port};
use crate::stats::{Recorder, Report, histogram, summarize};

#[derive(Args, Debug, Clone)]
pub struct PlanCacheArgs {
    /// Accounts in the subscription table (all warmed in the cache first).
    #[arg(long, default_value_t = 20_000)]
    pub accounts: usize,
    /// Alternating rounds; each measures both limiters.
    #[arg(long, default_value_t = 5)]
    pub rounds: usize,
    #[arg(long, default_value = "4s", value_parser = dur)]
    pub step: Duration,
    /// Requests in flight per measurement (1 = pure latency).
    #[arg(long, value_delimiter = ',', default_value = "1,16")]
    pub concurrency: Vec<usize>,
    #[arg(long)]
    pub json: Option<PathBuf>,
}

struct Pg {
    dir: PathBuf,
    port: u16,
    child: Option<std::process::Child>,
}

fn pg_bin(tool: &str) -> anyhow::Result<PathBuf> {
    let mut versions: Vec<PathBuf> = std::fs::read_dir("/usr/lib/postgresql")?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .collect();
    versions.sort();
    versions
        .last()
        .map(|v| v.join("bin").join(tool))
        .filter(|p| p.exists())
        .with_context(|| format!("no PostgreSQL {tool} under /usr/lib/postgresql"))
}

fn as_postgres(program: PathBuf) -> Command {
    let root = Command::new("id")
        .arg("-u")
        .output()
        .is_ok_and(|o| o.stdout.starts_with(b"0\n"));
    if root {
        let mut c = Command::new("runuser");
        c.args(["-u", "postgres", "--"]).arg(program);
        c
    } else {
        Command::new(program)
    }
}

impl Pg {
    /// A throwaway PostgreSQL (as limiter/tests/support does it): initdb, postgres on a free
    /// loopback port, killed and removed on drop.
    fn start() -> anyhow::Result<Pg> {
        let dir = std::env::temp_dir().join(format!("screenlimit-bench-pg-{}", free_port()));
        std::fs::create_dir_all(&dir)?;
        let _ = Command::new("chown")
            .arg("postgres:postgres")
            .arg(&dir)
            .status();
        let data = dir.join("data");
        let out = as_postgres(pg_bin("initdb")?)
            .arg("-D")
            .arg(&data)
            .args(["-A", "trust", "-U", "postgres", "--no-sync"])
            .output()?;
        if !out.status.success() {
            bail!("initdb: {}", String::from_utf8_lossy(&out.stderr));
        }
        let port = free_port();
        let child = as_postgres(pg_bin("postgres")?)
            .arg("-D")
            .arg(&data)
            .args(["-p", &port.to_string(), "-c", "listen_addresses=127.0.0.1"])
            .arg("-c")
            .arg(format!("unix_socket_directories={}", dir.display()))
            .args(["-c", "fsync=off", "-c", "full_page_writes=off"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()?;
        let pg = Pg {
            dir,
            port,
            child: Some(child),
        };
        let deadline = Instant::now() + Duration::from_secs(20);
        while !Command::new(pg_bin("pg_isready")?)
            .args(["-h", "127.0.0.1", "-p", &port.to_string(), "-q"])
            .status()
            .is_ok_and(|s| s.success())
        {
            if Instant::now() > deadline {
                bail!("postgres not ready");
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        Ok(pg)
    }

    fn psql(&self, sql: &str) -> anyhow::Result<()> {
        let out = Command::new(pg_bin("psql")?)
            .args([
                "-h",
                "127.0.0.1",
                "-p",
                &self.port.to_string(),
                "-U",
                "postgres",
            ])
            .args(["-v", "ON_ERROR_STOP=1", "-q", "-c", sql])
            .output()?;
        if !out.status.success() {
            bail!("psql: {}", String::from_utf8_lossy(&out.stderr));
        }
        Ok(())
    }
}

impl Drop for Pg {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            if let Ok(pid) = std::fs::read_to_string(self.dir.join("data/postmaster.pid"))
                && let Some(pid) = pid.lines().next()
            {
                // Fast shutdown (every backend exits), then make sure.
                let _ = Command::new("kill").args(["-TERM", pid]).status();
                let deadline = Instant::now() + Duration::from_secs(5);
                while self.dir.join("data/postmaster.pid").exists() && Instant::now() < deadline {
                    std::thread::sleep(Duration::from_millis(50));
                }
                let _ = Command::new("kill").args(["-KILL", pid]).status();
            }
            let _ = child.kill();
            let _ = child.wait();
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

async fn closed_loop(
    api: &Api,
    concurrency: usize,
    step: Duration,
    accounts: usize,
    named_plan: bool,
) -> hdrhistogram::Histogram<u64> {
    let hist = Arc::new(std::sync::Mutex::new(histogram()));
    let end = Instant::now() + step;
    let tasks: Vec<_> = (0..concurrency)
        .map(|_| {
            let (api, hist) = (api.clone(), hist.clone());
            tokio::spawn(async move {
                while Instant::now() < end {
                    let a = random_range(0..accounts);
                    let d = random_range(0..4usize);
                    let (account, device) = (format!("pc-{a:08}"), format!("dev-{d}"));
                    let play = PlayArgs::new(
                        &account,
                        &device,
                        named_plan.then_some("premium"),
                        DEVICE_KINDS[d],
                    );
                    let t = Instant::now();
                    let out = api.play("play_start", &play, t).await;
                    if matches!(out, Play::Granted { .. }) {
                        let _ = hist
                            .lock()
                            .unwrap_or_else(|e| e.into_inner())
                            .record((t.elapsed().as_micros() as u64).max(1));
                    } else {
                        api.rec.fail("play_start not granted");
                    }
                }
            })
        })
        .collect();
    for t in tasks {
        let _ = t.await;
    }
    hist.lock().unwrap_or_else(|e| e.into_inner()).clone()
}

/// Two limiters on one Redis, one resolving plans from the request and one from PostgreSQL
/// through its cache (warmed first); alternating rounds of the same play-starts against each.
pub async fn plan_cache(args: &PlanCacheArgs) -> anyhow::Result<Report> {
    let mut report = Report::new("plan-cache");
    let pg = tokio::task::spawn_blocking(Pg::start).await??;
    pg.psql(&format!(
        "CREATE TABLE subscriptions (account_id text PRIMARY KEY, plan text NOT NULL); \
         INSERT INTO subscriptions SELECT 'pc-' || lpad(i::text, 8, '0'), 'premium' \
         FROM generate_series(0, {}) AS i;",
        args.accounts - 1
    ))?;
    let redis = RedisProc::start()?;
    let mut setup = LimiterSetup::new(
        Duration::from_secs(30),
        Duration::from_secs(90),
        Duration::from_millis(25),
    );
    let request = LimiterProc::start(&redis.url(), &setup)?;
    setup.extra_yaml = format!(
        "plan_source:\n  kind: postgres\n  postgres_url: \"host=127.0.0.1 port={} user=postgres dbname=postgres\"\n",
        pg.port
    );
    let postgres = LimiterProc::start(&redis.url(), &setup)?;
    let max_c = args.concurrency.iter().copied().max().unwrap_or(1);
    let rec = Arc::new(Recorder::new());
    let api_req = Api::new(
        HttpClient::new(std::slice::from_ref(&request.url), max_c)?,
        rec.clone(),
    );
    let api_pg = Api::new(
        HttpClient::new(std::slice::from_ref(&postgres.url), max_c)?,
        rec.clone(),
    );
    // Warm the cache: every account once through the postgres limiter.
    let warm = Instant::now();
    let next = Arc::new(AtomicU64::new(0));
    let tasks: Vec<_> = (0..16)
        .map(|_| {
            let (api, next) = (api_pg.clone(), next.clone());
            let accounts = args.accounts as u64;
            tokio::spawn(async move {
                loop {
                    let a = next.fetch_add(1, Ordering::Relaxed);
                    if a >= accounts {
                        return;
                    }
                    let account = format!("pc-{a:08}");
                    let play = PlayArgs::new(&account, "dev-0", None, ("tv", "Living Room TV"));
                    if !matches!(
                        api.play("warm", &play, Instant::now()).await,
                        Play::Granted { limit: 4, .. }
                    ) {
                        api.rec
                            .fail("warm-up play not granted on the database's plan");
                    }
                }
            })
        })
        .collect();
    for t in tasks {
        let _ = t.await;
    }
    report.figure("warm_up_secs", round2(warm.elapsed().as_secs_f64()));
    for &c in &args.concurrency {
        let (mut p50_req, mut p50_pg, mut rate_req, mut rate_pg, mut ratios) =
            (Vec::new(), Vec::new(), Vec::new(), Vec::new(), Vec::new());
        for round in 0..args.rounds {
            // Alternate which goes first so drift in machine load hits both alike.
            let order = if round % 2 == 0 {
                [false, true]
            } else {
                [true, false]
            };
            let mut pair = [None, None];
            for pg_side in order {
                let api = if pg_side { &api_pg } else { &api_req };
                let h = closed_loop(api, c, args.step, args.accounts, !pg_side).await;
                pair[pg_side as usize] = Some(summarize("play_start", &h, args.step.as_secs_f64()));
            }
            let (r, p) = (pair[0].take().unwrap(), pair[1].take().unwrap());
            let row = json!({"concurrency": c, "round": round,
                "request_p50_ms": r.p50_ms, "postgres_cached_p50_ms": p.p50_ms,
                "request_p99_ms": r.p99_ms, "postgres_cached_p99_ms": p.p99_ms,
                "request_per_sec": r.rate_per_sec.round(), "postgres_cached_per_sec": p.rate_per_sec.round(),
                "p50_ratio": round2(p.p50_ms / r.p50_ms)});
            eprintln!("plan-cache: {row}");
            report.rows.push(row);
            p50_req.push(r.p50_ms);
            p50_pg.push(p.p50_ms);
            rate_req.push(r.rate_per_sec);
            rate_pg.push(p.rate_per_sec);
            ratios.push(p.p50_ms / r.p50_ms);
        }
        report.figure(&format!("c{c}_request_p50_ms_median"), median(&mut p50_req));
        report.figure(
            &format!("c{c}_postgres_cached_p50_ms_median"),
            median(&mut p50_pg),
        );
        report.figure(
            &format!("c{c}_p50_ratio_median"),
            round2(median(&mut ratios)),
        );
        report.figure(
            &format!("c{c}_request_per_sec_median"),
            median(&mut rate_req).round(),
        );
        report.figure(
            &format!("c{c}_postgres_cached_per_sec_median"),
            median(&mut rate_pg).round(),
        );
    }
    // The database was asked once per account (warm-up) and not again.
    report.figure("accounts", args.accounts);
    let failures = rec.failures_snapshot();
    report.failures = failures;
    Ok(report)
}
