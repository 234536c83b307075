//! HTTP/2 over cleartext with prior knowledge (h2c), as a gateway speaks it upstream, against the
//! real binary: the stream API over h2c on the embedded store and on Redis, many streams on one
//! connection, the bounds and deadlines every HTTP/2 connection is held to (concurrent streams,
//! header size, idle, body, flow control, PING, maximum age), the stop, HTTP/1.1 on the same
//! port, and `http.h2c: false`.
//!
//! Three kinds of client: reqwest with `http2_prior_knowledge` (what a gateway does), hyper's
//! HTTP/2 client on one explicit connection (many streams at once, bodies that take their time),
//! and raw frames on a socket (a peer that breaks the rules, or whose frames a test watches).

mod support;

use std::convert::Infallible;
use std::io::{ErrorKind, Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

use bytes::Bytes;
use futures::StreamExt;
use http_body_util::combinators::BoxBody;
use http_body_util::{BodyExt, Full, StreamBody};
use hyper::body::Frame;
use hyper::client::conn::http2::SendRequest;
use hyper_util::rt::{TokioExecutor, TokioIo};
use reqwest::{StatusCode, Version};
use serde_json::{Value, json};
use support::{Api, LimiterProcess, RedisServer, redis_config};

/// A client that speaks HTTP/2 from the first byte, as a gateway does upstream.
fn h2_api(limiter: &LimiterProcess) -> Api {
    Api {
        base: limiter.base.clone(),
        http: reqwest::Client::builder()
            .http2_prior_knowledge()
            .timeout(Duration::from_secs(10))
            .build()
            .unwrap(),
    }
}

// ---- hyper's HTTP/2 client: one connection, many streams ----

type H2Body = BoxBody<Bytes, Infallible>;

/// One HTTP/2 connection, and the task that drives it (it ends when the connection does).
async fn h2_connect(
    limiter: &LimiterProcess,
) -> (
    SendRequest<H2Body>,
    tokio::task::JoinHandle<Result<(), hyper::Error>>,
) {
    let addr = limiter.base.trim_start_matches("http://");
    let stream = tokio::net::TcpStream::connect(addr).await.unwrap();
    let (send, conn) =
        hyper::client::conn::http2::handshake(TokioExecutor::new(), TokioIo::new(stream))
            .await
            .unwrap();
    (send, tokio::spawn(conn))
}

fn full(body: Option<Value>) -> H2Body {
    let bytes = body.map(|b| b.to_string()).unwrap_or_default();
    Full::new(Bytes::from(bytes)).boxed()
}

/// A request body sent by the test at its own pace: each `Bytes` sent is one DATA frame, the
/// body ends when the sender drops.
fn channel_body() -> (futures::channel::mpsc::UnboundedSender<Bytes>, H2Body) {
    let (tx, rx) = futures::channel::mpsc::unbounded::<Bytes>();
    let body = StreamBody::new(rx.map(|chunk| Ok::<_, Infallible>(Frame::data(chunk))));
    (tx, BodyExt::boxed(body))
}

fn request(base: &str, method: &str, path: &str, body: H2Body) -> hyper::Request<H2Body> {
    hyper::Request::builder()
        .method(method)
        .uri(format!("{base}{path}"))
        .header("content-type", "application/json")
        .body(body)
        .unwrap()
}

/// Sends one request on the connection; its status and JSON body.
async fn h2_send(
    send: &SendRequest<H2Body>,
    request: hyper::Request<H2Body>,
) -> Result<(StatusCode, Value), hyper::Error> {
    let mut send = send.clone();
    let response = send.send_request(request).await?;
    assert_eq!(response.version(), hyper::Version::HTTP_2);
    let status = StatusCode::from_u16(response.status().as_u16()).unwrap();
    let bytes = response.into_body().collect().await?.to_bytes();
    Ok((
        status,
        serde_json::from_slice(&bytes).unwrap_or(Value::Null),
    ))
}

async fn h2_play(send: &SendRequest<H2Body>, base: &str, account: &str, device: &str) -> Value {
    let body = json!({ "account_id": account, "device_id": device });
    let (status, body) = h2_send(send, request(base, "POST", "/v1/streams", full(Some(body))))
        .await
        .expect("an answer");
    json!({ "status": status.as_u16(), "body": body })
}

/// One line of `/metrics`, over a fresh HTTP/1.1 connection.
async fn metric(limiter: &LimiterProcess, line_start: &str) -> f64 {
    let text = limiter.client().get("/metrics").await.text().await.unwrap();
    text.lines()
        .find_map(|line| line.strip_prefix(line_start))
        .and_then(|value| value.trim().parse().ok())
        .unwrap_or_else(|| panic!("no {line_start} in\n{text}"))
}

async fn timeouts(limiter: &LimiterProcess, kind: &str) -> f64 {
    metric(
        limiter,
        &format!("screenlimit_connection_timeouts_total{{kind=\"{kind}\"}}"),
    )
    .await
}

// ---- raw frames: a peer that breaks the rules, or whose frames the test watches ----

const PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";
const DATA: u8 = 0x0;
const HEADERS: u8 = 0x1;
const RST_STREAM: u8 = 0x3;
const SETTINGS: u8 = 0x4;
const PING: u8 = 0x6;
const GOAWAY: u8 = 0x7;
const END_STREAM: u8 = 0x1;
const END_HEADERS: u8 = 0x4;
const ACK: u8 = 0x1;
const SETTINGS_MAX_CONCURRENT_STREAMS: u16 = 0x3;
const SETTINGS_INITIAL_WINDOW_SIZE: u16 = 0x4;
const REFUSED_STREAM: u32 = 0x7;

#[derive(Debug)]
struct RawFrame {
    kind: u8,
    flags: u8,
    stream: u32,
    payload: Vec<u8>,
    at: Instant,
}

struct RawH2 {
    stream: TcpStream,
    /// Acknowledge the limiter's PINGs (a live peer does; a dead one does not).
    answer_pings: bool,
    /// No test waits for a frame or the close past this (the limiter's PINGs would keep a
    /// connection that is never closed busy).
    give_up: Instant,
}

impl RawH2 {
    /// Connects, sends the preface and SETTINGS with `settings`.
    fn connect(limiter: &LimiterProcess, settings: &[(u16, u32)], answer_pings: bool) -> Self {
        let addr = limiter.base.trim_start_matches("http://");
        let stream = TcpStream::connect(addr).unwrap();
        stream
            .set_read_timeout(Some(Duration::from_secs(10)))
            .unwrap();
        let mut raw = RawH2 {
            stream,
            answer_pings,
            give_up: Instant::now() + Duration::from_secs(20),
        };
        raw.stream.write_all(PREFACE).unwrap();
        let payload: Vec<u8> = settings
            .iter()
            .flat_map(|(id, value)| {
                let mut p = id.to_be_bytes().to_vec();
                p.extend_from_slice(&value.to_be_bytes());
                p
            })
            .collect();
        raw.write_frame(SETTINGS, 0, 0, &payload);
        raw
    }

    fn write_frame(&mut self, kind: u8, flags: u8, stream: u32, payload: &[u8]) {
        let len = payload.len() as u32;
        let mut frame = len.to_be_bytes()[1..].to_vec();
        frame.extend_from_slice(&[kind, flags]);
        frame.extend_from_slice(&stream.to_be_bytes());
        frame.extend_from_slice(payload);
        self.stream.write_all(&frame).unwrap();
    }

    /// A request's HEADERS (HPACK without the dynamic table or Huffman): `end_stream` when it
    /// has no body.
    fn request(&mut self, stream: u32, method: &str, path: &str, end_stream: bool) {
        let mut block = vec![if method == "GET" { 0x82 } else { 0x83 }, 0x86];
        for (index, value) in [(4u8, path), (1, "x")] {
            block.push(index);
            block.push(value.len() as u8);
            block.extend_from_slice(value.as_bytes());
        }
        if method != "GET" {
            block.push(0);
            for text in ["content-type", "application/json"] {
                block.push(text.len() as u8);
                block.extend_from_slice(text.as_bytes());
            }
        }
        let flags = END_HEADERS | if end_stream { END_STREAM } else { 0 };
        self.write_frame(HEADERS, flags, stream, &block);
    }

    /// The next frame (the limiter's SETTINGS and, if so set, its PINGs acknowledged on the
    /// way); `None` once the limiter has closed the connection.
    fn next(&mut self) -> Option<RawFrame> {
        assert!(
            Instant::now() < self.give_up,
            "the connection is still open after 20 s"
        );
        let mut head = [0u8; 9];
        match self.stream.read_exact(&mut head) {
            Ok(()) => {}
            Err(e)
                if matches!(
                    e.kind(),
                    ErrorKind::UnexpectedEof | ErrorKind::ConnectionReset
                ) =>
            {
                return None;
            }
            Err(e) => panic!("no frame and no close after 10 s: {e}"),
        }
        let len = u32::from_be_bytes([0, head[0], head[1], head[2]]) as usize;
        let mut payload = vec![0u8; len];
        if self.stream.read_exact(&mut payload).is_err() {
            return None;
        }
        let frame = RawFrame {
            kind: head[3],
            flags: head[4],
            stream: u32::from_be_bytes([head[5], head[6], head[7], head[8]]) & 0x7fff_ffff,
            payload,
            at: Instant::now(),
        };
        if frame.kind == SETTINGS && frame.flags & ACK == 0 {
            self.write_frame(SETTINGS, ACK, 0, &[]);
        }
        if frame.kind == PING && frame.flags & ACK == 0 && self.answer_pings {
            let payload = frame.payload.clone();
            self.write_frame(PING, ACK, 0, &payload);
        }
        Some(frame)
    }

    /// Every frame until the limiter closes the connection.
    fn until_closed(&mut self) -> Vec<RawFrame> {
        std::iter::from_fn(|| self.next()).collect()
    }

    /// Frames until one matches `what` (returned with those before it).
    fn until(&mut self, what: impl Fn(&RawFrame) -> bool) -> (Vec<RawFrame>, RawFrame) {
        let mut before = Vec::new();
        loop {
            let frame = self
                .next()
                .unwrap_or_else(|| panic!("closed before the awaited frame; got {before:?}"));
            if what(&frame) {
                return (before, frame);
            }
            before.push(frame);
        }
    }
}

fn goaways(frames: &[RawFrame]) -> Vec<&RawFrame> {
    frames.iter().filter(|f| f.kind == GOAWAY).collect()
}

/// The error code of a GOAWAY or RST_STREAM frame.
fn error_code(frame: &RawFrame) -> u32 {
    let at = if frame.kind == GOAWAY { 4 } else { 0 };
    u32::from_be_bytes(frame.payload[at..at + 4].try_into().unwrap())
}

// ---- the stream API over h2c ----

/// Play, heartbeat, list and stop over h2c, and a bad request answered as over HTTP/1.1.
async fn play_heartbeat_list_stop(limiter: &LimiterProcess) {
    let api = h2_api(limiter);
    let version = api.get("/healthz").await.version();
    assert_eq!(version, Version::HTTP_2);
    let played = api.play_on("acct-h2", "tv").await;
    assert_eq!(played.status, StatusCode::OK, "{played:?}");
    assert_eq!(played.body["degraded"], false, "{played:?}");
    let id = played.stream_id();
    let beat = api.heartbeat("acct-h2", &id).await;
    assert_eq!(beat.status, StatusCode::OK, "{beat:?}");
    assert_eq!(beat.body["ok"], true, "{beat:?}");
    let list = api.list("acct-h2").await;
    assert_eq!(list.status, StatusCode::OK, "{list:?}");
    let active = list.body["active"].as_array().expect("active streams");
    assert_eq!(active.len(), 1, "{list:?}");
    assert_eq!(active[0]["stream_id"], id.as_str());
    let second = api.play_on("acct-h2", "phone").await;
    assert_eq!(second.status, StatusCode::CONFLICT, "the cap: {second:?}");
    let stop = api.stop("acct-h2", &id).await;
    assert_eq!(stop.status, StatusCode::OK, "{stop:?}");
    let list = api.list("acct-h2").await;
    assert_eq!(list.body["active"], json!([]), "{list:?}");
    // The same input checks as over HTTP/1.1.
    let bad = json!({ "account_id": "acct-h2" });
    let over_h2 = api.play(bad.clone()).await;
    let over_h1 = limiter.client().play(bad).await;
    assert!(over_h2.status.is_client_error(), "{over_h2:?}");
    assert_eq!(
        (over_h2.status, over_h2.error()),
        (over_h1.status, over_h1.error())
    );
}

#[tokio::test]
async fn play_heartbeat_list_and_stop_over_h2c_on_the_embedded_store() {
    let limiter = LimiterProcess::start("");
    play_heartbeat_list_stop(&limiter).await;
}

#[tokio::test]
async fn play_heartbeat_list_and_stop_over_h2c_on_redis() {
    let redis = RedisServer::start();
    let limiter = LimiterProcess::start(&redis_config(&[redis.url()], ""));
    play_heartbeat_list_stop(&limiter).await;
}

#[tokio::test]
async fn two_hundred_plays_at_once_on_one_connection_and_the_cap_holds() {
    let limiter = LimiterProcess::start("");
    let base = limiter.base.clone();
    let (send, _conn) = h2_connect(&limiter).await;
    let plays = (0..200).map(|i| {
        let (send, base) = (send.clone(), base.clone());
        tokio::spawn(async move { h2_play(&send, &base, &format!("acct-many-{i}"), "tv").await })
    });
    let mut ids = std::collections::HashSet::new();
    for play in futures::future::join_all(plays).await {
        let play = play.unwrap();
        assert_eq!(play["status"], 200, "{play}");
        assert_eq!(play["body"]["degraded"], false, "{play}");
        ids.insert(play["body"]["stream_id"].as_str().unwrap().to_owned());
    }
    assert_eq!(ids.len(), 200, "one stream id each");

    // A Basic account (one screen) racing 50 devices on the same connection: one grant.
    let race = (0..50).map(|i| {
        let (send, base) = (send.clone(), base.clone());
        tokio::spawn(
            async move { h2_play(&send, &base, "acct-basic-race", &format!("d{i}")).await },
        )
    });
    let answers: Vec<Value> = futures::future::join_all(race)
        .await
        .into_iter()
        .map(Result::unwrap)
        .collect();
    let granted = answers.iter().filter(|a| a["status"] == 200).count();
    let refused = answers.iter().filter(|a| a["status"] == 409).count();
    assert_eq!((granted, refused), (1, 49), "{answers:?}");
    let (status, list) = h2_send(
        &send,
        request(
            &base,
            "GET",
            "/v1/accounts/acct-basic-race/streams",
            full(None),
        ),
    )
    .await
    .unwrap();
    assert_eq!(status, StatusCode::OK);
    assert_eq!(list["active"].as_array().map(Vec::len), Some(1), "{list}");

    // All of it on one connection: the limiter holds just this one.
    let deadline = Instant::now() + Duration::from_secs(3);
    loop {
        let (_, ready) = h2_send(&send, request(&base, "GET", "/readyz", full(None)))
            .await
            .unwrap();
        if ready["load"]["connections"] == 1 {
            break;
        }
        assert!(Instant::now() < deadline, "{ready}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[test]
fn streams_beyond_max_concurrent_streams_are_refused() {
    let limiter =
        LimiterProcess::start("http: { max_concurrent_streams: 4, body_read_timeout: 5s }\n");
    let mut raw = RawH2::connect(&limiter, &[], true);
    // The limiter announces its bound...
    let (_, settings) = raw.until(|f| f.kind == SETTINGS && f.flags & ACK == 0);
    let announced = settings
        .payload
        .chunks(6)
        .find(|p| u16::from_be_bytes([p[0], p[1]]) == SETTINGS_MAX_CONCURRENT_STREAMS)
        .map(|p| u32::from_be_bytes([p[2], p[3], p[4], p[5]]));
    assert_eq!(announced, Some(4), "{settings:?}");
    // ...and holds a peer that ignores it: four plays whose bodies never come hold four streams,
    // a fifth is refused.
    for stream in [1, 3, 5, 7] {
        raw.request(stream, "POST", "/v1/streams", false);
    }
    raw.request(9, "POST", "/v1/streams", false);
    let (before, reset) = raw.until(|f| f.kind == RST_STREAM);
    assert_eq!(reset.stream, 9, "{reset:?} after {before:?}");
    assert_eq!(error_code(&reset), REFUSED_STREAM);
    assert!(
        !before.iter().any(|f| f.kind == HEADERS),
        "the four held streams are not answered yet: {before:?}"
    );
}

#[tokio::test]
async fn a_client_that_keeps_to_the_bound_gets_every_answer() {
    let limiter = LimiterProcess::start("http: { max_concurrent_streams: 4 }\n");
    let base = limiter.base.clone();
    let (send, _conn) = h2_connect(&limiter).await;
    // Until the client has the limiter's SETTINGS, it knows no bound (RFC 9113 §6.5.2): one
    // answer first.
    let (status, _) = h2_send(&send, request(&base, "GET", "/healthz", full(None)))
        .await
        .unwrap();
    assert_eq!(status, StatusCode::OK);
    let plays = (0..40).map(|i| {
        let (send, base) = (send.clone(), base.clone());
        tokio::spawn(async move { h2_play(&send, &base, &format!("acct-bound-{i}"), "tv").await })
    });
    for play in futures::future::join_all(plays).await {
        let play = play.unwrap();
        assert_eq!(play["status"], 200, "{play}");
    }
}

#[test]
fn oversized_headers_are_answered_431_and_the_connection_stays() {
    let limiter = LimiterProcess::start("http: { max_header_bytes: 2048 }\n");
    let runtime = tokio::runtime::Runtime::new().unwrap();
    runtime.block_on(async {
        let api = h2_api(&limiter);
        let url = format!("{}/healthz", api.base);
        let big = api
            .http
            .get(&url)
            .header("x-padding", "a".repeat(4096))
            .send()
            .await
            .unwrap();
        assert_eq!(big.version(), Version::HTTP_2);
        assert_eq!(big.status(), StatusCode::REQUEST_HEADER_FIELDS_TOO_LARGE);
        let fits = api
            .http
            .get(&url)
            .header("x-padding", "a".repeat(1024))
            .send()
            .await
            .unwrap();
        assert_eq!(fits.status(), StatusCode::OK);
    });
}

#[test]
fn an_idle_connection_gets_a_goaway_after_the_idle_timeout() {
    let limiter =
        LimiterProcess::start("http: { idle_timeout: 1500ms, body_read_timeout: 3500ms }\n");
    // A connection that made one request, then none.
    let mut used = RawH2::connect(&limiter, &[], true);
    used.request(1, "GET", "/healthz", true);
    let (_, answered) = used.until(|f| f.stream == 1 && f.flags & END_STREAM != 0);
    // A connection whose one stream waits for its body: not idle while it does.
    let mut busy = RawH2::connect(&limiter, &[], true);
    busy.request(1, "POST", "/v1/streams", false);
    let opened = Instant::now();
    // Each read as its frames come, so that each frame's time is its arrival.
    let busy = std::thread::spawn(move || busy.until_closed());

    let frames = used.until_closed();
    let goaway = goaways(&frames)[0];
    let after = goaway.at - answered.at;
    assert!(
        after >= Duration::from_millis(1300) && after < Duration::from_millis(3000),
        "GOAWAY {after:?} after the last answer; the idle timeout is 1.5s"
    );
    assert_eq!(error_code(goaway), 0, "NO_ERROR");

    let frames = busy.join().unwrap();
    let timed_out = frames
        .iter()
        .find(|f| f.kind == DATA && f.stream == 1)
        .expect("the stream is answered");
    assert!(
        String::from_utf8_lossy(&timed_out.payload).contains("request_timeout"),
        "{timed_out:?}"
    );
    let goaway = goaways(&frames)[0];
    assert!(
        goaway.at > timed_out.at,
        "no GOAWAY while a stream is open: {frames:?}"
    );
    let after = goaway.at - timed_out.at;
    assert!(
        after >= Duration::from_millis(1300) && after < Duration::from_millis(3000),
        "GOAWAY {after:?} after the stream ended; the idle timeout is 1.5s"
    );
    assert!(opened.elapsed() >= Duration::from_millis(4800));
    let runtime = tokio::runtime::Runtime::new().unwrap();
    assert_eq!(runtime.block_on(timeouts(&limiter, "idle")), 2.0);
}

#[tokio::test]
async fn a_slow_body_is_answered_408_on_its_stream_and_the_connection_goes_on() {
    let limiter = LimiterProcess::start("http: { body_read_timeout: 600ms }\n");
    let base = limiter.base.clone();
    let (send, conn) = h2_connect(&limiter).await;
    let (tx, body) = channel_body();
    tx.unbounded_send(Bytes::from_static(b"{\"account_id\":"))
        .unwrap();
    let started = Instant::now();
    let sent = h2_send(&send, request(&base, "POST", "/v1/streams", body));
    let (status, answer) = tokio::time::timeout(Duration::from_secs(5), sent)
        .await
        .expect("answered within 5 s")
        .unwrap();
    let after = started.elapsed();
    assert_eq!(status, StatusCode::REQUEST_TIMEOUT, "{answer}");
    assert_eq!(answer["error"], "request_timeout");
    assert!(
        after >= Duration::from_millis(500) && after < Duration::from_millis(2000),
        "answered after {after:?}, the body deadline is 600ms"
    );
    drop(tx);
    // The other streams of the connection are not affected.
    let play = h2_play(&send, &base, "acct-after-slow", "tv").await;
    assert_eq!(play["status"], 200, "{play}");
    assert!(!conn.is_finished());
    assert_eq!(timeouts(&limiter, "body").await, 1.0);
}

#[test]
fn answers_held_back_by_a_window_of_zero_are_cut_off_at_the_write_deadline() {
    let limiter = LimiterProcess::start("http: { write_timeout: 500ms }\n");
    // A peer that grants no window: no answer body can be sent.
    let mut raw = RawH2::connect(&limiter, &[(SETTINGS_INITIAL_WINDOW_SIZE, 0)], true);
    raw.request(1, "GET", "/openapi.json", true);
    let (_, head) = raw.until(|f| f.kind == HEADERS && f.stream == 1);
    let frames = raw.until_closed();
    let after = head.at.elapsed();
    assert!(
        !frames.iter().any(|f| f.kind == DATA),
        "no window, no DATA: {frames:?}"
    );
    assert!(
        after >= Duration::from_millis(450) && after < Duration::from_millis(2500),
        "cut off {after:?} after the answer was ready; the write deadline is 500ms"
    );
    let runtime = tokio::runtime::Runtime::new().unwrap();
    assert_eq!(runtime.block_on(timeouts(&limiter, "write")), 1.0);
}

#[test]
fn a_peer_that_does_not_answer_pings_is_dropped() {
    let limiter = LimiterProcess::start(
        "http: { write_timeout: 500ms, idle_timeout: 1h, body_read_timeout: 1h }\n",
    );
    // Its one stream waits for a body that never comes: only the PING finds the peer gone.
    let mut raw = RawH2::connect(&limiter, &[], false);
    raw.request(1, "POST", "/v1/streams", false);
    let started = Instant::now();
    let frames = raw.until_closed();
    let after = started.elapsed();
    assert!(
        frames.iter().any(|f| f.kind == PING && f.flags & ACK == 0),
        "{frames:?}"
    );
    assert!(
        after >= Duration::from_millis(800) && after < Duration::from_millis(3000),
        "dropped after {after:?}: PING after 500ms of silence, unanswered for 500ms"
    );
    let runtime = tokio::runtime::Runtime::new().unwrap();
    assert_eq!(runtime.block_on(timeouts(&limiter, "write")), 1.0);
}

#[test]
fn a_connection_gets_a_goaway_at_its_maximum_age() {
    let limiter = LimiterProcess::start("http: { max_connection_age: 1s }\n");
    let mut raw = RawH2::connect(&limiter, &[], true);
    let opened = Instant::now();
    raw.request(1, "GET", "/healthz", true);
    let frames = raw.until_closed();
    let closed = opened.elapsed();
    let goaways = goaways(&frames);
    assert!(!goaways.is_empty(), "{frames:?}");
    let first = goaways[0].at - opened;
    // Jittered within ±10 %: 0.9 to 1.1 s, plus a busy machine's delay.
    assert!(
        first >= Duration::from_millis(850) && first < Duration::from_secs(3),
        "GOAWAY after {first:?}"
    );
    assert!(goaways.iter().all(|g| error_code(g) == 0), "{goaways:?}");
    assert!(closed < Duration::from_secs(4), "closed after {closed:?}");

    // A gateway opens its next connection and loses no request.
    let runtime = tokio::runtime::Runtime::new().unwrap();
    runtime.block_on(async {
        let api = h2_api(&limiter);
        let until = Instant::now() + Duration::from_millis(2500);
        let mut i = 0;
        while Instant::now() < until {
            let play = api.play_on(&format!("acct-age-{i}"), "tv").await;
            assert_eq!(play.status, StatusCode::OK, "{play:?}");
            i += 1;
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    });
}

#[tokio::test]
async fn the_in_flight_bound_sheds_h2_streams_as_it_sheds_http1_requests() {
    let redis = RedisServer::start();
    let config = redis_config(
        &[redis.url()],
        "failure_policy: closed\nhttp: { max_in_flight: 1 }\n",
    )
    .replace("timeout: 25ms", "timeout: 3s");
    let limiter = LimiterProcess::start(&config);
    let base = limiter.base.clone();
    let (send, _conn) = h2_connect(&limiter).await;
    let warm = h2_play(&send, &base, "acct-warm", "tv").await;
    assert_eq!(warm["status"], 200, "{warm}");
    redis.freeze(true);
    let holder = tokio::spawn({
        let (send, base) = (send.clone(), base.clone());
        async move { h2_play(&send, &base, "acct-holder", "tv").await }
    });
    tokio::time::sleep(Duration::from_millis(300)).await;
    let started = Instant::now();
    let shed = h2_play(&send, &base, "acct-shed", "tv").await;
    assert_eq!(shed["status"], 503, "{shed}");
    assert_eq!(shed["body"]["error"], "overloaded", "{shed}");
    assert!(started.elapsed() < Duration::from_secs(1), "shed at once");
    redis.freeze(false);
    assert_eq!(holder.await.unwrap()["status"], 200);
}

#[test]
fn http1_is_still_served_on_the_same_port() {
    let limiter = LimiterProcess::start("");
    let addr = limiter.base.trim_start_matches("http://");
    // A request head in pieces, the first one a byte: "P" could still be the preface.
    let mut stream = TcpStream::connect(addr).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    let body = json!({ "account_id": "acct-h1", "device_id": "tv" }).to_string();
    let head = format!(
        "POST /v1/streams HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    for piece in [&head[..1], &head[1..3], &head[3..]] {
        stream.write_all(piece.as_bytes()).unwrap();
        std::thread::sleep(Duration::from_millis(100));
    }
    let mut answer = String::new();
    stream.read_to_string(&mut answer).unwrap();
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    // And with a kept-alive client, next to an HTTP/2 one.
    let runtime = tokio::runtime::Runtime::new().unwrap();
    runtime.block_on(async {
        let h1 = limiter.client();
        let ok = h1.get("/healthz").await;
        assert_eq!(ok.version(), Version::HTTP_11);
        assert_eq!(ok.status(), StatusCode::OK);
        let play = h1.play_on("acct-h1-kept", "tv").await;
        assert_eq!(play.status, StatusCode::OK, "{play:?}");
        let h2 = h2_api(&limiter).get("/healthz").await;
        assert_eq!(h2.version(), Version::HTTP_2);
    });
}

#[tokio::test]
async fn with_h2c_off_a_prior_knowledge_client_is_refused() {
    let limiter = LimiterProcess::start("http: { h2c: false }\n");
    let sent = h2_api(&limiter)
        .http
        .get(format!("{}/healthz", limiter.base))
        .send()
        .await;
    assert!(sent.is_err(), "{sent:?}");
    let h1 = limiter.client().get("/healthz").await;
    assert_eq!(h1.status(), StatusCode::OK);
}

#[tokio::test]
async fn a_stop_sends_goaway_and_lets_the_streams_in_flight_finish() {
    let limiter = LimiterProcess::start("");
    let base = limiter.base.clone();
    let (send, conn) = h2_connect(&limiter).await;
    // A play whose body is still coming when the stop begins.
    let (tx, body) = channel_body();
    tx.unbounded_send(Bytes::from_static(b"{\"account_id\":\"acct-stop\","))
        .unwrap();
    let in_flight = tokio::spawn({
        let send = send.clone();
        let request = request(&base, "POST", "/v1/streams", body);
        async move { h2_send(&send, request).await }
    });
    tokio::time::sleep(Duration::from_millis(300)).await;
    limiter.send_sigterm();
    tokio::time::sleep(Duration::from_millis(300)).await;
    // No new stream after the GOAWAY...
    let late = h2_send(&send, request(&base, "GET", "/healthz", full(None))).await;
    assert!(late.is_err(), "{late:?}");
    // ...but the one in flight finishes.
    tx.unbounded_send(Bytes::from_static(b"\"device_id\":\"tv\"}"))
        .unwrap();
    drop(tx);
    let (status, answer) = in_flight.await.unwrap().unwrap();
    assert_eq!(status, StatusCode::OK, "{answer}");
    assert_eq!(answer["degraded"], false, "{answer}");
    tokio::time::timeout(Duration::from_secs(5), conn)
        .await
        .expect("the connection ends")
        .unwrap()
        .unwrap();
    let mut limiter = limiter;
    let deadline = Instant::now() + Duration::from_secs(5);
    let status = loop {
        if let Some(status) = limiter.exited() {
            break status;
        }
        assert!(Instant::now() < deadline, "still running");
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert!(status.success(), "{status}");
}

#[tokio::test]
async fn while_draining_an_answer_is_followed_by_a_goaway() {
    let limiter = LimiterProcess::try_start("", &[("SCREENLIMIT_DRAIN_PERIOD", "3s")]).unwrap();
    let base = limiter.base.clone();
    let (send, conn) = h2_connect(&limiter).await;
    let play = h2_play(&send, &base, "acct-drain", "tv").await;
    assert_eq!(play["status"], 200);
    limiter.send_sigterm();
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(!conn.is_finished(), "an idle connection is left alone");
    let play = h2_play(&send, &base, "acct-drain-2", "tv").await;
    assert_eq!(play["status"], 200, "still answered while draining: {play}");
    tokio::time::timeout(Duration::from_secs(2), conn)
        .await
        .expect("the connection goes away after that answer")
        .unwrap()
        .unwrap();
    // New connections are still served during the drain.
    let (send, _conn) = h2_connect(&limiter).await;
    let play = h2_play(&send, &base, "acct-drain-3", "tv").await;
    assert_eq!(play["status"], 200, "{play}");
}
