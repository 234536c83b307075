//! The limiter on a Redis Cluster (three primaries, a replica each, started by the test): every
//! account served by its slot's primary, the primaries listed as shards, a node outside cluster
//! mode refused at start, a lone node that does not know its own address, a primary frozen and
//! thawed (its circuit opens, then closes), and a primary killed under load (its replica
//! promoted by the cluster, the limiter following it), with the window measured.

mod support;

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use reqwest::StatusCode;
use serde_json::{Value, json};
use support::cluster::{NODE_TIMEOUT_MS, RedisCluster};
use support::{Api, LimiterProcess, RedisServer, SECRET};

/// A limiter config on the cluster whose nodes are `seeds`.
fn cluster_config(seeds: &[String], timeout: &str, extra: &str) -> String {
    let nodes: Vec<String> = seeds.iter().map(|s| format!("\"{s}\"")).collect();
    format!(
        "store:\n  backend: redis\n  cluster:\n    nodes: [{}]\n    refresh_interval: 1s\n  timeout: {timeout}\n  circuit_probe_interval: 100ms\nstream_id_secret: \"{SECRET}\"\n{extra}",
        nodes.join(", ")
    )
}

/// Accounts whose slots fall on each of the cluster's primaries: (account, its primary's port).
fn accounts_on_every_primary(cluster: &RedisCluster, count: usize) -> Vec<(String, u16)> {
    (0..count)
        .map(|i| {
            let account = format!("acct-{i}");
            let port = cluster.owner_of(cluster.slot_of(&format!("sl:{{{account}}}")));
            (account, port)
        })
        .collect()
}

async fn shard_endpoints(api: &Api, path: &str) -> BTreeSet<String> {
    let body: Value = api.get(path).await.json().await.unwrap();
    body["shards"]
        .as_array()
        .unwrap_or_else(|| panic!("{path}: {body}"))
        .iter()
        .map(|s| s["endpoint"].as_str().unwrap().to_owned())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_account_is_served_by_its_slot_s_primary_and_the_primaries_are_the_shards() {
    let cluster = RedisCluster::start(3, 1);
    let limiter = LimiterProcess::start(&cluster_config(&cluster.urls()[..1], "2s", ""));
    let api = limiter.client();
    let accounts = accounts_on_every_primary(&cluster, 24);
    let primaries: BTreeSet<u16> = accounts.iter().map(|(_, port)| *port).collect();
    assert_eq!(primaries.len(), 3, "the accounts spread over every primary");

    for (account, _) in &accounts {
        let tv = api.play_on(account, "tv").await;
        assert_eq!(tv.status, StatusCode::OK, "{tv:?}");
        assert_eq!(tv.body["degraded"], false, "{tv:?}");
        let phone = api.play_on(account, "phone").await;
        assert_eq!(
            phone.status,
            StatusCode::CONFLICT,
            "basic holds one: {phone:?}"
        );
        let beat = api.heartbeat(account, &tv.stream_id()).await;
        assert_eq!(beat.status, StatusCode::OK, "{beat:?}");
    }
    // Each account's keys are on its primary (the others answer MOVED for its slot).
    for (account, port) in &accounts {
        let key = format!("sl:{{{account}}}");
        let exists: i64 = support::cluster::query(*port, redis::cmd("EXISTS").arg(&key)).unwrap();
        assert_eq!(exists, 1, "{key} on {port}");
    }

    let expected: BTreeSet<String> = cluster
        .primaries()
        .iter()
        .map(|port| format!("127.0.0.1:{port}"))
        .collect();
    assert_eq!(shard_endpoints(&api, "/readyz").await, expected);
    assert_eq!(shard_endpoints(&api, "/v1/fleet").await, expected);
    let fleet: Value = api.get("/v1/fleet").await.json().await.unwrap();
    for shard in fleet["shards"].as_array().unwrap() {
        assert_eq!(shard["reachable"], true, "{shard}");
        assert_eq!(shard["circuit"], "closed", "{shard}");
    }
    let metrics = api.get("/metrics").await.text().await.unwrap();
    let circuits = metrics
        .lines()
        .filter(|l| l.starts_with("screenlimit_store_circuit_open{"))
        .count();
    assert_eq!(circuits, 3, "a circuit per primary:\n{metrics}");
}

/// A lone node (every slot, no other node met) reports an empty address in `CLUSTER SHARDS`: the
/// limiter reaches it where it asked. Frozen, its circuit opens; thawed, the probe closes it.
#[tokio::test]
async fn a_lone_node_is_served_and_its_circuit_closes_after_a_freeze() {
    let node = RedisServer::start_lone_cluster_node();
    let limiter = LimiterProcess::start(&cluster_config(&[node.url()], "100ms", ""));
    let api = limiter.client();
    let first = api.play_on("acct-lone", "tv").await;
    assert_eq!(first.body["degraded"], false, "{first:?}");
    // Its empty address is one the limiter can use: no node is counted unusable.
    let metrics = api.get("/metrics").await.text().await.unwrap();
    assert!(
        metrics.contains("\nscreenlimit_store_cluster_unusable_nodes 0\n"),
        "{metrics}"
    );

    node.freeze(true);
    for i in 0..6 {
        let play = api.play_on(&format!("acct-frozen-{i}"), "tv").await;
        assert_eq!(play.body["degraded"], true, "{play:?}");
    }
    let ready: Value = api.get("/readyz").await.json().await.unwrap();
    assert_eq!(ready["shards"][0]["circuit"], "open", "{ready}");
    node.freeze(false);

    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let ready: Value = api.get("/readyz").await.json().await.unwrap();
        if ready["shards"][0]["circuit"] == "closed" {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the circuit never closed: {ready}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let after = api.play_on("acct-after", "tv").await;
    assert_eq!(after.body["degraded"], false, "{after:?}");
}

#[tokio::test]
async fn a_seed_node_outside_cluster_mode_is_a_config_error() {
    let plain = RedisServer::start();
    let Err(failure) = LimiterProcess::try_start(&cluster_config(&[plain.url()], "25ms", ""), &[])
    else {
        panic!("a limiter started on a node outside cluster mode")
    };
    assert!(failure.contains("exit status: 2"), "{failure}");
    assert!(failure.contains("store.cluster.nodes"), "{failure}");
    assert!(failure.contains("not in cluster mode"), "{failure}");
}

/// A cluster none of whose nodes answers: the limiter starts, serves under its failure policy,
/// and is not ready under `closed` (no slot map, so no primary it could reach).
#[tokio::test]
async fn with_no_node_reachable_the_limiter_serves_its_policy_and_is_not_ready_when_closed() {
    let nowhere = format!("redis://127.0.0.1:{}", support::free_port());
    let limiter = LimiterProcess::start(&cluster_config(
        &[nowhere],
        "25ms",
        "failure_policy: closed\n",
    ));
    let api = limiter.client();
    let play = api.play_on("acct-1", "tv").await;
    assert_eq!(play.status, StatusCode::SERVICE_UNAVAILABLE, "{play:?}");
    let ready = api.get("/readyz").await;
    assert_eq!(ready.status(), StatusCode::SERVICE_UNAVAILABLE);
    let body: Value = ready.json().await.unwrap();
    assert_eq!(body["shards"][0]["reachable"], false, "{body}");
}

/// One round of play-starts and heartbeats: the answers by kind.
#[derive(Default, Debug)]
struct Round {
    fine: usize,
    degraded: usize,
    errors: usize,
}

/// A primary is SIGKILLed while accounts on every primary play; the cluster promotes its replica
/// and the limiter follows. Meanwhile answers are degraded (the policy is `open`), never 5xx.
/// Measured: the window from the kill to the first answer that is not degraded for an account of
/// that primary. Caps hold again within one heartbeat interval after it: a second device on a
/// full account is refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_primary_s_replica_takes_over_and_the_limiter_follows() {
    let mut cluster = RedisCluster::start(3, 1);
    // The deadline a production limiter would run with, a little looser for a loaded machine.
    let limiter = LimiterProcess::start(&cluster_config(
        &cluster.urls(),
        "100ms",
        "lease: { heartbeat_interval: 1s, ttl: 3s }\n",
    ));
    let api = limiter.client();
    let accounts = accounts_on_every_primary(&cluster, 24);
    let victim = accounts[0].1;
    let mut streams = Vec::new();
    for (account, _) in &accounts {
        let tv = from_the_store(|| api.play_on(account, "tv")).await;
        assert_eq!(tv.status, StatusCode::OK, "{tv:?}");
        streams.push(tv.stream_id());
    }
    // The replica must hold the leases before its primary dies.
    let replica = cluster.replica_of(victim);
    cluster.wait_until(Duration::from_secs(10), "replica caught up", |c| {
        c.replication_offset(replica) >= c.replication_offset(victim)
    });

    cluster.kill(victim);
    let killed = Instant::now();
    let mut first_fine_on_victim: Option<Duration> = None;
    let mut total = Round::default();
    let on_victim: Vec<usize> = (0..accounts.len())
        .filter(|&i| accounts[i].1 == victim)
        .collect();
    while killed.elapsed() < Duration::from_secs(15) {
        let round = futures::future::join_all(accounts.iter().zip(&streams).map(
            |((account, _), stream)| {
                let api = api.clone();
                async move { api.heartbeat(account, stream).await }
            },
        ))
        .await;
        let mut victim_fine = true;
        for (i, reply) in round.iter().enumerate() {
            assert!(
                !reply.status.is_server_error(),
                "no 5xx under the open policy: {reply:?}"
            );
            let degraded = reply.body["degraded"] == true;
            match (reply.status, degraded) {
                (StatusCode::OK, false) => total.fine += 1,
                (StatusCode::OK, true) => total.degraded += 1,
                _ => total.errors += 1,
            }
            if on_victim.contains(&i) && (degraded || reply.status != StatusCode::OK) {
                victim_fine = false;
            }
        }
        if victim_fine && first_fine_on_victim.is_none() && !cluster.primaries().contains(&victim) {
            first_fine_on_victim = Some(killed.elapsed());
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let window = first_fine_on_victim.unwrap_or_else(|| {
        panic!("the limiter never served the killed primary's accounts again: {total:?}")
    });
    println!(
        "failover: primary {victim} killed; its accounts served again after {window:?} (node timeout {NODE_TIMEOUT_MS} ms); answers meanwhile: {total:?}"
    );
    assert!(
        !cluster.primaries().contains(&victim),
        "the replica was promoted"
    );
    // Caps hold: within a heartbeat interval every lease is back, so a second device is refused.
    tokio::time::sleep(Duration::from_millis(1100)).await;
    for (i, (account, _)) in accounts.iter().enumerate() {
        let beat = from_the_store(|| api.heartbeat(account, &streams[i])).await;
        assert_eq!(beat.status, StatusCode::OK, "{account}: {beat:?}");
        let phone =
            from_the_store(|| api.play(json!({ "account_id": account, "device_id": "phone" })))
                .await;
        assert_eq!(
            phone.status,
            StatusCode::CONFLICT,
            "{account}: the cap holds again: {phone:?}"
        );
    }
    let endpoints = shard_endpoints(&api, "/readyz").await;
    assert!(
        !endpoints.contains(&format!("127.0.0.1:{victim}")),
        "the dead primary is no longer a shard: {endpoints:?}"
    );
    assert_eq!(endpoints.len(), 3, "{endpoints:?}");
    let metrics = api.get("/metrics").await.text().await.unwrap();
    let circuits: Vec<&str> = metrics
        .lines()
        .filter(|l| l.starts_with("screenlimit_store_circuit_open{"))
        .collect();
    assert_eq!(
        circuits.len(),
        3,
        "the dead primary's circuit is gone: {circuits:?}"
    );
    assert!(circuits.iter().all(|l| l.ends_with(" 0")), "{circuits:?}");
    // An outage is logged as it changes (a circuit, the slot map), never per request.
    let log = limiter.log();
    assert!(log.contains("cluster slot map changed"), "{log}");
    assert!(log.lines().count() < 30, "{log}");
}

/// What the accounts saw while their slots moved.
#[derive(Default, Debug)]
struct Tally {
    heartbeats: usize,
    /// Heartbeats answered without the store (the failure policy).
    degraded_heartbeats: usize,
    /// Second devices on a full account: refused, as they must be.
    refused: usize,
    /// Second devices let in without the store (the over-admission the policy allows).
    degraded_grants: usize,
    /// Second devices the store itself let in: a broken cap.
    store_grants: usize,
    /// When answers were degraded: the first and the last.
    degraded_from: Option<Duration>,
    degraded_until: Option<Duration>,
}

impl Tally {
    fn degraded_at(&mut self, at: Duration) {
        self.degraded_from.get_or_insert(at);
        self.degraded_until = Some(at);
    }

    fn window(&self) -> Duration {
        match (self.degraded_from, self.degraded_until) {
            (Some(from), Some(until)) => until - from,
            _ => Duration::ZERO,
        }
    }
}

/// Every account at its cap (basic: one tv) heartbeats and a second device tries to play, round
/// after round, until `stop` is set. No answer may be a 5xx.
async fn play_at_the_cap(
    api: Api,
    accounts: Vec<(String, String)>,
    started: Instant,
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
) -> Tally {
    let mut tally = Tally::default();
    while !stop.load(std::sync::atomic::Ordering::Relaxed) {
        let round = futures::future::join_all(accounts.iter().map(|(account, tv)| {
            let api = api.clone();
            async move {
                let beat = api.heartbeat(account, tv).await;
                let phone = api.play_on(account, "phone").await;
                (beat, phone)
            }
        }))
        .await;
        let at = started.elapsed();
        for ((account, _), (beat, phone)) in accounts.iter().zip(round) {
            for reply in [&beat, &phone] {
                assert!(!reply.status.is_server_error(), "{account}: {reply:?}");
            }
            assert_eq!(beat.status, StatusCode::OK, "{account}: {beat:?}");
            tally.heartbeats += 1;
            if beat.body["degraded"] == true {
                tally.degraded_heartbeats += 1;
                tally.degraded_at(at);
            }
            match (phone.status, phone.body["degraded"] == true) {
                (StatusCode::CONFLICT, _) => tally.refused += 1,
                (StatusCode::OK, true) => {
                    tally.degraded_grants += 1;
                    tally.degraded_at(at);
                }
                _ => {
                    // Said, so that a failure shows when and beside which heartbeat.
                    eprintln!(
                        "{account}: a second device granted by the store at {at:?}: {phone:?}; the tv's heartbeat that round: {beat:?}"
                    );
                    tally.store_grants += 1;
                    api.stop(account, &phone.stream_id()).await;
                }
            }
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    tally
}

/// The answer the store gave: a request sent again (a few times, spaced) while the answer is
/// degraded, since on a loaded machine a first contact with a primary (connect, load the
/// scripts) can miss a short store deadline.
async fn from_the_store<F, Fut>(request: F) -> support::Reply
where
    F: Fn() -> Fut,
    Fut: std::future::Future<Output = support::Reply>,
{
    for _ in 0..20 {
        let reply = request().await;
        if reply.body["degraded"] != true {
            return reply;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("degraded answers for 2 s")
}

/// Accounts at their cap (basic, one tv each): (account, the tv's stream id).
async fn fill_accounts(api: &Api, accounts: &[String]) -> Vec<(String, String)> {
    let mut playing = Vec::new();
    for account in accounts {
        let tv = from_the_store(|| api.play_on(account, "tv")).await;
        assert_eq!(tv.status, StatusCode::OK, "{tv:?}");
        playing.push((account.clone(), tv.stream_id()));
    }
    playing
}

/// After the move: every account still holds exactly its tv, and a second device is refused.
async fn assert_capped(api: &Api, playing: &[(String, String)]) {
    for (account, tv) in playing {
        let beat = from_the_store(|| api.heartbeat(account, tv)).await;
        assert_eq!(beat.status, StatusCode::OK, "{account}: {beat:?}");
        let phone = from_the_store(|| api.play_on(account, "phone")).await;
        assert_eq!(phone.status, StatusCode::CONFLICT, "{account}: {phone:?}");
        let listed = api.list(account).await;
        assert_eq!(
            listed.body["active"].as_array().unwrap().len(),
            1,
            "{listed:?}"
        );
    }
}

/// The slots of accounts at their cap move to another primary while they play, the way
/// `redis-cli --cluster reshard` moves a slot: the keys are migrated while the slot is open
/// (scripts on the source wait with `TRYAGAIN`), then for a while the source answers `ASK` for
/// keys it no longer holds (the limiter sends `ASKING` and the command to the target), then the
/// slot changes hands (`MOVED`). No 5xx, no second device let in by the store, and the window of
/// degraded answers measured.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn accounts_at_their_cap_keep_it_while_their_slots_migrate() {
    caps_hold_while_slots_migrate(RedisCluster::start(3, 0), "lua").await;
}

/// The same on the module's native commands: they stop with `TRYAGAIN` on a migrating slot, as
/// the scripts do (`redis-module/src/lib.rs`, `keyed`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn accounts_at_their_cap_keep_it_while_their_slots_migrate_on_native_commands() {
    caps_hold_while_slots_migrate(RedisCluster::start_with_module(3, 0), "native").await;
}

/// Every shard `/v1/fleet` lists is on `path`, within 10 s (a primary learns its path at once).
async fn every_shard_on(api: &Api, path: &str) {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let fleet: Value = api.get("/v1/fleet").await.json().await.unwrap();
        let shards = fleet["shards"].as_array().cloned().unwrap_or_default();
        if shards.len() == 3 && shards.iter().all(|s| s["path"] == path) {
            return;
        }
        assert!(Instant::now() < deadline, "not all on {path}: {fleet}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

async fn caps_hold_while_slots_migrate(cluster: RedisCluster, path: &str) {
    // Generous for a loaded machine: the test is about the moves, not the deadline.
    let limiter = LimiterProcess::start(&cluster_config(
        &cluster.urls(),
        "500ms",
        "lease: { heartbeat_interval: 1s, ttl: 3s }\n",
    ));
    let api = limiter.client();
    every_shard_on(&api, path).await;
    let accounts = accounts_on_every_primary(&cluster, 30);
    let from = accounts[0].1;
    let to = cluster
        .primaries()
        .into_iter()
        .find(|&p| p != from)
        .unwrap();
    let moving: Vec<String> = accounts
        .iter()
        .filter(|(_, port)| *port == from)
        .map(|(account, _)| account.clone())
        .collect();
    let playing = fill_accounts(&api, &moving).await;

    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let started = Instant::now();
    let load = tokio::spawn(play_at_the_cap(
        api.clone(),
        playing.clone(),
        started,
        stop.clone(),
    ));
    tokio::time::sleep(Duration::from_millis(300)).await;
    let slots: BTreeSet<u16> = moving
        .iter()
        .map(|a| cluster.slot_of(&format!("sl:{{{a}}}")))
        .collect();
    let cluster = tokio::task::spawn_blocking(move || {
        for &slot in &slots {
            // Keys moved, slot not yet handed over: the source answers ASK for a while.
            cluster.migrate_slot(slot, to, |phase| {
                if phase == "moved" {
                    std::thread::sleep(Duration::from_millis(150));
                }
            });
        }
        cluster
    })
    .await
    .unwrap();
    let moved_at = started.elapsed();
    tokio::time::sleep(Duration::from_millis(500)).await;
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let tally = load.await.unwrap();
    println!(
        "migration ({path}): {} accounts' slots moved in {moved_at:?}; degraded answers over {:?}: {tally:?}",
        moving.len(),
        tally.window()
    );
    assert_eq!(
        tally.store_grants, 0,
        "the store never broke a cap: {tally:?}"
    );
    assert!(tally.refused > 0, "{tally:?}");
    for account in &moving {
        let slot = cluster.slot_of(&format!("sl:{{{account}}}"));
        assert_eq!(cluster.owner_of(slot), to, "{account} moved");
    }
    assert_capped(&api, &playing).await;
}

/// A fourth primary joins and takes slots (`redis-cli --cluster rebalance`, keys and all) while
/// accounts play: the limiter finds it, its accounts keep their caps, and it is listed as a shard.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_primary_added_and_rebalanced_under_load_takes_its_accounts_with_their_caps() {
    let mut cluster = RedisCluster::start(3, 0);
    // Generous for a loaded machine: the test is about the moves, not the deadline.
    let limiter = LimiterProcess::start(&cluster_config(
        &cluster.urls(),
        "500ms",
        "lease: { heartbeat_interval: 1s, ttl: 3s }\n",
    ));
    let api = limiter.client();
    let names: Vec<String> = (0..40).map(|i| format!("acct-{i}")).collect();
    let playing = fill_accounts(&api, &names).await;
    let added = cluster.add_primary();

    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let started = Instant::now();
    let load = tokio::spawn(play_at_the_cap(
        api.clone(),
        playing.clone(),
        started,
        stop.clone(),
    ));
    let seed = cluster.urls()[0].trim_start_matches("redis://").to_owned();
    let rebalanced = tokio::task::spawn_blocking(move || {
        std::process::Command::new("redis-cli")
            .args([
                "--cluster",
                "rebalance",
                &seed,
                "--cluster-use-empty-masters",
            ])
            .stdin(std::process::Stdio::null())
            .output()
            .expect("run redis-cli --cluster rebalance")
    })
    .await
    .unwrap();
    assert!(
        rebalanced.status.success(),
        "{}",
        String::from_utf8_lossy(&rebalanced.stdout)
    );
    let rebalanced_at = started.elapsed();
    tokio::time::sleep(Duration::from_millis(500)).await;
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let tally = load.await.unwrap();
    let on_new: Vec<&String> = names
        .iter()
        .filter(|a| cluster.owner_of(cluster.slot_of(&format!("sl:{{{a}}}"))) == added)
        .collect();
    println!(
        "rebalance: a fourth primary took {} of {} accounts in {rebalanced_at:?}; degraded answers over {:?}: {tally:?}",
        on_new.len(),
        names.len(),
        tally.window()
    );
    assert!(!on_new.is_empty(), "the new primary serves some accounts");
    assert_eq!(
        tally.store_grants, 0,
        "the store never broke a cap: {tally:?}"
    );
    assert_capped(&api, &playing).await;
    let endpoints = shard_endpoints(&api, "/readyz").await;
    assert!(
        endpoints.contains(&format!("127.0.0.1:{added}")),
        "the new primary is a shard: {endpoints:?}"
    );
    assert_eq!(endpoints.len(), 4, "{endpoints:?}");
}

/// The module's migration guard, exactly: while an account's slot migrates and its lease key has
/// already moved to the target, the source holds the account key but not the lease key. A native
/// heartbeat there must stop with `TRYAGAIN` before any write (the limiter sends it again), as
/// the script does, instead of re-registering the lease on the source.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_a_migrating_slot_a_native_command_stops_before_any_write_as_the_script_does() {
    use screenlimit_limiter::ids::StreamIdCodec;
    use screenlimit_limiter::model::{AcquireCmd, AcquireOutcome, Device, Plan, Timing};
    use screenlimit_limiter::plan_book::PlanBook;
    use screenlimit_limiter::store::LeaseStore;
    use screenlimit_limiter::store::redis::access::Access;
    use screenlimit_limiter::store::redis::{
        RedisOptions, RedisStore, ShardSpec, account_key, lease_key,
    };
    use support::cluster::query;

    let cluster = RedisCluster::start_with_module(3, 0);
    let options = RedisOptions {
        shards: ShardSpec::Cluster {
            nodes: cluster.urls(),
            refresh_interval: Duration::from_secs(5),
        },
        deadline: Duration::from_secs(2),
        batch_window: Duration::ZERO,
        admission: true,
        failure_threshold: 3,
        probe_interval: Duration::from_millis(100),
        access: Access::default(),
        module: true,
    };
    let plans = PlanBook::new(Plan::new("basic", 1), []);
    let timing = Timing::from_ttl(Duration::from_secs(30));
    let store = RedisStore::new(&options, &plans, timing).unwrap();
    store.check_access().await.unwrap();
    assert!(
        store
            .shard_states()
            .iter()
            .all(|(_, s)| s.path == Some("native")),
        "every primary on the native path"
    );
    let play = AcquireCmd {
        account_id: "moving".into(),
        device: Device {
            id: "tv".into(),
            ..Device::default()
        },
        nonce: StreamIdCodec::new_nonce(),
        plan: None,
        replace: None,
        shadow: false,
    };
    assert!(matches!(
        store.acquire(&play).await.unwrap(),
        AcquireOutcome::Granted { .. }
    ));
    let (account, lease) = (account_key("moving"), lease_key("moving", &play.nonce));
    let slot = cluster.slot_of(&account);
    let from = cluster.owner_of(slot);
    let to = cluster
        .primaries()
        .into_iter()
        .find(|&p| p != from)
        .unwrap();
    let (from_id, to_id) = (cluster.id_of(from), cluster.id_of(to));
    let setslot = |port: u16, state: &str, id: &str| {
        let mut command = redis::cmd("CLUSTER");
        command.arg("SETSLOT").arg(slot).arg(state).arg(id);
        let _: () = query(port, &command).unwrap();
    };
    setslot(to, "IMPORTING", &from_id);
    setslot(from, "MIGRATING", &to_id);
    let mut migrate = redis::cmd("MIGRATE");
    migrate
        .arg("127.0.0.1")
        .arg(to)
        .arg("")
        .arg(0)
        .arg(5000)
        .arg("KEYS")
        .arg(&lease);
    let _: String = query(from, &migrate).unwrap();

    let ttl = timing.ttl_ms;
    let mut beat = redis::cmd("SL.HEARTBEAT");
    beat.arg(&account)
        .arg(ttl)
        .arg(timing.revocation_ms)
        .arg("basic")
        .arg(1)
        .arg("tv")
        .arg(&play.nonce[..]);
    let refused = query::<redis::Value>(from, &beat).unwrap_err();
    assert_eq!(refused.code(), Some("TRYAGAIN"), "{refused}");
    // (A key read on a migrating slot is redirected: count the slot's keys on each node.)
    let keys_in_slot = |port: u16| -> i64 {
        query(port, redis::cmd("CLUSTER").arg("COUNTKEYSINSLOT").arg(slot)).unwrap()
    };
    assert_eq!(
        keys_in_slot(from),
        1,
        "the account key alone: no lease key written"
    );
    assert_eq!(keys_in_slot(to), 1, "the moved lease key");
    // A command on an account whose slot is steady is not held up.
    let other = (0..100)
        .map(|i| format!("steady-{i}"))
        .find(|a| {
            cluster.slot_of(&account_key(a)) != slot
                && cluster.owner_of(cluster.slot_of(&account_key(a))) == from
        })
        .expect("another account on the source");
    let mut list = redis::cmd("SL.LIST");
    list.arg(account_key(&other)).arg(ttl).arg("basic").arg(1);
    let listed: Vec<redis::Value> = query(from, &list).unwrap();
    assert!(!listed.is_empty());
}
