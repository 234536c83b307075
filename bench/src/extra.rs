//! Comparisons measured in one run on one machine: the limiter against the raw store
//! (`overhead`), our acquire + release cycle at the store (`store-cycle`, the peer comparison's
//! other half; see scripts/bench-peer.sh), and play-start with a warm plan cache against plans
//! named in the request (`plan-cache`).

use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use clap::Args;
use rand::random_range;
use serde_json::json;

use crate::api::{Api, DEVICE_KINDS, Play, PlayArgs};
use crate::client::HttpClient;
use crate::procs::{LimiterProc, LimiterSetup, RedisProc, RedisStats, free_port};
use crate::scenarios::dur;
use crate::stats::{Recorder, Report, histogram, summarize};

fn script_source(name: &str) -> &'static str {
    screenlimit_limiter::store::redis::Scripts::sources()
        .into_iter()
        .find(|(n, _)| *n == name)
        .map(|(_, s)| s)
        .expect("known script")
}

/// The `details` argument of acquire as `store/redis/record.rs::encode_details` builds it:
/// B body length, B device type code, then B length + bytes of meta, profile and title.
pub fn encode_details(type_code: u8, meta: &str, profile: &str, title: &str) -> Vec<u8> {
    let fields = [meta.as_bytes(), profile.as_bytes(), title.as_bytes()];
    let body = 1 + fields.iter().map(|f| 1 + f.len()).sum::<usize>();
    let mut out = vec![body as u8, type_code];
    for f in fields {
        out.push(f.len() as u8);
        out.extend_from_slice(f);
    }
    out
}

/// ARGV of an acquire (no take-over, no device caps) as the limiter sends it, except that the
/// caps are `''` rather than six 0 bytes so the list also works as command-line arguments (the
/// script reads both as "no cap").
fn acquire_argv(ttl_ms: u64, device: &str, nonce: &[u8]) -> Vec<Vec<u8>> {
    vec![
        ttl_ms.to_string().into_bytes(),
        (2 * ttl_ms).to_string().into_bytes(),
        b"premium".to_vec(),
        b"4".to_vec(),
        b"basic".to_vec(),
        b"1".to_vec(),
        device.as_bytes().to_vec(),
        nonce.to_vec(),
        encode_details(1, "Samsung Galaxy S23", "profile-1", "title:tt0111161"),
        Vec::new(),
        Vec::new(),
        Vec::new(),
    ]
}

fn median(v: &mut [f64]) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    if v.is_empty() { 0.0 } else { v[v.len() / 2] }
}

fn round2(x: f64) -> f64 {
    (x * 100.0).round() / 100.0
}

// ------------------------------------------------------------------------------------ overhead

#[derive(Args, Debug, Clone)]
pub struct OverheadArgs {
    /// Rounds; each runs redis-benchmark then HTTP play-starts; medians are reported.
    #[arg(long, default_value_t = 3)]
    pub rounds: usize,
    /// Seconds of HTTP play-starts per round (redis-benchmark runs a similar number of calls).
    #[arg(long, default_value = "8s", value_parser = dur)]
    pub step: Duration,
    /// HTTP requests in flight.
    #[arg(long, default_value_t = 32)]
    pub concurrency: usize,
    /// redis-benchmark connections.
    #[arg(long, default_value_t = 50)]
    pub bench_clients: usize,
    #[arg(long, default_value_t = 100_000)]
    pub accounts: usize,
    #[arg(long)]
    pub json: Option<PathBuf>,
}

pub async fn overhead(args: &OverheadArgs) -> anyhow::Result<Report> {
    let mut report = Report::new("overhead");
    let setup = LimiterSetup::new(
        Duration::from_secs(30),
        Duration::from_secs(90),
        Duration::from_millis(25),
    );
    let redis = RedisProc::start()?;
    let limiter = LimiterProc::start(&redis.url(), &setup)?;
    let mut stats = redis.stats()?;
    let client = redis::Client::open(redis.url())?;
    let mut conn = client.get_multiplexed_async_connection().await?;
    let sha: String = redis::cmd("SCRIPT")
        .arg("LOAD")
        .arg(script_source("acquire"))
        .query_async(&mut conn)
        .await?;
    let rec = Arc::new(Recorder::new());
    let api = Api::new(
        HttpClient::new(std::slice::from_ref(&limiter.url), args.concurrency)?,
        rec,
    );
    let (mut raw, mut http, mut raw_us, mut http_us, mut lim_cpu) =
        (Vec::new(), Vec::new(), Vec::new(), Vec::new(), Vec::new());
    let mut last_rate = 20_000.0f64;
    for round in 0..args.rounds {
        // 1. redis-benchmark: the acquire script alone, as many calls as ~step at the last rate.
        let n = ((last_rate * args.step.as_secs_f64()) as u64).max(20_000);
        stats.reset()?;
        let mut cmd = Command::new("redis-benchmark");
        cmd.args(["-h", "127.0.0.1", "-p", &redis.port.to_string()])
            .args(["-c", &args.bench_clients.to_string(), "-n", &n.to_string()])
            .args([
                "-r",
                &args.accounts.to_string(),
                "--csv",
                "EVALSHA",
                &sha,
                "1",
            ])
            .arg("sl:{__rand_int__}");
        for a in acquire_argv(90_000, "mobile-7f3a9c2e1b4d", b"bench-nonce-0001") {
            cmd.arg(String::from_utf8(a).expect("printable"));
        }
        let out = tokio::task::spawn_blocking(move || cmd.stderr(Stdio::null()).output())
            .await?
            .context("run redis-benchmark (apt-get install redis-tools)")?;
        let text = String::from_utf8_lossy(&out.stdout);
        let rps: f64 = text
            .lines()
            .nth(1)
            .and_then(|l| l.split(',').nth(1))
            .map(|f| f.trim_matches('"').parse().unwrap_or(0.0))
            .with_context(|| format!("redis-benchmark output: {text}"))?;
        let st = stats.command("evalsha")?;
        raw.push(rps);
        raw_us.push(st.usec_per_call());
        // 2. HTTP play-starts through the limiter, closed loop.
        stats.reset()?;
        let cpu0 = crate::procs::process_cpu_seconds(limiter.proc.pid()).unwrap_or(0.0);
        let done = Arc::new(AtomicU64::new(0));
        let failures = Arc::new(AtomicU64::new(0));
        let t0 = Instant::now();
        let end = t0 + args.step;
        let workers: Vec<_> = (0..args.concurrency)
            .map(|_| {
                let (api, done, failures) = (api.clone(), done.clone(), failures.clone());
                let accounts = args.accounts;
                tokio::spawn(async move {
                    while Instant::now() < end {
                        let a = random_range(0..accounts);
                        // One device per account, as redis-benchmark's calls do.
                        let account = format!("ov-{a:08}");
                        let play = PlayArgs::new(
                            &account,
                            "mobile-7f3a9c2e1b4d",
                            Some("premium"),
                            ("mobile", "Samsung Galaxy S23"),
                        );
                        match api.play("play_start", &play, Instant::now()).await {
                            Play::Granted { .. } => done.fetch_add(1, Ordering::Relaxed),
                            _ => failures.fetch_add(1, Ordering::Relaxed),
                        };
                    }
                })
            })
            .collect();
        for w in workers {
            let _ = w.await;
        }
        let secs = t0.elapsed().as_secs_f64();
        let rate = done.load(Ordering::Relaxed) as f64 / secs;
        let cpu = crate::procs::process_cpu_seconds(limiter.proc.pid()).unwrap_or(0.0) - cpu0;
        http.push(rate);
        http_us.push(stats.command("evalsha")?.usec_per_call());
        lim_cpu.push(cpu * 1e6 / done.load(Ordering::Relaxed).max(1) as f64);
        last_rate = rps;
        let row = json!({"round": round, "redis_benchmark_acquire_per_sec": rps.round(),
            "redis_usec_per_acquire_benchmark": round2(st.usec_per_call()),
            "http_play_start_per_sec": rate.round(), "ratio": round2(rate / rps),
            "redis_usec_per_acquire_http": round2(*http_us.last().unwrap_or(&0.0)),
            "limiter_cpu_us_per_play_start": round2(*lim_cpu.last().unwrap_or(&0.0)),
            "http_failures": failures.load(Ordering::Relaxed)});
        eprintln!("overhead: {row}");
        if failures.load(Ordering::Relaxed) > 0 {
            api.rec.fail("http play_start not granted");
        }
        report.rows.push(row);
    }
    let (r, h) = (median(&mut raw), median(&mut http));
    report.figure("redis_benchmark_acquire_per_sec_median", r.round());
    report.figure("http_play_start_per_sec_median", h.round());
    report.figure("ratio_http_to_raw", round2(h / r));
    report.figure(
        "redis_usec_per_acquire_raw_median",
        round2(median(&mut raw_us)),
    );
    report.figure(
        "redis_usec_per_acquire_http_median",
        round2(median(&mut http_us)),
    );
    report.figure(
        "limiter_cpu_us_per_play_start_median",
        round2(median(&mut lim_cpu)),
    );
    report.figure("http_concurrency", args.concurrency);
    report.figure("redis_benchmark_clients", args.bench_clients);
    Ok(report)
}

// ------------------------------------------------------------------------------------ store-cycle

#[derive(Args, Debug, Clone)]
pub struct StoreCycleArgs {
    /// The Redis to run against (e.g. the one scripts/bench-peer.sh starts).
    #[arg(long)]
    pub redis: String,
    #[arg(long, default_value = "10s", value_parser = dur)]
    pub duration: Duration,
    /// Cycles in flight.
    #[arg(long, default_value_t = 50)]
    pub concurrency: usize,
    #[arg(long, default_value_t = 100_000)]
    pub accounts: usize,
    #[arg(long)]
    pub json: Option<PathBuf>,
}

/// Acquire + release cycles of our scripts straight against Redis (no HTTP), as a client
/// library such as redis-semaphore would run them. Reports cycles/s and Redis µs per cycle.
pub async fn store_cycle(args: &StoreCycleArgs) -> anyhow::Result<Report> {
    let mut report = Report::new("store-cycle");
    let client = redis::Client::open(args.redis.as_str())?;
    let conn = client.get_multiplexed_async_connection().await?;
    let acquire = redis::Script::new(script_source("acquire"));
    let release = redis::Script::new(script_source("release"));
    let mut stats = RedisStats::connect(&args.redis)?;
    // Load both scripts so every call of the measured window is one EVALSHA.
    {
        let mut c = conn.clone();
        for s in [script_source("acquire"), script_source("release")] {
            let _: String = redis::cmd("SCRIPT")
                .arg("LOAD")
                .arg(s)
                .query_async(&mut c)
                .await?;
        }
    }
    stats.reset()?;
    let cycles = Arc::new(AtomicU64::new(0));
    let failures = Arc::new(AtomicU64::new(0));
    let hist = Arc::new(std::sync::Mutex::new(histogram()));
    let t0 = Instant::now();
    let end = t0 + args.duration;
    let tasks: Vec<_> = (0..args.concurrency)
        .map(|w| {
            let (mut conn, acquire, release) = (conn.clone(), acquire.clone(), release.clone());
            let (cycles, failures, hist) = (cycles.clone(), failures.clone(), hist.clone());
            let accounts = args.accounts;
            tokio::spawn(async move {
                let device = format!("mobile-{w:012x}");
                while Instant::now() < end {
                    let key = format!("sl:{{sc-{:08}}}", random_range(0..accounts));
                    let nonce: [u8; 16] = rand::random();
                    let started = Instant::now();
                    // The caps argument as the limiter sends it: six 0 bytes.
                    let granted: redis::RedisResult<Vec<redis::Value>> = {
                        let mut inv = acquire.key(&key);
                        let mut argv = acquire_argv(90_000, &device, &nonce);
                        argv[11] = vec![0; 6];
                        for a in argv {
                            inv.arg(a);
                        }
                        inv.invoke_async(&mut conn).await
                    };
                    let ok = matches!(granted.as_deref(), Ok([redis::Value::Int(1), ..]));
                    let released: redis::RedisResult<i64> = release
                        .key(&key)
                        .arg(90_000)
                        .arg(180_000)
                        .arg(&device)
                        .arg(&nonce[..])
                        .invoke_async(&mut conn)
                        .await;
                    if ok && matches!(released, Ok(1)) {
                        cycles.fetch_add(1, Ordering::Relaxed);
                        let _ = hist
                            .lock()
                            .unwrap_or_else(|e| e.into_inner())
                            .record((started.elapsed().as_micros() as u64).max(1));
                    } else {
                        failures.fetch_add(1, Ordering::Relaxed);
                    }
                }
            })
        })
        .collect();
    for t in tasks {
        let _ = t.await;
    }
    let secs = t0.elapsed().as_secs_f64();
    let n = cycles.load(Ordering::Relaxed);
    let all: Vec<_> = stats.commandstats()?;
    // Redis 7 also counts the commands a script runs on their own lines, inside the script's
    // time: only the top-level EVALSHAs are summed.
    let top = || all.iter().filter(|(n, _)| n == "evalsha" || n == "eval");
    let usec: u64 = top().map(|(_, s)| s.usec).sum();
    let calls: u64 = top().map(|(_, s)| s.calls).sum();
    report.duration_sec = secs;
    report.figure("cycles", n);
    report.figure("cycles_per_sec", (n as f64 / secs).round());
    report.figure(
        "redis_usec_per_cycle",
        round2(usec as f64 / n.max(1) as f64),
    );
    report.figure(
        "redis_calls_per_cycle",
        round2(calls as f64 / n.max(1) as f64),
    );
    report.figure(
        "commandstats",
        json!(
            all.iter()
                .map(|(k, s)| (k.clone(), json!({"calls": s.calls, "usec": s.usec})))
                .collect::<serde_json::Map<_, _>>()
        ),
    );
    report.figure("concurrency", args.concurrency);
    let h = hist.lock().unwrap_or_else(|e| e.into_inner()).clone();
    report.figure("cycle_latency", summarize("cycle", &h, secs));
    let f = failures.load(Ordering::Relaxed);
    if f > 0 {
        report
            .failures
            .insert("cycle not granted or not released".into(), f);
    }
    Ok(report)
}

// ------------------------------------------------------------------------------------ plan-cache

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
