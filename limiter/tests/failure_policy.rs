//! The soft gate, tested for real: the `redis-server` is SIGKILLed mid-run, each failure policy
//! answers within the store deadline, and after a restart (empty store) the caps come back by
//! themselves within one heartbeat interval.

mod support;

use std::time::{Duration, Instant};

use reqwest::StatusCode;
use support::{Api, LimiterProcess, RedisServer, redis_config};

const HEARTBEAT: Duration = Duration::from_secs(1);

fn limiter_on(redis: &RedisServer, policy: &str) -> LimiterProcess {
    LimiterProcess::start(&redis_config(
        &[redis.url()],
        &format!("failure_policy: {policy}\nlease: {{ heartbeat_interval: 1s, ttl: 3s }}\n"),
    ))
}

fn median(mut samples: Vec<Duration>) -> Duration {
    samples.sort();
    samples[samples.len() / 2]
}

/// Times `count` play-starts on fresh accounts; returns their latencies.
async fn timed_plays(api: &Api, tag: &str, count: usize, expect: StatusCode) -> Vec<Duration> {
    let mut latencies = Vec::with_capacity(count);
    for i in 0..count {
        let started = Instant::now();
        let reply = api.play_on(&format!("{tag}-{i}"), "tv").await;
        latencies.push(started.elapsed());
        assert_eq!(reply.status, expect, "{reply:?}");
    }
    latencies
}

/// Polls until a heartbeat is answered by the store again; returns how long that took.
async fn wait_for_store(api: &Api, account: &str, stream: &str, since: Instant) -> Duration {
    loop {
        let reply = api.heartbeat(account, stream).await;
        let answered_by_store = match reply.status {
            StatusCode::OK => reply.body["degraded"] == false,
            status => status != StatusCode::SERVICE_UNAVAILABLE,
        };
        if answered_by_store {
            return since.elapsed();
        }
        assert!(
            since.elapsed() < Duration::from_secs(10),
            "the store never came back: {reply:?}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test]
async fn fail_open_allows_within_the_deadline_and_caps_return_after_recovery() {
    let mut redis = RedisServer::start();
    let limiter = limiter_on(&redis, "open");
    let api = limiter.client();
    let tv = api.play_on("home", "tv").await;
    assert_eq!(
        (tv.status, tv.body["degraded"].clone()),
        (StatusCode::OK, false.into())
    );
    let tv = tv.stream_id();

    redis.kill();
    let started = Instant::now();
    let phone = api.play_on("home", "phone").await;
    let first = started.elapsed();
    assert_eq!(
        phone.status,
        StatusCode::OK,
        "a paying user is never blocked by our store: {phone:?}"
    );
    assert_eq!(phone.body["degraded"], true);
    assert!(
        phone.body["active_count"].is_null(),
        "the count is unknown while the store is down"
    );
    let phone = phone.stream_id();
    let open_circuit = timed_plays(&api, "outage", 30, StatusCode::OK).await;
    let beat = api.heartbeat("home", &tv).await;
    assert_eq!(
        (beat.status, beat.body["degraded"].clone()),
        (StatusCode::OK, true.into())
    );
    println!(
        "fail-open: first play after the kill {first:?}; next 30 plays median {:?}, max {:?} (deadline 25ms)",
        median(open_circuit.clone()),
        open_circuit.iter().max().unwrap()
    );
    assert!(
        first < Duration::from_millis(500),
        "bounded by the store deadline, took {first:?}"
    );
    assert!(
        median(open_circuit) < Duration::from_millis(25),
        "an open circuit does not pay the deadline"
    );

    let ready = api.get("/readyz").await;
    assert_eq!(
        ready.status(),
        StatusCode::OK,
        "fail-open instances stay in service"
    );
    let ready: serde_json::Value = ready.json().await.unwrap();
    assert_eq!(ready["shards"][0]["reachable"], false);
    let metrics = api.get("/metrics").await.text().await.unwrap();
    assert!(
        metrics.contains("screenlimit_store_circuit_open{shard=\"0\"} 1"),
        "{metrics}"
    );
    assert!(metrics.contains("screenlimit_decisions_total{decision=\"degraded\"}"));
    assert!(metrics.contains("screenlimit_store_errors_total{kind=\"circuit_open\",shard=\"0\"}"));
    let list = api.list("home").await;
    assert_eq!(
        (list.status, list.error()),
        (StatusCode::SERVICE_UNAVAILABLE, "store_unavailable")
    );

    // Restart empty, as after a crash. Clients keep heartbeating; the store must be back in use
    // well within one heartbeat interval, and the next round of heartbeats re-applies the cap.
    redis.restart();
    let restarted = Instant::now();
    let recovered = wait_for_store(&api, "home", &tv, restarted).await;
    println!("recovery: store answering again {recovered:?} after the restart");
    assert!(
        recovered < HEARTBEAT,
        "back within one heartbeat interval, took {recovered:?}"
    );
    let tv_beat = api.heartbeat("home", &tv).await;
    assert_eq!(
        tv_beat.status,
        StatusCode::OK,
        "the tv re-registered its lost lease"
    );
    let phone_beat = api.heartbeat("home", &phone).await;
    assert_eq!(
        phone_beat.status,
        StatusCode::GONE,
        "the over-cap stream is sent back: {phone_beat:?}"
    );
    assert_eq!(phone_beat.error(), "lease_expired");
    let retry = api.play_on("home", "phone").await;
    assert_eq!(retry.status, StatusCode::CONFLICT, "the cap holds again");
    assert!(restarted.elapsed() < HEARTBEAT + Duration::from_millis(500));
}

#[tokio::test]
async fn fail_closed_answers_503_and_recovers() {
    let mut redis = RedisServer::start();
    let limiter = limiter_on(&redis, "closed");
    let api = limiter.client();
    let tv = api.play_on("home", "tv").await.stream_id();

    redis.kill();
    let started = Instant::now();
    let refused = api.play_on("home", "phone").await;
    let took = started.elapsed();
    assert_eq!(
        (refused.status, refused.error()),
        (StatusCode::SERVICE_UNAVAILABLE, "store_unavailable")
    );
    assert!(took < Duration::from_millis(500), "{took:?}");
    let beat = api.heartbeat("home", &tv).await;
    assert_eq!(beat.status, StatusCode::SERVICE_UNAVAILABLE);
    let retry_after = api
        .http
        .post(format!("{}/v1/streams", api.base))
        .json(&serde_json::json!({"account_id": "x", "device_id": "y"}))
        .send()
        .await
        .unwrap();
    assert_eq!(retry_after.headers()["retry-after"], "1");
    assert_eq!(
        api.get("/readyz").await.status(),
        StatusCode::SERVICE_UNAVAILABLE
    );

    redis.restart();
    let restarted = Instant::now();
    let recovered = wait_for_store(&api, "home", &tv, restarted).await;
    assert!(recovered < HEARTBEAT, "{recovered:?}");
    assert_eq!(api.get("/readyz").await.status(), StatusCode::OK);
}

#[tokio::test]
async fn local_cap_enforces_the_limit_on_the_instance_while_the_store_is_down() {
    let mut redis = RedisServer::start();
    let limiter = limiter_on(&redis, "local_cap");
    let api = limiter.client();

    redis.kill();
    let tv = api.play_on("home", "tv").await;
    assert_eq!(
        (tv.status, tv.body["degraded"].clone()),
        (StatusCode::OK, true.into())
    );
    assert_eq!(tv.body["active_count"], 1);
    let phone = api.play_on("home", "phone").await;
    assert_eq!(
        phone.status,
        StatusCode::CONFLICT,
        "the local cap still says no: {phone:?}"
    );
    let beat = api.heartbeat("home", &tv.stream_id()).await;
    assert_eq!(
        (beat.status, beat.body["degraded"].clone()),
        (StatusCode::OK, true.into())
    );
    assert_eq!(
        api.stop("home", &tv.stream_id()).await.status,
        StatusCode::OK
    );
    assert_eq!(
        api.play_on("home", "phone").await.status,
        StatusCode::OK,
        "a local stop frees the local slot"
    );
}

#[tokio::test]
async fn a_hanging_store_costs_one_deadline_then_the_circuit_fails_fast() {
    let redis = RedisServer::start();
    let limiter = limiter_on(&redis, "open");
    let api = limiter.client();
    let tv = api.play_on("home", "tv").await.stream_id();

    redis.freeze(true);
    // The circuit opens after 3 consecutive failures; each of those waits out the 25ms deadline.
    let at_deadline = timed_plays(&api, "hang", 3, StatusCode::OK).await;
    let fast = timed_plays(&api, "hang-open", 20, StatusCode::OK).await;
    println!(
        "hanging store: plays at the deadline {at_deadline:?}; with the circuit open median {:?}",
        median(fast.clone())
    );
    for took in &at_deadline {
        assert!(
            *took >= Duration::from_millis(20),
            "waited for the deadline: {took:?}"
        );
        assert!(
            *took < Duration::from_millis(400),
            "but not much longer: {took:?}"
        );
    }
    assert!(
        median(fast) < Duration::from_millis(20),
        "the open circuit skips the deadline"
    );

    redis.freeze(false);
    let thawed = Instant::now();
    let recovered = wait_for_store(&api, "home", &tv, thawed).await;
    assert!(recovered < HEARTBEAT, "{recovered:?}");
    assert_eq!(
        api.play_on("home", "phone").await.status,
        StatusCode::CONFLICT,
        "the cap holds again"
    );
}

#[tokio::test]
async fn a_store_outage_logs_its_state_changes_not_a_line_per_request() {
    for (policy, answer) in [
        ("open", StatusCode::OK),
        ("closed", StatusCode::SERVICE_UNAVAILABLE),
    ] {
        let mut redis = RedisServer::start();
        // At the product's default log level.
        let config = redis_config(&[redis.url()], &format!("failure_policy: {policy}\n"));
        let limiter = LimiterProcess::try_start(&config, &[("RUST_LOG", "info")])
            .unwrap_or_else(|said| panic!("{said}"));
        let api = limiter.client();
        assert_eq!(api.play_on("quiet-0", "tv").await.status, StatusCode::OK);
        let at_start = limiter.log().lines().count();
        redis.kill();
        let plays = 200;
        timed_plays(&api, policy, plays, answer).await;
        let log = limiter.log();
        let lines = log.lines().count() - at_start;
        println!("{policy}: {plays} plays during the outage logged {lines} lines:\n{log}");
        assert!(
            lines < 10,
            "{policy}: {plays} plays answered by the failure policy must not log a line each: {lines} lines"
        );
        assert!(
            log.contains("store circuit opened"),
            "the state change is logged: {log}"
        );
    }
}
