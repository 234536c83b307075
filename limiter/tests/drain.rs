//! The limiter's stop in a rollout, on the real binary: SIGTERM while players play and
//! heartbeat over kept-alive connections. `/readyz` turns 503 at once; every request is still
//! answered through the drain period, with `Connection: close`; no connection is refused before
//! the drain ends; a request stuck in flight does not hold the exit past `http.shutdown_timeout`.

mod support;

use std::io::Write;
use std::net::TcpStream;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use reqwest::StatusCode;
use serde_json::json;
use support::LimiterProcess;

const DRAIN: Duration = Duration::from_secs(2);
const SHUTDOWN_TIMEOUT: Duration = Duration::from_secs(2);
const PLAYERS: usize = 8;

/// What one request got.
#[derive(Debug)]
enum Outcome {
    Answered { status: StatusCode, close: bool },
    Refused,
    Failed(String),
}

type Log = Arc<Mutex<Vec<(Instant, Outcome)>>>;

async fn record(log: &Log, sent: Result<reqwest::Response, reqwest::Error>) -> Option<String> {
    let at = Instant::now();
    let (outcome, stream_id) = match sent {
        Ok(response) => {
            let status = response.status();
            let close = response
                .headers()
                .get("connection")
                .is_some_and(|v| v.as_bytes().eq_ignore_ascii_case(b"close"));
            let body: serde_json::Value = response.json().await.unwrap_or_default();
            let id = body["stream_id"].as_str().map(str::to_owned);
            (Outcome::Answered { status, close }, id)
        }
        Err(error) if error.is_connect() => (Outcome::Refused, None),
        Err(error) => (Outcome::Failed(format!("{error:?}")), None),
    };
    log.lock().unwrap().push((at, outcome));
    stream_id
}

/// Plays, then heartbeats in a loop on one kept-alive client, until the process is gone.
async fn player(base: String, account: String, log: Log) {
    let http = reqwest::Client::builder()
        .timeout(Duration::from_secs(5))
        .build()
        .unwrap();
    let mut stream_id: Option<String> = None;
    let deadline = Instant::now() + Duration::from_secs(20);
    while Instant::now() < deadline {
        let sent = match &stream_id {
            None => {
                http.post(format!("{base}/v1/streams"))
                    .json(&json!({ "account_id": account, "device_id": "tv", "plan": "premium" }))
                    .send()
                    .await
            }
            Some(id) => {
                http.put(format!("{base}/v1/streams/{id}/heartbeat"))
                    .json(&json!({ "account_id": account }))
                    .send()
                    .await
            }
        };
        let refused = matches!(&sent, Err(e) if e.is_connect());
        if let Some(id) = record(&log, sent).await {
            stream_id = Some(id);
        }
        if refused {
            return; // the process is gone: this player is done
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_drains_answering_with_connection_close_then_exits() {
    let drain = format!("{}ms", DRAIN.as_millis());
    let timeout = format!("{}ms", SHUTDOWN_TIMEOUT.as_millis());
    let mut limiter = LimiterProcess::try_start(
        "threads: 2\n",
        &[
            ("SCREENLIMIT_DRAIN_PERIOD", drain.as_str()),
            ("SCREENLIMIT_SHUTDOWN_TIMEOUT", timeout.as_str()),
            ("RUST_LOG", "info"),
            ("SCREENLIMIT_LOG_FORMAT", "json"),
        ],
    )
    .unwrap();
    let log: Log = Arc::default();
    let players: Vec<_> = (0..PLAYERS)
        .map(|i| {
            tokio::spawn(player(
                limiter.base.clone(),
                format!("acct-{i}"),
                log.clone(),
            ))
        })
        .collect();
    tokio::time::sleep(Duration::from_millis(500)).await;

    // A request that stays in flight: its body never comes (the body deadline is 10 s, far
    // beyond the shutdown timeout).
    let addr = limiter.base.trim_start_matches("http://").to_owned();
    let mut stuck = TcpStream::connect(&addr).unwrap();
    stuck
        .write_all(b"POST /v1/streams HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\ncontent-length: 100\r\n\r\n{\"account_id\"")
        .unwrap();
    tokio::time::sleep(Duration::from_millis(100)).await;

    limiter.send_sigterm();
    let signalled = Instant::now();
    let probe = reqwest::Client::builder()
        .pool_max_idle_per_host(0)
        .timeout(Duration::from_secs(2))
        .build()
        .unwrap();
    let unready_after = loop {
        let answer = probe
            .get(format!("{}/readyz", limiter.base))
            .send()
            .await
            .expect("/readyz answers while draining");
        if answer.status() == StatusCode::SERVICE_UNAVAILABLE {
            let body: serde_json::Value = answer.json().await.unwrap();
            assert_eq!(body["draining"], true, "{body}");
            break signalled.elapsed();
        }
        assert!(
            signalled.elapsed() < Duration::from_secs(1),
            "/readyz never turned 503"
        );
    };
    // What a rollout needs: unready early in the drain period, so that the endpoints drop the
    // pod while it still answers. (Not a speed target: a loaded debug build took 105 ms once.)
    println!("/readyz answered 503 {unready_after:?} after SIGTERM");
    assert!(
        unready_after <= DRAIN / 4,
        "/readyz answered 503 only {unready_after:?} after SIGTERM (drain period {DRAIN:?})"
    );

    let status = loop {
        if let Some(status) = limiter.exited() {
            break status;
        }
        assert!(
            signalled.elapsed() < DRAIN + SHUTDOWN_TIMEOUT + Duration::from_secs(3),
            "still running {:?} after SIGTERM",
            signalled.elapsed()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    let exited_after = signalled.elapsed();
    assert!(status.success(), "{status}");
    assert!(
        exited_after >= DRAIN + SHUTDOWN_TIMEOUT - Duration::from_millis(200),
        "exited {exited_after:?} after SIGTERM: before the drain and the stuck request's timeout"
    );
    for player in players {
        player.await.unwrap();
    }
    drop(stuck);

    let log = log.lock().unwrap();
    let drain_end = signalled + DRAIN;
    let mut during = 0;
    for (at, outcome) in log.iter() {
        if *at >= drain_end - Duration::from_millis(200) {
            continue; // the drain is over: refusals are expected from here on
        }
        match outcome {
            Outcome::Answered { status, close } => {
                assert!(
                    status.is_success(),
                    "answered {status} at {:?}",
                    at.duration_since(signalled)
                );
                // An answer that arrives well after the signal was written while draining.
                if *at > signalled + Duration::from_millis(100) {
                    during += 1;
                    assert!(
                        close,
                        "an answer during the drain without Connection: close"
                    );
                }
            }
            Outcome::Refused => panic!(
                "connection refused {:?} after SIGTERM, before the drain ended",
                at.checked_duration_since(signalled)
            ),
            Outcome::Failed(error) => panic!(
                "{error} {:?} after SIGTERM, before the drain ended",
                at.checked_duration_since(signalled)
            ),
        }
    }
    let after_drain = log
        .iter()
        .filter(|(at, o)| *at >= drain_end && matches!(o, Outcome::Refused))
        .count();
    println!(
        "SIGTERM under {PLAYERS} kept-alive players: /readyz 503 after {unready_after:?}; {during} answers \
         during the {DRAIN:?} drain, all with Connection: close, 0 refused or broken; refused after it: \
         {after_drain}; exit after {exited_after:?} (the stuck request cut at the {SHUTDOWN_TIMEOUT:?} \
         shutdown timeout)"
    );
    assert!(
        during >= PLAYERS * 10,
        "only {during} answers during the drain"
    );

    let lines = limiter.log();
    assert_eq!(lines.matches("draining").count(), 1, "{lines}");
    assert!(
        lines.contains("stopped (drain over)") && lines.contains(r#""connections_cut":1"#),
        "{lines}"
    );
}
