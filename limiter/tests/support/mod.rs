//! Test harness: throwaway `redis-server` processes and limiter processes on free loopback ports
//! (or started by a command of the test's, on an address it chose: inside a network namespace,
//! `netns.rs`), plus a small client for the stream API. Every process is killed when its handle
//! drops.

#![allow(dead_code)] // each test binary uses a different part of the harness

use std::io::{Read, Write};
use std::net::{IpAddr, Ipv4Addr, SocketAddr, TcpListener, TcpStream};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use reqwest::StatusCode;
use serde_json::{Value, json};

pub mod balancer;
pub mod cluster;
pub mod cpu_quota;
pub mod link;
pub mod netns;
pub mod tls;

pub const SECRET: &str = "conformance-test-stream-id-secret";

pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

pub fn redis_server_bin() -> String {
    std::env::var("REDIS_SERVER_BIN").unwrap_or_else(|_| "redis-server".into())
}

/// Valkey's server (`scripts/lib/install-valkey.sh` puts it there), for the tests that run the
/// scripts and the module on Valkey too.
fn valkey_server_bin() -> String {
    std::env::var("VALKEY_SERVER_BIN").unwrap_or_else(|_| "/usr/local/bin/valkey-server".into())
}

/// The screenlimit module (`redis-module/`), as the `.so` that `redis-server --loadmodule`
/// takes: the file `SCREENLIMIT_MODULE_SO` names (`scripts/test.sh` builds it before the suite
/// and sets it), else built here once per test process by `cargo build -p
/// screenlimit-redis-module` into this test binary's own target directory and profile (cargo's
/// lock keeps parallel test processes from building it twice at once; a fresh build is a no-op).
pub fn module_path() -> PathBuf {
    static BUILT: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();
    BUILT
        .get_or_init(|| {
            if let Some(path) = std::env::var_os("SCREENLIMIT_MODULE_SO") {
                let path = PathBuf::from(path);
                assert!(
                    path.is_file(),
                    "SCREENLIMIT_MODULE_SO={} is not a file",
                    path.display()
                );
                return path;
            }
            build_module()
        })
        .clone()
}

/// `cargo build -p screenlimit-redis-module` for this test binary's target directory and
/// profile (`<target>/<profile>/deps/<test binary>`); the `.so` it leaves there.
fn build_module() -> PathBuf {
    let exe = std::env::current_exe().expect("the test binary's path");
    let profile_dir = exe
        .parent()
        .and_then(|deps| deps.parent())
        .expect("a test binary in <target>/<profile>/deps");
    let target_dir = profile_dir.parent().expect("a target directory");
    let profile = profile_dir
        .file_name()
        .and_then(|name| name.to_str())
        .expect("a profile directory");
    let profile = match profile {
        "debug" => "dev",
        other => other,
    };
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let manifest = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../Cargo.toml");
    let status = Command::new(cargo)
        .args([
            "build",
            "--quiet",
            "-p",
            "screenlimit-redis-module",
            "--profile",
            profile,
        ])
        .arg("--manifest-path")
        .arg(&manifest)
        .arg("--target-dir")
        .arg(target_dir)
        .stdout(Stdio::null())
        .status()
        .expect("cannot run cargo to build the screenlimit module; set SCREENLIMIT_MODULE_SO");
    assert!(
        status.success(),
        "cargo build -p screenlimit-redis-module failed (it needs clang and libclang-dev: \
         scripts/install-test-deps.sh)"
    );
    let so = profile_dir.join("libscreenlimit_redis_module.so");
    assert!(so.is_file(), "{} is missing after the build", so.display());
    so
}

/// `--loadmodule <the screenlimit module>`, for `RedisServer::start_with` and the cluster's
/// nodes.
pub fn module_args() -> [String; 2] {
    ["--loadmodule".into(), module_path().display().to_string()]
}

/// A `redis-server` of the test's own, on a free port, with no persistence.
pub struct RedisServer {
    /// Where it listens: loopback, unless started in a namespace of the test's own.
    pub host: IpAddr,
    pub port: u16,
    child: Option<Child>,
    /// Its working directory, its own: a replica's full sync writes `dump.rdb` there, and a
    /// server started in a shared directory would load another test's data at start.
    _dir: Option<tempfile::TempDir>,
}

impl RedisServer {
    pub fn start() -> Self {
        Self::spawn_on_a_free_port(&[])
    }

    pub fn start_on(port: u16) -> Self {
        Self::spawn(port, &[]).unwrap_or_else(|e| panic!("{e}"))
    }

    /// A lone Redis Cluster node that serves every slot (as a one-shard cluster-mode service
    /// is), ready once it says `cluster_state:ok`.
    pub fn start_lone_cluster_node() -> Self {
        let bus = free_port().to_string();
        // In the server's own directory (its `--dir`), gone with it.
        let server = Self::spawn_on_a_free_port(&[
            "--cluster-enabled",
            "yes",
            "--cluster-config-file",
            "nodes.conf",
            "--cluster-port",
            &bus,
        ]);
        server
            .command("CLUSTER ADDSLOTSRANGE 0 16383")
            .expect("slots taken");
        let deadline = Instant::now() + Duration::from_secs(10);
        while !server
            .command("CLUSTER INFO")
            .is_some_and(|info| info.contains("cluster_state:ok"))
        {
            assert!(
                Instant::now() < deadline,
                "the lone node never said cluster_state:ok"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
        server
    }

    /// A server started with extra arguments (`--maxmemory-policy volatile-lru`, ...).
    pub fn start_with(extra: &[&str]) -> Self {
        Self::spawn_on_a_free_port(extra)
    }

    /// A server with the screenlimit module loaded, and `extra` arguments.
    pub fn start_with_module(extra: &[&str]) -> Self {
        let module = module_args();
        let mut args: Vec<&str> = module.iter().map(String::as_str).collect();
        args.extend_from_slice(extra);
        Self::spawn_on_a_free_port(&args)
    }

    /// A Valkey server (the same wire protocol, scripts and module API), with `extra`
    /// arguments.
    pub fn start_valkey(extra: &[&str]) -> Self {
        let mut last_error = String::new();
        for _ in 0..5 {
            let dir = tempfile::tempdir().unwrap();
            match Self::spawn_binary(&valkey_server_bin(), free_port(), extra, dir) {
                Ok(server) => return server,
                Err(e) => last_error = e,
            }
        }
        panic!("{last_error}")
    }

    /// A Valkey server with the screenlimit module loaded.
    pub fn start_valkey_with_module(extra: &[&str]) -> Self {
        let module = module_args();
        let mut args: Vec<&str> = module.iter().map(String::as_str).collect();
        args.extend_from_slice(extra);
        Self::start_valkey(&args)
    }

    /// A replica of the server on `primary_port`.
    pub fn start_replica_of(primary_port: u16) -> Self {
        Self::spawn_on_a_free_port(&["--replicaof", "127.0.0.1", &primary_port.to_string()])
    }

    /// A port found free can be taken by a parallel test before our server binds it; then
    /// another test's server would answer our PING, so try again on a new port.
    fn spawn_on_a_free_port(extra: &[&str]) -> Self {
        let mut last_error = String::new();
        for _ in 0..5 {
            match Self::spawn(free_port(), extra) {
                Ok(server) => return server,
                Err(e) => last_error = e,
            }
        }
        panic!("{last_error}")
    }

    fn spawn(port: u16, extra: &[&str]) -> Result<Self, String> {
        Self::spawn_in(port, extra, tempfile::tempdir().unwrap())
    }

    fn spawn_in(port: u16, extra: &[&str], dir: tempfile::TempDir) -> Result<Self, String> {
        Self::spawn_binary(&redis_server_bin(), port, extra, dir)
    }

    fn spawn_binary(
        binary: &str,
        port: u16,
        extra: &[&str],
        dir: tempfile::TempDir,
    ) -> Result<Self, String> {
        let loopback = IpAddr::V4(Ipv4Addr::LOCALHOST);
        Self::spawn_command(Command::new(binary), (loopback, port).into(), extra, dir)
    }

    /// A server started by `command` (`redis-server`, or `nsenter ... redis-server` for one in a
    /// network namespace) on `addr`, which the test reaches from where it runs.
    pub fn start_by(command: Command, addr: SocketAddr) -> Self {
        Self::spawn_command(command, addr, &[], tempfile::tempdir().unwrap())
            .unwrap_or_else(|e| panic!("{e}"))
    }

    fn spawn_command(
        mut command: Command,
        addr: SocketAddr,
        extra: &[&str],
        dir: tempfile::TempDir,
    ) -> Result<Self, String> {
        let (host, port) = (addr.ip(), addr.port());
        let binary = command.get_program().to_string_lossy().into_owned();
        if !host.is_loopback() {
            // A namespace's address of the test's own: the test reaches it from outside, which
            // protected mode (no password) would refuse.
            command.args(["--protected-mode", "no"]);
        }
        let child = command
            .args(["--port", &port.to_string(), "--bind", &host.to_string(), "--save", "", "--appendonly", "no"])
            .arg("--dir")
            .arg(dir.path())
            .args(extra)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap_or_else(|e| {
                panic!("cannot start {binary} ({e}); run scripts/install-test-deps.sh or set REDIS_SERVER_BIN / VALKEY_SERVER_BIN")
            });
        let mut server = RedisServer {
            host,
            port,
            child: Some(child),
            _dir: Some(dir),
        };
        server.wait_until_ready()?;
        Ok(server)
    }

    pub fn url(&self) -> String {
        format!("redis://{}", SocketAddr::from((self.host, self.port)))
    }

    fn wait_until_ready(&mut self) -> Result<(), String> {
        let addr = (self.host, self.port).into();
        wait_for_own_redis_at(self.child.as_mut().expect("spawned"), addr, None)
    }

    /// Sends one inline command and returns the raw reply, or `None` if the server is down.
    /// Simple, integer, error and bulk-string replies are read whole.
    pub fn command(&self, command: &str) -> Option<String> {
        self.command_as(None, command)
    }

    /// How many times the server ran `command` (`INFO commandstats`), 0 if never.
    pub fn calls(&self, command: &str) -> u64 {
        let stats = self.command("INFO commandstats").unwrap_or_default();
        stats
            .split(&format!("cmdstat_{command}:calls="))
            .nth(1)
            .and_then(|rest| rest.split(',').next())
            .and_then(|n| n.parse().ok())
            .unwrap_or(0)
    }

    /// `command` on a connection that first signs in as `user` (name, password), when given.
    pub fn command_as(&self, user: Option<(&str, &str)>, command: &str) -> Option<String> {
        let mut stream = TcpStream::connect((self.host, self.port)).ok()?;
        stream.set_read_timeout(Some(Duration::from_secs(2))).ok()?;
        let mut reply = Vec::new();
        if let Some((name, password)) = user {
            stream
                .write_all(format!("AUTH {name} {password}\r\n").as_bytes())
                .ok()?;
            let mut byte = [0u8; 1];
            while !reply.ends_with(b"\r\n") {
                stream.read_exact(&mut byte).ok()?;
                reply.push(byte[0]);
            }
            if reply != b"+OK\r\n" {
                return Some(String::from_utf8_lossy(&reply).into_owned());
            }
            reply.clear();
        }
        stream.write_all(format!("{command}\r\n").as_bytes()).ok()?;
        let mut buf = [0u8; 65536];
        loop {
            let n = stream.read(&mut buf).ok()?;
            if n == 0 {
                return None;
            }
            reply.extend_from_slice(&buf[..n]);
            let text = String::from_utf8_lossy(&reply).into_owned();
            let Some(header_end) = text.find("\r\n") else {
                continue;
            };
            let complete = match text.strip_prefix('$') {
                Some(rest) => match rest[..header_end - 1].parse::<i64>() {
                    Ok(len) if len >= 0 => reply.len() >= header_end + 2 + len as usize + 2,
                    _ => true,
                },
                None => true,
            };
            if complete {
                return Some(text);
            }
        }
    }

    /// SIGKILL: the store vanishes mid-run, as in a crash.
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = Command::new("kill")
                .args(["-CONT", &child.id().to_string()])
                .status();
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    pub fn pid(&self) -> u32 {
        self.child.as_ref().expect("server running").id()
    }

    /// SIGSTOP (`true`) or SIGCONT (`false`): a store that hangs instead of failing fast.
    pub fn freeze(&self, frozen: bool) {
        freeze(self.child.as_ref().expect("server running"), frozen);
    }

    /// Saves the data (`SAVE`), stops the server and starts another on the same port and in the
    /// same directory, which loads it, with `extra` arguments instead of those it had: a restart
    /// with another setup (without the screenlimit module, for one).
    pub fn restart_with(&mut self, extra: &[&str]) {
        let saved = self.command("SAVE").unwrap_or_default();
        assert!(saved.starts_with("+OK"), "SAVE: {saved}");
        let dir = self._dir.take().expect("a server of the test's own");
        self.kill();
        *self = Self::spawn_in(self.port, extra, dir).unwrap_or_else(|e| panic!("{e}"));
    }

    /// SIGKILL, then a server on the same port and in the same directory with `extra`
    /// arguments, as a container restarted on the pod's volume: it keeps what its own
    /// persistence wrote there (an append-only file), and nothing else (no `SAVE` first).
    pub fn crash_and_restart_with(&mut self, extra: &[&str]) {
        let dir = self._dir.take().expect("a server of the test's own");
        self.kill();
        *self = Self::spawn_in(self.port, extra, dir).unwrap_or_else(|e| panic!("{e}"));
    }

    /// Starts an empty server on the same port, as after a crash and restart.
    pub fn restart(&mut self) {
        self.kill();
        *self = Self::start_on(self.port);
    }
}

/// Waits until `child` itself answers on `port` (`INFO server` names its pid): a port found
/// free can be taken by a parallel test's server before ours binds it, and that one would
/// answer a plain PING.
fn wait_for_own_redis(
    child: &mut Child,
    port: u16,
    user: Option<(&str, &str)>,
) -> Result<(), String> {
    wait_for_own_redis_at(child, (Ipv4Addr::LOCALHOST, port).into(), user)
}

fn wait_for_own_redis_at(
    child: &mut Child,
    addr: SocketAddr,
    user: Option<(&str, &str)>,
) -> Result<(), String> {
    let port = addr.port();
    let our_pid = format!("process_id:{}\r\n", child.id());
    let probe = RedisServer {
        host: addr.ip(),
        port,
        child: None,
        _dir: None,
    };
    let deadline = Instant::now() + Duration::from_secs(10);
    while Instant::now() < deadline {
        if let Ok(Some(status)) = child.try_wait() {
            return Err(format!(
                "redis-server on port {port} exited at start ({status}); was the port taken?"
            ));
        }
        if probe
            .command_as(user, "INFO server")
            .is_some_and(|r| r.contains(&our_pid))
        {
            return Ok(());
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    Err(format!(
        "redis-server on port {port} did not answer within 10s"
    ))
}

/// A Redis Sentinel of the test's own, monitoring the given masters (name, port) with quorum 2,
/// tuned to fail over within about a second.
pub struct SentinelServer {
    pub port: u16,
    child: Option<Child>,
    /// Its `requirepass`, which Sentinels also use between themselves.
    password: Option<String>,
    _dir: tempfile::TempDir,
}

/// Three Sentinels monitoring `masters`, once each of them knows a replica of every master
/// (Sentinel promotes only a replica it has found); and their addresses as a config list.
pub async fn sentinels_knowing_replicas(masters: &[(&str, u16)]) -> (Vec<SentinelServer>, String) {
    let sentinels: Vec<SentinelServer> = (0..3).map(|_| SentinelServer::start(masters)).collect();
    let deadline = std::time::Instant::now() + Duration::from_secs(15);
    while sentinels
        .iter()
        .any(|s| masters.iter().any(|(name, _)| s.known_replicas(name) < 1))
    {
        assert!(
            std::time::Instant::now() < deadline,
            "sentinels never saw the replicas"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let addresses: Vec<String> = sentinels
        .iter()
        .map(|s| format!("\"{}\"", s.url()))
        .collect();
    (sentinels, addresses.join(", "))
}

impl SentinelServer {
    pub fn start(masters: &[(&str, u16)]) -> Self {
        let mut last_error = String::new();
        for _ in 0..5 {
            match Self::try_start(masters, "", None) {
                Ok(sentinel) => return sentinel,
                Err(e) => last_error = e,
            }
        }
        panic!("{last_error}")
    }

    /// `extra` goes after the monitor lines (per-master settings must follow them).
    fn try_start(
        masters: &[(&str, u16)],
        extra: &str,
        password: Option<&str>,
    ) -> Result<Self, String> {
        let dir = tempfile::tempdir().unwrap();
        let port = free_port();
        let mut conf = format!(
            "port {port}\nbind 127.0.0.1\ndir {}\n",
            dir.path().display()
        );
        for (name, master_port) in masters {
            conf.push_str(&format!(
                "sentinel monitor {name} 127.0.0.1 {master_port} 2\n\
                 sentinel down-after-milliseconds {name} 500\n\
                 sentinel failover-timeout {name} 3000\n\
                 sentinel parallel-syncs {name} 1\n"
            ));
        }
        conf.push_str(extra);
        if let Some(password) = password {
            conf.push_str(&format!(
                "requirepass {password}\nsentinel sentinel-pass {password}\n"
            ));
        }
        let conf_path = dir.path().join("sentinel.conf");
        std::fs::write(&conf_path, conf).unwrap();
        let child = Command::new(redis_server_bin())
            .arg(&conf_path)
            .arg("--sentinel")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start redis-server --sentinel");
        let mut sentinel = SentinelServer {
            port,
            child: Some(child),
            password: password.map(str::to_owned),
            _dir: dir,
        };
        let child = sentinel.child.as_mut().expect("spawned");
        let user = password.map(|p| ("default", p));
        wait_for_own_redis(child, port, user).map(|()| sentinel)
    }

    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    pub fn command(&self, command: &str) -> Option<String> {
        let user = self.password.as_deref().map(|p| ("default", p));
        RedisServer {
            host: IpAddr::V4(Ipv4Addr::LOCALHOST),
            port: self.port,
            child: None,
            _dir: None,
        }
        .command_as(user, command)
    }

    /// How many healthy replicas this Sentinel knows for `master`.
    pub fn known_replicas(&self, master: &str) -> usize {
        let reply = self
            .command(&format!("SENTINEL replicas {master}"))
            .unwrap_or_default();
        reply
            .matches("flags")
            .count()
            .saturating_sub(reply.matches("s_down").count())
    }
}

impl Drop for SentinelServer {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        self.kill();
    }
}

/// A `screenlimit-limiter` process started from a YAML config (without `listen`).
pub struct LimiterProcess {
    pub base: String,
    child: Child,
    _dir: tempfile::TempDir,
    pub config_path: PathBuf,
    /// Where its log goes (tracing writes to standard output).
    stdout_path: PathBuf,
}

impl LimiterProcess {
    pub fn start(config_yaml: &str) -> Self {
        Self::try_start(config_yaml, &[])
            .unwrap_or_else(|stderr| panic!("limiter did not start: {stderr}"))
    }

    /// Starts the binary; on failure returns its exit status ("exit status: 2") and what it
    /// printed. A port found free can be taken
    /// by a parallel test before the limiter binds it: then it tries another.
    pub fn try_start(config_yaml: &str, env: &[(&str, &str)]) -> Result<Self, String> {
        let mut attempts = 0;
        loop {
            attempts += 1;
            match Self::try_start_once(config_yaml, env) {
                Err(stderr) if stderr.contains("Address already in use") && attempts < 5 => {}
                outcome => return outcome,
            }
        }
    }

    /// Starts the binary on `port`, chosen beforehand (a test that must name its address to
    /// others before it starts, as regions name their peers).
    pub fn start_on(port: u16, config_yaml: &str, env: &[(&str, &str)]) -> Self {
        Self::try_start_on(port, config_yaml, env)
            .unwrap_or_else(|stderr| panic!("limiter did not start: {stderr}"))
    }

    fn try_start_once(config_yaml: &str, env: &[(&str, &str)]) -> Result<Self, String> {
        Self::try_start_on(free_port(), config_yaml, env)
    }

    fn try_start_on(port: u16, config_yaml: &str, env: &[(&str, &str)]) -> Result<Self, String> {
        let loopback = (Ipv4Addr::LOCALHOST, port).into();
        Self::try_start_by(Command::new(Self::BINARY), loopback, config_yaml, env)
    }

    /// The binary under test.
    pub const BINARY: &str = env!("CARGO_BIN_EXE_screenlimit-limiter");

    /// Starts the binary by `command` ([`Self::BINARY`], or `nsenter ... <binary>` for an
    /// instance in a network namespace), listening on `addr`, which the test reaches from where
    /// it runs.
    pub fn start_by(
        command: Command,
        addr: SocketAddr,
        config_yaml: &str,
        env: &[(&str, &str)],
    ) -> Self {
        Self::try_start_by(command, addr, config_yaml, env)
            .unwrap_or_else(|stderr| panic!("limiter did not start: {stderr}"))
    }

    fn try_start_by(
        mut command: Command,
        addr: SocketAddr,
        config_yaml: &str,
        env: &[(&str, &str)],
    ) -> Result<Self, String> {
        let dir = tempfile::tempdir().unwrap();
        let config_path = dir.path().join("limiter.yaml");
        std::fs::write(&config_path, format!("listen: {addr}\n{config_yaml}")).unwrap();
        let stderr_path = dir.path().join("stderr.log");
        let stdout_path = dir.path().join("stdout.log");
        let mut child = command
            .arg("--config")
            .arg(&config_path)
            .env("RUST_LOG", "warn")
            // A stop does not wait out a drain, unless the test sets its own.
            .env("SCREENLIMIT_DRAIN_PERIOD", "0s")
            .envs(env.iter().copied())
            .stdout(std::fs::File::create(&stdout_path).unwrap())
            .stderr(std::fs::File::create(&stderr_path).unwrap())
            .spawn()
            .expect("spawn screenlimit-limiter");
        let deadline = Instant::now() + Duration::from_secs(10);
        while Instant::now() < deadline {
            if let Ok(Some(status)) = child.try_wait() {
                let stderr = std::fs::read_to_string(&stderr_path).unwrap_or_default();
                return Err(format!("{status}\n{stderr}"));
            }
            if TcpStream::connect(addr).is_ok() {
                return Ok(LimiterProcess {
                    base: format!("http://{addr}"),
                    child,
                    _dir: dir,
                    config_path,
                    stdout_path,
                });
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = child.kill();
        let _ = child.wait();
        Err("no listener within 10s".into())
    }

    /// Replaces its config file the way a ConfigMap update does: a new file (the same `listen`
    /// line, then `body`) renamed over it.
    pub fn rewrite_config(&self, body: &str) {
        let text = std::fs::read_to_string(&self.config_path).unwrap();
        let listen = text.lines().next().unwrap();
        let next = self.config_path.with_extension("next");
        std::fs::write(&next, format!("{listen}\n{body}")).unwrap();
        std::fs::rename(&next, &self.config_path).unwrap();
    }

    /// What it has logged so far (at `RUST_LOG=warn` unless the test's environment says otherwise).
    pub fn log(&self) -> String {
        std::fs::read_to_string(&self.stdout_path).unwrap_or_default()
    }

    /// SIGSTOP (`true`) or SIGCONT (`false`): an instance whose CPU does not keep up.
    pub fn freeze(&self, frozen: bool) {
        freeze(&self.child, frozen);
    }

    /// A client for this instance.
    pub fn client(&self) -> Api {
        Api::new(&self.base)
    }

    /// Sends SIGTERM and returns the exit status (graceful shutdown).
    pub fn terminate(mut self) -> std::process::ExitStatus {
        let pid = self.child.id().to_string();
        Command::new("kill").args(["-TERM", &pid]).status().unwrap();
        self.child.wait().unwrap()
    }
}

impl LimiterProcess {
    /// Sends SIGTERM without waiting: the drain begins.
    pub fn send_sigterm(&self) {
        let pid = self.child.id().to_string();
        assert!(
            Command::new("kill")
                .args(["-TERM", &pid])
                .status()
                .unwrap()
                .success()
        );
    }

    /// The exit status, once the process has exited; `None` while it runs.
    pub fn exited(&mut self) -> Option<std::process::ExitStatus> {
        self.child.try_wait().unwrap()
    }
}

impl LimiterProcess {
    /// SIGKILL: a crash, or a region lost.
    pub fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for LimiterProcess {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Config for limiter processes on the given Redis shards.
/// Sends SIGSTOP (`true`) or SIGCONT (`false`) to a child process.
fn freeze(child: &Child, frozen: bool) {
    let signal = if frozen { "-STOP" } else { "-CONT" };
    assert!(
        Command::new("kill")
            .args([signal, &child.id().to_string()])
            .status()
            .unwrap()
            .success()
    );
}

pub fn redis_config(shards: &[String], extra: &str) -> String {
    let shards: Vec<String> = shards.iter().map(|s| format!("\"{s}\"")).collect();
    format!(
        "store:\n  backend: redis\n  redis_shards: [{}]\n  timeout: 25ms\n  circuit_probe_interval: 100ms\nstream_id_secret: \"{SECRET}\"\n{extra}",
        shards.join(", ")
    )
}

/// An answer: status and JSON body (`Value::Null` when the body is not JSON).
#[derive(Debug, Clone)]
pub struct Reply {
    pub status: StatusCode,
    pub body: Value,
}

impl Reply {
    pub fn stream_id(&self) -> String {
        self.body["stream_id"]
            .as_str()
            .unwrap_or_else(|| panic!("no stream_id in {self:?}"))
            .to_owned()
    }

    pub fn error(&self) -> &str {
        self.body["error"].as_str().unwrap_or("")
    }
}

/// The stream API over HTTP/1.1 keep-alive.
#[derive(Clone)]
pub struct Api {
    pub base: String,
    pub http: reqwest::Client,
}

impl Api {
    pub fn new(base: &str) -> Self {
        Api {
            base: base.trim_end_matches('/').to_owned(),
            http: reqwest::Client::builder()
                .timeout(Duration::from_secs(10))
                .build()
                .unwrap(),
        }
    }

    pub async fn send(&self, request: reqwest::RequestBuilder) -> Reply {
        let response = request.send().await.expect("HTTP request");
        let status = response.status();
        let text = response.text().await.unwrap_or_default();
        Reply {
            status,
            body: serde_json::from_str(&text).unwrap_or(Value::Null),
        }
    }

    pub async fn play(&self, body: Value) -> Reply {
        self.send(
            self.http
                .post(format!("{}/v1/streams", self.base))
                .json(&body),
        )
        .await
    }

    pub async fn play_on(&self, account: &str, device: &str) -> Reply {
        self.play(json!({ "account_id": account, "device_id": device }))
            .await
    }

    pub async fn heartbeat(&self, account: &str, stream_id: &str) -> Reply {
        let url = format!("{}/v1/streams/{stream_id}/heartbeat", self.base);
        self.send(self.http.put(url).json(&json!({ "account_id": account })))
            .await
    }

    pub async fn stop(&self, account: &str, stream_id: &str) -> Reply {
        let url = format!("{}/v1/streams/{stream_id}", self.base);
        self.send(
            self.http
                .delete(url)
                .json(&json!({ "account_id": account })),
        )
        .await
    }

    pub async fn list(&self, account: &str) -> Reply {
        self.send(
            self.http
                .get(format!("{}/v1/accounts/{account}/streams", self.base)),
        )
        .await
    }

    pub async fn force_stop(&self, account: &str, stream_id: &str) -> Reply {
        let url = format!(
            "{}/v1/accounts/{account}/streams/{stream_id}/force-stop",
            self.base
        );
        self.send(self.http.post(url)).await
    }

    /// The value of the first `/metrics` line that starts with `line_start`, if any.
    pub async fn metric(&self, line_start: &str) -> Option<f64> {
        let text = self.get("/metrics").await.text().await.unwrap();
        text.lines()
            .find(|l| l.starts_with(line_start))
            .and_then(|l| l.rsplit(' ').next())
            .and_then(|v| v.parse().ok())
    }

    pub async fn get(&self, path: &str) -> reqwest::Response {
        self.http
            .get(format!("{}{path}", self.base))
            .send()
            .await
            .expect("HTTP request")
    }
}

/// A PostgreSQL server of the test's own (initdb into a temp dir, trust auth, free port).
/// As root it runs as the `postgres` user, since PostgreSQL refuses to run as root.
pub struct PgServer {
    pub port: u16,
    dir: PathBuf,
    child: Option<Child>,
}

fn pg_bin(tool: &str) -> PathBuf {
    let mut versions: Vec<PathBuf> = std::fs::read_dir("/usr/lib/postgresql")
        .map(|d| d.filter_map(|e| e.ok()).map(|e| e.path()).collect())
        .unwrap_or_default();
    versions.sort();
    versions
        .last()
        .map(|v| v.join("bin").join(tool))
        .filter(|p| p.exists())
        .unwrap_or_else(|| {
            panic!(
                "no PostgreSQL {tool} under /usr/lib/postgresql; run scripts/install-test-deps.sh"
            )
        })
}

fn as_postgres_user(program: PathBuf) -> Command {
    // SAFETY-free check of the effective user: root cannot run PostgreSQL.
    let is_root = std::env::var("USER").map(|u| u == "root").unwrap_or(false)
        || Command::new("id")
            .arg("-u")
            .output()
            .is_ok_and(|o| o.stdout.starts_with(b"0\n"));
    if is_root {
        let mut command = Command::new("runuser");
        command.args(["-u", "postgres", "--"]).arg(program);
        command
    } else {
        Command::new(program)
    }
}

impl PgServer {
    pub fn start() -> Self {
        let dir = std::env::temp_dir().join(format!(
            "screenlimit-pg-{}-{}",
            std::process::id(),
            free_port()
        ));
        std::fs::create_dir_all(&dir).unwrap();
        let _ = Command::new("chown")
            .args(["postgres:postgres", dir.to_str().unwrap()])
            .status();
        let data = dir.join("data");
        let initdb = as_postgres_user(pg_bin("initdb"))
            .args([
                "-D",
                data.to_str().unwrap(),
                "-A",
                "trust",
                "-U",
                "postgres",
                "--no-sync",
            ])
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .output()
            .expect("run initdb");
        assert!(
            initdb.status.success(),
            "initdb failed: {}",
            String::from_utf8_lossy(&initdb.stderr)
        );
        let mut server = PgServer {
            port: free_port(),
            dir,
            child: None,
        };
        server.launch();
        server
    }

    fn launch(&mut self) {
        let data = self.dir.join("data");
        let child = as_postgres_user(pg_bin("postgres"))
            .args(["-D", data.to_str().unwrap(), "-p", &self.port.to_string()])
            .args([
                "-c",
                "listen_addresses=127.0.0.1",
                "-c",
                &format!("unix_socket_directories={}", self.dir.display()),
            ])
            .args(["-c", "fsync=off", "-c", "full_page_writes=off"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start postgres");
        self.child = Some(child);
        let deadline = Instant::now() + Duration::from_secs(20);
        while Instant::now() < deadline {
            let ready = Command::new(pg_bin("pg_isready"))
                .args(["-h", "127.0.0.1", "-p", &self.port.to_string(), "-q"])
                .status()
                .is_ok_and(|s| s.success());
            if ready {
                return;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        panic!("postgres on port {} not ready within 20s", self.port);
    }

    pub fn url(&self) -> String {
        format!(
            "host=127.0.0.1 port={} user=postgres dbname=postgres",
            self.port
        )
    }

    /// Kills the server outright (every backend too), as in a crash.
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            // SIGKILL the postmaster and its backends (runuser would not pass SIGKILL on).
            let pid_file = self.dir.join("data").join("postmaster.pid");
            if let Some(pid) = std::fs::read_to_string(pid_file)
                .ok()
                .and_then(|t| t.lines().next().map(str::to_owned))
            {
                let _ = Command::new("pkill").args(["-KILL", "-P", &pid]).status();
                let _ = Command::new("kill").args(["-KILL", &pid]).status();
            }
            let _ = child.kill();
            let _ = child.wait();
            std::thread::sleep(Duration::from_millis(100));
        }
    }
}

impl Drop for PgServer {
    fn drop(&mut self) {
        self.kill();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}
