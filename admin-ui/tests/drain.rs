//! The dashboard's stop in a rollout, on the real binary: SIGTERM while browsers load pages over
//! kept-alive connections. `/readyz` turns 503 at once; pages are still served through the drain
//! period with `Connection: close`; no connection is refused before it ends; the exit follows.
//! And a kept-alive connection past its maximum age is told `Connection: close`, so browsers
//! spread over the replicas a roll added.

mod common;

use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use reqwest::StatusCode;

const BIN: &str = env!("CARGO_BIN_EXE_screenlimit-admin-ui");
const DRAIN: Duration = Duration::from_secs(2);

/// Kills the child when the test ends, however it ends.
struct Running(std::process::Child);

impl Drop for Running {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// When each page load ended, and what it got: its status and whether it said
/// `Connection: close`, or the error.
type Log = Arc<Mutex<Vec<(Instant, Result<(StatusCode, bool), String>)>>>;

async fn browser(base: String, log: Log) {
    let http = reqwest::Client::builder()
        .timeout(Duration::from_secs(5))
        .build()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(20);
    while Instant::now() < deadline {
        let sent = http.get(format!("{base}/sign-in")).send().await;
        let refused = matches!(&sent, Err(e) if e.is_connect());
        let outcome = match sent {
            Ok(r) => {
                let close = r
                    .headers()
                    .get("connection")
                    .is_some_and(|v| v.as_bytes().eq_ignore_ascii_case(b"close"));
                let status = r.status();
                let _ = r.bytes().await;
                Ok((status, close))
            }
            Err(e) => Err(format!("{e:?}")),
        };
        log.lock().unwrap().push((Instant::now(), outcome));
        if refused {
            return;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// The dashboard in `--dev` with `args`, ready; its base URL and a client that never keeps a
/// connection (for probes).
async fn start(args: &[&str]) -> (Running, String, reqwest::Client) {
    let (limiter_port, ui_port) = (
        common::free_listener().await.local_addr().unwrap().port(),
        common::free_listener().await.local_addr().unwrap().port(),
    );
    let child = Command::new(BIN)
        .args(["--dev", "--dev-limiter-listen"])
        .arg(format!("127.0.0.1:{limiter_port}"))
        .args(["--listen", &format!("127.0.0.1:{ui_port}")])
        .args(args)
        .env("SCREENLIMIT_ADMIN_DEV_PASSWORD", "dev-password-1")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let running = Running(child);
    let base = format!("http://127.0.0.1:{ui_port}");
    let probe = reqwest::Client::builder()
        .pool_max_idle_per_host(0)
        .timeout(Duration::from_secs(2))
        .build()
        .unwrap();
    let up = Instant::now() + Duration::from_secs(30);
    while !probe
        .get(format!("{base}/readyz"))
        .send()
        .await
        .is_ok_and(|r| r.status() == StatusCode::OK)
    {
        assert!(Instant::now() < up, "the dashboard did not become ready");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    (running, base, probe)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_kept_alive_connection_is_told_to_close_after_its_maximum_age() {
    let (_running, base, _) = start(&["--max-connection-age", "1s"]).await;
    let http = reqwest::Client::builder()
        .timeout(Duration::from_secs(5))
        .build()
        .unwrap();
    let opened = Instant::now();
    let closing_at = loop {
        let answer = http.get(format!("{base}/sign-in")).send().await.unwrap();
        assert_eq!(answer.status(), StatusCode::OK);
        let close = answer
            .headers()
            .get("connection")
            .is_some_and(|v| v.as_bytes().eq_ignore_ascii_case(b"close"));
        let _ = answer.bytes().await;
        if close {
            break opened.elapsed();
        }
        assert!(
            opened.elapsed() < Duration::from_secs(5),
            "never told to close"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    // Within ±10 % of 1 s, plus a page's time on a busy machine.
    assert!(
        closing_at >= Duration::from_millis(900) && closing_at < Duration::from_secs(3),
        "told to close after {closing_at:?}"
    );
    // The next page opens a new connection, which starts its own age.
    let next = http.get(format!("{base}/sign-in")).send().await.unwrap();
    assert_eq!(next.status(), StatusCode::OK);
    assert!(
        next.headers().get("connection").is_none(),
        "{:?}",
        next.headers()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_drains_the_dashboard_then_exits() {
    let (mut running, base, probe) =
        start(&["--drain-period", "2s", "--shutdown-timeout", "2s"]).await;
    let log: Log = Arc::default();
    let browsers: Vec<_> = (0..4)
        .map(|_| tokio::spawn(browser(base.clone(), log.clone())))
        .collect();
    tokio::time::sleep(Duration::from_millis(500)).await;

    let pid = running.0.id().to_string();
    assert!(
        Command::new("kill")
            .args(["-TERM", &pid])
            .status()
            .unwrap()
            .success()
    );
    let signalled = Instant::now();
    let unready_after = loop {
        let answer = probe
            .get(format!("{base}/readyz"))
            .send()
            .await
            .expect("/readyz answers while draining");
        if answer.status() == StatusCode::SERVICE_UNAVAILABLE {
            break signalled.elapsed();
        }
        assert!(
            signalled.elapsed() < Duration::from_secs(1),
            "/readyz never turned 503"
        );
    };
    assert!(
        unready_after <= Duration::from_millis(100),
        "/readyz answered 503 only {unready_after:?} after SIGTERM"
    );
    let status = loop {
        if let Some(status) = running.0.try_wait().unwrap() {
            break status;
        }
        assert!(
            signalled.elapsed() < DRAIN + Duration::from_secs(5),
            "still running {:?} after SIGTERM",
            signalled.elapsed()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    assert!(status.success(), "{status}");
    assert!(signalled.elapsed() >= DRAIN - Duration::from_millis(200));
    for browser in browsers {
        browser.await.unwrap();
    }

    let log = log.lock().unwrap();
    let mut during = 0;
    for (at, outcome) in log.iter() {
        if *at >= signalled + DRAIN - Duration::from_millis(200) {
            continue;
        }
        match outcome {
            Ok((status, close)) => {
                assert_eq!(*status, StatusCode::OK);
                if *at > signalled + Duration::from_millis(100) {
                    during += 1;
                    assert!(close, "a page during the drain without Connection: close");
                }
            }
            Err(error) => panic!(
                "{error} {:?} after SIGTERM, before the drain ended",
                at.checked_duration_since(signalled)
            ),
        }
    }
    assert!(during >= 20, "only {during} pages during the drain");
}
