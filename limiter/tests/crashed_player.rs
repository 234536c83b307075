//! Never leak, measured end to end: a player heartbeats, then dies without a word; another device
//! polls for the slot. The slot must come free one TTL after the last heartbeat, on both stores,
//! with no background job involved.

mod support;

use std::time::{Duration, Instant};

use reqwest::StatusCode;
use support::{Api, LimiterProcess, RedisServer, redis_config};

const LEASES: &str = "lease: { heartbeat_interval: 200ms, ttl: 600ms }\n";
const TTL: Duration = Duration::from_millis(600);

/// Returns the time from the crashed player's last heartbeat to the slot being taken by another.
async fn time_to_reuse_a_crashed_players_slot(api: &Api) -> Duration {
    let tv = api.play_on("family", "tv").await.stream_id();
    for _ in 0..3 {
        tokio::time::sleep(Duration::from_millis(200)).await;
        assert_eq!(api.heartbeat("family", &tv).await.status, StatusCode::OK);
    }
    let last_heartbeat = Instant::now(); // then the player crashes
    loop {
        let reply = api.play_on("family", "phone").await;
        match reply.status {
            StatusCode::OK => return last_heartbeat.elapsed(),
            StatusCode::CONFLICT => {}
            other => panic!("unexpected {other}: {reply:?}"),
        }
        assert!(
            last_heartbeat.elapsed() < TTL * 4,
            "the crashed player's slot leaked"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

fn check(took: Duration, store: &str) {
    println!(
        "crashed player ({store}): slot reusable {took:?} after its last heartbeat (TTL {TTL:?})"
    );
    assert!(
        took >= TTL - Duration::from_millis(50),
        "freed before its lease ran out: {took:?}"
    );
    assert!(
        took <= TTL + Duration::from_millis(250),
        "freed late: {took:?}"
    );
}

#[tokio::test]
async fn a_crashed_players_slot_frees_one_ttl_after_its_last_heartbeat_on_redis() {
    let redis = RedisServer::start();
    let limiter = LimiterProcess::start(&redis_config(&[redis.url()], LEASES));
    check(
        time_to_reuse_a_crashed_players_slot(&limiter.client()).await,
        "redis",
    );
}

#[tokio::test]
async fn a_crashed_players_slot_frees_one_ttl_after_its_last_heartbeat_on_the_embedded_store() {
    let limiter = LimiterProcess::start(LEASES);
    check(
        time_to_reuse_a_crashed_players_slot(&limiter.client()).await,
        "memory",
    );
}
