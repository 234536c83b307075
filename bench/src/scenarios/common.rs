//! What the scenarios share: the flags every load scenario takes (`Common`), the duration
//! parser, progress lines, run tags, the cost window, loading a population, answer labels.

use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use clap::Args;
use rand::random_range;
use serde_json::json;
use tokio::task::JoinHandle;

use crate::api::{Api, Beat, DEVICE_KINDS, Play, PlayArgs};
use crate::procs::Stack;
use crate::stats::Recorder;

/// A command-line duration (`5s`, `250ms`), for every scenario's flags.
pub(crate) fn dur(s: &str) -> Result<Duration, humantime::DurationError> {
    humantime::parse_duration(s)
}

/// `--h2c`: also tells the HTTP client (every scenario makes its clients after the command line
/// is read, without the flags at hand).
fn h2c(s: &str) -> Result<bool, String> {
    let on = s.parse::<bool>().map_err(|e| e.to_string())?;
    crate::client::set_h2c(on);
    Ok(on)
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
    /// Connections in all: HTTP/1.1 keep-alive ones (one request at a time each), or with
    /// `--h2c` HTTP/2 ones (many requests at once each).
    #[arg(long, default_value_t = 64)]
    pub connections: usize,
    /// Send over HTTP/2 with prior knowledge (h2c), as a gateway does upstream, instead of
    /// HTTP/1.1 keep-alive. `--connections` then counts HTTP/2 connections, and no longer bounds
    /// the requests in flight: each connection carries up to the limiter's
    /// `http.max_concurrent_streams` at once.
    #[arg(long, num_args = 0, default_value = "false", default_missing_value = "true", value_parser = h2c)]
    pub h2c: bool,
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
    /// `store.renewal_window` of spawned limiters: how long a heartbeat's renewal waits for
    /// others of its shard (default: the limiter's own, 20ms; `0s` sends each as it comes).
    #[arg(long, value_parser = dur)]
    pub renewal_window: Option<Duration>,
    /// Serving lanes (`threads`) of each spawned limiter; 0: one per CPU.
    #[arg(long, default_value_t = 0)]
    pub limiter_threads: usize,
    /// With `--spawn`: the spawned Redis loads this screenlimit module (`cargo build --release
    /// -p screenlimit-redis-module`), so the limiters take the native path.
    #[arg(long)]
    pub redis_module: Option<PathBuf>,
    /// With `--spawn`: one more argument for the spawned Redis, repeatable (e.g. `--redis-arg
    /// --io-threads --redis-arg 2`; with `REDIS_SERVER_BIN=valkey-server`, Valkey's I/O threads).
    #[arg(long = "redis-arg", allow_hyphen_values = true)]
    pub redis_args: Vec<String>,
    /// Play-starts in flight while a population loads (default: `--connections`). Fewer keep a
    /// machine that also runs Redis and the limiter from answering the load past the store's
    /// deadline, which fails open and leaves those leases unwritten.
    #[arg(long)]
    pub load_in_flight: Option<usize>,
}

impl Common {
    /// The progress period, unless progress lines are off.
    pub fn progress_every(&self) -> Option<Duration> {
        (!self.no_progress).then_some(self.progress)
    }

    /// How many play-starts a population's load keeps in flight.
    pub fn load_workers(&self) -> usize {
        self.load_in_flight.unwrap_or(self.connections).max(1)
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

/// Redis and limiter costs over a window: call `end` with the requests made meanwhile.
pub(crate) struct CostWindow {
    stats: Option<crate::procs::RedisStats>,
    redis_cpu: f64,
    redis_main_cpu: f64,
    limiter_cpu: f64,
    started: Instant,
}

impl CostWindow {
    pub(crate) fn start(stack: &Stack) -> Self {
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

    pub(crate) fn end(mut self, stack: &Stack, requests: u64) -> serde_json::Value {
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

/// The source of one of the limiter's Lua scripts, by name (`acquire`, `release`, ...).
pub(crate) fn script_source(name: &str) -> &'static str {
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

/// ARGV of an acquire (no take-over, no device caps, no caps book, the default history bounds)
/// as the limiter sends it, except that the caps are `''` rather than six 0 bytes so the list
/// also works as command-line arguments (the script reads both as "no cap").
pub(crate) fn acquire_argv(ttl_ms: u64, device: &str, nonce: &[u8]) -> Vec<Vec<u8>> {
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
        Vec::new(),
    ]
    .into_iter()
    .chain(history_argv())
    .collect()
}

/// The history's bounds every command that may write an account's history ends with, one
/// argument (`HistoryLimits::bounds_arg`): the defaults (50 entries, 7 days).
pub(crate) fn history_argv() -> [Vec<u8>; 1] {
    [screenlimit_limiter::model::HistoryLimits::default().bounds_arg()]
}

/// The median (upper of the two middle values); sorts `v`.
pub(crate) fn median(v: &mut [f64]) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    if v.is_empty() { 0.0 } else { v[v.len() / 2] }
}
