//! `fleet`: on this one machine, the traffic one Redis shard sees in the fleet model, and what
//! it costs that shard's main thread.
//!
//! The measure is Redis's main-thread CPU (`INFO cpu`, `used_cpu_user_main_thread +
//! used_cpu_sys_main_thread`, network I/O included) as a delta over a phase divided by that
//! phase's operations. The run, in order, all against the same server:
//!
//! 1. **Closed loop**, `--clients` (8) each waiting for its answer, and the baseline the
//!    targets are written against (heartbeat ≤ 0.5×, play-start ≤ 2× a SET):
//!    `redis-benchmark -c 8 -t set` on the same server, then heartbeats, then play-starts,
//!    `--closed-step` each.
//! 2. The server is emptied (when spawned), the open loop's population is loaded (its Redis
//!    memory per stream measured), and an **idle window** measures what the server's main
//!    thread (and the limiters) burn with no traffic; a second one follows the open loop. Their
//!    mean is subtracted from every phase (figures without the subtraction are reported too).
//! 3. **Open loop**: `--players` live leases, each heartbeating on its own jittered schedule
//!    (every `--heartbeat-every` ± 10 %, random phase). `--rounds` rounds, each a window of
//!    heartbeats alone (`--heartbeat-only`) then a mixed window (`--duration`) with play-starts
//!    at `--play-rate` (each a graceful stop of a random player's stream and a new play from a
//!    new device: the population stays constant). The play-start's cost is attributed by
//!    subtraction: the mixed windows' CPU minus their heartbeats at the heartbeat windows' cost
//!    per heartbeat, over the play-starts. By default the rates are the fleet model's per
//!    (limiter process, shard) pair times the limiters spawned, so each limiter's batches are as
//!    deep as a fleet process's would be.
//! 4. Store round trips: PING on a connection of its own under the heartbeat traffic, and the
//!    limiter's own batch cycle (time between batches while its queue never idles, minus W).
//! 5. The **projection** to the seed's peak, printed as a model with its inputs.
//!
//! With `--background-busy F`, a background load (`GET`/`SET bg:<n>` on
//! `--background-connections` connections, one command at a time each, paced at a rate
//! calibrated at the start for a main thread F busy) runs through the open loop and through
//! windows of it alone: before the first round, between rounds (the players hold their
//! heartbeats, and their schedules move on by the pause) and after the last. The open loop's
//! costs are then also reported as **marginal** (each round's window CPU minus the mean
//! background-alone CPU per second of the windows either side × the window's length, over
//! its operations), and the projection uses those: what a shard already busy with other
//! connections pays for this traffic, rather than an idle shard's full wake-up per batch.
//!
//! Batch depth comes from the limiters' `/metrics` (`screenlimit_store_batches_total` and
//! `screenlimit_store_batched_commands_total`, deltas per phase).

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use clap::Args;
use http::Method;
use rand::random_range;
use serde_json::{Value, json};
use tokio::sync::{Notify, watch};

use crate::api::{Api, Beat, Play, PlayArgs};
use crate::client::HttpClient;
use crate::procs::{RedisStats, Stack, process_rss_bytes};
use crate::scenarios::{Common, beat_label, dur, kind, load, progress, round2, run_tag, short};
use crate::stats::{OpSummary, Recorder, Report};

/// The coalescing window `fleet` gives spawned limiters (and its model) unless told otherwise.
pub const DEFAULT_BATCH_WINDOW: Duration = Duration::from_millis(2);

#[derive(Args, Debug, Clone)]
pub struct FleetArgs {
    #[command(flatten)]
    pub common: Common,
    /// Closed-loop clients, each waiting for its answer (also redis-benchmark's -c).
    #[arg(long, default_value_t = 8)]
    pub clients: usize,
    /// Length of each closed-loop phase (heartbeats, then play-starts).
    #[arg(long, default_value = "6s", value_parser = dur)]
    pub closed_step: Duration,
    /// Leases the closed-loop heartbeats renew (premium accounts, one stream each).
    #[arg(long, default_value_t = 20_000)]
    pub closed_leases: usize,
    /// Premium accounts the closed-loop play-starts go to (4 devices each: always granted).
    #[arg(long, default_value_t = 100_000)]
    pub closed_accounts: usize,
    /// SETs of the redis-benchmark baseline.
    #[arg(long, default_value_t = 100_000)]
    pub baseline_requests: u64,
    /// Idle windows before and after the open loop (population loaded, no traffic): their mean
    /// CPU per second is subtracted.
    #[arg(long, default_value = "3s", value_parser = dur)]
    pub idle: Duration,
    /// Live leases of the open loop (default: the model's heartbeat rate per pair × limiters ×
    /// --heartbeat-every).
    #[arg(long)]
    pub players: Option<usize>,
    /// Play-starts per second in the mixed phase (default: the model's rate per pair ×
    /// limiters).
    #[arg(long)]
    pub play_rate: Option<f64>,
    /// Each player's heartbeat period (±10 % jitter, random phase).
    #[arg(long, default_value = "30s", value_parser = dur)]
    pub heartbeat_every: Duration,
    /// Open loop, each round: heartbeats alone, measured before the mixed window.
    #[arg(long, default_value = "6s", value_parser = dur)]
    pub heartbeat_only: Duration,
    /// Open loop, each round: the mixed window (heartbeats and play-starts), measured.
    #[arg(long, default_value = "10s", value_parser = dur)]
    pub duration: Duration,
    /// Open-loop rounds (heartbeats alone, then mixed), so that a drift in the shared
    /// machine's load falls on both kinds of window; their sums are what is reported.
    #[arg(long, default_value_t = 2)]
    pub rounds: usize,
    /// Store round trips (PING) measured after the mixed window, under the same traffic.
    #[arg(long, default_value = "2s", value_parser = dur)]
    pub probe: Duration,
    /// Accounts listed at the end to check the cap and that no lease was lost or leaked.
    #[arg(long, default_value_t = 500)]
    pub verify_accounts: usize,
    /// Model: Redis shards in the fleet.
    #[arg(long, default_value_t = 20)]
    pub fleet_shards: usize,
    /// Model: limiter processes in the fleet (each has one queue per shard).
    #[arg(long, default_value_t = 100)]
    pub fleet_processes: usize,
    /// Model: serving lanes (cores) per limiter process.
    #[arg(long, default_value_t = 4)]
    pub fleet_lanes: usize,
    /// The seed's peak heartbeats per second.
    #[arg(long, default_value_t = 3_330_000.0)]
    pub peak_heartbeats: f64,
    /// The seed's peak play-starts per second.
    #[arg(long, default_value_t = 500_000.0)]
    pub peak_play_starts: f64,
    /// The seed's concurrent streams.
    #[arg(long, default_value_t = 100_000_000.0)]
    pub peak_streams: f64,
    /// Share of its core a shard's main thread may use in the model.
    #[arg(long, default_value_t = 0.5)]
    pub shard_cpu_budget: f64,
    /// Keep the Redis main thread about this busy (0..1) with unrelated background traffic
    /// (`GET`/`SET bg:<n>` from many connections) through the open loop and windows of that
    /// background alone before, between the rounds of and after it; the open loop's costs are then also reported as
    /// marginal (window CPU minus the background-alone CPU per second × the window), and the
    /// projection uses those. 0: no background.
    #[arg(long, default_value_t = 0.0)]
    pub background_busy: f64,
    /// Connections (one task each) of the background load.
    #[arg(long, default_value_t = 64)]
    pub background_connections: usize,
    /// Each window of the background load alone (before the open loop, between rounds with
    /// the players paused, and after).
    #[arg(long, default_value = "6s", value_parser = dur)]
    pub background_alone: Duration,
    /// Length of each of the background load's calibration steps (4 of them).
    #[arg(long, default_value = "1s", value_parser = dur)]
    pub background_calibrate: Duration,
}

// ------------------------------------------------------------------------------ measurements

/// What the run reads at a phase boundary.
#[derive(Debug, Clone, Copy)]
struct Snap {
    at: Instant,
    redis_main: f64,
    limiter: f64,
    batches: u64,
    commands: u64,
}

/// What changed between two snaps.
#[derive(Debug, Clone, Copy, Default)]
struct Delta {
    secs: f64,
    redis_main: f64,
    limiter: f64,
    batches: u64,
    commands: u64,
}

impl Delta {
    fn add(&mut self, other: &Delta) {
        self.secs += other.secs;
        self.redis_main += other.redis_main;
        self.limiter += other.limiter;
        self.batches += other.batches;
        self.commands += other.commands;
    }

    fn between(a: &Snap, b: &Snap) -> Self {
        Delta {
            secs: (b.at - a.at).as_secs_f64(),
            redis_main: b.redis_main - a.redis_main,
            limiter: b.limiter - a.limiter,
            batches: b.batches.saturating_sub(a.batches),
            commands: b.commands.saturating_sub(a.commands),
        }
    }
}

/// Reads Redis's `INFO`, the spawned limiters' CPU and every limiter's batch counters.
struct Meter<'a> {
    stack: &'a Stack,
    stats: RedisStats,
    metrics: Vec<HttpClient>,
}

impl Meter<'_> {
    async fn snap(&mut self) -> anyhow::Result<Snap> {
        let (mut batches, mut commands) = (0, 0);
        for client in &self.metrics {
            let reply = client
                .send(Method::GET, "/metrics", String::new())
                .await
                .context("GET /metrics")?;
            let text = String::from_utf8_lossy(&reply.body);
            batches += counter_sum(&text, "screenlimit_store_batches_total");
            commands += counter_sum(&text, "screenlimit_store_batched_commands_total");
        }
        Ok(Snap {
            at: Instant::now(),
            redis_main: self.stats.main_thread_cpu_seconds()?,
            limiter: self.stack.limiter_cpu(),
            batches,
            commands,
        })
    }

    /// The path every limiter takes to its shard (`screenlimit_store_path`): `native` or `lua`,
    /// waited for (a shard learns it at first contact) until it is the one `native` asks for,
    /// for up to 15 s.
    async fn store_path(&self, native: bool) -> anyhow::Result<&'static str> {
        let wanted = if native { "native" } else { "lua" };
        let line = format!("screenlimit_store_path{{path=\"{wanted}\",shard=\"0\"}} 1");
        let deadline = Instant::now() + Duration::from_secs(15);
        'wait: loop {
            for client in &self.metrics {
                let reply = client
                    .send(Method::GET, "/metrics", String::new())
                    .await
                    .context("GET /metrics")?;
                if !String::from_utf8_lossy(&reply.body).contains(&line) {
                    if Instant::now() > deadline {
                        bail!("a limiter's shard is not on the {wanted} path after 15 s");
                    }
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    continue 'wait;
                }
            }
            return Ok(wanted);
        }
    }

    /// Calls per command since the last reset, then resets.
    fn take_commandstats(&mut self) -> anyhow::Result<BTreeMap<String, u64>> {
        let out = self
            .stats
            .commandstats()?
            .into_iter()
            .map(|(name, s)| (name, s.calls))
            .collect();
        self.stats.reset()?;
        Ok(out)
    }
}

fn add_calls(total: &mut BTreeMap<String, u64>, calls: BTreeMap<String, u64>) {
    for (name, n) in calls {
        *total.entry(name).or_default() += n;
    }
}

/// No traffic for `span`: what Redis's main thread and the limiters burn anyway.
async fn idle_window(meter: &mut Meter<'_>, span: Duration) -> anyhow::Result<Delta> {
    let a = meter.snap().await?;
    tokio::time::sleep(span).await;
    let b = meter.snap().await?;
    Ok(Delta::between(&a, &b))
}

/// The sum of a Prometheus counter over its label sets.
fn counter_sum(text: &str, name: &str) -> u64 {
    text.lines()
        .filter(|l| {
            l.strip_prefix(name)
                .is_some_and(|r| r.starts_with('{') || r.starts_with(' '))
        })
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .map(|v| v as u64)
        .sum()
}

fn per_op_us(cpu_secs: f64, ops: u64) -> f64 {
    if ops == 0 {
        0.0
    } else {
        cpu_secs * 1e6 / ops as f64
    }
}

fn ratio(a: f64, b: f64) -> f64 {
    if b == 0.0 { 0.0 } else { a / b }
}

fn round3(x: f64) -> f64 {
    (x * 1000.0).round() / 1000.0
}

/// `redis://host:port[/db]` → (host, port).
fn host_port(url: &str) -> anyhow::Result<(String, u16)> {
    let rest = url
        .strip_prefix("redis://")
        .with_context(|| format!("{url}: a redis:// URL"))?;
    let rest = rest.rsplit('@').next().unwrap_or(rest);
    let authority = rest.split('/').next().unwrap_or(rest);
    let (host, port) = authority.rsplit_once(':').unwrap_or((authority, "6379"));
    Ok((host.to_owned(), port.parse().context("redis port")?))
}

/// Latency summaries of a phase's operations, named `phase.op`.
fn summaries(rec: &Recorder, secs: f64, phase: &str) -> Vec<OpSummary> {
    let mut tmp = Report::default();
    rec.fill(&mut tmp, secs);
    tmp.ops
        .into_iter()
        .map(|mut s| {
            s.op = format!("{phase}.{}", s.op);
            s
        })
        .collect()
}

fn find<'a>(ops: &'a [OpSummary], name: &str) -> Option<&'a OpSummary> {
    ops.iter().find(|o| o.op == name)
}

fn latency(ops: &[OpSummary], name: &str) -> Value {
    find(ops, name).map_or(Value::Null, |o| {
        json!({"count": o.count, "rate_per_sec": o.rate_per_sec.round(), "p50_ms": o.p50_ms,
               "p99_ms": o.p99_ms, "max_ms": o.max_ms})
    })
}

/// The SET baseline: `redis-benchmark -c CLIENTS -n N -t set` on the same server.
fn redis_benchmark(host: &str, port: u16, clients: usize, n: u64) -> anyhow::Result<(f64, String)> {
    let bin = std::env::var("REDIS_BENCHMARK_BIN").unwrap_or_else(|_| "redis-benchmark".into());
    let out = Command::new(&bin)
        .args(["-h", host, "-p", &port.to_string()])
        .args(["-c", &clients.to_string(), "-n", &n.to_string()])
        .args(["-t", "set", "--csv"])
        .stderr(Stdio::null())
        .output()
        .map_err(|e| {
            if e.kind() == std::io::ErrorKind::NotFound {
                anyhow::anyhow!(
                    "{bin} not found: the fleet scenario's SET baseline needs Debian's redis-benchmark \
                     (apt-get install redis-tools), or set REDIS_BENCHMARK_BIN"
                )
            } else {
                anyhow::anyhow!("run {bin}: {e}")
            }
        })?;
    if !out.status.success() {
        bail!("{bin} failed ({})", out.status);
    }
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let rps = text
        .lines()
        .nth(1)
        .and_then(|l| l.split(',').nth(1))
        .and_then(|f| f.trim_matches('"').parse().ok())
        .with_context(|| format!("redis-benchmark output: {text}"))?;
    Ok((rps, text))
}

/// PING round trips on a connection of its own, one every 10 ms, for `span`: microseconds.
fn ping_probe(url: &str, span: Duration) -> anyhow::Result<Vec<u64>> {
    let mut stats = RedisStats::connect(url)?;
    let end = Instant::now() + span;
    let mut out = Vec::new();
    while Instant::now() < end {
        let t = Instant::now();
        stats.ping()?;
        out.push(t.elapsed().as_micros() as u64);
        std::thread::sleep(Duration::from_millis(10));
    }
    Ok(out)
}

fn quantile(sorted: &[u64], q: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    sorted[((sorted.len() - 1) as f64 * q).round() as usize] as f64
}

// ------------------------------------------------------------------------------ background

/// Cheap traffic unrelated to the limiter (`GET bg:<n>`, one in ten a `SET`) from many
/// connections, each its own task sending one command at a time, paced to a shared rate.
struct Background {
    rate: Arc<AtomicU64>,
    ops: Arc<AtomicU64>,
    errors: Arc<AtomicU64>,
    stop: watch::Sender<bool>,
    tasks: Vec<tokio::task::JoinHandle<()>>,
}

impl Background {
    async fn start(url: &str, connections: usize) -> anyhow::Result<Self> {
        let client = redis::Client::open(url)?;
        let connections = connections.max(1);
        let rate = Arc::new(AtomicU64::new(0f64.to_bits()));
        let ops = Arc::new(AtomicU64::new(0));
        let errors = Arc::new(AtomicU64::new(0));
        let (stop, stop_rx) = watch::channel(false);
        let mut tasks = Vec::new();
        for _ in 0..connections {
            let mut conn = client
                .get_multiplexed_async_connection()
                .await
                .context("background connection")?;
            let (rate, ops, errors, mut stop_rx) =
                (rate.clone(), ops.clone(), errors.clone(), stop_rx.clone());
            tasks.push(tokio::spawn(async move {
                let mut tick = tokio::time::interval(Duration::from_millis(1));
                tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
                let (mut last, mut credit) = (Instant::now(), random_range(0.0..1.0f64));
                loop {
                    tokio::select! {
                        _ = tick.tick() => {}
                        _ = stop_rx.changed() => break,
                    }
                    let now = Instant::now();
                    let per_conn =
                        f64::from_bits(rate.load(Ordering::Relaxed)) / connections as f64;
                    // At most 50 ms of backlog: a task held up does not burst afterwards.
                    credit =
                        (credit + per_conn * (now - last).as_secs_f64()).min(1.0 + per_conn * 0.05);
                    last = now;
                    while credit >= 1.0 && !*stop_rx.borrow() {
                        credit -= 1.0;
                        let key = format!("bg:{}", random_range(0..10_000u32));
                        let res = if random_range(0..10u32) == 0 {
                            redis::cmd("SET")
                                .arg(&key)
                                .arg("x")
                                .exec_async(&mut conn)
                                .await
                        } else {
                            redis::cmd("GET").arg(&key).exec_async(&mut conn).await
                        };
                        match res {
                            Ok(()) => ops.fetch_add(1, Ordering::Relaxed),
                            Err(_) => errors.fetch_add(1, Ordering::Relaxed),
                        };
                    }
                }
            }));
        }
        Ok(Background {
            rate,
            ops,
            errors,
            stop,
            tasks,
        })
    }

    fn set_rate(&self, per_sec: f64) {
        self.rate
            .store(per_sec.max(0.0).to_bits(), Ordering::Relaxed);
    }

    fn rate(&self) -> f64 {
        f64::from_bits(self.rate.load(Ordering::Relaxed))
    }

    fn ops(&self) -> u64 {
        self.ops.load(Ordering::Relaxed)
    }

    async fn stop(self) -> u64 {
        let _ = self.stop.send(true);
        for t in self.tasks {
            let _ = t.await;
        }
        self.errors.load(Ordering::Relaxed)
    }
}

/// The background's rate for a main thread `target` busy: four steps of `step`, each at the
/// last step's rate scaled by target ÷ the busy fraction it reached (a busier loop costs less
/// per command, so one step from a light load would undershoot).
async fn calibrate(
    meter: &mut Meter<'_>,
    bg: &Background,
    target: f64,
    step: Duration,
) -> anyhow::Result<Vec<Value>> {
    let mut rate = 5_000.0;
    let mut steps = Vec::new();
    for _ in 0..4 {
        bg.set_rate(rate);
        tokio::time::sleep(step / 4).await;
        let (a, oa) = (meter.snap().await?, bg.ops());
        tokio::time::sleep(step).await;
        let (b, ob) = (meter.snap().await?, bg.ops());
        let d = Delta::between(&a, &b);
        let busy = ratio(d.redis_main, d.secs);
        let achieved = ratio((ob - oa) as f64, d.secs);
        steps.push(
            json!({"rate_per_sec": rate.round(), "achieved_per_sec": achieved.round(),
                          "busy": round3(busy),
                          "redis_main_us_per_op": round2(per_op_us(d.redis_main, ob - oa))}),
        );
        eprintln!(
            "fleet: background at {rate:.0}/s: {achieved:.0}/s achieved, Redis main thread {:.1} % busy",
            busy * 100.0
        );
        if busy > 0.0 {
            rate *= (target / busy).clamp(0.25, 8.0);
        }
    }
    bg.set_rate(rate);
    Ok(steps)
}

// ------------------------------------------------------------------------------ closed loop

/// `clients` workers, each sending its next call when the last was answered, for `step`:
/// heartbeats on `pool` when given, else play-starts on premium accounts.
async fn closed_loop(
    api: &Api,
    clients: usize,
    step: Duration,
    pool: Option<Arc<Vec<(String, String)>>>,
    tag: &str,
    accounts: usize,
) {
    let end = Instant::now() + step;
    let workers: Vec<_> = (0..clients)
        .map(|_| {
            let (api, pool, tag) = (api.clone(), pool.clone(), tag.to_owned());
            tokio::spawn(async move {
                while Instant::now() < end {
                    if let Some(pool) = &pool {
                        let (account, id) = &pool[random_range(0..pool.len())];
                        let beat = api.heartbeat(account, id, Instant::now()).await;
                        if beat != Beat::Ok {
                            api.rec.fail(&format!("heartbeat: {}", beat_label(&beat)));
                        }
                    } else {
                        let a = random_range(0..accounts.max(1));
                        let d = random_range(0..4usize);
                        let account = format!("fc-{tag}-{a}");
                        let device = format!("dev-{d}");
                        let play = PlayArgs::new(&account, &device, Some("premium"), kind(a + d));
                        match api.play("play_start", &play, Instant::now()).await {
                            Play::Granted {
                                limit,
                                active_count,
                                ..
                            } => check_count(&api.rec, limit, active_count),
                            other => api.rec.fail(&format!("play_start: {}", short(&other))),
                        }
                    }
                }
            })
        })
        .collect();
    for w in workers {
        let _ = w.await;
    }
}

/// A granted play's answer: the account's live leases, this one included, within its limit.
fn check_count(rec: &Recorder, limit: u32, active_count: Option<u32>) {
    if let Some(active) = active_count {
        rec.checked("no_account_above_cap", 1);
        if active > limit {
            rec.violated("no_account_above_cap");
            eprintln!("VIOLATION: a play was granted with {active} live leases, limit {limit}");
        }
    }
}

// ------------------------------------------------------------------------------ open loop

struct Household {
    name: String,
    plan: &'static str,
    limit: u32,
    players: Vec<usize>,
}

struct Player {
    household: usize,
    slot: usize,
    restart: Notify,
    pending: AtomicBool,
    stream: Mutex<String>,
}

struct Shared {
    households: Vec<Household>,
    players: Vec<Player>,
    /// The current phase's client (its recorder changes at each phase boundary).
    api: Mutex<Api>,
    interval: Duration,
    /// While true the players send nothing (a background-alone window between rounds)...
    pause: watch::Sender<bool>,
    /// ...and their schedules move by every pause's length (µs), so none bursts afterwards.
    shift_us: AtomicU64,
}

impl Shared {
    fn api(&self) -> Api {
        self.api.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }

    fn phase(&self, rec: &Arc<Recorder>) {
        self.api.lock().unwrap_or_else(|e| e.into_inner()).rec = rec.clone();
    }

    fn shift(&self) -> Duration {
        Duration::from_micros(self.shift_us.load(Ordering::Acquire))
    }
}

/// Households: every third premium (limit 4) with 3 players, the others standard (limit 2) and
/// full with 2: on average 2.33 streams per account.
fn households(tag: &str, players: usize) -> (Vec<Household>, Vec<Player>) {
    let (mut hs, mut ps) = (Vec::new(), Vec::new());
    while ps.len() < players {
        let h = hs.len();
        let (plan, limit, size) = if h % 3 == 0 {
            ("premium", 4, 3)
        } else {
            ("standard", 2, 2)
        };
        let mut members = Vec::new();
        for slot in 0..size {
            if ps.len() == players {
                break;
            }
            members.push(ps.len());
            ps.push(Player {
                household: h,
                slot,
                restart: Notify::new(),
                pending: AtomicBool::new(false),
                stream: Mutex::new(String::new()),
            });
        }
        hs.push(Household {
            name: format!("fo-{tag}-{h}"),
            plan,
            limit,
            players: members,
        });
    }
    (hs, ps)
}

/// One player: heartbeats on its own jittered schedule from `first`; on a restart, a graceful
/// stop and a new play from a new device, after which its schedule starts again.
async fn player(shared: Arc<Shared>, i: usize, first: Instant, mut stop: watch::Receiver<bool>) {
    let p = &shared.players[i];
    let h = &shared.households[p.household];
    let mut stream = p.stream.lock().unwrap_or_else(|e| e.into_inner()).clone();
    let mut generation = 0usize;
    let mut next = first;
    let jittered = |interval: Duration| interval.mul_f64(random_range(0.9..1.1f64));
    let mut pause = shared.pause.subscribe();
    loop {
        // `next` is on the unshifted schedule; every pause so far moves it on.
        let due = next + shared.shift();
        tokio::select! {
            _ = tokio::time::sleep_until(due.into()) => {
                if *pause.borrow_and_update() {
                    tokio::select! {
                        _ = pause.wait_for(|p| !*p) => {}
                        _ = stop.changed() => break,
                    }
                    continue;
                }
                if next + shared.shift() > Instant::now() {
                    continue; // a pause moved it on while this task slept
                }
                let api = shared.api();
                let beat = api.heartbeat(&h.name, &stream, due).await;
                if beat != Beat::Ok {
                    api.rec.fail(&format!("heartbeat: {}", beat_label(&beat)));
                }
                next += jittered(shared.interval);
            }
            _ = p.restart.notified() => {
                let api = shared.api();
                if !api.release(&h.name, &stream, Instant::now()).await {
                    api.rec.fail("release: not 200");
                }
                generation += 1;
                let device = format!("p{}-g{generation}", p.slot);
                let play = PlayArgs::new(&h.name, &device, Some(h.plan), kind(i + generation));
                match api.play("play_start", &play, Instant::now()).await {
                    Play::Granted { stream_id, limit, active_count, .. } => {
                        check_count(&api.rec, limit, active_count);
                        stream = stream_id;
                    }
                    other => api.rec.fail(&format!("play_start: {}", short(&other))),
                }
                p.pending.store(false, Ordering::Release);
                let now = Instant::now();
                next = now.checked_sub(shared.shift()).unwrap_or(now) + jittered(shared.interval);
            }
            _ = stop.changed() => break,
        }
    }
    *p.stream.lock().unwrap_or_else(|e| e.into_inner()) = stream;
}

/// Lists household `h`: within its cap, and exactly the leases its players hold.
async fn verify_account(api: Api, shared: Arc<Shared>, h: usize) {
    let hh = &shared.households[h];
    let holding = hh
        .players
        .iter()
        .filter(|&&p| {
            !shared.players[p]
                .stream
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .is_empty()
        })
        .count();
    let Some((limit, active)) = api.list(&hh.name).await else {
        api.rec.fail("list: no answer");
        return;
    };
    api.rec.checked("no_account_above_cap", 1);
    if active.len() as u32 > limit.min(hh.limit) {
        api.rec.violated("no_account_above_cap");
        eprintln!("VIOLATION: {} holds {} streams", hh.name, active.len());
    }
    api.rec.checked("live_leases_match_players", 1);
    if active.len() != holding {
        api.rec.violated("live_leases_match_players");
        eprintln!(
            "VIOLATION: {} lists {} live leases, its players hold {holding}",
            hh.name,
            active.len()
        );
    }
}

// ------------------------------------------------------------------------------ the scenario

/// One measured phase of the report.
struct Phase {
    name: &'static str,
    /// Operations the Redis CPU is divided by.
    ops: u64,
    delta: Delta,
    /// Redis main-thread µs per op: as measured, and with the idle CPU subtracted.
    redis_raw_us: f64,
    redis_us: f64,
    limiter_us: f64,
    p50_ms: f64,
    p99_ms: f64,
}

pub async fn fleet(
    args: &FleetArgs,
    api: &Api,
    stack: &Stack,
    report: &mut Report,
) -> anyhow::Result<Duration> {
    let common = &args.common;
    let spawned = stack.redis.is_some();
    let window = common.batch_window.unwrap_or(DEFAULT_BATCH_WINDOW);
    let Some(redis_url) = stack.redis_url.clone() else {
        bail!(
            "fleet measures Redis's INFO cpu: use --spawn, or --redis URL (the one shard the --url limiters use)"
        );
    };
    let (host, port) = host_port(&redis_url)?;
    let limiters = stack.urls.len();
    let mut meter = Meter {
        stack,
        stats: RedisStats::connect(&redis_url)?,
        metrics: stack
            .urls
            .iter()
            .map(|u| HttpClient::new(std::slice::from_ref(u), 1))
            .collect::<anyhow::Result<_>>()?,
    };
    meter
        .stats
        .main_thread_cpu_seconds()
        .context("fleet needs Redis 7.0 or newer (INFO cpu of the main thread)")?;
    let path = meter.store_path(common.redis_module.is_some()).await?;
    println!("store path of every limiter's shard: {path}");

    // The model's rates per (limiter process, shard) pair, and the open loop's at that pair
    // rate for each limiter of this run.
    let pairs = (args.fleet_processes.max(1) * args.fleet_shards.max(1)) as f64;
    let hb_pair = args.peak_heartbeats / pairs;
    let play_pair = args.peak_play_starts / pairs;
    let every = args.heartbeat_every.as_secs_f64();
    let players = args
        .players
        .unwrap_or((hb_pair * limiters as f64 * every).round() as usize)
        .max(1);
    let play_rate = args.play_rate.unwrap_or(play_pair * limiters as f64);
    if spawned && common.ttl < args.heartbeat_every.mul_f64(1.1) + Duration::from_secs(1) {
        bail!(
            "--ttl {:?} must outlast --heartbeat-every {:?} + 10 % jitter",
            common.ttl,
            args.heartbeat_every
        );
    }
    let tag = run_tag();
    let main = api.rec.clone();
    let phase_api = |rec: &Arc<Recorder>| Api {
        http: api.http.clone(),
        rec: rec.clone(),
    };
    let mut measured = Duration::ZERO;
    let mut ops_out: Vec<OpSummary> = Vec::new();

    // ---- 1. closed loop: heartbeats, the SET baseline, play-starts.
    eprintln!("fleet: loading {} closed-loop leases", args.closed_leases);
    let load_rec = Arc::new(Recorder::new());
    let t = tag.clone();
    let ids = load(
        &phase_api(&load_rec),
        args.closed_leases,
        api.http.connections(),
        Arc::new(move |i: usize| (format!("fh-{t}-{i}"), "dev-0".to_owned(), "premium")),
    )
    .await;
    main.absorb(&load_rec, "closed-loop load");
    let pool: Arc<Vec<(String, String)>> = Arc::new(
        ids.into_iter()
            .enumerate()
            .filter(|(_, id)| !id.is_empty())
            .map(|(i, id)| (format!("fh-{tag}-{i}"), id))
            .collect(),
    );
    if pool.is_empty() {
        bail!("fleet: no closed-loop lease was granted");
    }

    eprintln!(
        "fleet: baseline redis-benchmark -c {} -n {} -t set",
        args.clients, args.baseline_requests
    );
    let s0 = meter.snap().await?;
    meter.stats.reset()?;
    let (h, c, n) = (host.clone(), args.clients, args.baseline_requests);
    let (set_rps, _) =
        tokio::task::spawn_blocking(move || redis_benchmark(&h, port, c, n)).await??;
    let s1 = meter.snap().await?;
    let sets = meter.take_commandstats()?.get("set").copied().unwrap_or(0);
    let set_delta = Delta::between(&s0, &s1);

    let mut closed = Vec::new();
    for (name, heartbeat) in [("heartbeat", true), ("play_start", false)] {
        eprintln!(
            "fleet: closed loop, {} clients, {name}, {:?}",
            args.clients, args.closed_step
        );
        let rec = Arc::new(Recorder::new());
        let ticker = progress(rec.clone(), common, "fleet closed", Some(args.closed_step));
        let a = meter.snap().await?;
        closed_loop(
            &phase_api(&rec),
            args.clients,
            args.closed_step,
            heartbeat.then(|| pool.clone()),
            &tag,
            args.closed_accounts,
        )
        .await;
        let b = meter.snap().await?;
        ticker.abort();
        let cmds = meter.take_commandstats()?;
        let d = Delta::between(&a, &b);
        measured += Duration::from_secs_f64(d.secs);
        let ops = summaries(&rec, d.secs, "closed");
        main.absorb(&rec, &format!("closed {name}"));
        closed.push((name, d, rec.count(name), ops.clone(), cmds));
        ops_out.extend(ops);
    }

    // ---- 2. the open loop's population, its memory, and the idle window.
    if spawned {
        meter.stats.flushall()?;
    }
    let (hs, ps) = households(&tag, players);
    let mem_before = meter.stats.used_memory()?;
    eprintln!(
        "fleet: loading {players} players in {} households",
        hs.len()
    );
    let load_rec = Arc::new(Recorder::new());
    let who: Arc<Vec<(String, String, &'static str)>> = Arc::new(
        ps.iter()
            .map(|p| {
                let h = &hs[p.household];
                (h.name.clone(), format!("p{}-g0", p.slot), h.plan)
            })
            .collect(),
    );
    let t_load = Instant::now();
    let ids = load(
        &phase_api(&load_rec),
        players,
        api.http.connections(),
        Arc::new(move |i: usize| who[i].clone()),
    )
    .await;
    let load_secs = t_load.elapsed().as_secs_f64();
    main.absorb(&load_rec, "open-loop load");
    let loaded = ids.iter().filter(|id| !id.is_empty()).count();
    let mem_after = meter.stats.used_memory()?;
    let bytes_per_stream = mem_after.saturating_sub(mem_before) as f64 / loaded.max(1) as f64;
    for (p, id) in ps.iter().zip(ids) {
        *p.stream.lock().unwrap_or_else(|e| e.into_inner()) = id;
    }

    eprintln!("fleet: idle {:?}", args.idle);
    let idle_before = idle_window(&mut meter, args.idle).await?;
    // The background load (if asked for): calibrated, then a window of it alone.
    let bg_target = args.background_busy.clamp(0.0, 0.95);
    let (bg, bg_calibration, bg_before) = if bg_target > 0.0 {
        eprintln!(
            "fleet: background load on {} connections, target {:.0} % busy",
            args.background_connections,
            bg_target * 100.0
        );
        let bg = Background::start(&redis_url, args.background_connections).await?;
        let steps = calibrate(&mut meter, &bg, bg_target, args.background_calibrate).await?;
        tokio::time::sleep(args.background_calibrate / 4).await;
        eprintln!("fleet: background alone {:?}", args.background_alone);
        let o0 = bg.ops();
        let d = idle_window(&mut meter, args.background_alone).await?;
        let n = bg.ops() - o0;
        (Some(bg), steps, Some((d, n)))
    } else {
        (None, Vec::new(), None)
    };
    let bg_ops = || bg.as_ref().map_or(0, Background::ops);
    // (name, delta, background ops, limiter ops, round: 0 for the background alone).
    let mut bg_windows: Vec<(String, Delta, u64, u64, usize)> = Vec::new();
    // The background-alone windows in order: before round 1, between rounds, after the last.
    let mut alone: Vec<Delta> = Vec::new();
    if let Some((d, n)) = bg_before {
        bg_windows.push(("background alone, before".into(), d, n, 0, 0));
        alone.push(d);
    }

    // ---- 3. the open loop: rounds of heartbeats alone, then heartbeats and play-starts.
    let live: Arc<Vec<usize>> = Arc::new(
        (0..ps.len())
            .filter(|&i| {
                !ps[i]
                    .stream
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .is_empty()
            })
            .collect(),
    );
    let warmup = Arc::new(Recorder::new());
    let shared = Arc::new(Shared {
        households: hs,
        players: ps,
        api: Mutex::new(phase_api(&warmup)),
        interval: args.heartbeat_every,
        pause: watch::channel(false).0,
        shift_us: AtomicU64::new(0),
    });
    let (stop_tx, stop_rx) = watch::channel(false);
    let t_open = Instant::now() + Duration::from_millis(200);
    let tasks: Vec<_> = live
        .iter()
        .map(|&i| {
            let first = t_open + args.heartbeat_every.mul_f64(random_range(0.0..1.0f64));
            tokio::spawn(player(shared.clone(), i, first, stop_rx.clone()))
        })
        .collect();
    tokio::time::sleep_until(t_open.into()).await;
    meter.stats.reset()?;

    let hb_rec = Arc::new(Recorder::new());
    let mixed_rec = Arc::new(Recorder::new());
    let tail_rec = Arc::new(Recorder::new());
    let skipped = Arc::new(AtomicU64::new(0));
    let rounds = args.rounds.max(1);
    let (mut d_hb, mut d_mixed) = (Delta::default(), Delta::default());
    let (mut cmds_hb, mut cmds_mixed) = (BTreeMap::new(), BTreeMap::new());
    let mut windows = Vec::new();
    for round in 1..=rounds {
        if round > 1
            && let Some(bg) = &bg
        {
            // The background alone between rounds: the players hold their heartbeats and
            // resume on a schedule moved by the pause.
            eprintln!(
                "fleet: background alone {:?} (players paused)",
                args.background_alone
            );
            let t0 = Instant::now();
            shared.pause.send_replace(true);
            tokio::time::sleep(Duration::from_millis(100)).await; // in-flight calls return
            let o0 = bg.ops();
            let d = idle_window(&mut meter, args.background_alone).await?;
            let n = bg.ops() - o0;
            shared
                .shift_us
                .fetch_add(t0.elapsed().as_micros() as u64, Ordering::AcqRel);
            shared.pause.send_replace(false);
            tokio::time::sleep(Duration::from_millis(100)).await;
            bg_windows.push((
                format!("background alone, after round {}", round - 1),
                d,
                n,
                0,
                0,
            ));
            alone.push(d);
        }
        eprintln!(
            "fleet: open loop round {round}/{rounds}, {} players every {:?}: heartbeats alone {:?}, then + {play_rate:.0} play-starts/s {:?}",
            live.len(),
            args.heartbeat_every,
            args.heartbeat_only,
            args.duration
        );
        // Heartbeats alone.
        shared.phase(&hb_rec);
        let ticker = progress(
            hb_rec.clone(),
            common,
            "fleet heartbeats",
            Some(args.heartbeat_only),
        );
        let hb0 = hb_rec.count("heartbeat");
        let a = meter.snap().await?;
        let bg_a = bg_ops();
        tokio::time::sleep(args.heartbeat_only).await;
        shared.phase(&mixed_rec);
        let b = meter.snap().await?;
        let bg_b = bg_ops();
        ticker.abort();
        let hb_n = hb_rec.count("heartbeat") - hb0;
        add_calls(&mut cmds_hb, meter.take_commandstats()?);
        let d = Delta::between(&a, &b);
        d_hb.add(&d);
        windows.push(
            json!({"round": round, "phase": "heartbeats", "secs": round2(d.secs),
            "heartbeats": hb_n, "redis_main_cpu_ms": round2(d.redis_main * 1e3),
            "redis_main_thread_busy": round3(ratio(d.redis_main, d.secs)),
            "background_ops": bg_b - bg_a,
            "batches": d.batches, "commands": d.commands}),
        );
        if bg.is_some() {
            bg_windows.push((
                format!("heartbeats alone, round {round}"),
                d,
                bg_b - bg_a,
                hb_n,
                round,
            ));
        }

        // Heartbeats and play-starts.
        let ticker = progress(
            mixed_rec.clone(),
            common,
            "fleet mixed",
            Some(args.duration),
        );
        let (m_hb0, m_pl0) = (mixed_rec.count("heartbeat"), mixed_rec.count("play_start"));
        let gen_stop = Arc::new(AtomicBool::new(false));
        let generator = {
            let (shared, live, gen_stop, skipped) = (
                shared.clone(),
                live.clone(),
                gen_stop.clone(),
                skipped.clone(),
            );
            tokio::spawn(async move {
                let start = Instant::now();
                let mut issued = 0u64;
                let mut tick = tokio::time::interval(Duration::from_millis(5));
                while !gen_stop.load(Ordering::Relaxed) && !live.is_empty() {
                    tick.tick().await;
                    let elapsed = start.elapsed().as_secs_f64();
                    while (issued as f64) < play_rate * elapsed {
                        issued += 1;
                        let p = &shared.players[live[random_range(0..live.len())]];
                        if p.pending.swap(true, Ordering::AcqRel) {
                            skipped.fetch_add(1, Ordering::Relaxed);
                        } else {
                            p.restart.notify_one();
                        }
                    }
                }
            })
        };
        tokio::time::sleep(args.duration).await;
        gen_stop.store(true, Ordering::Relaxed);
        let _ = generator.await;
        // The plays already asked for finish in this window.
        let drain = Instant::now() + Duration::from_secs(5);
        while Instant::now() < drain
            && shared
                .players
                .iter()
                .any(|p| p.pending.load(Ordering::Acquire))
        {
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
        shared.phase(&tail_rec);
        let c = meter.snap().await?;
        let bg_c = bg_ops();
        ticker.abort();
        add_calls(&mut cmds_mixed, meter.take_commandstats()?);
        let (m_hb, m_pl) = (
            mixed_rec.count("heartbeat") - m_hb0,
            mixed_rec.count("play_start") - m_pl0,
        );
        let d = Delta::between(&b, &c);
        d_mixed.add(&d);
        windows.push(
            json!({"round": round, "phase": "mixed", "secs": round2(d.secs),
            "heartbeats": m_hb, "play_starts": m_pl,
            "redis_main_cpu_ms": round2(d.redis_main * 1e3),
            "redis_main_thread_busy": round3(ratio(d.redis_main, d.secs)),
            "background_ops": bg_c - bg_b,
            "batches": d.batches, "commands": d.commands}),
        );
        if bg.is_some() {
            bg_windows.push((
                format!("mixed, round {round}"),
                d,
                bg_c - bg_b,
                m_hb + m_pl,
                round,
            ));
        }
    }

    // ---- 4. the store round trip under the same traffic (heartbeats), then stop.
    shared.phase(&tail_rec);
    let url = redis_url.clone();
    let span = args.probe;
    let mut pings = tokio::task::spawn_blocking(move || ping_probe(&url, span)).await??;
    pings.sort_unstable();
    let rss: Vec<u64> = stack
        .limiter_pids()
        .into_iter()
        .filter_map(process_rss_bytes)
        .collect();
    let _ = stop_tx.send(true);
    for t in tasks {
        let _ = t.await;
    }
    let mut bg_errors = 0;
    let bg_rate = bg.as_ref().map_or(0.0, Background::rate);
    if let Some(bg) = bg {
        eprintln!("fleet: background alone again {:?}", args.background_alone);
        let o0 = bg.ops();
        let d = idle_window(&mut meter, args.background_alone).await?;
        let n = bg.ops() - o0;
        bg_windows.push(("background alone, after".into(), d, n, 0, 0));
        alone.push(d);
        bg_errors = bg.stop().await;
        if bg_errors > 0 {
            main.fail_n("background: command failed", bg_errors);
        }
    }
    eprintln!("fleet: idle again {:?}", args.idle);
    let idle_after = idle_window(&mut meter, args.idle).await?;
    let mut idle = idle_before;
    idle.add(&idle_after);
    let idle_redis = ratio(idle.redis_main, idle.secs);
    let idle_limiter = ratio(idle.limiter, idle.secs);

    // ---- verification: sampled accounts hold exactly their players' leases, within the cap.
    let verify_rec = Arc::new(Recorder::new());
    let verify = phase_api(&verify_rec);
    let mut sample: Vec<usize> = (0..shared.households.len()).collect();
    for i in (1..sample.len()).rev() {
        sample.swap(i, random_range(0..=i));
    }
    sample.truncate(args.verify_accounts);
    for chunk in sample.chunks(16) {
        let checks: Vec<_> = chunk
            .iter()
            .map(|&h| tokio::spawn(verify_account(verify.clone(), shared.clone(), h)))
            .collect();
        for c in checks {
            let _ = c.await;
        }
    }
    for (rec, what) in [
        (&warmup, "open loop (before the first window)"),
        (&hb_rec, "open heartbeats"),
        (&mixed_rec, "open mixed"),
        (&tail_rec, "open loop (probe)"),
        (&verify_rec, "verify"),
    ] {
        main.absorb(rec, what);
    }

    // ---- figures.
    measured += Duration::from_secs_f64(d_hb.secs + d_mixed.secs);
    let hb_ops = summaries(&hb_rec, d_hb.secs, "open");
    let mixed_ops = summaries(&mixed_rec, d_mixed.secs, "mixed");
    ops_out.extend(hb_ops.iter().cloned());
    ops_out.extend(mixed_ops.iter().cloned());
    report.ops.extend(ops_out.iter().cloned());

    // With a background load, what it alone costs per second: each window of it alone, and
    // for round r the mean of the two around it (before it and after it).
    let alone_rates: Vec<f64> = alone.iter().map(|d| ratio(d.redis_main, d.secs)).collect();
    let bg_alone = (bg_target > 0.0 && alone.len() >= 2).then(|| {
        let mut d = Delta::default();
        alone.iter().for_each(|a| d.add(a));
        let max = alone_rates.iter().copied().fold(f64::MIN, f64::max);
        let min = alone_rates.iter().copied().fold(f64::MAX, f64::min);
        (ratio(d.redis_main, d.secs), max - min)
    });
    let base_of = |round: usize| -> f64 {
        match (alone.get(round.saturating_sub(1)), alone.get(round)) {
            (Some(a), Some(b)) if round > 0 => {
                let mut d = *a;
                d.add(b);
                ratio(d.redis_main, d.secs)
            }
            _ => bg_alone.map_or(0.0, |b| b.0),
        }
    };
    // Each background window's marginal CPU (seconds): against its round's neighbours, or the
    // background alone's mean for the alone windows.
    let marginal_cpu = |d: &Delta, round: usize| d.redis_main - base_of(round) * d.secs;
    let idle_sub = |d: &Delta| d.redis_main - idle_redis * d.secs;
    let idle_sub_lim = |d: &Delta| d.limiter - idle_limiter * d.secs;
    let phase = |name: &'static str, d: &Delta, ops: u64, lat: Option<&OpSummary>| Phase {
        name,
        ops,
        delta: *d,
        redis_raw_us: per_op_us(d.redis_main, ops),
        redis_us: per_op_us(idle_sub(d), ops),
        limiter_us: per_op_us(idle_sub_lim(d), ops),
        p50_ms: lat.map_or(0.0, |o| o.p50_ms),
        p99_ms: lat.map_or(0.0, |o| o.p99_ms),
    };
    let set = Phase {
        // redis-benchmark's own percentiles are not read; its rate is in the JSON.
        limiter_us: 0.0,
        ..phase("baseline SET", &set_delta, sets, None)
    };
    let mut closed_phases = Vec::new();
    let mut closed_json = json!({});
    for (name, d, count, ops, cmds) in &closed {
        let lat = find(ops, &format!("closed.{name}"));
        let p = phase(
            if *name == "heartbeat" {
                "closed heartbeat"
            } else {
                "closed play-start"
            },
            d,
            *count,
            lat,
        );
        closed_json[*name] = json!({
            "ops": count, "secs": round2(d.secs),
            "redis_main_us_per_op": round2(p.redis_raw_us),
            "redis_main_us_per_op_idle_subtracted": round2(p.redis_us),
            "ratio_to_set": round3(ratio(p.redis_us, set.redis_us)),
            "limiter_cpu_us_per_op": round2(p.limiter_us),
            "batches": d.batches, "commands": d.commands,
            "commands_per_batch": round2(ratio(d.commands as f64, d.batches as f64)),
            "ops_per_batch": round2(ratio(*count as f64, d.batches as f64)),
            "commands_per_op": round2(ratio(d.commands as f64, *count as f64)),
            "redis_commands": cmds,
            "latency": latency(ops, &format!("closed.{name}")),
        });
        closed_phases.push(p);
    }
    let hb_count = hb_rec.count("heartbeat");
    let hb_only = phase(
        "open heartbeats alone",
        &d_hb,
        hb_count,
        find(&hb_ops, "open.heartbeat"),
    );
    // The mixed phase: heartbeats at the heartbeat-only phase's cost, the rest is the plays'.
    let m_hb = mixed_rec.count("heartbeat");
    let m_play = mixed_rec.count("play_start");
    let m_release = mixed_rec.count("release");
    let play_cycle = |total: f64, per_hb: f64| {
        if m_play == 0 {
            0.0
        } else {
            (total * 1e6 - m_hb as f64 * per_hb) / m_play as f64
        }
    };
    let mixed_hb = Phase {
        p50_ms: find(&mixed_ops, "mixed.heartbeat").map_or(0.0, |o| o.p50_ms),
        p99_ms: find(&mixed_ops, "mixed.heartbeat").map_or(0.0, |o| o.p99_ms),
        ops: m_hb,
        delta: Delta::default(),
        name: "mixed: heartbeat",
        ..hb_only
    };
    let mixed_play = Phase {
        name: "mixed: play-start (+stop)",
        ops: m_play,
        delta: d_mixed,
        redis_raw_us: play_cycle(d_mixed.redis_main, hb_only.redis_raw_us),
        redis_us: play_cycle(idle_sub(&d_mixed), hb_only.redis_us),
        limiter_us: play_cycle(idle_sub_lim(&d_mixed), hb_only.limiter_us),
        p50_ms: find(&mixed_ops, "mixed.play_start").map_or(0.0, |o| o.p50_ms),
        p99_ms: find(&mixed_ops, "mixed.play_start").map_or(0.0, |o| o.p99_ms),
    };
    // Marginal costs over the background: the window's CPU minus the background alone's CPU
    // per second over the same duration.
    let marginal = bg_alone.map(|_| {
        let sum = |phase: &str| -> f64 {
            bg_windows
                .iter()
                .filter(|w| w.4 > 0 && w.0.starts_with(phase))
                .map(|w| marginal_cpu(&w.1, w.4))
                .sum()
        };
        let hb = per_op_us(sum("heartbeats"), hb_count);
        (hb, play_cycle(sum("mixed"), hb))
    });
    // The costs the projection uses: marginal with a background, else idle-subtracted.
    let (hb_cost, play_cost) = marginal.unwrap_or((hb_only.redis_us, mixed_play.redis_us));
    let cmds_per_hb = ratio(d_hb.commands as f64, hb_count as f64);
    let cmds_per_cycle = if m_play == 0 {
        0.0
    } else {
        (d_mixed.commands as f64 - m_hb as f64 * cmds_per_hb) / m_play as f64
    };
    let per_proc = |x: f64, secs: f64| ratio(x, secs * limiters as f64);
    let mixed_cmd_rate = per_proc(d_mixed.commands as f64, d_mixed.secs);
    let hb_cmd_rate = per_proc(d_hb.commands as f64, d_hb.secs);
    // Two measures of the round trip: PING on a connection of the run's own (network and
    // Redis), and the limiter's own: while its queue never idles (many commands arrive per
    // batch), one batch follows another, so the mean time between a limiter's batches is
    // W + its round trip, timer rounding and task wake-ups included.
    let ping_rtt_us = quantile(&pings, 0.5);
    let batch_cycle_us = ratio(d_hb.secs * limiters as f64, d_hb.batches as f64) * 1e6;
    let queue_never_idle = ratio(d_hb.commands as f64, d_hb.batches as f64) >= 8.0;
    let limiter_rtt_us = (batch_cycle_us - window.as_secs_f64() * 1e6).max(0.0);
    let (rtt_us, rtt_source) = if queue_never_idle {
        (
            limiter_rtt_us,
            "limiter: mean time between batches in the heartbeat windows - W",
        )
    } else {
        (
            ping_rtt_us,
            "PING p50 (the limiter's queue idled, its batch cycle is not a round trip)",
        )
    };
    let expected_depth = |cmds_per_sec: f64, rtt_us: f64| {
        let w = window.as_secs_f64();
        (1.0 + cmds_per_sec * w).max(cmds_per_sec * (w + rtt_us / 1e6))
    };

    // ---- the projection.
    let shards = args.fleet_shards.max(1) as f64;
    let procs = args.fleet_processes.max(1) as f64;
    let lanes = args.fleet_lanes.max(1) as f64;
    let cmd_pair = hb_pair * cmds_per_hb + play_pair * cmds_per_cycle;
    let depth_model = expected_depth(cmd_pair, rtt_us);
    let depth_model_ping = expected_depth(cmd_pair, ping_rtt_us);
    let mixed_depth = ratio(d_mixed.commands as f64, d_mixed.batches as f64);
    let hb_rate_proc = per_proc(m_hb as f64, d_mixed.secs);
    let play_rate_proc = per_proc(m_play as f64, d_mixed.secs);
    let near = |measured: f64, model: f64| model > 0.0 && (measured / model - 1.0).abs() <= 0.1;
    let rates_match = near(hb_rate_proc, hb_pair) && near(play_rate_proc, play_pair);
    let redis_cores = (args.peak_heartbeats * hb_cost + args.peak_play_starts * play_cost) / 1e6;
    let redis_cores_raw = (args.peak_heartbeats * hb_only.redis_raw_us
        + args.peak_play_starts * mixed_play.redis_raw_us)
        / 1e6;
    let shards_needed = (redis_cores / args.shard_cpu_budget).ceil();
    let shards_needed_raw = (redis_cores_raw / args.shard_cpu_budget).ceil();
    let limiter_cores = (args.peak_heartbeats * hb_only.limiter_us
        + args.peak_play_starts * mixed_play.limiter_us)
        / 1e6;
    let rss_mean = if rss.is_empty() {
        0.0
    } else {
        rss.iter().sum::<u64>() as f64 / rss.len() as f64
    };
    let redis_ram = bytes_per_stream * args.peak_streams;

    let hb_ratio = ratio(closed_phases[0].redis_us, set.redis_us);
    let play_ratio = ratio(closed_phases[1].redis_us, set.redis_us);
    let open_hb_ratio = ratio(hb_only.redis_us, set.redis_us);
    let open_play_ratio = ratio(mixed_play.redis_us, set.redis_us);

    let cost_basis = if marginal.is_some() {
        format!(
            "marginal: open-loop window CPU minus the background-alone CPU per second over the same duration, Redis main thread kept about {:.0} % busy by background traffic",
            bg_target * 100.0
        )
    } else {
        "open loop on an otherwise idle shard, idle CPU subtracted".to_owned()
    };
    // The background's windows: busy fraction, its rate, and the limiter traffic's marginal CPU.
    let bg_rows: Vec<(String, f64, f64, u64, f64, f64)> = bg_windows
        .iter()
        .map(|(name, d, n, ops, round)| {
            (
                name.clone(),
                d.secs,
                ratio(d.redis_main, d.secs),
                *ops,
                ratio(*n as f64, d.secs),
                marginal_cpu(d, *round),
            )
        })
        .collect();
    // The background-alone windows' spread (max - min), and what half of it moves a
    // heartbeat's marginal cost by.
    let hb_noise_us = bg_alone.map(|(_, spread)| per_op_us(spread / 2.0 * d_hb.secs, hb_count));
    let background_json = bg_alone.map_or(Value::Null, |(mean, spread)| {
        json!({
            "target_busy": bg_target,
            "connections": args.background_connections,
            "traffic": "GET bg:<n> (one in ten SET), n < 10,000, one command at a time per connection",
            "calibration": bg_calibration,
            "rate_per_sec": bg_rate.round(),
            "errors": bg_errors,
            "alone_redis_main_ms_per_sec": round3(mean * 1e3),
            "alone_redis_main_ms_per_sec_windows": alone_rates.iter().map(|r| round3(r * 1e3)).collect::<Vec<_>>(),
            "alone_spread_ms_per_sec": round3(spread * 1e3),
            "marginal_base": "each round's windows minus the mean of the background-alone windows before and after that round (players paused between rounds)",
            "heartbeat_marginal_us_moved_by_half_the_spread": hb_noise_us.map(round2),
            "windows": bg_rows.iter().map(|(name, secs, busy, ops, rate, marg)| json!({
                "window": name, "secs": round2(*secs), "redis_main_thread_busy": round3(*busy),
                "background_ops_per_sec": rate.round(), "limiter_ops": ops,
                "marginal_redis_main_ms": round2(marg * 1e3),
            })).collect::<Vec<_>>(),
        })
    });

    // JSON.
    let open_json = json!({
        "limiters": limiters,
        "players": live.len(),
        "households": shared.households.len(),
        "heartbeat_every_sec": every,
        "play_rate_target": play_rate,
        "load_secs": round2(load_secs),
        "redis_bytes_per_live_stream": round2(bytes_per_stream),
        "idle": {"secs": round2(idle.secs),
                 "redis_main_thread_ms_per_sec": round3(idle_redis * 1e3),
                 "redis_main_thread_ms_per_sec_before": round3(ratio(idle_before.redis_main, idle_before.secs) * 1e3),
                 "redis_main_thread_ms_per_sec_after": round3(ratio(idle_after.redis_main, idle_after.secs) * 1e3),
                 "limiter_cpu_ms_per_sec": round3(idle_limiter * 1e3)},
        "rounds": rounds,
        "windows": windows,
        "heartbeat_only": {
            "ops": hb_count, "secs": round2(d_hb.secs),
            "heartbeats_per_sec_per_limiter": round2(per_proc(hb_count as f64, d_hb.secs)),
            "redis_main_us_per_heartbeat": round2(hb_only.redis_raw_us),
            "redis_main_us_per_heartbeat_idle_subtracted": round2(hb_only.redis_us),
            "redis_main_us_per_heartbeat_marginal": marginal.map(|m| round2(m.0)),
            "ratio_to_set": round3(open_hb_ratio),
            "limiter_cpu_us_per_heartbeat": round2(hb_only.limiter_us),
            "redis_main_thread_busy": round3(ratio(d_hb.redis_main, d_hb.secs)),
            "batches": d_hb.batches, "commands": d_hb.commands,
            "commands_per_batch": round2(ratio(d_hb.commands as f64, d_hb.batches as f64)),
            "heartbeats_per_batch": round2(ratio(hb_count as f64, d_hb.batches as f64)),
            "commands_per_heartbeat": round2(cmds_per_hb),
            "commands_per_sec_per_limiter": round2(hb_cmd_rate),
            "expected_commands_per_batch": round2(expected_depth(hb_cmd_rate, rtt_us)),
            "redis_commands": cmds_hb,
            "latency": latency(&hb_ops, "open.heartbeat"),
        },
        "mixed": {
            "secs": round2(d_mixed.secs),
            "heartbeats": m_hb, "play_starts": m_play, "releases": m_release,
            "restarts_skipped_busy": skipped.load(Ordering::Relaxed),
            "heartbeats_per_sec_per_limiter": round2(hb_rate_proc),
            "play_starts_per_sec_per_limiter": round2(play_rate_proc),
            "attribution": "subtraction: mixed-phase CPU minus its heartbeats at the heartbeat-only phase's cost per heartbeat; the rest over its play-starts (each with its graceful stop)",
            "redis_main_us_per_op_all": round2(per_op_us(d_mixed.redis_main, m_hb + m_play + m_release)),
            "redis_main_us_per_play_start_cycle": round2(mixed_play.redis_raw_us),
            "redis_main_us_per_play_start_cycle_idle_subtracted": round2(mixed_play.redis_us),
            "redis_main_us_per_play_start_cycle_marginal": marginal.map(|m| round2(m.1)),
            "ratio_to_set": round3(open_play_ratio),
            "limiter_cpu_us_per_play_start_cycle": round2(mixed_play.limiter_us),
            "redis_main_thread_busy": round3(ratio(d_mixed.redis_main, d_mixed.secs)),
            "batches": d_mixed.batches, "commands": d_mixed.commands,
            "commands_per_batch": round2(mixed_depth),
            "heartbeats_per_batch": round2(ratio(m_hb as f64, d_mixed.batches as f64)),
            "play_starts_per_batch": round2(ratio(m_play as f64, d_mixed.batches as f64)),
            "commands_per_play_start_cycle": round2(cmds_per_cycle),
            "commands_per_sec_per_limiter": round2(mixed_cmd_rate),
            "expected_commands_per_batch": round2(expected_depth(mixed_cmd_rate, rtt_us)),
            "redis_commands": cmds_mixed,
            "latency": {"heartbeat": latency(&mixed_ops, "mixed.heartbeat"),
                        "play_start": latency(&mixed_ops, "mixed.play_start"),
                        "release": latency(&mixed_ops, "mixed.release")},
        },
        "store_round_trip": {"method": "PING on a connection of its own every 10 ms, after the mixed window, same traffic",
                             "count": pings.len(), "p50_us": ping_rtt_us,
                             "p99_us": quantile(&pings, 0.99)},
        "limiter_rss_bytes": rss,
        "background": background_json,
    });
    let projection = json!({
        "inputs": {
            "peak_heartbeats_per_sec": args.peak_heartbeats,
            "peak_play_starts_per_sec": args.peak_play_starts,
            "peak_streams": args.peak_streams,
            "shards": args.fleet_shards, "limiter_processes": args.fleet_processes,
            "lanes_per_process": args.fleet_lanes,
            "batch_window_us": window.as_micros() as u64,
            "shard_cpu_budget": args.shard_cpu_budget,
        },
        "per_pair": {
            "heartbeats_per_sec": round2(hb_pair), "play_starts_per_sec": round2(play_pair),
            "commands_per_sec": round2(cmd_pair),
            "round_trip_us": round2(rtt_us),
            "round_trip_source": rtt_source,
            "ping_round_trip_us": ping_rtt_us,
            "limiter_batch_cycle_us": round2(batch_cycle_us),
            "expected_commands_per_batch": round2(depth_model),
            "expected_commands_per_batch_with_ping_round_trip": round2(depth_model_ping),
            "expected_depth_formula": "max(1 + rate x W, rate x (W + round trip)), rate in commands/s",
            "measured_commands_per_batch": round2(mixed_depth),
            "open_loop_rates_match_model": rates_match,
        },
        "redis_main_us_per_heartbeat": round2(hb_cost),
        "redis_main_us_per_play_start_cycle": round2(play_cost),
        "cost_basis": cost_basis,
        "redis_main_cores": round2(redis_cores),
        "redis_main_cores_without_idle_subtraction": round2(redis_cores_raw),
        "shards_needed": shards_needed,
        "shards_needed_without_idle_subtraction": shards_needed_raw,
        "shard_utilisation_at_inputs": round3(redis_cores / shards),
        "fits": shards_needed <= shards,
        "limiter_cpu_us_per_heartbeat": round2(hb_only.limiter_us),
        "limiter_cpu_us_per_play_start_cycle": round2(mixed_play.limiter_us),
        "limiter_cores": round2(limiter_cores),
        "limiter_lane_utilisation": round3(limiter_cores / (procs * lanes)),
        "redis_bytes_per_stream": round2(bytes_per_stream),
        "redis_ram_bytes": redis_ram.round(),
        "redis_ram_bytes_per_shard": (redis_ram / shards).round(),
        "limiter_rss_bytes_per_process": rss_mean.round(),
        "limiter_ram_bytes": (rss_mean * procs).round(),
    });
    report.figure(
        "baseline",
        json!({"tool": format!("redis-benchmark -c {} -n {} -t set", args.clients, args.baseline_requests),
               "sets": sets, "rate_per_sec": set_rps.round(), "secs": round2(set_delta.secs),
               "redis_main_us_per_set": round2(set.redis_raw_us),
               "redis_main_us_per_set_idle_subtracted": round2(set.redis_us)}),
    );
    report.figure("closed", closed_json);
    report.figure("open", open_json);
    report.figure("projection", projection);
    report.figure("heartbeat_vs_set", round3(hb_ratio));
    report.figure("play_start_vs_set", round3(play_ratio));
    report.figure("shards_needed", shards_needed);
    report.figure("limiter_cores_needed", round2(limiter_cores));
    report.figure("batch_window_ms", window.as_secs_f64() * 1e3);

    // The table.
    let mut t = String::new();
    let _ = writeln!(
        t,
        "\nRedis main-thread CPU per operation (INFO cpu deltas, network I/O included); idle {:.2} ms/s of Redis main thread and {:.2} ms/s of limiter CPU subtracted ({:.1} s idle window, {} leases)",
        idle_redis * 1e3,
        idle_limiter * 1e3,
        idle.secs,
        loaded
    );
    let _ = writeln!(
        t,
        "{:<27} {:>8} {:>8} {:>7} {:>7} {:>8} {:>8} {:>6} {:>7} {:>7} {:>7} {:>8}",
        "phase",
        "ops",
        "ops/s",
        "p50 ms",
        "p99 ms",
        "µs raw",
        "µs -idle",
        "× SET",
        "cmd/bat",
        "ops/bat",
        "cmd/op",
        "lim µs"
    );
    let row = |t: &mut String, p: &Phase, d: Option<&Delta>, secs: f64| {
        let (cpb, opb, cpo) = d.map_or(("-".into(), "-".into(), "-".into()), |d| {
            (
                format!("{:.2}", ratio(d.commands as f64, d.batches as f64)),
                format!("{:.2}", ratio(p.ops as f64, d.batches as f64)),
                format!("{:.2}", ratio(d.commands as f64, p.ops as f64)),
            )
        });
        let _ = writeln!(
            t,
            "{:<27} {:>8} {:>8.0} {:>7.2} {:>7.2} {:>8.2} {:>8.2} {:>6.2} {:>7} {:>7} {:>7} {:>8.1}",
            p.name,
            p.ops,
            ratio(p.ops as f64, secs),
            p.p50_ms,
            p.p99_ms,
            p.redis_raw_us,
            p.redis_us,
            ratio(p.redis_us, set.redis_us),
            cpb,
            opb,
            cpo,
            p.limiter_us
        );
    };
    row(&mut t, &set, None, set_delta.secs);
    for p in &closed_phases {
        row(&mut t, p, Some(&p.delta), p.delta.secs);
    }
    row(&mut t, &hb_only, Some(&d_hb), d_hb.secs);
    row(&mut t, &mixed_hb, None, d_mixed.secs);
    let _ = writeln!(
        t,
        "{:<27} {:>8} {:>8.0} {:>7.2} {:>7.2} {:>8.2} {:>8.2} {:>6.2} {:>7.2} {:>7} {:>7.2} {:>8.1}",
        mixed_play.name,
        m_play,
        ratio(m_play as f64, d_mixed.secs),
        mixed_play.p50_ms,
        mixed_play.p99_ms,
        mixed_play.redis_raw_us,
        mixed_play.redis_us,
        open_play_ratio,
        mixed_depth,
        format!(
            "{:.2}+{:.2}",
            ratio(m_hb as f64, d_mixed.batches as f64),
            ratio(m_play as f64, d_mixed.batches as f64)
        ),
        cmds_per_cycle,
        mixed_play.limiter_us
    );
    let _ = writeln!(
        t,
        "  (mixed: heartbeats charged at the heartbeat-only cost, the rest of the phase's CPU over its play-starts, each with its graceful stop; ops/bat = heartbeats+play-starts per batch; Redis main thread {:.1} % busy heartbeats alone, {:.1} % mixed)",
        100.0 * ratio(d_hb.redis_main, d_hb.secs),
        100.0 * ratio(d_mixed.redis_main, d_mixed.secs)
    );
    let met = |ok: bool| if ok { "met" } else { "NOT met" };
    let _ = writeln!(
        t,
        "targets, closed loop of {} against redis-benchmark -c {} SET ({:.2} µs, {:.0}/s): heartbeat {:.2}× (≤ 0.5×: {}), play-start {:.2}× (≤ 2×: {}); open loop: heartbeat {:.2}×, play-start+stop {:.2}×",
        args.clients,
        args.clients,
        set.redis_us,
        set_rps,
        hb_ratio,
        met(hb_ratio <= 0.5),
        play_ratio,
        met(play_ratio <= 2.0),
        open_hb_ratio,
        open_play_ratio
    );
    let _ = writeln!(
        t,
        "store round trip: PING (own connection, under the heartbeat traffic) p50 {:.0} µs, p99 {:.0} µs ({} probes); limiter's batch cycle {:.0} µs = W + {:.0} µs; Redis {:.0} B per live stream ({} streams)",
        ping_rtt_us,
        quantile(&pings, 0.99),
        pings.len(),
        batch_cycle_us,
        limiter_rtt_us,
        bytes_per_stream,
        loaded
    );
    if let Some((mean, spread)) = bg_alone {
        let _ = writeln!(
            t,
            "\nBackground load (--background-busy {:.2}): {} connections, GET/SET bg:<n> one at a time, paced at {:.0}/s (calibrated: {}); {} errors",
            bg_target,
            args.background_connections,
            bg_rate,
            bg_calibration
                .iter()
                .map(|c| format!(
                    "{}/s → {:.1} %",
                    c["achieved_per_sec"],
                    c["busy"].as_f64().unwrap_or(0.0) * 100.0
                ))
                .collect::<Vec<_>>()
                .join(", "),
            bg_errors
        );
        let _ = writeln!(
            t,
            "{:<33} {:>6} {:>7} {:>9} {:>8} {:>11} {:>10}",
            "window", "secs", "busy %", "bg ops/s", "lim ops", "marginal ms", "µs/op marg"
        );
        for (name, secs, busy, ops, rate, marg) in &bg_rows {
            let _ = writeln!(
                t,
                "{:<33} {:>6.2} {:>7.1} {:>9.0} {:>8} {:>11.2} {:>10}",
                name,
                secs,
                busy * 100.0,
                rate,
                ops,
                marg * 1e3,
                if *ops > 0 {
                    format!("{:.2}", per_op_us(*marg, *ops))
                } else {
                    "-".into()
                }
            );
        }
        let (m_hb_us, m_play_us) = marginal.unwrap_or_default();
        let _ = writeln!(
            t,
            "marginal Redis µs per heartbeat {m_hb_us:.2} ({:.2}× SET; plain {:.2} with the background in, {:.2} on the idle shard's subtraction), per play-start+stop {m_play_us:.2} ({:.2}× SET); background alone {:.1} ms/s ({}: spread {:.1} ms/s, ± {:.2} µs per heartbeat; each round's windows net of the background-alone windows either side)",
            ratio(m_hb_us, set.redis_us),
            hb_only.redis_raw_us,
            hb_only.redis_us,
            ratio(m_play_us, set.redis_us),
            mean * 1e3,
            alone_rates
                .iter()
                .map(|r| format!("{:.1}", r * 1e3))
                .collect::<Vec<_>>()
                .join(", "),
            spread * 1e3,
            hb_noise_us.unwrap_or(0.0)
        );
    }
    let _ = writeln!(
        t,
        "\nFleet projection to the seed's peak (model; inputs, then outputs)"
    );
    fn kv(t: &mut String, k: impl std::fmt::Display, v: String) {
        let _ = writeln!(t, "  {k:<62} {v}");
    }
    let alt = if marginal.is_some() {
        "plain, background included"
    } else {
        "without idle subtraction"
    };
    kv(
        &mut t,
        "peak heartbeats/s, play-starts/s, streams (seed)",
        format!(
            "{:.0}, {:.0}, {:.0}",
            args.peak_heartbeats, args.peak_play_starts, args.peak_streams
        ),
    );
    kv(
        &mut t,
        "shards S, limiter processes P × lanes L, batch window W",
        format!(
            "{}, {} × {}, {:?}",
            args.fleet_shards, args.fleet_processes, args.fleet_lanes, window
        ),
    );
    kv(
        &mut t,
        "shard CPU budget (main thread)",
        format!("{:.0} %", args.shard_cpu_budget * 100.0),
    );
    kv(
        &mut t,
        "per (process, shard) pair: heartbeats/s, play-starts/s",
        format!("{hb_pair:.0}, {play_pair:.0}"),
    );
    kv(
        &mut t,
        format!(
            "  commands/s (×{cmds_per_hb:.2} per heartbeat, ×{cmds_per_cycle:.2} per start+stop)"
        ),
        format!("{cmd_pair:.0}"),
    );
    kv(
        &mut t,
        "  round trip RTT (limiter's batch cycle - W; PING p50)",
        format!(
            "{rtt_us:.0} µs{}; {ping_rtt_us:.0} µs",
            if queue_never_idle {
                ""
            } else {
                " (PING: queue idled)"
            }
        ),
    );
    kv(
        &mut t,
        "  expected depth max(1 + rate·W, rate·(W + RTT)) (with PING)",
        format!("{depth_model:.2} commands/batch ({depth_model_ping:.2})"),
    );
    kv(
        &mut t,
        format!(
            "  measured depth (open loop at {:.0} hb/s, {:.0} plays/s per limiter)",
            hb_rate_proc, play_rate_proc
        ),
        format!(
            "{mixed_depth:.2} commands/batch{}",
            if rates_match {
                ""
            } else {
                " (open loop NOT at the model's rates: cost is at this depth)"
            }
        ),
    );
    kv(
        &mut t,
        if marginal.is_some() {
            format!(
                "Redis µs per heartbeat, per play-start+stop: MARGINAL at {:.0} % busy",
                bg_target * 100.0
            )
        } else {
            "Redis µs per heartbeat, per play-start+stop at that depth".to_owned()
        },
        format!("{hb_cost:.2}, {play_cost:.2}"),
    );
    kv(
        &mut t,
        format!("Redis main-thread cores at peak ({alt})"),
        format!("{redis_cores:.1} ({redis_cores_raw:.1})"),
    );
    kv(
        &mut t,
        format!(
            "shards needed at {:.0} % ({alt})",
            args.shard_cpu_budget * 100.0
        ),
        format!(
            "{shards_needed:.0} ({shards_needed_raw:.0}) — {} S = {}; {:.1} % busy each at S",
            if shards_needed <= shards {
                "fits"
            } else {
                "does NOT fit"
            },
            args.fleet_shards,
            100.0 * redis_cores / shards
        ),
    );
    kv(
        &mut t,
        "limiter CPU µs per heartbeat, per play-start+stop",
        format!("{:.1}, {:.1}", hb_only.limiter_us, mixed_play.limiter_us),
    );
    kv(
        &mut t,
        "limiter cores at peak (P × L available)",
        format!(
            "{limiter_cores:.0} ({:.0}; {:.0} % busy)",
            procs * lanes,
            100.0 * limiter_cores / (procs * lanes)
        ),
    );
    kv(
        &mut t,
        "Redis RAM at peak streams (per shard)",
        format!(
            "{:.1} GB ({:.2} GB) at {bytes_per_stream:.0} B/stream",
            redis_ram / 1e9,
            redis_ram / shards / 1e9
        ),
    );
    kv(
        &mut t,
        "limiter RAM (RSS per process here × P)",
        format!(
            "{:.1} GB ({:.0} MB per process)",
            rss_mean * procs / 1e9,
            rss_mean / 1e6
        ),
    );
    report.text = t;
    Ok(measured)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counters_are_summed_over_shards() {
        let text = "# HELP x\nscreenlimit_store_batches_total{shard=\"0\"} 7\n\
                    screenlimit_store_batches_total{shard=\"1\"} 3\n\
                    screenlimit_store_batches_totally 100\n\
                    screenlimit_store_batched_commands_total{shard=\"0\"} 30\n";
        assert_eq!(counter_sum(text, "screenlimit_store_batches_total"), 10);
        assert_eq!(
            counter_sum(text, "screenlimit_store_batched_commands_total"),
            30
        );
    }

    #[test]
    fn redis_urls_give_host_and_port() {
        assert_eq!(
            host_port("redis://127.0.0.1:6400").unwrap(),
            ("127.0.0.1".to_owned(), 6400)
        );
        assert_eq!(
            host_port("redis://:pw@10.0.0.1:7000/2").unwrap(),
            ("10.0.0.1".to_owned(), 7000)
        );
        assert_eq!(host_port("redis://r").unwrap(), ("r".to_owned(), 6379));
    }

    #[test]
    fn households_mix_premium_and_full_standard_accounts() {
        let (hs, ps) = households("t", 8);
        assert_eq!(ps.len(), 8);
        assert_eq!(hs[0].plan, "premium");
        assert_eq!(hs[0].players.len(), 3);
        assert_eq!(hs[1].players.len(), 2);
        assert!(hs.iter().all(|h| h.players.len() as u32 <= h.limit));
    }
}
