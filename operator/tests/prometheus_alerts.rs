//! The operator's alerts in a real Prometheus (Debian's `prometheus`, as a cluster's Prometheus
//! would run the rendered `PrometheusRule`): it scrapes a real limiter backed by a real
//! redis-server, with the rule groups of the `PrometheusRule` the operator builds loaded. Redis
//! is killed: the shard's circuit-open alert and the degraded-plays alert fire; Redis comes back:
//! the circuit-open alert clears. Only the waits are shortened: scrapes and evaluations every
//! second, and every alert's `for:` set to one second. Everything listens on loopback ports of
//! its own and is killed at the end.

mod common;

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use screenlimit_operator::build::build;
use screenlimit_operator::build::monitoring::MonitoringKind;
use serde_json::Value;

/// How long anything may take on a loaded machine.
const PATIENCE: Duration = Duration::from_secs(90);
/// The rule group of the limiter's alerts for `demo` in `video`.
const GROUP: &str = "screenlimit-video-demo-limiter";

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// A child process killed when dropped.
struct Process(Child);

impl Drop for Process {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// One HTTP/1.0 exchange on loopback (the server closes; no chunking): status and body.
fn http(port: u16, method: &str, path: &str, body: Option<&str>) -> Option<(u16, String)> {
    let mut stream = TcpStream::connect(("127.0.0.1", port)).ok()?;
    stream.set_read_timeout(Some(Duration::from_secs(5))).ok()?;
    stream
        .set_write_timeout(Some(Duration::from_secs(5)))
        .ok()?;
    let body = body.unwrap_or_default();
    let request = format!(
        "{method} {path} HTTP/1.0\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n\
         Content-Length: {}\r\n\r\n{body}",
        body.len()
    );
    stream.write_all(request.as_bytes()).ok()?;
    let mut reply = String::new();
    stream.read_to_string(&mut reply).ok()?;
    let status = reply.split(' ').nth(1)?.parse().ok()?;
    let (_, body) = reply.split_once("\r\n\r\n")?;
    Some((status, body.to_owned()))
}

fn wait_for(what: &str, mut done: impl FnMut() -> bool) {
    let deadline = Instant::now() + PATIENCE;
    while !done() {
        assert!(Instant::now() < deadline, "gave up waiting for {what}");
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// A redis-server on `port` with no persistence, once it is the one answering there
/// (`INFO server` names its pid: a parallel test may have taken the port).
fn start_redis(port: u16) -> Result<Process, String> {
    let child = Command::new("redis-server")
        .args(["--port", &port.to_string(), "--bind", "127.0.0.1"])
        .args(["--save", "", "--appendonly", "no"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("redis-server (scripts/install-test-deps.sh installs it)");
    let mut redis = Process(child);
    let ours = format!("process_id:{}\r\n", redis.0.id());
    let deadline = Instant::now() + Duration::from_secs(20);
    while Instant::now() < deadline {
        if let Ok(Some(status)) = redis.0.try_wait() {
            return Err(format!("redis-server on {port} exited at start ({status})"));
        }
        let info = TcpStream::connect(("127.0.0.1", port))
            .ok()
            .and_then(|mut s| {
                s.set_read_timeout(Some(Duration::from_secs(2))).ok()?;
                s.write_all(b"INFO server\r\n").ok()?;
                let mut buf = [0u8; 8192];
                let n = s.read(&mut buf).ok()?;
                Some(String::from_utf8_lossy(&buf[..n]).into_owned())
            });
        if info.is_some_and(|i| i.contains(&ours)) {
            return Ok(redis);
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    Err(format!("redis-server on {port} did not answer"))
}

/// A process listening on a port it was given: started again on another port when the one
/// found free was taken meanwhile (it exits at start).
fn start_listening(
    what: &str,
    dir: &Path,
    mut spawn: impl FnMut(u16) -> Child,
    ready: impl Fn(u16) -> bool,
) -> (Process, u16) {
    for _ in 0..5 {
        let port = free_port();
        let mut process = Process(spawn(port));
        let deadline = Instant::now() + PATIENCE;
        loop {
            if let Ok(Some(_)) = process.0.try_wait() {
                break;
            }
            if ready(port) {
                return (process, port);
            }
            assert!(
                Instant::now() < deadline,
                "{what} not ready on {port}; its log is in {}",
                dir.display()
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }
    panic!("{what} would not start; its log is in {}", dir.display());
}

/// The alerts Prometheus has now (pending or firing): (name, state, labels).
fn alerts(prometheus: u16) -> Vec<(String, String, Value)> {
    let Some((200, body)) = http(prometheus, "GET", "/api/v1/alerts", None) else {
        return Vec::new();
    };
    let reply: Value = serde_json::from_str(&body).expect("alerts JSON");
    reply["data"]["alerts"]
        .as_array()
        .cloned()
        .unwrap_or_default()
        .into_iter()
        .map(|a| {
            (
                a["labels"]["alertname"]
                    .as_str()
                    .unwrap_or_default()
                    .to_owned(),
                a["state"].as_str().unwrap_or_default().to_owned(),
                a["labels"].clone(),
            )
        })
        .collect()
}

fn firing(prometheus: u16, alert: &str) -> Option<Value> {
    alerts(prometheus)
        .into_iter()
        .find(|(name, state, _)| name == alert && state == "firing")
        .map(|(_, _, labels)| labels)
}

/// How many times Prometheus has evaluated the limiter's rule group (its own metrics).
fn evaluations(prometheus: u16) -> u64 {
    let Some((200, metrics)) = http(prometheus, "GET", "/metrics", None) else {
        return 0;
    };
    metrics
        .lines()
        .find(|l| {
            l.starts_with("prometheus_rule_group_iterations_total{")
                && l.contains(&format!(";{GROUP}\""))
        })
        .and_then(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .map_or(0, |v| v as u64)
}

/// Whether Prometheus has a sample of `query` (an instant query) from the limiter.
fn has_samples(prometheus: u16, query: &str) -> bool {
    let path = format!("/api/v1/query?query={query}");
    http(prometheus, "GET", &path, None)
        .filter(|(status, _)| *status == 200)
        .and_then(|(_, body)| serde_json::from_str::<Value>(&body).ok())
        .is_some_and(|r| {
            r["data"]["result"]
                .as_array()
                .is_some_and(|a| !a.is_empty())
        })
}

#[test]
fn a_real_prometheus_fires_the_circuit_alert_when_redis_dies_and_clears_it_when_it_returns() {
    let dir = tempfile::tempdir().unwrap();

    // The PrometheusRule the operator builds for `demo` in `video`, its groups as a rules
    // file; only `for:` is shortened.
    let mut sl = common::fixture("managed.yaml");
    sl.spec.monitoring.prometheus_rule.enabled = true;
    let desired = build(&sl).unwrap();
    let rule = desired
        .monitoring
        .iter()
        .find(|o| o.kind == MonitoringKind::PrometheusRule)
        .expect("the PrometheusRule");
    let mut groups = rule.object["spec"].clone();
    for group in groups["groups"].as_array_mut().unwrap() {
        for rule in group["rules"].as_array_mut().unwrap() {
            rule["for"] = "1s".into();
        }
    }
    std::fs::write(
        dir.path().join("rules.yaml"),
        serde_yaml_ng::to_string(&groups).unwrap(),
    )
    .unwrap();

    // Redis and the limiter (failure policy open: plays are allowed, degraded, while the store
    // is down; a failing shard's circuit opens after three failures and is probed every 100 ms).
    let redis_port = free_port();
    let mut redis = Some(start_redis(redis_port).unwrap_or_else(|e| panic!("{e}")));
    let limiter_log = dir.path().join("limiter.log");
    let (_limiter, limiter_port) = start_listening(
        "the limiter",
        dir.path(),
        |port| {
            let config = dir.path().join("limiter.yaml");
            std::fs::write(
                &config,
                format!(
                    "listen: 127.0.0.1:{port}\nstore:\n  backend: redis\n  redis_shards: [\"redis://127.0.0.1:{redis_port}\"]\n  \
                     timeout: 50ms\n  circuit_probe_interval: 100ms\nstream_id_secret: \"prometheus-alerts-test-stream-id-secret\"\n"
                ),
            )
            .unwrap();
            Command::new(common::limiter_binary())
                .arg("--config")
                .arg(&config)
                .env("RUST_LOG", "warn")
                .stdout(std::fs::File::create(&limiter_log).unwrap())
                .stderr(Stdio::null())
                .spawn()
                .expect("spawn the limiter")
        },
        |port| http(port, "GET", "/readyz", None).is_some(),
    );

    // Prometheus: scrapes the limiter as the ServiceMonitor would (job = the limiter Service,
    // a namespace label), every second, and evaluates the rules every second.
    let prometheus_log = dir.path().join("prometheus.log");
    let (_prometheus, prometheus) = start_listening(
        "prometheus",
        dir.path(),
        |port| {
            let config = dir.path().join("prometheus.yaml");
            std::fs::write(
                &config,
                format!(
                    "global: {{scrape_interval: 1s, scrape_timeout: 1s, evaluation_interval: 1s}}\n\
                     rule_files: [{rules}]\n\
                     scrape_configs:\n  - job_name: demo-limiter\n    static_configs:\n      \
                     - targets: ['127.0.0.1:{limiter_port}']\n        labels: {{namespace: video}}\n",
                    rules = dir.path().join("rules.yaml").display()
                ),
            )
            .unwrap();
            Command::new("prometheus")
                .arg(format!("--config.file={}", config.display()))
                .arg(format!(
                    "--storage.tsdb.path={}",
                    dir.path().join("data").display()
                ))
                .arg(format!("--web.listen-address=127.0.0.1:{port}"))
                .arg("--log.level=warn")
                .stdout(Stdio::null())
                .stderr(std::fs::File::create(&prometheus_log).unwrap())
                .spawn()
                .expect("prometheus (Debian's prometheus package; scripts/install-test-deps.sh installs it)")
        },
        |port| http(port, "GET", "/-/ready", None).is_some_and(|(status, _)| status == 200),
    );
    let diagnostics = || {
        format!(
            "alerts: {:?}\nprometheus log:\n{}\nlimiter log:\n{}",
            alerts(prometheus),
            std::fs::read_to_string(&prometheus_log).unwrap_or_default(),
            std::fs::read_to_string(&limiter_log).unwrap_or_default()
        )
    };

    // Players: a play-start every 50 ms, fresh accounts.
    let playing = Arc::new(AtomicBool::new(true));
    let players = {
        let playing = playing.clone();
        std::thread::spawn(move || {
            let mut i = 0u64;
            while playing.load(Ordering::Relaxed) {
                i += 1;
                let body =
                    format!(r#"{{"account_id":"acct-{i}","device_id":"tv-1","plan":"basic"}}"#);
                let _ = http(limiter_port, "POST", "/v1/streams", Some(&body));
                std::thread::sleep(Duration::from_millis(50));
            }
        })
    };

    // Healthy: the limiter's series are in, the rules evaluated over them twice, nothing fires.
    wait_for("the limiter's series in Prometheus", || {
        has_samples(
            prometheus,
            "screenlimit_store_circuit_open%7Bnamespace%3D%22video%22%2Cjob%3D%22demo-limiter%22%7D",
        )
    });
    let seen = evaluations(prometheus);
    wait_for("two evaluations of the rules", || {
        evaluations(prometheus) >= seen + 2
    });
    let quiet = alerts(prometheus);
    assert!(
        !quiet
            .iter()
            .any(|(name, _, _)| name == "ScreenlimitShardCircuitOpen"
                || name == "ScreenlimitPlaysDegraded"),
        "alerts while healthy: {quiet:?}"
    );

    // Redis dies: the shard's circuit opens, plays are answered degraded.
    drop(redis.take());
    let deadline = Instant::now() + PATIENCE;
    let circuit = loop {
        if let Some(labels) = firing(prometheus, "ScreenlimitShardCircuitOpen") {
            break labels;
        }
        assert!(
            Instant::now() < deadline,
            "the circuit alert never fired\n{}",
            diagnostics()
        );
        std::thread::sleep(Duration::from_millis(200));
    };
    assert_eq!(circuit["shard"], "0", "{circuit}");
    assert_eq!(circuit["severity"], "critical", "{circuit}");
    wait_for("the degraded-plays alert", || {
        firing(prometheus, "ScreenlimitPlaysDegraded").is_some()
    });

    // Redis returns on its port: the circuit closes at the next probe, the alert clears.
    let _redis = start_redis(redis_port).unwrap_or_else(|e| panic!("{e}"));
    let deadline = Instant::now() + PATIENCE;
    while alerts(prometheus)
        .iter()
        .any(|(name, _, _)| name == "ScreenlimitShardCircuitOpen")
    {
        assert!(
            Instant::now() < deadline,
            "the circuit alert never cleared\n{}",
            diagnostics()
        );
        std::thread::sleep(Duration::from_millis(200));
    }

    playing.store(false, Ordering::Relaxed);
    players.join().unwrap();
}
