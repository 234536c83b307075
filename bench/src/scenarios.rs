//! The scenarios: `max`, `steady`, `race`, `churn` (see `BENCHMARKS.md` for what each proves).

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::Context;
use clap::{Args, Parser, Subcommand};
use rand::random_range;
use serde_json::json;
use tokio::sync::Barrier;
use tokio::task::JoinHandle;

use crate::api::{Api, Beat, DEVICE_KINDS, Play, PlayArgs};
use crate::client::HttpClient;
use crate::procs::{LimiterSetup, Stack};
use crate::stats::{Recorder, Report, loadavg, summarize};

/// A command-line duration (`5s`, `250ms`), for every scenario's flags.
pub(crate) fn dur(s: &str) -> Result<Duration, humantime::DurationError> {
    humantime::parse_duration(s)
}

#[derive(Parser, Debug)]
#[command(
    name = "screenlimit-loadgen",
    about = "Load scenarios against screenlimit-limiter over HTTP/1.1 keep-alive, with HDR latency histograms and invariant checks"
)]
pub struct Cli {
    #[command(subcommand)]
    pub scenario: Scenario,
}

#[derive(Subcommand, Debug)]
pub enum Scenario {
    /// Highest sustained play-start and heartbeat rates (closed loop, rising concurrency).
    Max(MaxArgs),
    /// A live population heartbeating on its interval plus play-starts at a fixed rate.
    Steady(SteadyArgs),
    /// Accounts each hit by limit+N simultaneous plays: over-admissions must be 0.
    Race(RaceArgs),
    /// Crash-heavy traffic: time from a client's death to its slot being reusable.
    Churn(ChurnArgs),
    /// HTTP play-start throughput vs redis-benchmark running the acquire script, same server.
    Overhead(crate::extra::OverheadArgs),
    /// Our acquire + release cycle straight against a Redis (the peer comparison's half).
    StoreCycle(crate::extra::StoreCycleArgs),
    /// Play-start with plans from a warm PostgreSQL cache vs plans named in the request.
    PlanCache(crate::extra::PlanCacheArgs),
    /// One shard's slice of the fleet: Redis main-thread CPU per heartbeat and per play-start
    /// against a SET baseline, batch depth, and the projection to the seed's peak.
    Fleet(crate::fleet::FleetArgs),
    /// Thousands of half-sent requests against one limiter while real traffic goes on: each
    /// must be answered 408 and closed within the body deadline; fds and latency are reported.
    SlowClients(crate::hostile::SlowClientsArgs),
    /// Play-starts offered open loop at multiples of one instance's measured capacity: answered
    /// p99, the share shed, errors and the store's load at each multiple.
    Overload(crate::overload::OverloadArgs),
}

#[derive(Args, Debug, Clone)]
pub struct Common {
    /// Limiter base URL(s), comma separated; requests are spread round-robin.
    #[arg(
        long = "url",
        value_delimiter = ',',
        default_value = "http://127.0.0.1:8080"
    )]
    pub urls: Vec<String>,
    /// Start a throwaway redis-server and limiter(s) for this run (binary from
    /// $SCREENLIMIT_LIMITER_BIN or target/release).
    #[arg(long)]
    pub spawn: bool,
    /// Limiter processes to spawn (with --spawn).
    #[arg(long, default_value_t = 1)]
    pub limiters: usize,
    /// Redis to read INFO from (set by --spawn); enables per-op Redis costs and memory.
    #[arg(long)]
    pub redis: Option<String>,
    /// HTTP/1.1 keep-alive connections in all.
    #[arg(long, default_value_t = 64)]
    pub connections: usize,
    /// Write the report as JSON here.
    #[arg(long)]
    pub json: Option<PathBuf>,
    /// Progress line interval on stderr (elapsed/total, operations, current rate, errors); a
    /// run shorter than this prints none.
    #[arg(long, default_value = "5s", value_parser = dur)]
    pub progress: Duration,
    /// No progress lines.
    #[arg(long)]
    pub no_progress: bool,
    /// Lease heartbeat interval of spawned limiters.
    #[arg(long, default_value = "30s", value_parser = dur)]
    pub heartbeat_interval: Duration,
    /// Lease TTL of spawned limiters.
    #[arg(long, default_value = "90s", value_parser = dur)]
    pub ttl: Duration,
    /// Store deadline of spawned limiters (their default is 25ms).
    #[arg(long, default_value = "25ms", value_parser = dur)]
    pub store_timeout: Duration,
    /// Do not print the table.
    #[arg(long)]
    pub quiet: bool,
    /// `store.batch_window` of spawned limiters: how long a shard's batch waits for company
    /// (default: the limiter's own, 0s; `fleet`: 2ms). `fleet` also uses it in its model, so give
    /// it with `--url` too.
    #[arg(long, value_parser = dur)]
    pub batch_window: Option<Duration>,
    /// Serving lanes (`threads`) of each spawned limiter; 0: one per CPU.
    #[arg(long, default_value_t = 0)]
    pub limiter_threads: usize,
    /// With `--spawn`: the spawned Redis loads this screenlimit module (`cargo build --release
    /// -p screenlimit-redis-module`), so the limiters take the native path.
    #[arg(long)]
    pub redis_module: Option<PathBuf>,
}

#[derive(Args, Debug, Clone)]
pub struct MaxArgs {
    #[command(flatten)]
    pub common: Common,
    /// Operations to drive, one after the other: play-start, heartbeat.
    #[arg(long, value_delimiter = ',', default_value = "play-start,heartbeat")]
    pub ops: Vec<String>,
    /// Concurrency levels (requests in flight).
    #[arg(long, value_delimiter = ',', default_value = "4,8,16,32,64")]
    pub levels: Vec<usize>,
    /// Time at each level.
    #[arg(long, default_value = "10s", value_parser = dur)]
    pub step: Duration,
    /// Accounts play-starts are spread over (premium plan, 4 devices each: always granted).
    #[arg(long, default_value_t = 100_000)]
    pub accounts: usize,
    /// Leases loaded before the heartbeat steps.
    #[arg(long, default_value_t = 20_000)]
    pub leases: usize,
    #[arg(long, default_value_t = 5.0)]
    pub p99_target_ms: f64,
}

#[derive(Args, Debug, Clone)]
pub struct SteadyArgs {
    #[command(flatten)]
    pub common: Common,
    /// Live leases held (streams per account of a standard plan, see --per-account).
    #[arg(long, default_value_t = 100_000)]
    pub leases: usize,
    #[arg(long, default_value_t = 2)]
    pub per_account: usize,
    /// Measured window after the leases are loaded.
    #[arg(long, default_value = "60s", value_parser = dur)]
    pub duration: Duration,
    /// New plays per second (each: graceful stop of a random stream, then a play from a new
    /// device of the same full account).
    #[arg(long, default_value_t = 5000.0)]
    pub play_rate: f64,
    /// Accounts listed per second to check the cap.
    #[arg(long, default_value_t = 50)]
    pub checks_per_sec: usize,
}

#[derive(Args, Debug, Clone)]
pub struct RaceArgs {
    #[command(flatten)]
    pub common: Common,
    #[arg(long, default_value_t = 10_000)]
    pub accounts: usize,
    #[arg(long, default_value = "standard")]
    pub plan: String,
    /// Plays per account beyond its limit (the plan's limit is learned from the answers).
    #[arg(long, default_value_t = 3)]
    pub extra: usize,
    /// Accounts raced at once.
    #[arg(long, default_value_t = 200)]
    pub wave: usize,
}

#[derive(Args, Debug, Clone)]
pub struct ChurnArgs {
    #[command(flatten)]
    pub common: Common,
    /// Concurrent clients, each on its own basic (1-stream) account.
    #[arg(long, default_value_t = 200)]
    pub clients: usize,
    #[arg(long, default_value = "60s", value_parser = dur)]
    pub duration: Duration,
    /// Share of lifecycles ending in a crash (silence); the rest stop gracefully or are
    /// taken over.
    #[arg(long, default_value_t = 50)]
    pub crash_pct: u32,
    #[arg(long, default_value_t = 30)]
    pub stop_pct: u32,
    /// How often a new device retries the crashed client's slot.
    #[arg(long, default_value = "50ms", value_parser = dur)]
    pub probe_every: Duration,
    /// Tolerance on top of TTL + probe period before a slot counts as held past its TTL.
    #[arg(long, default_value = "250ms", value_parser = dur)]
    pub slack: Duration,
}

impl Scenario {
    fn common(&self) -> Option<&Common> {
        match self {
            Scenario::Max(a) => Some(&a.common),
            Scenario::Steady(a) => Some(&a.common),
            Scenario::Race(a) => Some(&a.common),
            Scenario::Churn(a) => Some(&a.common),
            Scenario::Fleet(a) => Some(&a.common),
            _ => None,
        }
    }
    fn name(&self) -> &'static str {
        match self {
            Scenario::Max(_) => "max",
            Scenario::Steady(_) => "steady",
            Scenario::Race(_) => "race",
            Scenario::Churn(_) => "churn",
            Scenario::Overhead(_) => "overhead",
            Scenario::StoreCycle(_) => "store-cycle",
            Scenario::PlanCache(_) => "plan-cache",
            Scenario::Fleet(_) => "fleet",
            Scenario::SlowClients(_) => "slow-clients",
            Scenario::Overload(_) => "overload",
        }
    }
}

fn finish(mut report: Report, json: Option<&PathBuf>, quiet: bool) -> anyhow::Result<Report> {
    report.machine.loadavg_end = loadavg();
    if !quiet {
        print!("{}", report.table());
    }
    if let Some(path) = json {
        std::fs::write(path, serde_json::to_string_pretty(&report)?)
            .with_context(|| format!("write {}", path.display()))?;
    }
    Ok(report)
}

impl Common {
    /// The progress period, unless progress lines are off.
    pub fn progress_every(&self) -> Option<Duration> {
        (!self.no_progress).then_some(self.progress)
    }
}

/// Progress lines on stderr for one phase of `total` (when it has a planned length).
pub(crate) fn progress(
    rec: Arc<Recorder>,
    common: &Common,
    label: &'static str,
    total: Option<Duration>,
) -> JoinHandle<()> {
    crate::progress::spawn(
        rec,
        common.progress_every(),
        label,
        total,
        std::io::stderr(),
    )
}

pub(crate) fn run_tag() -> String {
    format!("{:06x}", random_range(0..0xff_ffffu32))
}

/// Runs one scenario and returns its report (already printed unless `--quiet`, and written to
/// `--json`).
pub async fn run(cli: Cli) -> anyhow::Result<Report> {
    let scenario = cli.scenario;
    let started = Instant::now();
    let common = match &scenario {
        Scenario::Overhead(a) => {
            let mut r = crate::extra::overhead(a).await?;
            r.duration_sec = started.elapsed().as_secs_f64();
            return finish(r, a.json.as_ref(), false);
        }
        Scenario::StoreCycle(a) => {
            let r = crate::extra::store_cycle(a).await?;
            return finish(r, a.json.as_ref(), false);
        }
        Scenario::PlanCache(a) => {
            let mut r = crate::extra::plan_cache(a).await?;
            r.duration_sec = started.elapsed().as_secs_f64();
            return finish(r, a.json.as_ref(), false);
        }
        Scenario::SlowClients(a) => {
            let r = crate::hostile::slow_clients(a).await?;
            return finish(r, a.common.json.as_ref(), a.common.quiet);
        }
        Scenario::Overload(a) => {
            let r = crate::overload::overload(a).await?;
            return finish(r, a.common.json.as_ref(), a.common.quiet);
        }
        other => other
            .common()
            .expect("load scenarios have common flags")
            .clone(),
    };
    let stack = if common.spawn {
        let mut setup =
            LimiterSetup::new(common.heartbeat_interval, common.ttl, common.store_timeout);
        setup.threads = common.limiter_threads;
        setup.redis_module = common.redis_module.clone();
        setup.batch_window = match &scenario {
            Scenario::Fleet(_) => Some(
                common
                    .batch_window
                    .unwrap_or(crate::fleet::DEFAULT_BATCH_WINDOW),
            ),
            _ => common.batch_window,
        };
        let limiters = common.limiters;
        tokio::task::spawn_blocking(move || Stack::spawn(limiters, &setup)).await??
    } else {
        Stack::external(common.urls.clone(), common.redis.clone())
    };
    let connections = match &scenario {
        Scenario::Max(a) => a.levels.iter().copied().max().unwrap_or(1),
        Scenario::Fleet(a) => common.connections.max(a.clients),
        _ => common.connections,
    };
    let rec = Arc::new(Recorder::new());
    let api = Api::new(HttpClient::new(&stack.urls, connections)?, rec.clone());
    let mut report = Report::new(scenario.name());
    report.figure("limiters", stack.urls.len());
    report.figure("connections", connections);
    let measured = match &scenario {
        Scenario::Max(a) => max(a, &api, &stack, &mut report).await?,
        Scenario::Steady(a) => steady(a, &api, &stack, &mut report).await?,
        Scenario::Race(a) => race(a, &api, &mut report).await?,
        Scenario::Churn(a) => churn(a, &api, &mut report).await?,
        Scenario::Fleet(a) => crate::fleet::fleet(a, &api, &stack, &mut report).await?,
        _ => unreachable!("handled above"),
    };
    report.duration_sec = started.elapsed().as_secs_f64();
    rec.fill(&mut report, measured.as_secs_f64());
    drop(stack);
    finish(report, common.json.as_ref(), common.quiet)
}

/// Redis and limiter costs over a window: call `end` with the requests made meanwhile.
struct CostWindow {
    stats: Option<crate::procs::RedisStats>,
    redis_cpu: f64,
    redis_main_cpu: f64,
    limiter_cpu: f64,
    started: Instant,
}

impl CostWindow {
    fn start(stack: &Stack) -> Self {
        let mut stats = stack.stats();
        let redis_cpu = stats
            .as_mut()
            .and_then(|s| {
                s.reset().ok()?;
                s.cpu_seconds().ok()
            })
            .unwrap_or(0.0);
        let redis_main_cpu = stats
            .as_mut()
            .and_then(|s| s.main_thread_cpu_seconds().ok())
            .unwrap_or(0.0);
        CostWindow {
            stats,
            redis_cpu,
            redis_main_cpu,
            limiter_cpu: stack.limiter_cpu(),
            started: Instant::now(),
        }
    }

    fn end(mut self, stack: &Stack, requests: u64) -> serde_json::Value {
        let secs = self.started.elapsed().as_secs_f64();
        let per_req = |cpu: f64| {
            if requests == 0 {
                0.0
            } else {
                cpu * 1e6 / requests as f64
            }
        };
        let mut out = json!({});
        if let Some(stats) = self.stats.as_mut()
            && let (Ok(evalsha), Ok(cpu)) = (stats.command("evalsha"), stats.cpu_seconds())
        {
            out["redis_evalsha_calls"] = json!(evalsha.calls);
            out["redis_usec_per_evalsha"] = json!(round2(evalsha.usec_per_call()));
            out["redis_cpu_us_per_request"] = json!(round2(per_req(cpu - self.redis_cpu)));
            out["redis_cores_busy"] = json!(round2((cpu - self.redis_cpu) / secs));
        }
        if let Some(main) = self
            .stats
            .as_mut()
            .and_then(|s| s.main_thread_cpu_seconds().ok())
        {
            out["redis_main_thread_cpu_us_per_request"] =
                json!(round2(per_req(main - self.redis_main_cpu)));
        }
        if !stack.limiters.is_empty() {
            let cpu = stack.limiter_cpu() - self.limiter_cpu;
            out["limiter_cpu_us_per_request"] = json!(round2(per_req(cpu)));
            out["limiter_cores_busy"] = json!(round2(cpu / secs));
        }
        out
    }
}

pub(crate) fn round2(x: f64) -> f64 {
    (x * 100.0).round() / 100.0
}

pub(crate) fn kind(i: usize) -> (&'static str, &'static str) {
    DEVICE_KINDS[i % DEVICE_KINDS.len()]
}

/// Loads `count` streams with `workers` concurrent play-starts; `args(i)` gives
/// (account, device, plan, kind index). Returns the stream ids (empty where not granted).
pub(crate) async fn load(
    api: &Api,
    count: usize,
    workers: usize,
    args: Arc<dyn Fn(usize) -> (String, String, &'static str) + Send + Sync>,
) -> Vec<String> {
    let out = Arc::new(Mutex::new(vec![String::new(); count]));
    let next = Arc::new(AtomicUsize::new(0));
    let tasks: Vec<_> = (0..workers)
        .map(|_| {
            let (api, out, next, args) = (api.clone(), out.clone(), next.clone(), args.clone());
            tokio::spawn(async move {
                loop {
                    let i = next.fetch_add(1, Ordering::Relaxed);
                    if i >= count {
                        return;
                    }
                    let (account, device, plan) = args(i);
                    let (device_type, meta) = kind(i);
                    let play = PlayArgs::new(&account, &device, Some(plan), (device_type, meta));
                    match api.play("load", &play, Instant::now()).await {
                        Play::Granted { stream_id, .. } => {
                            out.lock().unwrap_or_else(|e| e.into_inner())[i] = stream_id
                        }
                        other => api
                            .rec
                            .fail(&format!("load: not granted ({})", short(&other))),
                    }
                }
            })
        })
        .collect();
    for t in tasks {
        let _ = t.await;
    }
    std::mem::take(&mut *out.lock().unwrap_or_else(|e| e.into_inner()))
}

pub(crate) fn short(play: &Play) -> String {
    match play {
        Play::Granted { .. } => "granted".into(),
        Play::Denied { .. } => "409".into(),
        Play::Other(0, _) => "transport".into(),
        Play::Other(s, e) => format!("{s} {e}"),
    }
}

pub(crate) fn beat_label(beat: &Beat) -> String {
    match beat {
        Beat::Ok => "200".into(),
        Beat::Expired => "410 lease_expired".into(),
        Beat::Revoked => "410 stream_revoked".into(),
        Beat::Other(0, _) => "transport".into(),
        Beat::Other(s, e) => format!("{s} {e}"),
    }
}

// ------------------------------------------------------------------------------------- max

async fn max(
    args: &MaxArgs,
    api: &Api,
    stack: &Stack,
    report: &mut Report,
) -> anyhow::Result<Duration> {
    let tag = run_tag();
    let mut measured = Duration::ZERO;
    for op in &args.ops {
        let heartbeat = match op.as_str() {
            "play-start" => false,
            "heartbeat" => true,
            other => anyhow::bail!("max: unknown op {other} (play-start, heartbeat)"),
        };
        let pool: Arc<Vec<(String, String)>> = if heartbeat {
            let t = tag.clone();
            let names =
                Arc::new(move |i: usize| (format!("mh-{t}-{i}"), "dev-0".to_owned(), "premium"));
            let ids = load(
                api,
                args.leases,
                args.levels.iter().copied().max().unwrap_or(1),
                names,
            )
            .await;
            Arc::new(
                ids.into_iter()
                    .enumerate()
                    .map(|(i, id)| (format!("mh-{tag}-{i}"), id))
                    .filter(|(_, id)| !id.is_empty())
                    .collect(),
            )
        } else {
            Arc::new(Vec::new())
        };
        let mut best: Option<serde_json::Value> = None;
        for &level in &args.levels {
            let rec = Arc::new(Recorder::new());
            let level_api = Api {
                http: api.http.clone(),
                rec: rec.clone(),
            };
            let ticker = progress(rec.clone(), &args.common, "max", Some(args.step));
            let window = CostWindow::start(stack);
            let t0 = Instant::now();
            let end = t0 + args.step;
            let workers: Vec<_> = (0..level)
                .map(|_| {
                    let (api, pool, tag) = (level_api.clone(), pool.clone(), tag.clone());
                    let accounts = args.accounts;
                    tokio::spawn(async move {
                        while Instant::now() < end {
                            if heartbeat {
                                let (account, id) = &pool[random_range(0..pool.len())];
                                let beat = api.heartbeat(account, id, Instant::now()).await;
                                if beat != Beat::Ok {
                                    api.rec.fail(&format!("heartbeat: {}", beat_label(&beat)));
                                }
                            } else {
                                let a = random_range(0..accounts);
                                let d = random_range(0..4usize);
                                let account = format!("mp-{tag}-{a}");
                                let device = format!("dev-{d}");
                                let play =
                                    PlayArgs::new(&account, &device, Some("premium"), kind(a + d));
                                let out = api.play("play_start", &play, Instant::now()).await;
                                if !matches!(out, Play::Granted { .. }) {
                                    api.rec.fail(&format!("play_start: {}", short(&out)));
                                }
                            }
                        }
                    })
                })
                .collect();
            for w in workers {
                let _ = w.await;
            }
            ticker.abort();
            let secs = t0.elapsed().as_secs_f64();
            measured += t0.elapsed();
            let name = if heartbeat { "heartbeat" } else { "play_start" };
            let mut step = Report::default();
            rec.fill(&mut step, secs);
            let Some(summary) = step.ops.iter().find(|o| o.op == name) else {
                continue;
            };
            let failures: u64 = step.failures.values().sum();
            let mut row = json!({
                "op": name, "level": level, "rate_per_sec": summary.rate_per_sec.round(),
                "p50_ms": summary.p50_ms, "p99_ms": summary.p99_ms, "p999_ms": summary.p999_ms,
                "max_ms": summary.max_ms, "failures": failures,
            });
            if let serde_json::Value::Object(costs) = window.end(stack, summary.count) {
                for (k, v) in costs {
                    row[k] = v;
                }
            }
            for (k, v) in &step.failures {
                api.rec.fail(&format!("level {level}: {k}"));
                eprintln!("max: level {level}: {k} x{v}");
            }
            eprintln!("max: {row}");
            let fits = summary.p99_ms <= args.p99_target_ms && failures == 0;
            if fits
                && best.as_ref().is_none_or(|b| {
                    b["rate_per_sec"].as_f64().unwrap_or(0.0) < summary.rate_per_sec
                })
            {
                best = Some(row.clone());
            }
            report.rows.push(row);
        }
        let name = if heartbeat { "heartbeat" } else { "play_start" };
        report.figure(
            &format!("{name}_best_under_p99_target"),
            best.unwrap_or(json!(null)),
        );
    }
    report.figure("p99_target_ms", args.p99_target_ms);
    Ok(measured)
}

// ------------------------------------------------------------------------------------- steady

struct Session {
    stream: Mutex<String>,
    generation: AtomicU32,
    busy: AtomicBool,
}

async fn steady(
    args: &SteadyArgs,
    api: &Api,
    stack: &Stack,
    report: &mut Report,
) -> anyhow::Result<Duration> {
    let tag = run_tag();
    let per = args.per_account.max(1);
    let account = {
        let tag = tag.clone();
        move |s: usize| format!("st-{tag}-{}", s / per)
    };
    let mut stats = stack.stats();
    let mem_before = stats.as_mut().and_then(|s| s.used_memory().ok());

    // Load the population (recorded apart from the measured window).
    let load_rec = Arc::new(Recorder::new());
    let load_api = Api {
        http: api.http.clone(),
        rec: load_rec.clone(),
    };
    let ticker = progress(load_rec.clone(), &args.common, "steady: loading", None);
    let t_load = Instant::now();
    let names = {
        let account = account.clone();
        Arc::new(move |i: usize| (account(i), format!("d{}-g0", i % per), "standard"))
    };
    let ids = load(&load_api, args.leases, api.http.connections(), names).await;
    ticker.abort();
    let load_secs = t_load.elapsed().as_secs_f64();
    let loaded = ids.iter().filter(|id| !id.is_empty()).count();
    report.figure("leases_loaded", loaded);
    report.figure("load_secs", round2(load_secs));
    report.figure("load_rate_per_sec", (loaded as f64 / load_secs).round());
    for (k, v) in load_rec.failures_snapshot() {
        api.rec.fail(&format!("loading: {k}"));
        eprintln!("steady: loading: {k} x{v}");
    }
    if let (Some(before), Some(after)) = (
        mem_before,
        stats.as_mut().and_then(|s| s.used_memory().ok()),
    ) {
        report.figure("redis_used_memory_bytes", after);
        report.figure(
            "redis_bytes_per_live_stream",
            round2((after.saturating_sub(before)) as f64 / loaded.max(1) as f64),
        );
    }
    let interval = load_rec.heartbeat_interval().unwrap_or(30.0);
    let sessions: Arc<Vec<Session>> = Arc::new(
        ids.into_iter()
            .map(|id| Session {
                stream: Mutex::new(id),
                generation: AtomicU32::new(0),
                busy: AtomicBool::new(false),
            })
            .collect(),
    );
    let n = sessions.len();
    let mut order: Vec<usize> = (0..n).collect();
    for i in (1..n).rev() {
        order.swap(i, random_range(0..=i));
    }

    let hb_rate = n as f64 / interval;
    report.figure("heartbeat_interval_sec", interval);
    report.figure("heartbeat_rate_target", hb_rate.round());
    report.figure("play_rate_target", args.play_rate);
    let ticker = progress(api.rec.clone(), &args.common, "steady", Some(args.duration));
    let window = CostWindow::start(stack);
    let start = Instant::now();
    let end = start + args.duration;
    let stop = Arc::new(AtomicBool::new(false));
    let checker = {
        let (api, stop, account) = (api.clone(), stop.clone(), account.clone());
        let per_sec = args.checks_per_sec;
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(Duration::from_millis(100));
            while !stop.load(Ordering::Relaxed) {
                tick.tick().await;
                for _ in 0..per_sec.div_ceil(10) {
                    if n > 0 {
                        api.check_cap(&account(random_range(0..n)), None).await;
                    }
                }
            }
        })
    };
    let skipped = Arc::new(AtomicU64::new(0));
    let (mut hb_issued, mut play_issued, mut cursor) = (0u64, 0u64, 0usize);
    let mut tick = tokio::time::interval(Duration::from_millis(5));
    while !sessions.is_empty() {
        tick.tick().await;
        let now = Instant::now();
        if now >= end {
            break;
        }
        let elapsed = (now - start).as_secs_f64();
        while (hb_issued as f64) < hb_rate * elapsed {
            let intended = start + Duration::from_secs_f64(hb_issued as f64 / hb_rate);
            hb_issued += 1;
            let idx = order[cursor];
            cursor = (cursor + 1) % n;
            let s = &sessions[idx];
            if s.busy.load(Ordering::Acquire) {
                skipped.fetch_add(1, Ordering::Relaxed);
                continue;
            }
            let generation = s.generation.load(Ordering::Acquire);
            let id = s.stream.lock().unwrap_or_else(|e| e.into_inner()).clone();
            let (api, sessions, acct) = (api.clone(), sessions.clone(), account(idx));
            tokio::spawn(async move {
                let beat = api.heartbeat(&acct, &id, intended).await;
                if beat != Beat::Ok && !matches!(beat, Beat::Other(0, _)) {
                    let s = &sessions[idx];
                    let raced = s.busy.load(Ordering::Acquire)
                        || s.generation.load(Ordering::Acquire) != generation;
                    if !raced {
                        api.rec.fail(&format!("heartbeat: {}", beat_label(&beat)));
                    }
                }
            });
        }
        while (play_issued as f64) < args.play_rate * elapsed {
            let intended = start + Duration::from_secs_f64(play_issued as f64 / args.play_rate);
            play_issued += 1;
            let idx = random_range(0..n);
            if sessions[idx].busy.swap(true, Ordering::AcqRel) {
                skipped.fetch_add(1, Ordering::Relaxed);
                continue;
            }
            let (api, sessions, acct) = (api.clone(), sessions.clone(), account(idx));
            tokio::spawn(async move {
                let s = &sessions[idx];
                let old = s.stream.lock().unwrap_or_else(|e| e.into_inner()).clone();
                if !api.release(&acct, &old, intended).await {
                    api.rec.fail("release: not 200");
                }
                let generation = s.generation.fetch_add(1, Ordering::AcqRel) + 1;
                let (device_type, meta) = kind(idx + generation as usize);
                let device = format!("d{}-g{generation}", idx % per);
                let play = PlayArgs::new(&acct, &device, Some("standard"), (device_type, meta));
                match api.play("play_start", &play, Instant::now()).await {
                    Play::Granted { stream_id, .. } => {
                        *s.stream.lock().unwrap_or_else(|e| e.into_inner()) = stream_id
                    }
                    other => api.rec.fail(&format!("play_start: {}", short(&other))),
                }
                s.busy.store(false, Ordering::Release);
            });
        }
    }
    // Let the calls in flight finish before the window closes.
    while sessions.iter().any(|s| s.busy.load(Ordering::Acquire)) {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    tokio::time::sleep(Duration::from_millis(200)).await;
    let measured = start.elapsed();
    stop.store(true, Ordering::Relaxed);
    let _ = checker.await;
    ticker.abort();
    let requests =
        api.rec.count("heartbeat") + api.rec.count("play_start") + api.rec.count("release");
    report.figure("costs", window.end(stack, requests));
    report.figure("skipped_busy", skipped.load(Ordering::Relaxed));
    if let Some(s) = stats.as_mut() {
        report.figure("redis_keys_at_end", s.dbsize().ok());
    }
    Ok(measured)
}

// ------------------------------------------------------------------------------------- race

async fn race(args: &RaceArgs, api: &Api, report: &mut Report) -> anyhow::Result<Duration> {
    let tag = run_tag();
    let start = Instant::now();
    // Learn the plan's limit from one throwaway play.
    let limit = match api
        .play(
            "probe",
            &PlayArgs::new(
                &format!("rc-{tag}-probe"),
                "probe",
                Some(&args.plan),
                ("tv", "probe"),
            ),
            Instant::now(),
        )
        .await
    {
        Play::Granted { limit, .. } => limit as usize,
        other => anyhow::bail!("race: cannot learn the plan's limit ({})", short(&other)),
    };
    let racers = limit + args.extra.max(1);
    report.figure("limit", limit);
    report.figure("plays_per_account", racers);
    let ticker = progress(api.rec.clone(), &args.common, "race", None);
    let accounts: Vec<usize> = (0..args.accounts).collect();
    let over = Arc::new(AtomicU64::new(0));
    let exact = Arc::new(AtomicU64::new(0));
    for wave in accounts.chunks(args.wave.max(1)) {
        let mut tasks = Vec::new();
        for &a in wave {
            let barrier = Arc::new(Barrier::new(racers));
            let granted = Arc::new(AtomicU32::new(0));
            for d in 0..racers {
                let (api, barrier, granted, plan) = (
                    api.clone(),
                    barrier.clone(),
                    granted.clone(),
                    args.plan.clone(),
                );
                let account = format!("rc-{tag}-{a}");
                tasks.push(tokio::spawn(async move {
                    barrier.wait().await;
                    let device = format!("racer-{d}");
                    let play = PlayArgs::new(&account, &device, Some(&plan), kind(d));
                    match api.play("play_start", &play, Instant::now()).await {
                        Play::Granted { .. } => {
                            granted.fetch_add(1, Ordering::AcqRel);
                        }
                        Play::Denied { .. } => {}
                        other => api.rec.fail(&format!("play_start: {}", short(&other))),
                    }
                    (account, granted)
                }));
            }
        }
        let mut seen = std::collections::BTreeMap::new();
        for t in tasks {
            if let Ok((account, granted)) = t.await {
                seen.insert(account, granted.load(Ordering::Acquire) as usize);
            }
        }
        let mut checks = Vec::new();
        for (account, granted) in seen {
            api.rec.checked("no_over_admission", 1);
            api.rec.checked("exactly_limit_winners", 1);
            if granted > limit {
                over.fetch_add(1, Ordering::Relaxed);
                api.rec.violated("no_over_admission");
                eprintln!("VIOLATION: {account} admitted {granted} of limit {limit}");
            }
            if granted == limit {
                exact.fetch_add(1, Ordering::Relaxed);
            } else {
                api.rec.violated("exactly_limit_winners");
            }
            let api = api.clone();
            checks.push(tokio::spawn(
                async move { api.check_cap(&account, None).await },
            ));
        }
        for c in checks {
            let _ = c.await;
        }
    }
    ticker.abort();
    report.figure("accounts", args.accounts);
    report.figure("accounts_over_admitted", over.load(Ordering::Relaxed));
    report.figure(
        "accounts_with_exactly_limit_winners",
        exact.load(Ordering::Relaxed),
    );
    Ok(start.elapsed())
}

// ------------------------------------------------------------------------------------- churn

async fn churn(args: &ChurnArgs, api: &Api, report: &mut Report) -> anyhow::Result<Duration> {
    let tag = run_tag();
    let start = Instant::now();
    let end = start + args.duration;
    let ticker = progress(api.rec.clone(), &args.common, "churn", Some(args.duration));
    let reuse = Arc::new(Mutex::new(crate::stats::histogram()));
    let ttl_seen = Arc::new(Mutex::new(0.0f64));
    let clients: Vec<_> = (0..args.clients)
        .map(|c| {
            let (api, reuse, ttl_seen, args) =
                (api.clone(), reuse.clone(), ttl_seen.clone(), args.clone());
            let account = format!("ch-{tag}-{c}");
            tokio::spawn(async move {
                churn_client(&api, &account, c, end, &args, &reuse, &ttl_seen).await
            })
        })
        .collect();
    for c in clients {
        let _ = c.await;
    }
    ticker.abort();
    let measured = start.elapsed();
    let hist = reuse.lock().unwrap_or_else(|e| e.into_inner()).clone();
    let ttl = *ttl_seen.lock().unwrap_or_else(|e| e.into_inner());
    report.figure("lease_ttl_sec", ttl);
    let mut s = summarize("crash_to_reusable", &hist, measured.as_secs_f64());
    s.outcomes.insert("measured".into(), hist.len());
    report.figure("crash_to_reusable", &s);
    report.figure(
        "crash_to_reusable_minus_ttl_p99_ms",
        round2(s.p99_ms - ttl * 1000.0),
    );
    Ok(measured)
}

async fn churn_client(
    api: &Api,
    account: &str,
    c: usize,
    end: Instant,
    args: &ChurnArgs,
    reuse: &Mutex<hdrhistogram::Histogram<u64>>,
    ttl_seen: &Mutex<f64>,
) {
    let mut generation = 0u32;
    let mut held: Option<String> = None;
    let (mut ttl, mut interval) = (Duration::ZERO, Duration::ZERO);
    let (device_type, meta) = kind(c);
    while Instant::now() < end {
        // 1. Hold a stream (a fresh device) unless the last lifecycle handed one over.
        let stream = match held.take() {
            Some(s) => s,
            None => {
                generation += 1;
                let device = format!("c{c}-g{generation}");
                let play = PlayArgs::new(account, &device, Some("basic"), (device_type, meta));
                match api.play("play_start", &play, Instant::now()).await {
                    Play::Granted {
                        stream_id,
                        lease_ttl_sec,
                        heartbeat_interval_sec,
                        ..
                    } => {
                        ttl = Duration::from_secs_f64(lease_ttl_sec);
                        interval = Duration::from_secs_f64(heartbeat_interval_sec);
                        *ttl_seen.lock().unwrap_or_else(|e| e.into_inner()) = lease_ttl_sec;
                        stream_id
                    }
                    other => {
                        api.rec
                            .fail(&format!("play_start on a free account: {}", short(&other)));
                        tokio::time::sleep(Duration::from_millis(100)).await;
                        continue;
                    }
                }
            }
        };
        // 2. Play for 1-3 heartbeats, each on the interval with ±10% jitter.
        let mut last_sent = Instant::now();
        let mut last_acked = last_sent;
        for _ in 0..random_range(1..=3u32) {
            let jitter = random_range(0.9..1.1f64);
            tokio::time::sleep(interval.mul_f64(jitter)).await;
            let sent = Instant::now();
            match api.heartbeat(account, &stream, sent).await {
                Beat::Ok => {
                    last_sent = sent;
                    last_acked = Instant::now();
                }
                Beat::Other(0, _) => {}
                other => api.rec.fail(&format!("heartbeat: {}", beat_label(&other))),
            }
        }
        // 3. End the lifecycle: crash, graceful stop, or be taken over.
        let fate = random_range(0..100u32);
        generation += 1;
        let device = format!("c{c}-g{generation}");
        if fate < args.crash_pct {
            // The player goes silent. A new device retries until the slot is free.
            let give_up = last_acked + ttl * 3 + Duration::from_secs(2);
            loop {
                tokio::time::sleep(args.probe_every).await;
                let play = PlayArgs::new(account, &device, Some("basic"), (device_type, meta));
                match api.play("probe", &play, Instant::now()).await {
                    Play::Granted { stream_id, .. } => {
                        let now = Instant::now();
                        let delay = now - last_acked;
                        let _ = reuse
                            .lock()
                            .unwrap_or_else(|e| e.into_inner())
                            .record((delay.as_micros() as u64).max(1));
                        api.rec.checked("slot_not_freed_before_ttl", 1);
                        // Lease ends are whole milliseconds of the store's clock, truncated:
                        // a lease may end up to 1 ms before `sent + TTL` by this clock.
                        if now - last_sent + Duration::from_millis(1) < ttl {
                            api.rec.violated("slot_not_freed_before_ttl");
                            eprintln!(
                                "VIOLATION: {account}: slot reusable {:?} before the TTL from the last renewal sent",
                                ttl - (now - last_sent)
                            );
                        }
                        api.rec.checked("crashed_slot_reusable_within_ttl", 1);
                        if delay > ttl + args.probe_every + args.slack {
                            api.rec.violated("crashed_slot_reusable_within_ttl");
                            eprintln!("VIOLATION: {account}: slot reusable after {delay:?}");
                        }
                        held = Some(stream_id);
                        break;
                    }
                    Play::Denied { .. } if Instant::now() < give_up => {}
                    Play::Denied { .. } => {
                        api.rec.checked("crashed_slot_reusable_within_ttl", 1);
                        api.rec.violated("crashed_slot_reusable_within_ttl");
                        break;
                    }
                    other => {
                        api.rec.fail(&format!("probe: {}", short(&other)));
                        break;
                    }
                }
            }
        } else if fate < args.crash_pct + args.stop_pct {
            if !api.release(account, &stream, Instant::now()).await {
                api.rec.fail("release: not 200");
            }
            let play = PlayArgs::new(account, &device, Some("basic"), (device_type, meta));
            api.rec.checked("slot_free_right_after_stop", 1);
            match api.play("play_start", &play, Instant::now()).await {
                Play::Granted { stream_id, .. } => held = Some(stream_id),
                Play::Denied { .. } => api.rec.violated("slot_free_right_after_stop"),
                other => api.rec.fail(&format!("play_start: {}", short(&other))),
            }
        } else {
            let play = PlayArgs::new(account, &device, Some("basic"), (device_type, meta))
                .replacing(&stream);
            api.rec.checked("takeover_granted", 1);
            match api.play("takeover", &play, Instant::now()).await {
                Play::Granted { stream_id, .. } => {
                    held = Some(stream_id);
                    api.rec.checked("replaced_stream_told_to_stop", 1);
                    if api.heartbeat(account, &stream, Instant::now()).await != Beat::Revoked {
                        api.rec.violated("replaced_stream_told_to_stop");
                    }
                }
                Play::Denied { .. } => api.rec.violated("takeover_granted"),
                other => api.rec.fail(&format!("takeover: {}", short(&other))),
            }
        }
        if random_range(0..10u32) == 0 {
            api.check_cap(account, None).await;
        }
    }
    if let Some(stream) = held {
        let _ = api.release(account, &stream, Instant::now()).await;
    }
}
