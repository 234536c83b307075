//! High availability with real processes on loopback: Sentinel failover under load, resharding
//! from 2 to 3 shards, and ten thousand crashed clients, each ending with the cap holding.

mod support;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use reqwest::StatusCode;
use screenlimit_limiter::ids::StreamIdCodec;
use screenlimit_limiter::model::{AcquireCmd, AcquireOutcome, Device, Plan, Timing};
use screenlimit_limiter::plan_book::PlanBook;
use screenlimit_limiter::store::LeaseStore;
use screenlimit_limiter::store::redis::ring::shard_for;
use screenlimit_limiter::store::redis::{
    RedisOptions, RedisStore, ShardSpec, account_key, lease_key,
};
use serde_json::json;
use support::{Api, LimiterProcess, RedisServer, SECRET, SentinelServer};

const HEARTBEAT: Duration = Duration::from_secs(1);

/// One heartbeat round, as players send it: every account's streams at once (each account's in
/// order, so the first re-registers up to the limit); how many were told `410`. An answer the
/// store did not decide (degraded: the store deadline passed on a loaded machine) is sent again,
/// as the player's next heartbeat would be. Other answers than 200 and 410 fail the test.
async fn heartbeat_round<'a>(
    api: &Api,
    held: impl IntoIterator<Item = &'a (String, Vec<String>)>,
) -> usize {
    let accounts = held.into_iter().map(|(account, streams)| async move {
        let mut sent_back = 0;
        for stream in streams {
            for attempt in 1.. {
                let reply = api.heartbeat(account, stream).await;
                match reply.status {
                    StatusCode::OK if reply.body["degraded"] == true && attempt < 20 => continue,
                    StatusCode::OK => {}
                    StatusCode::GONE => sent_back += 1,
                    other => panic!("heartbeat got {other}"),
                }
                break;
            }
        }
        sent_back
    });
    futures::future::join_all(accounts).await.into_iter().sum()
}

/// Plays two streams (the `standard` limit) on each account; returns (account, stream ids).
async fn fill(api: &Api, accounts: &[String]) -> Vec<(String, Vec<String>)> {
    let mut held = Vec::new();
    for account in accounts {
        let mut streams = Vec::new();
        for device in ["tv", "phone"] {
            let reply = api
                .play(json!({"account_id": account, "device_id": device, "plan": "standard"}))
                .await;
            assert_eq!(reply.status, StatusCode::OK, "{reply:?}");
            streams.push(reply.stream_id());
        }
        held.push((account.clone(), streams));
    }
    held
}

/// Every account holds at most its limit, as the limiter lists it.
async fn assert_caps_hold(api: &Api, accounts: &[String], limit: usize) {
    for account in accounts {
        let listed = api.list(account).await;
        assert_eq!(listed.status, StatusCode::OK, "{listed:?}");
        let active = listed.body["active"].as_array().unwrap().len();
        assert!(
            active <= limit,
            "{account} holds {active} streams, above its limit {limit}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sentinel_failover_is_followed_and_the_cap_holds_afterwards() {
    let primaries = [RedisServer::start(), RedisServer::start()];
    let replicas: Vec<RedisServer> = primaries
        .iter()
        .map(|p| RedisServer::start_replica_of(p.port))
        .collect();
    let masters = [
        ("shard-0", primaries[0].port),
        ("shard-1", primaries[1].port),
    ];
    let sentinels: Vec<SentinelServer> = (0..3).map(|_| SentinelServer::start(&masters)).collect();
    let deadline = Instant::now() + Duration::from_secs(15);
    while sentinels
        .iter()
        .any(|s| s.known_replicas("shard-0") < 1 || s.known_replicas("shard-1") < 1)
    {
        assert!(
            Instant::now() < deadline,
            "sentinels never saw the replicas"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let addresses: Vec<String> = sentinels
        .iter()
        .map(|s| format!("\"{}\"", s.url()))
        .collect();
    let limiter = LimiterProcess::start(&format!(
        "store:\n  backend: redis\n  timeout: 25ms\n  circuit_probe_interval: 100ms\n  sentinel:\n    addresses: [{}]\n    masters: [shard-0, shard-1]\n    poll_interval: 100ms\n\
         stream_id_secret: \"{SECRET}\"\nlease: {{ heartbeat_interval: 1s, ttl: 3s }}\n",
        addresses.join(", ")
    ));
    let api = limiter.client();
    let accounts: Vec<String> = (0..40).map(|i| format!("ha-{i}")).collect();
    let held = Arc::new(fill(&api, &accounts).await);

    // Clients heartbeat every 300 ms and a third device keeps trying to play, throughout.
    let stop = Arc::new(AtomicBool::new(false));
    let degraded = Arc::new(AtomicUsize::new(0));
    let answered = Arc::new(AtomicUsize::new(0));
    let load = {
        let (api, held, stop, degraded, answered) = (
            api.clone(),
            held.clone(),
            stop.clone(),
            degraded.clone(),
            answered.clone(),
        );
        tokio::spawn(async move {
            while !stop.load(Ordering::Relaxed) {
                for (account, streams) in held.iter() {
                    for stream in streams {
                        let reply = api.heartbeat(account, stream).await;
                        answered.fetch_add(1, Ordering::Relaxed);
                        if reply.body["degraded"] == true {
                            degraded.fetch_add(1, Ordering::Relaxed);
                        }
                    }
                    api.play_on(account, "tablet").await;
                }
                tokio::time::sleep(Duration::from_millis(300)).await;
            }
        })
    };
    tokio::time::sleep(Duration::from_millis(500)).await;

    let old_endpoint = format!("127.0.0.1:{}", primaries[0].port);
    let fleet_endpoint = |fleet: &serde_json::Value| {
        fleet["shards"][0]["endpoint"]
            .as_str()
            .unwrap_or("")
            .to_owned()
    };
    let before: serde_json::Value = api.get("/v1/fleet").await.json().await.unwrap();
    assert!(
        fleet_endpoint(&before).starts_with(&old_endpoint),
        "{before}"
    );

    let mut primaries = primaries;
    primaries[0].kill();
    let killed = Instant::now();
    let moved_after = loop {
        let fleet: serde_json::Value = api.get("/v1/fleet").await.json().await.unwrap();
        let endpoint = fleet_endpoint(&fleet);
        if !endpoint.starts_with(&old_endpoint) && !endpoint.starts_with("unknown") {
            break killed.elapsed();
        }
        assert!(
            killed.elapsed() < Duration::from_secs(20),
            "the limiter never followed the failover: {fleet}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    let degraded_during = degraded.load(Ordering::Relaxed);
    // One heartbeat interval after the switch, every client has heartbeated on the new master.
    tokio::time::sleep(HEARTBEAT).await;
    stop.store(true, Ordering::Relaxed);
    load.await.unwrap();
    println!(
        "failover: limiter writing to the new primary {moved_after:?} after the kill; {degraded_during} of {} answers degraded meanwhile (policy open)",
        answered.load(Ordering::Relaxed)
    );
    assert_caps_hold(&api, &accounts, 2).await;
    let third = api.play_on("ha-0", "console").await;
    assert_eq!(
        third.status,
        StatusCode::CONFLICT,
        "the cap holds on the promoted replica: {third:?}"
    );

    // The failover window: replication is asynchronous, so a primary can die before its replica
    // received its latest writes. Those are simulated here: the keys of shard 0's accounts (the
    // account key and its streams' lease keys, which every script writes together) are deleted
    // on the promoted replica. Until their players heartbeat once, such an account admits
    // streams over its cap, exactly like an account moved by resharding.
    let lost: Vec<&(String, Vec<String>)> = held
        .iter()
        .filter(|(account, _)| shard_for(account, 2) == 0)
        .take(10)
        .collect();
    // Their streams heartbeat once more first: the load has stopped, and a lease key lives one
    // TTL (3 s) after its last renewal, which a slow machine can let pass before the deletion.
    assert_eq!(
        heartbeat_round(&api, lost.iter().copied()).await,
        0,
        "every stream of the accounts still plays"
    );
    let codec = StreamIdCodec::new(SECRET.as_bytes());
    let mut promoted = redis::Client::open(replicas[0].url())
        .unwrap()
        .get_connection()
        .unwrap();
    for (account, streams) in &lost {
        let mut keys = vec![account_key(account).into_bytes()];
        for stream in streams {
            let stream = codec
                .decode(account, stream)
                .expect("a stream id of this account");
            keys.push(lease_key(account, &stream.nonce));
        }
        let deleted: usize = redis::cmd("DEL").arg(&keys).query(&mut promoted).unwrap();
        assert_eq!(deleted, keys.len(), "{account}: every key of the account");
    }
    let since = Instant::now();
    let mut over_cap = 0;
    for (account, _) in &lost {
        let tablet = json!({"account_id": account, "device_id": "tablet", "plan": "standard"});
        if api.play(tablet).await.status == StatusCode::OK {
            over_cap += 1;
        }
    }
    let sent_back = heartbeat_round(&api, lost.iter().copied()).await;
    println!(
        "failover window: {over_cap} of {} accounts whose writes the replica lacked admitted a stream over their cap; one heartbeat round later ({:?}) {sent_back} streams were told lease_expired",
        lost.len(),
        since.elapsed()
    );
    assert_eq!(over_cap, lost.len(), "each such account admits one extra");
    assert_eq!(
        sent_back, over_cap,
        "the next heartbeat round sends every extra back"
    );
    assert_caps_hold(&api, &accounts, 2).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn resharding_from_two_to_three_shards_moves_a_third_and_caps_return_within_a_heartbeat() {
    let servers = [
        RedisServer::start(),
        RedisServer::start(),
        RedisServer::start(),
    ];
    let urls: Vec<String> = servers.iter().map(RedisServer::url).collect();
    let leases = "lease: { heartbeat_interval: 1s, ttl: 3s }\n";
    let before = LimiterProcess::start(&support::redis_config(&urls[..2], leases));
    let accounts: Vec<String> = (0..90).map(|i| format!("reshard-{i}")).collect();
    let held = fill(&before.client(), &accounts).await;

    // The rolling update: an instance with the third shard appended takes the traffic.
    let after = LimiterProcess::start(&support::redis_config(&urls, leases));
    drop(before);
    let api = after.client();
    let moved: Vec<&String> = accounts
        .iter()
        .filter(|a| shard_for(a, 3) != shard_for(a, 2))
        .collect();
    assert!(
        moved.iter().all(|a| shard_for(a, 3) == 2),
        "accounts move only to the new shard"
    );
    let share = moved.len() as f64 / accounts.len() as f64;
    println!(
        "resharding 2 -> 3: {} of {} accounts moved ({:.0}%)",
        moved.len(),
        accounts.len(),
        share * 100.0
    );
    assert!(
        (0.2..0.47).contains(&share),
        "about a third should move, {share}"
    );

    // The window: the new shard does not know the moved accounts' streams yet, so a new device
    // is let in even though the account is full.
    let switched = Instant::now();
    let mut over_cap = 0;
    for account in &moved {
        let tablet = json!({"account_id": account, "device_id": "tablet", "plan": "standard"});
        if api.play(tablet).await.status == StatusCode::OK {
            over_cap += 1;
        }
    }
    // The first heartbeat round after the switch re-registers streams up to the limit and sends
    // the rest back to play again.
    let sent_back = heartbeat_round(&api, &held).await;
    let window = switched.elapsed();
    println!(
        "resharding window: {over_cap} moved accounts admitted a stream over their cap; one heartbeat round later ({window:?}) {sent_back} streams were told lease_expired"
    );
    // One heartbeat per stream is the whole round: what it takes in wall time here is the
    // test's sequential requests on a shared machine, printed above, not asserted.
    assert_eq!(
        sent_back, over_cap,
        "every extra stream is sent back by the next heartbeat round"
    );
    assert_caps_hold(&api, &accounts, 2).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ten_thousand_crashed_clients_free_every_slot_within_the_ttl() {
    let servers = [RedisServer::start(), RedisServer::start()];
    let ttl = Duration::from_secs(1);
    let options = RedisOptions {
        shards: ShardSpec::Urls(servers.iter().map(RedisServer::url).collect()),
        deadline: Duration::from_secs(2),
        batch_window: Duration::ZERO,
        admission: true,
        failure_threshold: 3,
        probe_interval: Duration::from_millis(100),
        access: Default::default(),
        module: true,
    };
    let store = RedisStore::new(
        &options,
        &PlanBook::new(Plan::new("standard", 2), []),
        Timing::from_ttl(ttl),
    )
    .unwrap();
    let plays: Vec<AcquireCmd> = (0..10_000)
        .map(|i| AcquireCmd {
            account_id: format!("crowd-{}", i / 2),
            device: Device {
                id: format!("device-{}", i % 2),
                meta: "Living Room TV".into(),
                ..Device::default()
            },
            nonce: StreamIdCodec::new_nonce(),
            plan: None,
            replace: None,
            shadow: false,
        })
        .collect();
    let started = Instant::now();
    for chunk in plays.chunks(500) {
        let results = futures::future::join_all(chunk.iter().map(|cmd| store.acquire(cmd))).await;
        assert!(
            results
                .iter()
                .all(|r| matches!(r, Ok(AcquireOutcome::Granted { .. })))
        );
    }
    let last_play = Instant::now();
    println!(
        "crash at scale: 10,000 streams on 5,000 accounts in {:?}",
        last_play - started
    );
    // Every client vanishes now. One TTL later every slot must be free, with no sweeper.
    tokio::time::sleep(ttl.saturating_sub(last_play.elapsed()) + Duration::from_millis(100)).await;
    let accounts: Vec<String> = (0..5_000).map(|i| format!("crowd-{i}")).collect();
    for chunk in accounts.chunks(500) {
        let views = futures::future::join_all(chunk.iter().map(|a| store.list(a))).await;
        assert!(
            views.iter().all(|v| v.as_ref().unwrap().active.is_empty()),
            "a crashed client's slot is still held"
        );
    }
    println!(
        "crash at scale: all 10,000 slots free {:?} after the last play (TTL {ttl:?})",
        last_play.elapsed()
    );
    // And the memory goes with them: lease keys expire with their leases, account keys six TTLs
    // after their last write (their life, which spares native renewals a script). The listings
    // above were writes too; Redis's active expiry then takes a moment to reach every key.
    let written = Instant::now();
    tokio::time::sleep(ttl * 6).await;
    let deadline = written + ttl * 7;
    for server in &servers {
        while server.command("DBSIZE").unwrap().trim() != ":0" {
            assert!(
                Instant::now() < deadline,
                "idle accounts left keys behind: DBSIZE {} seven TTLs after their last write",
                server.command("DBSIZE").unwrap().trim()
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
}
