//! Invariant 4 ("a kicked device stays kicked") across the loss of a store's process, with real
//! processes on loopback: a force-stop's tombstone lives in the account's value on its shard, so
//! it survives what that value survives.
//!
//! - A Sentinel failover: the primary is SIGKILLed after its replica has the force-stop; the
//!   promoted replica answers the device `410 stream_revoked`.
//! - A Redis Cluster failover: the same, a primary of three killed, its replica promoted.
//! - A restart in place (a container restarted on its pod's volume): with an append-only file
//!   (`appendonly yes`, `appendfsync everysec`, what `spec.redis.persistence` turns on) the
//!   restarted server still holds the tombstone; without one it comes back empty, and the kicked
//!   device's next heartbeat re-registers it (the window README "Invariant 4 and the store"
//!   describes).

mod support;

use std::time::{Duration, Instant};

use reqwest::StatusCode;
use serde_json::json;
use support::cluster::RedisCluster;
use support::{Api, LimiterProcess, RedisServer, SECRET, redis_config, sentinels_knowing_replicas};

/// Tombstones live 2 TTLs: long enough here for any failover to finish inside them.
const LEASE: &str = "lease: { heartbeat_interval: 2s, ttl: 10s }\n";

/// Plays a TV and a phone on `account` (plan `standard`, 2 screens) and force-stops the TV; the
/// TV's heartbeat is then `stream_revoked`. Returns (tv, phone).
async fn play_two_and_force_stop_the_tv(api: &Api, account: &str) -> (String, String) {
    let mut streams = Vec::new();
    for device in ["tv", "phone"] {
        let reply = api
            .play(json!({"account_id": account, "device_id": device, "plan": "standard"}))
            .await;
        assert_eq!(reply.status, StatusCode::OK, "{reply:?}");
        assert_ne!(
            reply.body["degraded"], true,
            "decided by the store: {reply:?}"
        );
        streams.push(reply.stream_id());
    }
    let stopped = api.force_stop(account, &streams[0]).await;
    assert_eq!(stopped.status, StatusCode::OK, "{stopped:?}");
    assert_revoked(api, account, &streams[0]).await;
    (streams.remove(0), streams.remove(0))
}

async fn assert_revoked(api: &Api, account: &str, stream: &str) {
    let beat = api.heartbeat(account, stream).await;
    assert_eq!(
        (beat.status, beat.error()),
        (StatusCode::GONE, "stream_revoked"),
        "the kicked device is told to stop: {beat:?}"
    );
}

/// Waits until a play-start on a fresh account is decided by the store again (not degraded by
/// the failure policy); the time it took.
async fn until_the_store_decides(api: &Api, within: Duration) -> Duration {
    let start = Instant::now();
    for probe in 0.. {
        let reply = api.play_on(&format!("probe-{probe}"), "tv").await;
        if reply.status == StatusCode::OK && reply.body["degraded"] != true {
            return start.elapsed();
        }
        assert!(
            start.elapsed() < within,
            "the store never decided again: {reply:?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    unreachable!()
}

/// How far `server` is in its replication stream (`master_repl_offset`).
fn replication_offset(server: &RedisServer) -> u64 {
    server
        .command("INFO replication")
        .unwrap_or_default()
        .lines()
        .find_map(|l| l.strip_prefix("master_repl_offset:"))
        .and_then(|n| n.trim().parse().ok())
        .unwrap_or(0)
}

/// Waits until `replica` has everything `primary` wrote so far (the force-stop included; the
/// Sentinels' own writes after it do not count).
async fn wait_for_replication(primary: &RedisServer, replica: &RedisServer) {
    let written = replication_offset(primary);
    let deadline = Instant::now() + Duration::from_secs(10);
    while replication_offset(replica) < written {
        assert!(Instant::now() < deadline, "the replica never caught up");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_revocation_survives_a_sentinel_failover() {
    let mut primary = RedisServer::start();
    let replica = RedisServer::start_replica_of(primary.port);
    let (_sentinels, addresses) = sentinels_knowing_replicas(&[("shard-0", primary.port)]).await;
    let limiter = LimiterProcess::start(&format!(
        "store:\n  backend: redis\n  timeout: 50ms\n  circuit_probe_interval: 100ms\n  sentinel:\n    addresses: [{}]\n    masters: [shard-0]\n    poll_interval: 100ms\n\
         stream_id_secret: \"{SECRET}\"\n{LEASE}",
        addresses
    ));
    let api = limiter.client();
    let (tv, phone) = play_two_and_force_stop_the_tv(&api, "kicked-sentinel").await;
    wait_for_replication(&primary, &replica).await;

    primary.kill();
    let killed = Instant::now();
    let old = format!("127.0.0.1:{}", primary.port);
    loop {
        let fleet: serde_json::Value = api.get("/v1/fleet").await.json().await.unwrap();
        let endpoint = fleet["shards"][0]["endpoint"].as_str().unwrap_or("");
        if !endpoint.starts_with(&old) && !endpoint.starts_with("unknown") {
            break;
        }
        assert!(
            killed.elapsed() < Duration::from_secs(20),
            "the limiter never followed the failover: {fleet}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let back = until_the_store_decides(&api, Duration::from_secs(10)).await;
    println!(
        "sentinel failover: the store decides again {:?} after the kill",
        killed.elapsed().max(back)
    );
    // The promoted replica remembers the force-stop: still revoked, and it stays so.
    assert_revoked(&api, "kicked-sentinel", &tv).await;
    assert_eq!(
        api.heartbeat("kicked-sentinel", &phone).await.status,
        StatusCode::OK
    );
    assert_revoked(&api, "kicked-sentinel", &tv).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_revocation_survives_a_cluster_failover() {
    let mut cluster = RedisCluster::start(3, 1);
    let seeds: Vec<String> = cluster.urls().iter().map(|u| format!("\"{u}\"")).collect();
    let limiter = LimiterProcess::start(&format!(
        "store:\n  backend: redis\n  timeout: 100ms\n  circuit_probe_interval: 100ms\n  cluster:\n    nodes: [{}]\n    refresh_interval: 1s\n\
         stream_id_secret: \"{SECRET}\"\n{LEASE}",
        seeds.join(", ")
    ));
    let api = limiter.client();
    let account = "kicked-cluster";
    let victim = cluster.owner_of(cluster.slot_of(&format!("sl:{{{account}}}")));
    let (tv, phone) = play_two_and_force_stop_the_tv(&api, account).await;
    let replica = cluster.replica_of(victim);
    cluster.wait_until(Duration::from_secs(10), "replica caught up", |c| {
        c.replication_offset(replica) >= c.replication_offset(victim)
    });

    cluster.kill(victim);
    let killed = Instant::now();
    cluster.wait_until(Duration::from_secs(15), "the replica promoted", |c| {
        !c.primaries().contains(&victim)
    });
    // Heartbeats of the phone until one is decided by the promoted replica again.
    loop {
        let beat = api.heartbeat(account, &phone).await;
        if beat.status == StatusCode::OK && beat.body["degraded"] != true {
            break;
        }
        assert!(
            killed.elapsed() < Duration::from_secs(20),
            "the account was never served again: {beat:?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    println!(
        "cluster failover: the account is served again {:?} after the kill",
        killed.elapsed()
    );
    assert_revoked(&api, account, &tv).await;
}

const AOF: [&str; 4] = ["--appendonly", "yes", "--appendfsync", "everysec"];

/// The restart in place: what the kicked device hears after the shard's process is killed and
/// started again on its own directory, with `persistence` arguments both times.
async fn heartbeat_after_a_restart_in_place(persistence: &[&str]) -> (StatusCode, String) {
    let mut redis = RedisServer::start_with(persistence);
    let limiter = LimiterProcess::start(&redis_config(&[redis.url()], LEASE));
    let api = limiter.client();
    let (tv, phone) = play_two_and_force_stop_the_tv(&api, "kicked-restart").await;

    redis.crash_and_restart_with(persistence);
    let back = until_the_store_decides(&api, Duration::from_secs(10)).await;
    println!("restart in place ({persistence:?}): the store decides again after {back:?}");
    let beat = api.heartbeat("kicked-restart", &tv).await;
    assert_eq!(
        api.heartbeat("kicked-restart", &phone).await.status,
        StatusCode::OK
    );
    (beat.status, beat.error().to_owned())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_revocation_survives_a_restart_with_an_append_only_file() {
    assert_eq!(
        heartbeat_after_a_restart_in_place(&AOF).await,
        (StatusCode::GONE, "stream_revoked".to_owned()),
        "the append-only file kept the tombstone"
    );
}

/// The window the README describes: without persistence a restarted shard is empty, and the
/// kicked device's next heartbeat re-registers it (a lost lease is given back).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_persistence_a_restarted_shard_forgets_the_revocation() {
    assert_eq!(
        heartbeat_after_a_restart_in_place(&[]).await,
        (StatusCode::OK, String::new()),
        "an empty shard re-registers the kicked device"
    );
}
