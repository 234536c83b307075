//! `overload`: one limiter instance offered play-starts open loop at multiples of its own
//! capacity. The capacity is measured first (closed loop, every play granted), then each
//! multiple is offered for `--step` over many more connections than cores, latency counted from
//! when each play was due. Reported per multiple: the answered p50/p99 (shed answers included),
//! the share shed (`degraded` answers and 503 `overloaded`), 5xx and transport errors, and what
//! the store saw (`EVALSHA` calls per second, Redis main-thread CPU per second) and how many
//! answers were real decisions (granted or denied by the store, not by the failure policy).
//! With `--limiter-cpus` the spawned limiter runs under a CPU quota, as a Kubernetes CPU limit
//! would hold it, so that a loadgen on the same machine can offer it five times what it serves;
//! with `--redis-cpus` the spawned Redis does (store-bound: the shard is the bottleneck, as in a
//! launch spike on a busy shard).

use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use clap::Args;
use http::Method;
use rand::random_range;
use serde_json::json;
use tokio::sync::Semaphore;

use super::common::{Common, dur, round2, run_tag};
use crate::client::HttpClient;
use crate::procs::{LimiterSetup, RedisStats, Stack};
use crate::stats::{Recorder, Report};

#[derive(Args, Debug, Clone)]
pub struct OverloadArgs {
    #[command(flatten)]
    pub common: Common,
    /// Multiples of the measured capacity to offer, one after the other.
    #[arg(long, value_delimiter = ',', default_value = "1,2,5")]
    pub multiples: Vec<f64>,
    /// Time at each multiple.
    #[arg(long, default_value = "10s", value_parser = dur)]
    pub step: Duration,
    /// Capacity in play-starts per second, instead of measuring it.
    #[arg(long)]
    pub capacity: Option<f64>,
    /// Requests in flight while the capacity is measured (closed loop).
    #[arg(long, default_value_t = 32)]
    pub probe_concurrency: usize,
    /// How long the capacity is measured.
    #[arg(long, default_value = "5s", value_parser = dur)]
    pub probe: Duration,
    /// CPUs the spawned limiter may use (cgroup v1 `cpu` quota on a 10 ms period); 0: no limit.
    #[arg(long, default_value_t = 0.0)]
    pub limiter_cpus: f64,
    /// CPUs the spawned Redis may use (cgroup v1 `cpu` quota); 0: no limit.
    #[arg(long, default_value_t = 0.0)]
    pub redis_cpus: f64,
    /// `store.admission` of the spawned limiter (`adaptive`, the default, or `off`).
    #[arg(long)]
    pub admission: Option<String>,
    /// `http.max_queue_delay` of the spawned limiter (0s: off).
    #[arg(long, value_parser = dur)]
    pub max_queue_delay: Option<Duration>,
    /// After each multiple, offer `GET /healthz` at the same rate for the same time (a `healthz
    /// Nx` row): what this machine can deliver at that rate with no store and no decision, so a
    /// multiple it cannot offer is told from one the limiter cannot answer.
    #[arg(long)]
    pub healthz_control: bool,
    /// The latency budget the answered p99 is checked against.
    #[arg(long, default_value_t = 50.0)]
    pub p99_budget_ms: f64,
    /// Accounts plays are spread over (premium plan, 4 devices: granted unless shed).
    #[arg(long, default_value_t = 100_000)]
    pub accounts: usize,
}

/// A CPU quota for a process tree, removed when dropped.
struct CpuQuota(std::path::PathBuf);

impl CpuQuota {
    fn apply(pid: u32, cpus: f64) -> anyhow::Result<Self> {
        let dir = std::path::PathBuf::from(format!(
            "/sys/fs/cgroup/cpu/screenlimit-loadgen-{}-{pid}",
            std::process::id()
        ));
        std::fs::create_dir_all(&dir).with_context(|| {
            format!(
                "--limiter-cpus needs a writable cgroup v1 cpu hierarchy ({})",
                dir.display()
            )
        })?;
        // A 10 ms period, longer where the kernel's least quota (1 ms) needs it.
        let period_us = (1_000.0 / cpus).max(10_000.0) as u64;
        std::fs::write(dir.join("cpu.cfs_period_us"), period_us.to_string())?;
        let quota = ((cpus * period_us as f64) as u64).max(1_000);
        std::fs::write(dir.join("cpu.cfs_quota_us"), quota.to_string())?;
        std::fs::write(dir.join("cgroup.procs"), pid.to_string())
            .context("move the process into its cgroup")?;
        Ok(CpuQuota(dir))
    }
}

impl Drop for CpuQuota {
    fn drop(&mut self) {
        // The limiter is gone by now (the stack drops first); an emptied cgroup can be removed.
        let _ = std::fs::remove_dir(&self.0);
    }
}

/// What one play-start came to.
fn outcome(status: u16, body: &[u8]) -> &'static str {
    let degraded = body
        .windows(br#""degraded":true"#.len())
        .any(|w| w == br#""degraded":true"#);
    match status {
        200 if degraded => "shed (200 degraded)",
        200 => "granted",
        409 => "denied",
        503 => "shed (503)",
        s if s >= 500 => "5xx",
        _ => "other 4xx",
    }
}

fn play_body(tag: &str, accounts: usize) -> String {
    let account = random_range(0..accounts);
    let device = random_range(0..4);
    format!(
        r#"{{"account_id":"ov-{tag}-{account}","device_id":"dev-{device}","device_type":"tv","plan":"premium"}}"#
    )
}

/// Whether an outcome was decided by the store (not by the failure policy).
fn decided(outcome: &str) -> bool {
    matches!(outcome, "granted" | "denied")
}

/// Closed loop at `concurrency` for `window`: granted play-starts per second.
async fn measure_capacity(
    http: &Arc<HttpClient>,
    tag: &str,
    args: &OverloadArgs,
) -> anyhow::Result<f64> {
    let end = Instant::now() + args.probe;
    let workers: Vec<_> = (0..args.probe_concurrency)
        .map(|_| {
            let (http, tag, accounts) = (http.clone(), tag.to_owned(), args.accounts);
            tokio::spawn(async move {
                let mut granted = 0u64;
                while Instant::now() < end {
                    if let Ok(reply) = http
                        .send(Method::POST, "/v1/streams", play_body(&tag, accounts))
                        .await
                        && outcome(reply.status, &reply.body) == "granted"
                    {
                        granted += 1;
                    }
                }
                granted
            })
        })
        .collect();
    let mut granted = 0;
    for w in workers {
        granted += w.await?;
    }
    if granted == 0 {
        bail!("no play-start was granted while the capacity was measured");
    }
    Ok(granted as f64 / args.probe.as_secs_f64())
}

fn evalsha_calls(redis: &mut Option<RedisStats>) -> Option<u64> {
    redis.as_mut()?.command("evalsha").ok().map(|c| c.calls)
}

fn redis_main_cpu(redis: &mut Option<RedisStats>) -> Option<f64> {
    redis.as_mut()?.main_thread_cpu_seconds().ok()
}

/// What an open-loop step sends.
#[derive(Clone, Copy)]
enum Offer {
    PlayStart,
    /// `GET /healthz`: the control.
    Healthz,
}

/// Offers `rate` requests per second for `window`, each on its own task (open loop).
#[allow(clippy::too_many_arguments)]
async fn offer(
    http: &Arc<HttpClient>,
    rec: &Arc<Recorder>,
    op: &'static str,
    what: Offer,
    tag: &str,
    rate: f64,
    window: Duration,
    accounts: usize,
) {
    // Bounds the loadgen's own backlog: a limiter that stops answering must not grow it forever.
    let backlog = Arc::new(Semaphore::new(100_000));
    let every = Duration::from_secs_f64(1.0 / rate.max(1.0));
    let mut tick = tokio::time::interval(every);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Burst);
    let end = Instant::now() + window;
    let mut tasks = Vec::new();
    while Instant::now() < end {
        let due = tick.tick().await.into_std();
        let Ok(permit) = backlog.clone().try_acquire_owned() else {
            rec.record(op, due.elapsed(), "not sent (loadgen backlog full)");
            continue;
        };
        let (http, rec) = (http.clone(), rec.clone());
        let (method, path, body) = match what {
            Offer::PlayStart => (Method::POST, "/v1/streams", play_body(tag, accounts)),
            Offer::Healthz => (Method::GET, "/healthz", String::new()),
        };
        tasks.push(tokio::spawn(async move {
            let label = match (http.send(method, path, body).await, what) {
                (Ok(reply), Offer::PlayStart) => outcome(reply.status, &reply.body),
                (Ok(reply), Offer::Healthz) if reply.status == 200 => "200",
                (Ok(_), Offer::Healthz) => "not 200",
                (Err(_), _) => "transport error",
            };
            rec.record(op, due.elapsed(), label);
            drop(permit);
        }));
    }
    for t in tasks {
        let _ = t.await;
    }
}

pub async fn overload(args: &OverloadArgs) -> anyhow::Result<Report> {
    let common = &args.common;
    let (stack, _quotas) = if common.spawn {
        let mut setup =
            LimiterSetup::new(common.heartbeat_interval, common.ttl, common.store_timeout);
        setup.threads = common.limiter_threads;
        setup.batch_window = common.batch_window;
        setup.renewal_window = common.renewal_window;
        setup.admission = args.admission.clone();
        if let Some(delay) = args.max_queue_delay {
            setup.extra_yaml = format!("http: {{ max_queue_delay: {}ms }}\n", delay.as_millis());
        }
        let stack = tokio::task::spawn_blocking(move || Stack::spawn(1, &setup)).await??;
        let mut quotas = Vec::new();
        if let (true, Some(&pid)) = (args.limiter_cpus > 0.0, stack.limiter_pids().first()) {
            quotas.push(CpuQuota::apply(pid, args.limiter_cpus)?);
        }
        if let (true, Some(pid)) = (args.redis_cpus > 0.0, stack.redis_pid()) {
            quotas.push(CpuQuota::apply(pid, args.redis_cpus)?);
        }
        (stack, quotas)
    } else {
        (
            Stack::external(common.urls.clone(), common.redis.clone()),
            Vec::new(),
        )
    };
    let http = Arc::new(HttpClient::new(&stack.urls, common.connections)?);
    let tag = run_tag();
    let mut report = Report::new("overload");
    report.figure("connections", common.connections);
    report.figure("limiter_cpus", args.limiter_cpus);
    report.figure("redis_cpus", args.redis_cpus);
    report.figure("admission", args.admission.as_deref().unwrap_or("adaptive"));
    report.figure(
        "max_queue_delay_ms",
        args.max_queue_delay.map(|d| d.as_millis() as u64),
    );
    let started = Instant::now();
    let capacity = match args.capacity {
        Some(c) => c,
        None => measure_capacity(&http, &tag, args).await?,
    };
    report.figure("capacity_per_sec", round2(capacity));
    let mut redis = stack.stats();
    let rec = Arc::new(Recorder::new());
    let mut steps = Vec::new();
    for &multiple in &args.multiples {
        // The op name is the multiple: the report's table then has a row per step.
        let op: &'static str = Box::leak(format!("play_start {multiple}x").into_boxed_str());
        let rate = capacity * multiple;
        let (calls_before, redis_cpu_before, cpu_before, at) = (
            evalsha_calls(&mut redis),
            redis_main_cpu(&mut redis),
            stack.limiter_cpu(),
            Instant::now(),
        );
        offer(
            &http,
            &rec,
            op,
            Offer::PlayStart,
            &tag,
            rate,
            args.step,
            args.accounts,
        )
        .await;
        let secs = at.elapsed().as_secs_f64();
        let store_calls_per_sec = evalsha_calls(&mut redis)
            .zip(calls_before)
            .map(|(after, before)| round2((after - before) as f64 / secs));
        let redis_cpu_per_sec = redis_main_cpu(&mut redis)
            .zip(redis_cpu_before)
            .map(|(after, before)| round2((after - before) / secs));
        steps.push(json!({
            "multiple": multiple,
            "offered_per_sec": round2(rate),
            "store_evalsha_per_sec": store_calls_per_sec,
            "redis_main_cpu_per_sec": redis_cpu_per_sec,
            "limiter_cpu_per_sec": round2((stack.limiter_cpu() - cpu_before) / secs),
        }));
        if args.healthz_control {
            let op: &'static str = Box::leak(format!("healthz {multiple}x").into_boxed_str());
            offer(
                &http,
                &rec,
                op,
                Offer::Healthz,
                &tag,
                rate,
                args.step,
                args.accounts,
            )
            .await;
        }
    }
    rec.fill(&mut report, args.step.as_secs_f64());
    for (step, multiple) in steps.iter_mut().zip(&args.multiples) {
        // The report's rows are sorted by name ("10x" before "2x"): find each step's own.
        let name = format!("play_start {multiple}x");
        let Some(op) = report.ops.iter().find(|op| op.op == name) else {
            continue;
        };
        let count = op.count.max(1) as f64;
        let share = |labels: &[&str]| {
            let n: u64 = labels
                .iter()
                .filter_map(|l| op.outcomes.get(*l))
                .sum::<u64>();
            round2(100.0 * n as f64 / count)
        };
        let decisions: u64 = op
            .outcomes
            .iter()
            .filter(|(label, _)| decided(label))
            .map(|(_, n)| n)
            .sum();
        let decided_per_sec = decisions as f64 / args.step.as_secs_f64();
        step["decided_per_sec"] = json!(round2(decided_per_sec));
        step["decided_of_capacity_percent"] = json!(round2(100.0 * decided_per_sec / capacity));
        step["answered_p50_ms"] = json!(round2(op.p50_ms));
        step["answered_p99_ms"] = json!(round2(op.p99_ms));
        step["shed_percent"] = json!(share(&["shed (200 degraded)", "shed (503)"]));
        step["errors_percent"] = json!(share(&[
            "5xx",
            "transport error",
            "not sent (loadgen backlog full)"
        ]));
        let over_budget = op.p99_ms > args.p99_budget_ms;
        rec.checked("answered p99 within the budget", 1);
        if over_budget {
            rec.violated("answered p99 within the budget");
        }
        for bad in ["5xx", "transport error"] {
            if let Some(&n) = op.outcomes.get(bad) {
                rec.fail_n(&format!("{}: {bad}", op.op), n);
            }
        }
    }
    report.figure("steps", steps);
    report.duration_sec = started.elapsed().as_secs_f64();
    // Invariants and failures were added after the first fill: fill them again.
    let mut checked = Report::default();
    rec.fill(&mut checked, args.step.as_secs_f64());
    report.failures = checked.failures;
    report.invariants = checked.invariants;
    drop(stack);
    Ok(report)
}
