//! Processes a scenario may start itself (`--spawn`): a throwaway `redis-server` and one or
//! more `screenlimit-limiter`s on free loopback ports, killed when dropped; plus what the run
//! reads from them (Redis `INFO`, process CPU time).

use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};

pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .unwrap_or(0)
}

/// A child process killed (SIGKILL) and reaped on drop.
pub struct Proc(Child);

impl Proc {
    pub fn pid(&self) -> u32 {
        self.0.id()
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

pub struct RedisProc {
    pub port: u16,
    pub proc: Proc,
}

impl RedisProc {
    pub fn start() -> anyhow::Result<Self> {
        Self::start_with(None, &[])
    }

    /// A throwaway server that loads `module` (the screenlimit module's `.so`), when given, with
    /// `extra` arguments (e.g. `--io-threads 2`).
    pub fn start_with(module: Option<&Path>, extra: &[String]) -> anyhow::Result<Self> {
        let bin = std::env::var("REDIS_SERVER_BIN").unwrap_or_else(|_| "redis-server".into());
        let port = free_port();
        if let Some(module) = module
            && !module.is_file()
        {
            bail!(
                "no module at {} (cargo build --release -p screenlimit-redis-module)",
                module.display()
            );
        }
        let mut command = Command::new(&bin);
        if let Some(module) = module {
            command.arg("--loadmodule").arg(module);
        }
        let child = command
            .args(["--port", &port.to_string(), "--bind", "127.0.0.1"])
            .args(["--save", "", "--appendonly", "no", "--maxclients", "10000"])
            .args(extra)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .with_context(|| format!("start {bin} (apt-get install redis-server)"))?;
        let redis = RedisProc {
            port,
            proc: Proc(child),
        };
        // Our own server, not one a parallel run started on the same port in the meantime.
        let our_pid = redis.proc.pid().to_string();
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let answering = redis
                .stats()
                .and_then(|mut s| s.field("server", "process_id"));
            if answering.is_ok_and(|pid| pid == our_pid) {
                return Ok(redis);
            }
            if Instant::now() > deadline {
                bail!("redis-server on {port} did not answer within 10 s");
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    pub fn stats(&self) -> anyhow::Result<RedisStats> {
        RedisStats::connect(&self.url())
    }
}

/// `INFO` and `CONFIG RESETSTAT` on one Redis.
pub struct RedisStats {
    conn: redis::Connection,
}

/// Calls and server-side microseconds of one command, from `INFO commandstats`.
#[derive(Debug, Clone, Copy, Default, serde::Serialize)]
pub struct CommandStat {
    pub calls: u64,
    pub usec: u64,
}

impl CommandStat {
    pub fn usec_per_call(&self) -> f64 {
        if self.calls == 0 {
            0.0
        } else {
            self.usec as f64 / self.calls as f64
        }
    }
}

impl RedisStats {
    pub fn connect(url: &str) -> anyhow::Result<Self> {
        let client = redis::Client::open(url)?;
        let conn = client.get_connection_with_timeout(Duration::from_secs(2))?;
        Ok(RedisStats { conn })
    }

    pub fn info(&mut self, section: &str) -> anyhow::Result<String> {
        Ok(redis::cmd("INFO").arg(section).query(&mut self.conn)?)
    }

    pub fn field(&mut self, section: &str, key: &str) -> anyhow::Result<String> {
        let info = self.info(section)?;
        info.lines()
            .find_map(|l| l.strip_prefix(key).and_then(|r| r.strip_prefix(':')))
            .map(|v| v.trim().to_owned())
            .with_context(|| format!("INFO {section} has no {key}"))
    }

    pub fn reset(&mut self) -> anyhow::Result<()> {
        redis::cmd("CONFIG").arg("RESETSTAT").exec(&mut self.conn)?;
        Ok(())
    }

    /// Every command's stats since the last reset, by lower-case name.
    pub fn commandstats(&mut self) -> anyhow::Result<Vec<(String, CommandStat)>> {
        let info = self.info("commandstats")?;
        let mut out = Vec::new();
        for line in info.lines() {
            let Some((name, rest)) = line
                .strip_prefix("cmdstat_")
                .and_then(|l| l.split_once(':'))
            else {
                continue;
            };
            let mut stat = CommandStat::default();
            for kv in rest.split(',') {
                match kv.split_once('=') {
                    Some(("calls", v)) => stat.calls = v.parse().unwrap_or(0),
                    Some(("usec", v)) => stat.usec = v.parse().unwrap_or(0),
                    _ => {}
                }
            }
            out.push((name.to_owned(), stat));
        }
        Ok(out)
    }

    pub fn command(&mut self, name: &str) -> anyhow::Result<CommandStat> {
        Ok(self
            .commandstats()?
            .into_iter()
            .find(|(n, _)| n == name)
            .map(|(_, s)| s)
            .unwrap_or_default())
    }

    /// Redis CPU seconds (user + sys) since it started.
    pub fn cpu_seconds(&mut self) -> anyhow::Result<f64> {
        let user: f64 = self.field("cpu", "used_cpu_user")?.parse()?;
        let sys: f64 = self.field("cpu", "used_cpu_sys")?.parse()?;
        Ok(user + sys)
    }

    /// CPU of Redis's main thread (user + sys, network I/O included): what caps one shard.
    pub fn main_thread_cpu_seconds(&mut self) -> anyhow::Result<f64> {
        let info = self.info("cpu")?;
        let field = |key: &str| -> anyhow::Result<f64> {
            info.lines()
                .find_map(|l| l.strip_prefix(key).and_then(|r| r.strip_prefix(':')))
                .with_context(|| format!("INFO cpu has no {key} (Redis 7.0 or newer)"))?
                .trim()
                .parse::<f64>()
                .map_err(Into::into)
        };
        Ok(field("used_cpu_user_main_thread")? + field("used_cpu_sys_main_thread")?)
    }

    pub fn used_memory(&mut self) -> anyhow::Result<u64> {
        Ok(self.field("memory", "used_memory")?.parse()?)
    }

    pub fn dbsize(&mut self) -> anyhow::Result<u64> {
        Ok(redis::cmd("DBSIZE").query(&mut self.conn)?)
    }

    /// Empties every database (scripts stay loaded).
    pub fn flushall(&mut self) -> anyhow::Result<()> {
        redis::cmd("FLUSHALL").exec(&mut self.conn)?;
        Ok(())
    }

    /// One `PING` round trip.
    pub fn ping(&mut self) -> anyhow::Result<()> {
        redis::cmd("PING").exec(&mut self.conn)?;
        Ok(())
    }
}

/// CPU seconds (user + sys) a process has used, from `/proc/<pid>/stat`.
pub fn process_cpu_seconds(pid: u32) -> Option<f64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let after = &stat[stat.rfind(')')? + 2..];
    let fields: Vec<&str> = after.split_whitespace().collect();
    // fields[0] is field 3 (state); utime and stime are fields 14 and 15.
    let utime: f64 = fields.get(11)?.parse().ok()?;
    let stime: f64 = fields.get(12)?.parse().ok()?;
    Some((utime + stime) / 100.0)
}

/// Resident memory of a process in bytes, from `/proc/<pid>/status` (`VmRSS`).
pub fn process_rss_bytes(pid: u32) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let kb: u64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))?
        .trim()
        .trim_end_matches("kB")
        .trim()
        .parse()
        .ok()?;
    Some(kb * 1024)
}

/// The limiter binary: `$SCREENLIMIT_LIMITER_BIN`, else next to this executable (or its parent
/// directory, for test binaries in `deps/`), else `target/release` then `target/debug`.
pub fn limiter_bin() -> anyhow::Result<PathBuf> {
    if let Ok(bin) = std::env::var("SCREENLIMIT_LIMITER_BIN") {
        return Ok(bin.into());
    }
    let name = "screenlimit-limiter";
    let mut candidates = Vec::new();
    if let Ok(exe) = std::env::current_exe()
        && let Some(dir) = exe.parent()
    {
        candidates.push(dir.join(name));
        if let Some(up) = dir.parent() {
            candidates.push(up.join(name));
        }
    }
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..");
    candidates.push(root.join("target/release").join(name));
    candidates.push(root.join("target/debug").join(name));
    candidates
        .into_iter()
        .find(|p| p.is_file())
        .context("screenlimit-limiter not built: cargo build --release -p screenlimit-limiter, or set SCREENLIMIT_LIMITER_BIN")
}

/// How spawned limiters are configured.
#[derive(Debug, Clone)]
pub struct LimiterSetup {
    pub heartbeat_interval: Duration,
    pub ttl: Duration,
    pub store_timeout: Duration,
    /// `store.batch_window`: how long a shard's batch waits for company (None: the limiter's
    /// default).
    pub batch_window: Option<Duration>,
    /// `store.renewal_window`: how long a heartbeat's renewal waits for others of its shard
    /// (None: the limiter's default).
    pub renewal_window: Option<Duration>,
    /// `threads` (serving lanes); 0: the limiter's default, one per CPU.
    pub threads: usize,
    /// Extra top-level YAML (e.g. a `plan_source` block).
    pub extra_yaml: String,
    /// `store.admission` (None: the limiter's default, `adaptive`).
    pub admission: Option<String>,
    /// The screenlimit module the spawned Redis loads (None: the Lua path).
    pub redis_module: Option<PathBuf>,
    /// More arguments for the spawned Redis (`--redis-arg`).
    pub redis_args: Vec<String>,
}

impl LimiterSetup {
    /// The limiter's defaults for everything but the lease timing.
    pub fn new(heartbeat_interval: Duration, ttl: Duration, store_timeout: Duration) -> Self {
        LimiterSetup {
            heartbeat_interval,
            ttl,
            store_timeout,
            batch_window: None,
            renewal_window: None,
            threads: 0,
            extra_yaml: String::new(),
            admission: None,
            redis_module: None,
            redis_args: Vec::new(),
        }
    }
}

pub struct LimiterProc {
    pub url: String,
    pub proc: Proc,
    _dir: tempfile::TempDir,
}

pub const STREAM_ID_SECRET: &str = "screenlimit-loadgen-shared-stream-id-secret";

fn ms(d: Duration) -> String {
    format!("{}ms", d.as_millis())
}

fn us(d: Duration) -> String {
    format!("{}us", d.as_micros())
}

impl LimiterProc {
    pub fn start(redis_url: &str, setup: &LimiterSetup) -> anyhow::Result<Self> {
        Self::start_on(free_port(), redis_url, setup)
    }

    /// On `port`, chosen beforehand (a region names its peers' addresses before they start).
    pub fn start_on(port: u16, redis_url: &str, setup: &LimiterSetup) -> anyhow::Result<Self> {
        let dir = tempfile::tempdir()?;
        let config = format!(
            "listen: 127.0.0.1:{port}\n\
             plans: {{ basic: 1, standard: 2, premium: 4 }}\n\
             default_plan: basic\n\
             lease: {{ heartbeat_interval: {}, ttl: {} }}\n\
             store: {{ backend: redis, redis_shards: [\"{redis_url}\"], timeout: {}{}{}{} }}\n\
             stream_id_secret: \"{STREAM_ID_SECRET}\"\n{}{}",
            ms(setup.heartbeat_interval),
            ms(setup.ttl),
            ms(setup.store_timeout),
            setup
                .batch_window
                .map(|w| format!(", batch_window: {}", us(w)))
                .unwrap_or_default(),
            setup
                .renewal_window
                .map(|w| format!(", renewal_window: {}", us(w)))
                .unwrap_or_default(),
            setup
                .admission
                .as_ref()
                .map(|a| format!(", admission: {a}"))
                .unwrap_or_default(),
            if setup.threads > 0 {
                format!("threads: {}\n", setup.threads)
            } else {
                String::new()
            },
            setup.extra_yaml
        );
        let path = dir.path().join("limiter.yaml");
        std::fs::write(&path, config)?;
        let stderr_path = dir.path().join("stderr.log");
        let child = Command::new(limiter_bin()?)
            .arg("--config")
            .arg(&path)
            .env("RUST_LOG", "warn")
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&stderr_path)?)
            .spawn()
            .context("spawn screenlimit-limiter")?;
        let mut proc = Proc(child);
        let deadline = Instant::now() + Duration::from_secs(15);
        loop {
            if let Ok(Some(status)) = proc.0.try_wait() {
                bail!(
                    "limiter exited ({status}): {}",
                    std::fs::read_to_string(&stderr_path).unwrap_or_default()
                );
            }
            if TcpStream::connect(("127.0.0.1", port)).is_ok() {
                return Ok(LimiterProc {
                    url: format!("http://127.0.0.1:{port}"),
                    proc,
                    _dir: dir,
                });
            }
            if Instant::now() > deadline {
                bail!("limiter did not listen on {port} within 15 s");
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

/// What a scenario runs against: spawned processes, or URLs given on the command line.
pub struct Stack {
    pub redis: Option<RedisProc>,
    pub limiters: Vec<LimiterProc>,
    pub urls: Vec<String>,
    pub redis_url: Option<String>,
}

impl Stack {
    pub fn spawn(count: usize, setup: &LimiterSetup) -> anyhow::Result<Self> {
        let redis = RedisProc::start_with(setup.redis_module.as_deref(), &setup.redis_args)?;
        let limiters = (0..count.max(1))
            .map(|_| LimiterProc::start(&redis.url(), setup))
            .collect::<anyhow::Result<Vec<_>>>()?;
        Ok(Stack {
            urls: limiters.iter().map(|l| l.url.clone()).collect(),
            redis_url: Some(redis.url()),
            redis: Some(redis),
            limiters,
        })
    }

    pub fn external(urls: Vec<String>, redis_url: Option<String>) -> Self {
        Stack {
            redis: None,
            limiters: Vec::new(),
            urls,
            redis_url,
        }
    }

    pub fn stats(&self) -> Option<RedisStats> {
        self.redis_url
            .as_deref()
            .and_then(|u| RedisStats::connect(u).ok())
    }

    /// CPU seconds used so far by the spawned limiters (0 when none were spawned).
    pub fn limiter_cpu(&self) -> f64 {
        self.limiters
            .iter()
            .filter_map(|l| process_cpu_seconds(l.proc.pid()))
            .sum()
    }

    /// The spawned Redis's pid (none when the store is external).
    pub fn redis_pid(&self) -> Option<u32> {
        self.redis.as_ref().map(|r| r.proc.pid())
    }

    pub fn limiter_pids(&self) -> Vec<u32> {
        self.limiters.iter().map(|l| l.proc.pid()).collect()
    }
}
