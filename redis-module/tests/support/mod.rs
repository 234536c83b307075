//! Throwaway `redis-server`s for the module's tests, on free loopback ports, killed when their
//! handle drops: one with the module loaded (the `.so` cargo built beside the test binary), one
//! with the limiter's Lua scripts loaded as the limiter loads them.

#![allow(dead_code)] // each test binary uses a different part

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

pub struct Server {
    pub port: u16,
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
    /// A server without persistence, with `extra` arguments.
    pub fn start(extra: &[&str]) -> Server {
        for _ in 0..5 {
            let port = free_port();
            let dir =
                std::env::temp_dir().join(format!("sl-module-test-{}-{port}", std::process::id()));
            std::fs::create_dir_all(&dir).expect("a directory for the test's redis-server");
            let child = Command::new("redis-server")
                .args(["--port", &port.to_string(), "--bind", "127.0.0.1"])
                .args(["--save", "", "--appendonly", "no"])
                .arg("--dir")
                .arg(&dir)
                .args(extra)
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .expect("cannot start redis-server; run scripts/install-test-deps.sh");
            let mut server = Server { port, child, dir };
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
        panic!("redis-server did not start");
    }

    /// A server with the module loaded.
    pub fn with_module(extra: &[&str]) -> Server {
        let so = module_path();
        let mut args = vec!["--loadmodule", so.to_str().unwrap()];
        args.extend_from_slice(extra);
        Server::start(&args)
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
