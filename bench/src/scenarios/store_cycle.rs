//! `store-cycle`: our acquire + release cycle straight against a Redis (the peer comparison's
//! other half; see scripts/bench-peer.sh): the scripts, or with `--native` the module's
//! `SL.ACQUIRE` and `SL.RELEASE` with the same keys and arguments.

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use clap::Args;
use rand::random_range;
use serde_json::json;

use super::common::{acquire_argv, dur, history_argv, round2, script_source};
use crate::procs::RedisStats;
use crate::stats::{Report, histogram, summarize};

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
    /// The module's commands instead of the scripts (the Redis must have the module loaded).
    #[arg(long)]
    pub native: bool,
}

/// One acquire or release, as the script or as the module's command: the same key and arguments.
fn cycle_call(
    native: bool,
    op: &str,
    script: &redis::Script,
    key: &str,
    args: Vec<Vec<u8>>,
) -> redis::Cmd {
    let mut command = match native {
        true => {
            let mut c = redis::cmd(op);
            c.arg(key);
            c
        }
        false => {
            let mut c = redis::cmd("EVALSHA");
            c.arg(script.get_hash()).arg(1).arg(key);
            c
        }
    };
    for arg in args {
        command.arg(arg);
    }
    command
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
            let (accounts, native) = (args.accounts, args.native);
            tokio::spawn(async move {
                let device = format!("mobile-{w:012x}");
                while Instant::now() < end {
                    let key = format!("sl:{{sc-{:08}}}", random_range(0..accounts));
                    let nonce: [u8; 16] = rand::random();
                    let started = Instant::now();
                    // As the limiter sends a play that names its plan: the plan's caps (six 0
                    // bytes) and no caps book.
                    let mut argv = acquire_argv(90_000, &device, &nonce);
                    argv[11] = vec![0; 6];
                    let granted: redis::RedisResult<Vec<redis::Value>> =
                        cycle_call(native, "SL.ACQUIRE", &acquire, &key, argv)
                            .query_async(&mut conn)
                            .await;
                    let ok = matches!(granted.as_deref(), Ok([redis::Value::Int(1), ..]));
                    let mut release_argv = vec![
                        b"90000".to_vec(),
                        b"180000".to_vec(),
                        device.as_bytes().to_vec(),
                        nonce.to_vec(),
                    ];
                    release_argv.extend(history_argv());
                    let released: redis::RedisResult<i64> =
                        cycle_call(native, "SL.RELEASE", &release, &key, release_argv)
                            .query_async(&mut conn)
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
    // time: only the top-level EVALSHAs (or the module's two commands) are summed.
    let top = || {
        all.iter()
            .filter(|(n, _)| matches!(n.as_str(), "evalsha" | "eval" | "sl.acquire" | "sl.release"))
    };
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
    report.figure("path", if args.native { "native" } else { "lua" });
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
