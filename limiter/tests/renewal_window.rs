//! Heartbeats wait for company (`store.renewal_window`), against the real binary and a real
//! Redis: the renewals of many streams of one shard inside one window go as one call (one
//! `SL.RENEW` on the native path, one round trip of `GETEX`es on Lua), a renewal that waited
//! still renews its lease before it ends, a window whose batch misses its deadline is answered by
//! the failure policy (never a 5xx), and a play-start never waits behind a window.

mod support;

use std::time::{Duration, Instant};

use futures::future::join_all;
use reqwest::StatusCode;
use support::{Api, LimiterProcess, RedisServer, redis_config};

/// A config with `renewal_window` (and `lease`) set on the limiter of `redis`.
fn config(redis: &RedisServer, window: &str, lease: &str) -> String {
    redis_config(&[redis.url()], lease).replace(
        "  timeout: 25ms\n",
        &format!("  timeout: 25ms\n  renewal_window: {window}\n"),
    )
}

async fn metric(api: &Api, line_start: &str) -> f64 {
    let text = api.get("/metrics").await.text().await.unwrap();
    text.lines()
        .find_map(|line| line.strip_prefix(line_start))
        .and_then(|value| value.trim().parse().ok())
        .unwrap_or_else(|| panic!("no {line_start} in the metrics"))
}

/// `count` live streams, one per account: (account, stream id).
async fn streams(api: &Api, count: usize) -> Vec<(String, String)> {
    let mut streams = Vec::new();
    for i in 0..count {
        let account = format!("window-{i}");
        let reply = api.play_on(&account, "tv").await;
        assert_eq!(reply.status, StatusCode::OK, "{reply:?}");
        assert_eq!(reply.body["degraded"], false, "{reply:?}");
        streams.push((account, reply.stream_id()));
    }
    streams
}

/// Every stream's heartbeat at once; each answer's status and whether it was degraded.
async fn heartbeat_all(api: &Api, streams: &[(String, String)]) -> Vec<(StatusCode, bool)> {
    let beats = streams.iter().map(|(account, id)| async move {
        let reply = api.heartbeat(account, id).await;
        (
            reply.status,
            reply.body["degraded"].as_bool().unwrap_or(false),
        )
    });
    join_all(beats).await
}

/// Every stream's heartbeat, one every `gap` (none waiting for another's answer).
async fn heartbeat_spread(
    api: &Api,
    streams: &[(String, String)],
    gap: Duration,
) -> Vec<(StatusCode, bool)> {
    let mut beats = Vec::new();
    for (account, id) in streams {
        let (api, account, id) = (api.clone(), account.clone(), id.clone());
        beats.push(tokio::spawn(async move {
            let reply = api.heartbeat(&account, &id).await;
            (
                reply.status,
                reply.body["degraded"].as_bool().unwrap_or(false),
            )
        }));
        tokio::time::sleep(gap).await;
    }
    let mut answers = Vec::new();
    for beat in beats {
        answers.push(beat.await.unwrap());
    }
    answers
}

/// 20 heartbeats 5 ms apart, inside one window of 300 ms: without the window each would find
/// the shard idle and go alone.
async fn renewals_go_as_one_call(redis: RedisServer, native: bool) {
    let limiter = LimiterProcess::start(&config(&redis, "300ms", ""));
    let api = limiter.client();
    let streams = streams(&api, 20).await;
    let batches = "screenlimit_store_batches_total{shard=\"0\"}";
    let before = metric(&api, batches).await;
    redis.command("CONFIG RESETSTAT").unwrap();
    let answers = heartbeat_spread(&api, &streams, Duration::from_millis(5)).await;
    assert!(
        answers.iter().all(|&a| a == (StatusCode::OK, false)),
        "every live lease renewed by the store: {answers:?}"
    );
    let sent = metric(&api, batches).await - before;
    assert!(sent <= 2.0, "20 renewals in one window, {sent} batches");
    match native {
        true => {
            assert_eq!(redis.calls("getex"), 0, "no renewal went alone");
            let renews = redis.calls("sl.renew");
            assert!(
                (1..=2).contains(&renews),
                "one SL.RENEW for the window: {renews}"
            );
        }
        false => assert_eq!(redis.calls("getex"), 20, "a GETEX a renewal"),
    }
}

#[tokio::test]
async fn the_renewals_of_one_window_go_as_one_sl_renew() {
    renewals_go_as_one_call(RedisServer::start_with_module(&[]), true).await;
}

#[tokio::test]
async fn on_lua_the_renewals_of_one_window_go_as_one_round_trip() {
    renewals_go_as_one_call(RedisServer::start(), false).await;
}

/// A renewal that waited a whole window still renews its lease before it ends: with a short lease
/// (400 ms, a heartbeat every 200 ms) and a window of 50 ms, streams heartbeating on time live
/// for many lease lives, every heartbeat renewed by the store and no lease key expired (a lease
/// that had ended would be found gone by its next renewal, which counts as an expired key).
#[tokio::test]
async fn a_renewal_that_waited_its_window_renews_before_the_lease_ends() {
    let redis = RedisServer::start();
    let lease = "lease: { heartbeat_interval: 200ms, ttl: 400ms }\n";
    let limiter = LimiterProcess::start(&config(&redis, "50ms", lease));
    let api = limiter.client();
    let streams = streams(&api, 3).await;
    let started = Instant::now();
    while started.elapsed() < Duration::from_secs(3) {
        let answers = heartbeat_all(&api, &streams).await;
        assert!(
            answers.iter().all(|&a| a == (StatusCode::OK, false)),
            "renewed after {:?}: {answers:?}",
            started.elapsed()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(
        expired_keys(&redis),
        0,
        "no lease ended between its renewals"
    );
    // And the count does tell: left alone, the three leases end (Redis's active expiry).
    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert!(
        expired_keys(&redis) >= 3,
        "the leases ended once left alone"
    );
}

/// Keys that have expired on the server (`INFO stats`): active and lazy expiry both count.
fn expired_keys(redis: &RedisServer) -> u64 {
    let stats = redis.command("INFO stats").unwrap_or_default();
    stats
        .split("expired_keys:")
        .nth(1)
        .and_then(|rest| rest.split("\r\n").next())
        .and_then(|n| n.trim().parse().ok())
        .expect("INFO stats has expired_keys")
}

/// A window whose batch cannot be answered (Redis frozen) is answered by the failure policy after
/// the window and the store deadline: `200` degraded under `open`, never a 5xx, never longer.
#[tokio::test]
async fn a_window_past_its_deadline_is_answered_by_the_failure_policy() {
    let redis = RedisServer::start();
    let limiter = LimiterProcess::start(&config(&redis, "100ms", ""));
    let api = limiter.client();
    let streams = streams(&api, 5).await;
    redis.freeze(true);
    let started = Instant::now();
    let answers = heartbeat_all(&api, &streams).await;
    let took = started.elapsed();
    redis.freeze(false);
    assert!(
        answers.iter().all(|&a| a == (StatusCode::OK, true)),
        "degraded by the policy: {answers:?}"
    );
    assert!(
        took >= Duration::from_millis(100),
        "the renewals waited their window: {took:?}"
    );
}

/// A play-start goes to the shard's queue as it comes: with renewals held in a long window, a
/// play-start sent after them is answered before any of them.
#[tokio::test]
async fn a_play_start_never_waits_behind_a_heartbeat_window() {
    let redis = RedisServer::start();
    let limiter = LimiterProcess::start(&config(&redis, "1s", ""));
    let api = limiter.client();
    let streams = streams(&api, 5).await;
    let beats = tokio::spawn({
        let (api, streams) = (api.clone(), streams.clone());
        async move {
            let answers = heartbeat_all(&api, &streams).await;
            (answers, Instant::now())
        }
    });
    tokio::time::sleep(Duration::from_millis(100)).await;
    let play = api.play_on("window-new", "tv").await;
    let played = Instant::now();
    assert_eq!(play.status, StatusCode::OK, "{play:?}");
    assert_eq!(
        play.body["degraded"], false,
        "decided by the store: {play:?}"
    );
    let (answers, renewed) = beats.await.unwrap();
    assert!(
        answers.iter().all(|&a| a == (StatusCode::OK, false)),
        "{answers:?}"
    );
    assert!(
        played < renewed,
        "the play-start was answered while the renewals still waited for their window"
    );
}
