//! Throwaway `redis-server`s (and `valkey-server`s) for the module's tests, on free loopback
//! ports, killed when their handle drops: one with the module loaded (the `.so` cargo built
//! beside the test binary), one with the limiter's Lua scripts loaded as the limiter loads them,
//! a primary with a strict replica, a two-node cluster (`cluster.rs`).

#![allow(dead_code)] // each test binary uses a different part

pub mod cluster;
pub mod junk;

use std::net::TcpListener;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use screenlimit_limiter::store::redis::Scripts;

/// The module cargo built for this test run: cargo builds a package's library (here the
/// cdylib) before its integration tests, into `deps/` beside the test binary.
pub fn module_path() -> PathBuf {
    let exe = std::env::current_exe().expect("test binary path");
    let so = exe.with_file_name("libscreenlimit_redis_module.so");
    assert!(
        so.exists(),
        "{} is missing: build it with `cargo build -p screenlimit-redis-module`",
        so.display()
    );
    so
}

/// Which server a test runs on: Redis (Debian's `redis-server`), or Valkey 8 beside it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Engine {
    Redis,
    Valkey,
}

/// Where Valkey's server is (`scripts/lib/install-valkey.sh` links it there).
fn valkey_bin() -> String {
    std::env::var("VALKEY_SERVER_BIN").unwrap_or_else(|_| "/usr/local/bin/valkey-server".into())
}

impl Engine {
    fn binary(self) -> String {
        match self {
            Engine::Redis => {
                std::env::var("REDIS_SERVER_BIN").unwrap_or_else(|_| "redis-server".into())
            }
            Engine::Valkey => valkey_bin(),
        }
    }

    /// Redis, and Valkey when its server is installed; without it, one line says what is
    /// skipped and how to install it.
    pub fn present(test: &str) -> Vec<Engine> {
        match std::path::Path::new(&valkey_bin()).exists() {
            true => vec![Engine::Redis, Engine::Valkey],
            false => {
                eprintln!(
                    "{test}: skipped on Valkey: no {} (scripts/install-test-deps.sh installs it through scripts/lib/install-valkey.sh; or set VALKEY_SERVER_BIN)",
                    valkey_bin()
                );
                vec![Engine::Redis]
            }
        }
    }
}

pub struct Server {
    pub port: u16,
    pub engine: Engine,
    child: Child,
    /// Its working directory (`--dir`): a replica's synced RDB lands there, not in the tree, and
    /// no server loads another's.
    dir: PathBuf,
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

impl Server {
    /// A Redis server without persistence, with `extra` arguments.
    pub fn start(extra: &[&str]) -> Server {
        Server::start_on(Engine::Redis, extra)
    }

    /// A server without persistence, logging to its own directory, with `extra` arguments.
    pub fn start_on(engine: Engine, extra: &[&str]) -> Server {
        for _ in 0..5 {
            let port = free_port();
            let dir =
                std::env::temp_dir().join(format!("sl-module-test-{}-{port}", std::process::id()));
            std::fs::create_dir_all(&dir).expect("a directory for the test's redis-server");
            let child = Command::new(engine.binary())
                .args(["--port", &port.to_string(), "--bind", "127.0.0.1"])
                .args(["--save", "", "--appendonly", "no"])
                .arg("--dir")
                .arg(&dir)
                .arg("--logfile")
                .arg(dir.join("server.log"))
                .args(extra)
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .expect("cannot start the server; run scripts/install-test-deps.sh");
            let mut server = Server {
                port,
                engine,
                child,
                dir,
            };
            let deadline = Instant::now() + Duration::from_secs(10);
            while Instant::now() < deadline {
                if let Ok(Some(_)) = server.child.try_wait() {
                    break; // the port was taken meanwhile: another one
                }
                // Ours, not a server that took the port first (its pid says so).
                if let Ok(mut c) = server.try_connect()
                    && let Ok(info) = redis::cmd("INFO").arg("server").query::<String>(&mut c)
                {
                    if info.contains(&format!("process_id:{}\r\n", server.child.id())) {
                        return server;
                    }
                    break; // another process answers on this port: another one
                }
                std::thread::sleep(Duration::from_millis(20));
            }
        }
        panic!("{engine:?} did not start");
    }

    /// A Redis server with the module loaded.
    pub fn with_module(extra: &[&str]) -> Server {
        Server::with_module_on(Engine::Redis, extra)
    }

    /// A server with the module loaded.
    pub fn with_module_on(engine: Engine, extra: &[&str]) -> Server {
        let so = module_path();
        let mut args = vec!["--loadmodule", so.to_str().unwrap()];
        args.extend_from_slice(extra);
        Server::start_on(engine, &args)
    }

    /// What the server logged so far.
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.join("server.log")).unwrap_or_default()
    }

    fn try_connect(&self) -> redis::RedisResult<redis::Connection> {
        let client = redis::Client::open(format!("redis://127.0.0.1:{}", self.port))?;
        let c = client.get_connection_with_timeout(Duration::from_secs(2))?;
        c.set_read_timeout(Some(Duration::from_secs(5)))?;
        Ok(c)
    }

    pub fn connect(&self) -> redis::Connection {
        self.try_connect()
            .expect("connect to the test's redis-server")
    }

    /// Whether the process still runs and answers.
    pub fn alive(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(None))
            && self
                .try_connect()
                .is_ok_and(|mut c| redis::cmd("PING").query::<String>(&mut c).is_ok())
    }
}

/// A primary with the module and a replica of it that would rather die than apply a replicated
/// effect it cannot (`propagation-error-behavior panic-on-replicas`). The replica has no module:
/// it receives the effects, plain commands, never an `SL.*` command, so loading the module
/// there would change nothing it runs.
pub struct Replicated {
    pub primary: Server,
    pub replica: Server,
}

impl Replicated {
    pub fn start(engine: Engine) -> Replicated {
        // No diskless-sync delay: the replica is in sync at once, not after 5 s.
        let primary = Server::with_module_on(engine, &["--repl-diskless-sync-delay", "0"]);
        let port = primary.port.to_string();
        let replica = Server::start_on(
            engine,
            &[
                "--replicaof",
                "127.0.0.1",
                &port,
                "--propagation-error-behavior",
                "panic-on-replicas",
            ],
        );
        let mut c = replica.connect();
        let deadline = Instant::now() + Duration::from_secs(15);
        loop {
            let info: String = redis::cmd("INFO").arg("replication").query(&mut c).unwrap();
            if info.contains("master_link_status:up") {
                return Replicated { primary, replica };
            }
            assert!(Instant::now() < deadline, "the replica never synced");
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// The replica has caught up, is up, logged no propagation error and holds what the primary
    /// holds; else what is wrong.
    pub fn check(&mut self) -> Result<(), String> {
        let caught_up = self.caught_up();
        // A replica that refused an effect logs it, then panics (its bug report takes a while).
        let refused = critical_lines(&self.replica.log());
        if !refused.is_empty() {
            return Err(format!("the replica logged: {refused}"));
        }
        if !self.replica.alive() {
            return Err("the replica died".into());
        }
        if !caught_up {
            return Err("the replica never caught up".into());
        }
        let on_primary = keyspace(&mut self.primary.connect());
        let on_replica = keyspace(&mut self.replica.connect());
        match on_primary == on_replica {
            true => Ok(()),
            false => Err(format!(
                "the replica holds other keys: primary {on_primary:?}, replica {on_replica:?}"
            )),
        }
    }

    /// Whether the replica has applied everything the primary sent so far. (Not `WAIT`: it waits
    /// only for the asking connection's own writes.)
    fn caught_up(&self) -> bool {
        let offset = |server: &Server, field: &str| -> Option<i64> {
            let info: String = redis::cmd("INFO")
                .arg("replication")
                .query(&mut server.try_connect().ok()?)
                .ok()?;
            let line = info.lines().find(|l| l.starts_with(field))?;
            line[field.len()..].trim().parse().ok()
        };
        let Some(sent) = offset(&self.primary, "master_repl_offset:") else {
            return false;
        };
        let deadline = Instant::now() + Duration::from_secs(5);
        while Instant::now() < deadline {
            match offset(&self.replica, "slave_repl_offset:") {
                Some(applied) if applied >= sent => return true,
                Some(_) => std::thread::sleep(Duration::from_millis(10)),
                None => return false,
            }
        }
        false
    }
}

/// The log lines that say a replica refused (or died of) what its primary sent.
fn critical_lines(log: &str) -> String {
    log.lines()
        .filter(|l| l.contains("CRITICAL") || l.contains("BUG REPORT START"))
        .take(5)
        .collect::<Vec<_>>()
        .join(" | ")
}

/// Every key with its type, value and exact expiry time, by name. A string compares by its
/// bytes (a primary may hold a number as a string where its replica holds it as an integer).
pub fn keyspace(c: &mut redis::Connection) -> Vec<(Vec<u8>, String, redis::Value, i64)> {
    let mut names: Vec<Vec<u8>> = redis::cmd("KEYS").arg("*").query(c).unwrap();
    names.sort();
    names
        .into_iter()
        .map(|name| {
            let kind: String = redis::cmd("TYPE").arg(&name).query(c).unwrap();
            let value = match kind.as_str() {
                "string" => redis::cmd("GET").arg(&name).query(c).unwrap(),
                "list" => redis::cmd("LRANGE")
                    .arg(&name)
                    .arg(0)
                    .arg(-1)
                    .query(c)
                    .unwrap(),
                "hash" => redis::cmd("HGETALL").arg(&name).query(c).unwrap(),
                _ => redis::Value::Nil,
            };
            let expiry: i64 = redis::cmd("PEXPIRETIME").arg(&name).query(c).unwrap();
            (name, kind, value, expiry)
        })
        .collect()
}

pub const NONCE: [u8; 16] = *b"0123456789abcdef";

/// A call of `command` as the limiter sends it, on these keys (TTL a minute: nothing expires
/// during a test).
pub fn call(command: &str, account: &[u8], audit: &[u8]) -> Vec<Vec<u8>> {
    let s = |t: &str| t.as_bytes().to_vec();
    let mut args = vec![account.to_vec()];
    match command {
        "SL.ACQUIRE" => args.extend([
            s("60000"),
            s("120000"),
            s(""),
            s("0"),
            s("basic"),
            s("2"),
            s("tv"),
            NONCE.to_vec(),
            vec![4, 1, 0, 0, 0],
            s(""),
            s(""),
            s(""),
            s(""),
            s("50:600000"),
        ]),
        "SL.HEARTBEAT" => args.extend([
            s("60000"),
            s("120000"),
            s("basic"),
            s("2"),
            s("tv"),
            NONCE.to_vec(),
            s("50:600000"),
        ]),
        "SL.RELEASE" => args.extend([
            s("60000"),
            s("120000"),
            s("tv"),
            NONCE.to_vec(),
            s("50:600000"),
        ]),
        "SL.LIST" => args.extend([s("60000"), s("basic"), s("2")]),
        "SL.FORCE_STOP" => args.extend([
            audit.to_vec(),
            s("60000"),
            s("120000"),
            s("tv"),
            NONCE.to_vec(),
            s("a"),
            s("stream"),
            s("support"),
            s("why"),
            s("50"),
            s("86400000"),
            s("50:600000"),
        ]),
        "SL.SET_OVERRIDE" => args.extend([
            audit.to_vec(),
            s("60000"),
            s("120000"),
            s("basic"),
            s("2"),
            s("3"),
            s("60000"),
            s("a"),
            s("support"),
            s("why"),
            s("50"),
            s("86400000"),
            s("50:600000"),
        ]),
        _ => unreachable!(),
    }
    args
}

pub const KEYED: [&str; 6] = [
    "SL.ACQUIRE",
    "SL.HEARTBEAT",
    "SL.RELEASE",
    "SL.LIST",
    "SL.FORCE_STOP",
    "SL.SET_OVERRIDE",
];

/// The scripts loaded on `c` as the limiter loads them (standalone); their SHA1s by name.
pub fn load_scripts(c: &mut redis::Connection) -> Vec<(&'static str, String)> {
    Scripts::sources()
        .into_iter()
        .map(|(name, source)| {
            let sha: String = redis::cmd("SCRIPT")
                .arg("LOAD")
                .arg(source)
                .query(c)
                .unwrap();
            (name, sha)
        })
        .collect()
}
