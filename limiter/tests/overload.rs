//! Hostile clients and overload, against the real binary over raw sockets: every connection
//! deadline (idle, header, body, write), the header size cap, the listen backlog, the connection
//! cap, and load shedding under the `open` and `closed` failure policies (with a frozen Redis
//! holding the one request the bound allows in flight).

mod support;

use std::io::{ErrorKind, Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

use reqwest::StatusCode;
use serde_json::json;
use support::{LimiterProcess, RedisServer, redis_config};

/// Short deadlines, each different, so that a test can tell which one closed a connection.
const DEADLINES: &str = "http: { header_read_timeout: 600ms, body_read_timeout: 600ms, idle_timeout: 2500ms, max_header_bytes: 2048 }\n";

fn connect(limiter: &LimiterProcess) -> TcpStream {
    let addr = limiter.base.trim_start_matches("http://");
    let stream = TcpStream::connect(addr).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    stream
}

/// Reads until the limiter closes the connection (EOF or reset); returns what it sent and when
/// the connection ended, measured from `since`.
fn read_until_closed(stream: &mut TcpStream, since: Instant) -> (String, Duration) {
    let mut got = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        match stream.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => got.extend_from_slice(&buf[..n]),
            Err(e) if matches!(e.kind(), ErrorKind::ConnectionReset) => break,
            Err(e) => panic!("the connection was not closed after 10 s: {e}"),
        }
    }
    (String::from_utf8_lossy(&got).into_owned(), since.elapsed())
}

/// One GET on a fresh connection; the whole answer, or `None` when the connection is refused.
fn get(limiter: &LimiterProcess, path: &str) -> Option<String> {
    let mut stream = connect(limiter);
    write!(
        stream,
        "GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
    )
    .ok()?;
    let (answer, _) = read_until_closed(&mut stream, Instant::now());
    answer.starts_with("HTTP/1.1 200").then_some(answer)
}

fn metric(limiter: &LimiterProcess, line_start: &str) -> f64 {
    let text = get(limiter, "/metrics").expect("metrics answered");
    text.lines()
        .find_map(|line| line.strip_prefix(line_start))
        .and_then(|value| value.trim().parse().ok())
        .unwrap_or_else(|| panic!("no {line_start} in\n{text}"))
}

#[test]
fn slow_headers_are_cut_off_at_the_header_deadline_however_they_trickle() {
    let limiter = LimiterProcess::start(DEADLINES);
    let mut stream = connect(&limiter);
    let started = Instant::now();
    stream.write_all(b"POST /v1/streams HTTP/1.1\r\n").unwrap();
    // One header byte every 100 ms: the connection is never quiet, yet the headers never end.
    let mut trickle = stream.try_clone().unwrap();
    let trickling = std::thread::spawn(move || {
        for _ in 0..40 {
            if trickle.write_all(b"x").is_err() {
                return;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    });
    let (answer, after) = read_until_closed(&mut stream, started);
    assert!(
        after >= Duration::from_millis(500) && after < Duration::from_millis(2000),
        "closed after {after:?}, the header deadline is 600ms"
    );
    assert!(
        answer.is_empty(),
        "nothing is answered to half a head: {answer:?}"
    );
    trickling.join().unwrap();
    assert_eq!(
        metric(
            &limiter,
            "screenlimit_connection_timeouts_total{kind=\"header\"}"
        ),
        1.0
    );
}

#[test]
fn an_idle_connection_is_closed_at_the_idle_deadline_and_not_before() {
    let limiter = LimiterProcess::start(DEADLINES);
    // A kept-alive connection after one request, and one that never sends a byte.
    let mut used = connect(&limiter);
    used.write_all(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
        .unwrap();
    let mut first = [0u8; 512];
    let n = used.read(&mut first).unwrap();
    assert!(
        String::from_utf8_lossy(&first[..n]).starts_with("HTTP/1.1 200"),
        "{:?}",
        String::from_utf8_lossy(&first[..n])
    );
    let since = Instant::now();
    let mut silent = connect(&limiter);
    let (_, used_after) = read_until_closed(&mut used, since);
    let (answer, silent_after) = read_until_closed(&mut silent, since);
    for after in [used_after, silent_after] {
        // Longer than the header deadline: an idle connection is not a slow header.
        assert!(
            after >= Duration::from_millis(2200) && after < Duration::from_millis(4500),
            "closed after {after:?}, the idle deadline is 2.5s"
        );
    }
    assert!(answer.is_empty(), "{answer:?}");
    assert_eq!(
        metric(
            &limiter,
            "screenlimit_connection_timeouts_total{kind=\"idle\"}"
        ),
        2.0
    );
}

#[test]
fn a_slow_body_is_answered_408_and_its_connection_closed() {
    let limiter = LimiterProcess::start(DEADLINES);
    let mut stream = connect(&limiter);
    let started = Instant::now();
    stream
        .write_all(
            b"POST /v1/streams HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n{",
        )
        .unwrap();
    let (answer, after) = read_until_closed(&mut stream, started);
    assert!(
        answer.starts_with("HTTP/1.1 408"),
        "a slow body gets 408: {answer:?}"
    );
    assert!(answer.contains("\"error\":\"request_timeout\""), "{answer}");
    assert!(answer.to_ascii_lowercase().contains("connection: close"));
    assert!(
        after >= Duration::from_millis(500) && after < Duration::from_millis(2000),
        "answered and closed after {after:?}, the body deadline is 600ms"
    );
    assert_eq!(
        metric(
            &limiter,
            "screenlimit_connection_timeouts_total{kind=\"body\"}"
        ),
        1.0
    );
    // A body that arrives in time, even in pieces, is served.
    let mut stream = connect(&limiter);
    let body = json!({"account_id": "acct-slow", "device_id": "tv"}).to_string();
    write!(
        stream,
        "POST /v1/streams HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    )
    .unwrap();
    for piece in body.as_bytes().chunks(8) {
        stream.write_all(piece).unwrap();
        std::thread::sleep(Duration::from_millis(50));
    }
    let (answer, _) = read_until_closed(&mut stream, Instant::now());
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
}

#[test]
fn oversized_headers_are_answered_431() {
    let limiter = LimiterProcess::start(DEADLINES);
    let mut stream = connect(&limiter);
    let padding = "a".repeat(4096);
    write!(
        stream,
        "GET /healthz HTTP/1.1\r\nHost: x\r\nX-Padding: {padding}\r\n\r\n"
    )
    .unwrap();
    let (answer, _) = read_until_closed(&mut stream, Instant::now());
    assert!(answer.starts_with("HTTP/1.1 431"), "{answer:?}");
    // Headers under the cap are served.
    let mut stream = connect(&limiter);
    let padding = "a".repeat(1024);
    write!(
        stream,
        "GET /healthz HTTP/1.1\r\nHost: x\r\nX-Padding: {padding}\r\nConnection: close\r\n\r\n"
    )
    .unwrap();
    let (answer, _) = read_until_closed(&mut stream, Instant::now());
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer:?}");
}

#[test]
fn connections_beyond_the_cap_are_closed_at_once() {
    let limiter = LimiterProcess::start("http: { max_connections: 3 }\n");
    // The harness's own probe connection has gone.
    std::thread::sleep(Duration::from_millis(300));
    let held: Vec<TcpStream> = (0..3).map(|_| connect(&limiter)).collect();
    // Let the limiter accept them all before the next one arrives; they stay open.
    std::thread::sleep(Duration::from_millis(300));
    for (i, mut stream) in held.iter().enumerate() {
        stream
            .set_read_timeout(Some(Duration::from_millis(50)))
            .unwrap();
        let mut buf = [0u8; 256];
        match stream.read(&mut buf) {
            Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {}
            other => panic!("connection {i} under the cap was closed: {other:?}"),
        }
    }
    let started = Instant::now();
    let mut extra = connect(&limiter);
    let (answer, after) = read_until_closed(&mut extra, started);
    assert!(after < Duration::from_secs(1), "closed after {after:?}");
    assert!(
        answer.is_empty() || answer.starts_with("HTTP/1.1 503"),
        "{answer:?}"
    );
    drop(held);
    // Places free up as connections close.
    let deadline = Instant::now() + Duration::from_secs(5);
    while get(&limiter, "/healthz").is_none() {
        assert!(Instant::now() < deadline, "no place freed");
        std::thread::sleep(Duration::from_millis(50));
    }
    assert!(metric(&limiter, "screenlimit_connections_refused_total") >= 1.0);
}

/// A limiter on `redis` that lets one request in flight, with a store deadline long enough for
/// a frozen Redis to hold that one request while the test sends others.
fn one_in_flight(redis: &RedisServer, policy: &str) -> LimiterProcess {
    let config = redis_config(
        &[redis.url()],
        &format!("failure_policy: {policy}\nhttp: {{ max_in_flight: 1 }}\n"),
    )
    .replace("timeout: 25ms", "timeout: 3s");
    LimiterProcess::start(&config)
}

/// Plays once (so that the scripts are loaded), resets Redis's counters, freezes it, and starts
/// one play-start that will hold the one place in flight until the store deadline.
async fn hold_the_one_place(
    limiter: &LimiterProcess,
    redis: &RedisServer,
) -> (String, tokio::task::JoinHandle<support::Reply>) {
    let api = limiter.client();
    let warm = api.play_on("acct-warm", "tv").await;
    assert_eq!(warm.status, StatusCode::OK, "{warm:?}");
    redis.command("CONFIG RESETSTAT").unwrap();
    redis.freeze(true);
    let holder = tokio::spawn({
        let api = api.clone();
        async move { api.play_on("acct-holder", "tv").await }
    });
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(!holder.is_finished(), "the held request waits on the store");
    (warm.stream_id(), holder)
}

fn evalsha_calls(redis: &RedisServer) -> u64 {
    let stats = redis.command("INFO commandstats").unwrap();
    stats
        .lines()
        .find_map(|line| line.strip_prefix("cmdstat_evalsha:calls="))
        .and_then(|rest| rest.split(',').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or(0)
}

#[tokio::test]
async fn shedding_under_open_allows_degraded_without_touching_the_store() {
    let redis = RedisServer::start();
    let limiter = one_in_flight(&redis, "open");
    let api = limiter.client();
    let (warm_stream, holder) = hold_the_one_place(&limiter, &redis).await;

    let started = Instant::now();
    let shed = api.play_on("acct-shed", "tv").await;
    let shed_after = started.elapsed();
    assert_eq!(shed.status, StatusCode::OK, "{shed:?}");
    assert_eq!(shed.body["degraded"], true, "{shed:?}");
    assert!(shed.body["active_count"].is_null(), "{shed:?}");
    assert!(shed.body["stream_id"].is_string(), "{shed:?}");
    let beat = api.heartbeat("acct-warm", &warm_stream).await;
    assert_eq!(beat.status, StatusCode::OK, "{beat:?}");
    assert_eq!(beat.body["ok"], true);
    assert_eq!(beat.body["degraded"], true, "{beat:?}");
    let list = api.list("acct-warm").await;
    assert_eq!(list.status, StatusCode::SERVICE_UNAVAILABLE, "{list:?}");
    assert_eq!(list.error(), "overloaded");
    // Health and readiness are never shed.
    let alive = api.get("/healthz").await;
    assert_eq!(alive.status(), StatusCode::OK);
    assert!(
        shed_after < Duration::from_millis(1000),
        "shed at once, not after the held request's store deadline: {shed_after:?}"
    );
    assert!(!holder.is_finished(), "the held request still waits");

    redis.freeze(false);
    let held = holder.await.unwrap();
    assert_eq!(held.status, StatusCode::OK, "{held:?}");
    // Only the held play-start reached Redis: neither shed call did.
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert_eq!(evalsha_calls(&redis), 1);
    let metrics = api.get("/metrics").await.text().await.unwrap();
    for line in [
        "screenlimit_shed_total{route=\"play_start\"} 1",
        "screenlimit_shed_total{route=\"heartbeat\"} 1",
        "screenlimit_shed_total{route=\"other\"} 1",
    ] {
        assert!(metrics.contains(line), "{line} in\n{metrics}");
    }
    // Readiness shows the bounds and never turns unready for load.
    let ready = api.get("/readyz").await;
    assert_eq!(ready.status(), StatusCode::OK);
    let ready: serde_json::Value = ready.json().await.unwrap();
    assert_eq!(ready["load"]["max_in_flight"], 1, "{ready}");
    assert_eq!(ready["load"]["scale_out"], false, "{ready}");
    // Once the bound has room again, calls reach the store.
    let after = api.play_on("acct-after", "tv").await;
    assert_eq!(after.status, StatusCode::OK);
    assert_eq!(after.body["degraded"], false, "{after:?}");
}

#[tokio::test]
async fn shedding_under_closed_answers_503_with_retry_after() {
    let redis = RedisServer::start();
    let limiter = one_in_flight(&redis, "closed");
    let api = limiter.client();
    let (warm_stream, holder) = hold_the_one_place(&limiter, &redis).await;

    let started = Instant::now();
    let response = api
        .http
        .post(format!("{}/v1/streams", api.base))
        .json(&json!({"account_id": "acct-shed", "device_id": "tv"}))
        .send()
        .await
        .unwrap();
    assert!(started.elapsed() < Duration::from_millis(1000));
    assert_eq!(response.status(), StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(response.headers()["retry-after"], "1");
    let body: serde_json::Value = response.json().await.unwrap();
    assert_eq!(body["error"], "overloaded", "{body}");
    assert!(body["message"].is_string());
    let beat = api.heartbeat("acct-warm", &warm_stream).await;
    assert_eq!(beat.status, StatusCode::SERVICE_UNAVAILABLE, "{beat:?}");
    assert_eq!(beat.error(), "overloaded");

    redis.freeze(false);
    assert_eq!(holder.await.unwrap().status, StatusCode::OK);
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert_eq!(evalsha_calls(&redis), 1);
}

#[tokio::test]
async fn shedding_under_local_cap_lets_the_embedded_store_decide() {
    let redis = RedisServer::start();
    let limiter = one_in_flight(&redis, "local_cap");
    let api = limiter.client();
    let (_, holder) = hold_the_one_place(&limiter, &redis).await;

    // The default plan (basic) allows one stream: the instance's own store enforces it.
    let first = api.play_on("acct-local", "tv").await;
    assert_eq!(first.status, StatusCode::OK, "{first:?}");
    assert_eq!(first.body["degraded"], true, "{first:?}");
    assert_eq!(first.body["active_count"], 1, "{first:?}");
    let second = api.play_on("acct-local", "phone").await;
    assert_eq!(second.status, StatusCode::CONFLICT, "{second:?}");
    assert!(!holder.is_finished(), "the held request still waits");

    redis.freeze(false);
    assert_eq!(holder.await.unwrap().status, StatusCode::OK);
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert_eq!(evalsha_calls(&redis), 1);
}

#[test]
fn slow_bodies_hold_no_place_in_flight() {
    let limiter = LimiterProcess::start("http: { max_in_flight: 2, body_read_timeout: 5s }\n");
    // More half-sent requests than places in flight: play-starts, and support calls with a body.
    let heads: [&[u8]; 2] = [
        b"POST /v1/streams HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n{",
        b"PUT /v1/accounts/acct-real/limit-override HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n{",
    ];
    let slow: Vec<TcpStream> = (0..6)
        .map(|i| {
            let mut stream = connect(&limiter);
            stream.write_all(heads[i % 2]).unwrap();
            stream
        })
        .collect();
    std::thread::sleep(Duration::from_millis(300));
    let mut stream = connect(&limiter);
    let body = json!({"account_id": "acct-real", "device_id": "tv"}).to_string();
    write!(
        stream,
        "POST /v1/streams HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    )
    .unwrap();
    let (answer, _) = read_until_closed(&mut stream, Instant::now());
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    assert!(
        answer.contains("\"degraded\":false"),
        "a real play is not shed because of slow senders: {answer}"
    );
    let list = get(&limiter, "/v1/accounts/acct-real/streams");
    assert!(
        list.is_some(),
        "a support call is not refused because of slow senders"
    );
    drop(slow);
}

#[test]
fn a_client_that_does_not_read_its_answers_is_cut_off_at_the_write_deadline() {
    let limiter = LimiterProcess::start("http: { write_timeout: 500ms }\n");
    let mut stream = connect(&limiter);
    // Pipelined requests for a large document, never read: the answers fill the socket's
    // buffers, and then the limiter's writes cannot proceed.
    let one = "GET /openapi.json HTTP/1.1\r\nHost: x\r\n\r\n";
    let mut writer = stream.try_clone().unwrap();
    let writing = std::thread::spawn(move || {
        for _ in 0..2_000 {
            if writer.write_all(one.as_bytes()).is_err() {
                return;
            }
        }
    });
    let deadline = Instant::now() + Duration::from_secs(15);
    while metric(
        &limiter,
        "screenlimit_connection_timeouts_total{kind=\"write\"}",
    ) < 1.0
    {
        assert!(
            Instant::now() < deadline,
            "no write deadline closed the connection"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    // What was buffered is read, then the connection is seen closed.
    let (answer, _) = read_until_closed(&mut stream, Instant::now());
    assert!(
        answer.starts_with("HTTP/1.1 200"),
        "{}",
        &answer[..80.min(answer.len())]
    );
    let _ = writing.join();
}

/// Reads one answer to a GET on a kept-alive connection: its head (lower-cased) and body.
fn read_answer(stream: &mut TcpStream) -> String {
    let mut got = Vec::new();
    let mut byte = [0u8; 1];
    while !got.ends_with(b"\r\n\r\n") {
        assert_eq!(stream.read(&mut byte).unwrap(), 1, "the answer broke off");
        got.push(byte[0]);
    }
    let head = String::from_utf8_lossy(&got).to_ascii_lowercase();
    let length: usize = head
        .lines()
        .find_map(|l| l.strip_prefix("content-length:"))
        .map_or(0, |v| v.trim().parse().unwrap());
    let mut body = vec![0u8; length];
    stream.read_exact(&mut body).unwrap();
    head
}

#[test]
fn a_kept_alive_connection_is_closed_after_its_maximum_age() {
    let limiter = LimiterProcess::start("http: { max_connection_age: 1s }\n");
    let mut stream = connect(&limiter);
    let opened = Instant::now();
    let closing_at = loop {
        write!(stream, "GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n").unwrap();
        let head = read_answer(&mut stream);
        assert!(head.starts_with("http/1.1 200"), "{head}");
        if head.contains("connection: close") {
            break opened.elapsed();
        }
        assert!(
            opened.elapsed() < Duration::from_secs(5),
            "never told to close"
        );
        std::thread::sleep(Duration::from_millis(50));
    };
    // The age is jittered within ±10 %: 0.9 to 1.1 s, plus a request's time on a busy machine.
    assert!(
        closing_at >= Duration::from_millis(900) && closing_at < Duration::from_secs(3),
        "told to close after {closing_at:?}"
    );
    let (rest, _) = read_until_closed(&mut stream, Instant::now());
    assert!(
        rest.is_empty(),
        "the connection closes after that answer: {rest}"
    );
    // `0s` keeps a connection as long as its client likes.
    let limiter = LimiterProcess::start("http: { max_connection_age: 0s }\n");
    let mut stream = connect(&limiter);
    for _ in 0..3 {
        write!(stream, "GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n").unwrap();
        assert!(!read_answer(&mut stream).contains("connection: close"));
        std::thread::sleep(Duration::from_millis(400));
    }
}

#[test]
fn the_listen_backlog_is_the_configured_one() {
    let limiter = LimiterProcess::start("http: { listen_backlog: 3000 }\n");
    let port = limiter.base.rsplit(':').next().unwrap();
    // `ss` shows a listening socket's backlog in its Send-Q column.
    let out = std::process::Command::new("ss")
        .args(["-Hltn", &format!("sport = :{port}")])
        .output()
        .expect("ss (iproute2) runs");
    let text = String::from_utf8_lossy(&out.stdout);
    let backlog: Vec<&str> = text
        .lines()
        .filter_map(|line| line.split_whitespace().nth(2))
        .collect();
    assert_eq!(backlog, ["3000"], "{text}");
}

/// Its lane frozen for 400 ms (as a CPU that cannot keep up would hold it), the limiter sheds
/// the play that waited meanwhile without asking the store, then serves normally once caught up.
#[tokio::test]
async fn a_lane_that_falls_behind_sheds_until_it_has_caught_up() {
    let redis = RedisServer::start();
    let limiter = LimiterProcess::start(&redis_config(
        &[redis.url()],
        "failure_policy: open\nthreads: 1\nhttp: { max_queue_delay: 100ms }\n",
    ));
    let api = limiter.client();
    let warm = api.play_on("acct-warm", "tv").await;
    assert_eq!(warm.body["degraded"], false, "{warm:?}");
    redis.command("CONFIG RESETSTAT").unwrap();

    let mut stream = connect(&limiter);
    let body = json!({"account_id": "acct-late", "device_id": "tv"}).to_string();
    limiter.freeze(true);
    write!(
        stream,
        "POST /v1/streams HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    )
    .unwrap();
    std::thread::sleep(Duration::from_millis(400));
    limiter.freeze(false);
    let (answer, _) = read_until_closed(&mut stream, Instant::now());
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    assert!(answer.contains("\"degraded\":true"), "{answer}");
    assert_eq!(
        evalsha_calls(&redis),
        0,
        "a shed play does not reach the store"
    );

    tokio::time::sleep(Duration::from_millis(200)).await;
    let after = api.play_on("acct-after", "tv").await;
    assert_eq!(after.body["degraded"], false, "{after:?}");
    assert_eq!(metric(&limiter, "screenlimit_shed_lane_behind_total"), 1.0);
}
