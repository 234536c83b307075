//! `overhead`: HTTP play-start throughput against redis-benchmark running the acquire script
//! on the same server, in one run on one machine.

use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use anyhow::Context;
use clap::Args;
use rand::random_range;
use serde_json::json;

use super::common::{acquire_argv, dur, median, round2, script_source};
use crate::api::{Api, Play, PlayArgs};
use crate::client::HttpClient;
use crate::procs::{LimiterProc, LimiterSetup, RedisProc};
use crate::stats::{Recorder, Report};

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
