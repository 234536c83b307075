//! A full, evicting or read-only Redis must never silently turn the gate off, tested on real
//! `redis-server`s: an evicting `maxmemory-policy` and a replica named as a shard stop the start
//! (exit 2, the setting named) unless acknowledged; a shard filled to its `maxmemory` refuses new
//! plays (the failure policy decides: degraded under `open`, 503 under `closed`), never admits
//! one past the cap, still frees slots on stops and force-stops, and decides again once memory
//! frees; a primary demoted under a running limiter opens its circuit and `/readyz` says so; a
//! primary without a replica in sync (`NOREPLICAS`) is decided by the policy until one is back.
//! Each change is one log line, never one per request.

mod support;

use std::time::{Duration, Instant};

use reqwest::StatusCode;
use serde_json::Value;
use support::{LimiterProcess, RedisServer, SentinelServer, redis_config};

const PLANS: &str = "plans:\n  basic: 1\ndefault_plan: basic\n";

fn config(redis: &RedisServer, extra: &str) -> String {
    redis_config(
        &[redis.url()],
        &format!("{PLANS}lease: {{ heartbeat_interval: 2s, ttl: 6s }}\n{extra}"),
    )
    // A debug build on a loaded machine: room for the store's answers.
    .replace("timeout: 25ms", "timeout: 250ms")
}

fn refused(config: &str) -> String {
    match LimiterProcess::try_start(config, &[]) {
        Ok(_) => panic!("the limiter started on:\n{config}"),
        Err(said) => said,
    }
}

fn info_field(redis: &RedisServer, name: &str) -> u64 {
    let info = redis.command("INFO memory").expect("INFO memory");
    info.lines()
        .find_map(|line| line.trim_end().strip_prefix(&format!("{name}:")))
        .and_then(|value| value.parse().ok())
        .unwrap_or_else(|| panic!("no {name} in {info}"))
}

fn count(log: &str, what: &str) -> usize {
    log.lines().filter(|line| line.contains(what)).count()
}

async fn metrics(limiter: &LimiterProcess) -> String {
    limiter.client().get("/metrics").await.text().await.unwrap()
}

#[tokio::test]
async fn an_evicting_policy_stops_the_start_unless_the_config_accepts_it() {
    let redis = RedisServer::start_with(&["--maxmemory-policy", "volatile-lru"]);
    let said = refused(&config(&redis, ""));
    assert!(
        said.starts_with("exit status: 2")
            && said.contains("`store.allow_eviction`")
            && said.contains("volatile-lru")
            && said.contains(&format!("127.0.0.1:{}", redis.port)),
        "exit 2 naming the shard, its policy and the setting; got: {said}"
    );

    let limiter = LimiterProcess::start(&config(&redis, "").replace(
        "circuit_probe_interval",
        "allow_eviction: true\n  circuit_probe_interval",
    ));
    assert_eq!(
        limiter.client().play_on("acct-e", "tv").await.status,
        StatusCode::OK
    );
    assert_eq!(
        count(&limiter.log(), "accepted by store.allow_eviction"),
        1,
        "one warning at start: {}",
        limiter.log()
    );
    let metrics = metrics(&limiter).await;
    assert!(
        metrics.contains("screenlimit_store_evicting_policy{shard=\"0\"} 1"),
        "{metrics}"
    );
}

#[tokio::test]
async fn a_replica_named_as_a_shard_stops_the_start() {
    let primary = RedisServer::start();
    let replica = RedisServer::start_replica_of(primary.port);
    let said = refused(&config(&replica, ""));
    assert!(
        said.starts_with("exit status: 2")
            && said.contains("`store.redis_shards`")
            && said.contains("replica")
            && said.contains(&format!("127.0.0.1:{}", primary.port)),
        "exit 2 naming the field and whose replica it is; got: {said}"
    );
}

/// Plays new accounts (one device each) until the shard refuses one; returns the accounts the
/// store admitted with their stream ids, and the first refused play's answer.
async fn fill(limiter: &LimiterProcess, tag: &str) -> (Vec<(String, String)>, Value) {
    let api = limiter.client();
    let mut admitted = Vec::new();
    for round in 0..200 {
        let plays = (0..25).map(|i| {
            let api = api.clone();
            let account = format!("{tag}-{round}-{i}");
            async move {
                let reply = api.play_on(&account, "tv").await;
                (account, reply)
            }
        });
        let mut refused = None;
        for (account, reply) in futures::future::join_all(plays).await {
            match (reply.status, reply.body["degraded"].as_bool()) {
                (StatusCode::OK, Some(false)) => admitted.push((account, reply.stream_id())),
                _ => refused = refused.or(Some(reply.body)),
            }
        }
        if let Some(body) = refused {
            return (admitted, body);
        }
    }
    panic!("the shard never filled up");
}

#[tokio::test]
async fn a_full_shard_refuses_new_state_but_still_frees_slots() {
    let redis = RedisServer::start_with(&["--maxmemory-policy", "noeviction"]);
    a_full_shard(redis, "lua").await;
}

/// The same on the module's native commands: they refuse and allow what the scripts do.
#[tokio::test]
async fn a_full_shard_on_native_commands_refuses_new_state_but_still_frees_slots() {
    let redis = RedisServer::start_with_module(&["--maxmemory-policy", "noeviction"]);
    a_full_shard(redis, "native").await;
}

async fn a_full_shard(redis: RedisServer, path: &str) {
    let limiter = LimiterProcess::start(&config(&redis, "failure_policy: open\n"));
    let api = limiter.client();
    let fleet: Value = api.get("/v1/fleet").await.json().await.unwrap();
    assert_eq!(fleet["shards"][0]["path"], path, "{fleet}");
    // Room for a few hundred plays beyond what the limiter itself brings: its scripts (loaded
    // by the first play) and its connections' buffers.
    let warm_up = api.play_on("full-warm-up", "tv").await;
    assert_eq!(warm_up.body["degraded"], false, "{warm_up:?}");
    let limit = info_field(&redis, "used_memory") + 400 * 1024;
    redis
        .command(&format!("CONFIG SET maxmemory {limit}"))
        .unwrap();

    let (admitted, first_refused) = fill(&limiter, "full").await;
    assert!(
        admitted.len() > 100,
        "{} plays fit, then {first_refused}",
        admitted.len()
    );
    assert_eq!(first_refused["degraded"], true, "{first_refused}");
    // The scripts stop at maxmemory instead of writing past it (they wrote 2.5 times over).
    let used = info_field(&redis, "used_memory");
    assert!(
        used < limit + limit / 10,
        "used_memory {used} went past maxmemory {limit}"
    );
    // Full by a margin: a filled shard hovers at its limit, and the client buffers Redis
    // counts in `used_memory` (tens of kB as connections come and go) can let one write through
    // now and then. Below what it holds, the shard is full for every write that follows; the
    // limiter sees the new limit with its next memory sample (every 5 s).
    let limit = used - 128 * 1024;
    redis
        .command(&format!("CONFIG SET maxmemory {limit}"))
        .unwrap();
    let sampled = format!("screenlimit_store_maxmemory_bytes{{shard=\"0\"}} {limit}");
    let deadline = Instant::now() + Duration::from_secs(15);
    while !metrics(&limiter).await.contains(&sampled) {
        assert!(Instant::now() < deadline, "the new maxmemory never sampled");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }

    // Full: a second device on a one-stream plan is never admitted (degraded, or denied when
    // the shard dipped below its limit for a moment); a new play is degraded.
    for (account, _) in admitted.iter().take(20) {
        let reply = api.play_on(account, "phone").await;
        assert!(
            reply.status == StatusCode::CONFLICT
                || (reply.status == StatusCode::OK && reply.body["degraded"] == true),
            "{account}'s second device: {reply:?}"
        );
    }
    let reply = api.play_on("full-new", "tv").await;
    assert_eq!(reply.body["degraded"], true, "{reply:?}");
    // A live lease is renewed (the native renewal adds no memory), a stop and a force-stop
    // free their slots.
    let (hb_account, hb_stream) = &admitted[0];
    let renewed = api.heartbeat(hb_account, hb_stream).await;
    assert_eq!(
        (renewed.status, renewed.body["degraded"].clone()),
        (StatusCode::OK, Value::Bool(false)),
        "{renewed:?}"
    );
    let (stopped, stream) = &admitted[1];
    let reply = api.stop(stopped, stream).await;
    assert_eq!(reply.status, StatusCode::OK, "{reply:?}");
    assert_ne!(reply.body["degraded"], true, "{reply:?}");
    let (kicked, stream) = &admitted[2];
    let reply = api.force_stop(kicked, stream).await;
    assert_eq!(reply.status, StatusCode::OK, "{reply:?}");
    let listed = api.list(stopped).await;
    assert_eq!(listed.body["active"].as_array().map(Vec::len), Some(0));

    let metrics = metrics(&limiter).await;
    assert!(
        metrics.contains("screenlimit_store_errors_total{kind=\"oom\",shard=\"0\"}")
            && metrics.contains(&format!(
                "screenlimit_store_maxmemory_bytes{{shard=\"0\"}} {limit}"
            ))
            && metrics.contains("screenlimit_store_out_of_memory{shard=\"0\"} 1"),
        "{metrics}"
    );
    let fleet: Value = api.get("/v1/fleet").await.json().await.unwrap();
    let shard = &fleet["shards"][0];
    assert_eq!(shard["memory"]["max_bytes"], limit, "{fleet}");
    assert_eq!(shard["memory"]["policy"], "noeviction", "{fleet}");
    assert_eq!(shard["out_of_memory"], true, "{fleet}");

    // The same full shard under `closed`: refused, 503.
    let closed = LimiterProcess::start(&config(&redis, "failure_policy: closed\n"));
    let reply = closed.client().play_on("closed-new", "tv").await;
    assert_eq!(reply.status, StatusCode::SERVICE_UNAVAILABLE, "{reply:?}");

    // Memory freed: plays are decided by the store again, the cap with them.
    redis
        .command(&format!("CONFIG SET maxmemory {}", limit * 4))
        .unwrap();
    let reply = api.play_on("after-free", "tv").await;
    assert_eq!(reply.body["degraded"], false, "{reply:?}");
    let reply = api.play_on(&admitted[3].0, "phone").await;
    assert_eq!(
        reply.status,
        StatusCode::CONFLICT,
        "the cap is back: {reply:?}"
    );

    // One line when the shard filled, one when it took state again: none per request.
    let deadline = Instant::now() + Duration::from_secs(15);
    while count(&limiter.log(), "takes new state again") == 0 {
        assert!(Instant::now() < deadline, "{}", limiter.log());
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let log = limiter.log();
    assert_eq!(count(&log, "is full (OOM"), 1, "{log}");
    assert_eq!(count(&log, "takes new state again"), 1, "{log}");
    assert!(log.lines().count() <= 4, "a line per request? {log}");
}

#[tokio::test]
async fn a_primary_demoted_under_a_running_limiter_opens_its_circuit() {
    let redis = RedisServer::start();
    let other = RedisServer::start();
    let limiter = LimiterProcess::start(&config(&redis, "failure_policy: open\n"));
    let api = limiter.client();
    assert_eq!(api.play_on("demoted-0", "tv").await.body["degraded"], false);

    redis
        .command(&format!("REPLICAOF 127.0.0.1 {}", other.port))
        .unwrap();
    for i in 0..20 {
        let reply = api.play_on(&format!("demoted-{i}"), "phone").await;
        assert_eq!(reply.status, StatusCode::OK, "{reply:?}");
        assert_eq!(reply.body["degraded"], true, "{reply:?}");
    }
    let ready: Value = api.get("/readyz").await.json().await.unwrap();
    let shard = &ready["shards"][0];
    assert_eq!(shard["read_only"], true, "{ready}");
    assert_eq!(shard["circuit"], "open", "{ready}");
    let fleet: Value = api.get("/v1/fleet").await.json().await.unwrap();
    assert_eq!(fleet["shards"][0]["read_only"], true, "{fleet}");
    assert!(
        metrics(&limiter)
            .await
            .contains("screenlimit_store_read_only{shard=\"0\"} 1")
    );

    redis.command("REPLICAOF NO ONE").unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let reply = api.play_on("promoted", "tv").await;
        if reply.body["degraded"] == false {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "never a primary again: {reply:?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let log = limiter.log();
    assert_eq!(count(&log, "read-only replica (READONLY)"), 1, "{log}");
    assert_eq!(count(&log, "primary again: circuit closed"), 1, "{log}");
    assert!(log.lines().count() <= 3, "a line per request? {log}");
}

/// `INFO replication`'s count of replicas in sync, as the primary judges it for its writes.
fn good_replicas(redis: &RedisServer) -> u64 {
    let info = redis.command("INFO replication").expect("INFO replication");
    info.lines()
        .find_map(|line| line.trim_end().strip_prefix("min_slaves_good_slaves:"))
        .and_then(|value| value.parse().ok())
        .unwrap_or_else(|| panic!("no min_slaves_good_slaves in {info}"))
}

async fn wait_for(what: &str, mut done: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(15);
    while !done() {
        assert!(Instant::now() < deadline, "never: {what}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// A primary that needs a replica in sync to write (`min-replicas-to-write 1`), as the operator
/// runs shards with replicas: when it has none (its replica gone, or a failover replaced it), it
/// answers `NOREPLICAS`, and the limiter decides by its failure policy (degraded, never a 5xx,
/// never a decision the failover could lose) until a replica is in sync again.
#[tokio::test]
async fn a_primary_without_a_replica_in_sync_is_decided_by_the_policy_until_one_is_back() {
    let primary = RedisServer::start_with(&[
        "--min-replicas-to-write",
        "1",
        "--min-replicas-max-lag",
        "3",
    ]);
    let mut replica = RedisServer::start_replica_of(primary.port);
    wait_for("the replica in sync", || good_replicas(&primary) == 1).await;
    let limiter = LimiterProcess::start(&config(&primary, "failure_policy: open\n"));
    let api = limiter.client();
    let playing = api.play_on("replicated-0", "tv").await;
    assert_eq!(playing.body["degraded"], false, "{playing:?}");

    replica.kill();
    wait_for("the primary to see its replica gone", || {
        good_replicas(&primary) == 0
    })
    .await;
    for i in 0..10 {
        let reply = api.play_on(&format!("replicated-{i}"), "phone").await;
        assert_eq!(reply.status, StatusCode::OK, "{reply:?}");
        assert_eq!(reply.body["degraded"], true, "{reply:?}");
    }
    let renewed = api.heartbeat("replicated-0", &playing.stream_id()).await;
    assert_eq!(renewed.body["degraded"], true, "{renewed:?}");
    let ready: Value = api.get("/readyz").await.json().await.unwrap();
    assert_eq!(ready["shards"][0]["no_replicas"], true, "{ready}");
    let text = metrics(&limiter).await;
    assert!(
        text.contains("screenlimit_store_no_replicas{shard=\"0\"} 1"),
        "{text}"
    );
    assert!(text.contains("kind=\"no_replicas\""), "{text}");

    let _back = RedisServer::start_replica_of(primary.port);
    wait_for("a replica in sync again", || good_replicas(&primary) == 1).await;
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let reply = api.play_on("replicated-back", "tv").await;
        if reply.body["degraded"] == false {
            break;
        }
        assert!(Instant::now() < deadline, "never decided again: {reply:?}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let log = limiter.log();
    assert_eq!(count(&log, "(NOREPLICAS"), 1, "{log}");
    assert_eq!(
        count(&log, "replica in sync again: circuit closed"),
        1,
        "{log}"
    );
    assert!(log.lines().count() <= 3, "a line per request? {log}");
}

/// The same flags on a Redis Cluster node, whose scripts start with the migration guard after
/// their flags line: a full node refuses plays (the policy decides), a stop still runs.
#[tokio::test]
async fn a_full_cluster_node_refuses_new_plays_and_still_frees_slots() {
    let node = RedisServer::start_lone_cluster_node();
    let limiter = LimiterProcess::start(&format!(
        "{PLANS}store:\n  backend: redis\n  cluster:\n    nodes: [\"{}\"]\n  timeout: 250ms\n  circuit_probe_interval: 100ms\nstream_id_secret: \"{}\"\n",
        node.url(),
        support::SECRET
    ));
    let api = limiter.client();
    let playing = api.play_on("cluster-full", "tv").await;
    assert_eq!(playing.body["degraded"], false, "{playing:?}");

    node.command("CONFIG SET maxmemory 1").unwrap(); // full at once
    for i in 0..5 {
        let reply = api.play_on(&format!("cluster-new-{i}"), "tv").await;
        assert_eq!(reply.body["degraded"], true, "{reply:?}");
    }
    let renewed = api.heartbeat("cluster-full", &playing.stream_id()).await;
    assert_ne!(renewed.body["degraded"], true, "{renewed:?}");
    let stopped = api.stop("cluster-full", &playing.stream_id()).await;
    assert_ne!(stopped.body["degraded"], true, "{stopped:?}");
    node.command("CONFIG SET maxmemory 0").unwrap();
    let reply = api.play_on("cluster-full", "phone").await;
    assert_eq!(
        reply.body["degraded"], false,
        "the stop freed the slot: {reply:?}"
    );
    assert_eq!(
        count(&limiter.log(), "is full (OOM"),
        1,
        "{}",
        limiter.log()
    );
}

/// A Sentinel-named master is judged by its policy too (its role is Sentinel's to follow).
#[tokio::test]
async fn an_evicting_sentinel_master_stops_the_start() {
    let primary = RedisServer::start_with(&["--maxmemory-policy", "allkeys-lru"]);
    let sentinel = SentinelServer::start(&[("shard-0", primary.port)]);
    let config = format!(
        "{PLANS}store:\n  backend: redis\n  timeout: 250ms\n  sentinel:\n    addresses: [\"{}\"]\n    masters: [shard-0]\nstream_id_secret: \"{}\"\n",
        sentinel.url(),
        support::SECRET
    );
    let said = refused(&config);
    assert!(
        said.starts_with("exit status: 2")
            && said.contains("`store.allow_eviction`")
            && said.contains("allkeys-lru")
            && said.contains("master shard-0"),
        "exit 2 naming the master, its policy and the setting; got: {said}"
    );
}
