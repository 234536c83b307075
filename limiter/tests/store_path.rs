//! Each shard's path, native commands (the screenlimit module, `redis-module/`) or Lua scripts,
//! with real servers: a shard whose server loses the module (`MODULE UNLOAD`, as a replica
//! promoted without it would be) goes to Lua without one wrong answer or error, and back when it
//! is loaded again; the path shows in the metrics, `/v1/fleet` and one log line per change;
//! `store.module: off` and an ACL that does not grant the module's commands keep a shard on Lua.

mod support;

use std::sync::Arc;
use std::time::Duration;

use screenlimit_limiter::config::StoreConfig;
use screenlimit_limiter::ids::{StreamIdCodec, StreamRef};
use screenlimit_limiter::model::{
    AcquireCmd, AcquireOutcome, DenyRule, Device, HeartbeatOutcome, Plan, ReleaseOutcome, Timing,
};
use screenlimit_limiter::plan_book::PlanBook;
use screenlimit_limiter::store::LeaseStore;
use screenlimit_limiter::store::redis::access::{
    Access, LIMITER_ACL_RULES, LIMITER_MODULE_ACL_RULES,
};
use screenlimit_limiter::store::redis::{RedisOptions, RedisStore, ShardSpec};
use serde_json::Value;
use support::{LimiterProcess, RedisServer, module_path, redis_config};

fn store_on(url: String, access: Access) -> Arc<RedisStore> {
    let options = RedisOptions {
        shards: ShardSpec::Urls(vec![url]),
        deadline: Duration::from_secs(2),
        batch_window: Duration::ZERO,
        admission: true,
        failure_threshold: 3,
        probe_interval: Duration::from_millis(100),
        access,
        module: true,
    };
    let plans = PlanBook::new(Plan::new("standard", 2), []);
    RedisStore::new(&options, &plans, Timing::from_ttl(Duration::from_secs(30))).unwrap()
}

fn path_of(store: &RedisStore) -> Option<&'static str> {
    store.shard_states().first().and_then(|(_, s)| s.path)
}

/// Waits (up to 15 s: a shard learns a new path with its next health sample, every 5 s) until
/// the shard is on `path`.
async fn until_path(store: &RedisStore, path: &str) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(15);
    while path_of(store) != Some(path) {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the shard never took the {path} path: {:?}",
            path_of(store)
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

fn play(device: &str) -> AcquireCmd {
    AcquireCmd {
        account_id: "family".into(),
        device: Device {
            id: device.into(),
            ..Device::default()
        },
        nonce: StreamIdCodec::new_nonce(),
        plan: None,
        replace: None,
        shadow: false,
    }
}

async fn granted(store: &RedisStore, cmd: &AcquireCmd, active: u32) -> StreamRef {
    match store.acquire(cmd).await {
        Ok(AcquireOutcome::Granted {
            active_count, plan, ..
        }) => {
            assert_eq!(active_count, active, "{}", cmd.device.id);
            StreamRef {
                device_id: cmd.device.id.clone(),
                nonce: cmd.nonce,
                plan,
            }
        }
        other => panic!("{}: expected a grant, got {other:?}", cmd.device.id),
    }
}

fn unload(redis: &RedisServer) {
    let reply = redis
        .command("MODULE UNLOAD screenlimit")
        .unwrap_or_default();
    assert!(reply.starts_with("+OK"), "{reply}");
}

fn load(redis: &RedisServer) {
    let reply = redis
        .command(&format!("MODULE LOAD {}", module_path().display()))
        .unwrap_or_default();
    assert!(reply.starts_with("+OK"), "{reply}");
}

#[tokio::test]
async fn a_shard_that_loses_its_module_goes_to_lua_without_one_wrong_answer_and_comes_back() {
    let mut redis = RedisServer::start_with_module(&["--enable-module-command", "yes"]);
    let store = store_on(redis.url(), Access::default());
    until_path(&store, "native").await;
    let tv = granted(&store, &play("tv"), 1).await;

    // The module unloaded under the live connection: the next call is refused as an unknown
    // command and goes again as its script. (A list: its arguments are text. A refusal that
    // echoes a binary nonce breaks the connection instead; see the restart below and path.rs.)
    unload(&redis);
    assert_eq!(path_of(&store), Some("native"), "not noticed yet");
    let listed = store.list("family").await.expect("answered by the script");
    assert_eq!(listed.active.len(), 1);
    assert_eq!(path_of(&store), Some("lua"), "switched by the refusal");
    match store.heartbeat("family", &tv).await {
        Ok(HeartbeatOutcome::Renewed { .. }) => {}
        other => panic!("the live lease is renewed: {other:?}"),
    }
    let phone = granted(&store, &play("phone"), 2).await;
    match store.acquire(&play("tablet")).await.unwrap() {
        AcquireOutcome::Denied { rule, active, .. } => {
            assert_eq!(rule, DenyRule::MaxStreams);
            assert_eq!(active.len(), 2, "{active:?}");
        }
        other => panic!("the account is full: {other:?}"),
    }

    // Loaded again: the shard is asked with its next health sample and goes native again.
    load(&redis);
    until_path(&store, "native").await;
    assert_eq!(
        store.release("family", &tv).await.unwrap(),
        ReleaseOutcome::Released,
        "the Lua path's lease, released natively"
    );
    let tablet = granted(&store, &play("tablet"), 2).await;

    // Restarted without the module, its data kept (a failover to a replica without it looks
    // the same from here). Once the store reaches it again, every answer is the script's.
    redis.restart_with(&[]);
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while !store.health().await[0].reachable {
        assert!(tokio::time::Instant::now() < deadline, "never reachable");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    for stream in [&phone, &tablet] {
        match store.heartbeat("family", stream).await {
            Ok(HeartbeatOutcome::Renewed { .. }) => {}
            other => panic!("{}: renewed after the restart: {other:?}", stream.device_id),
        }
    }
    match store.acquire(&play("laptop")).await.unwrap() {
        AcquireOutcome::Denied { rule, .. } => assert_eq!(rule, DenyRule::MaxStreams),
        other => panic!("phone and tablet play: {other:?}"),
    }
    assert_eq!(path_of(&store), Some("lua"));
    for stream in [&phone, &tablet] {
        assert_eq!(
            store.release("family", stream).await.unwrap(),
            ReleaseOutcome::Released
        );
    }
    assert!(store.list("family").await.unwrap().active.is_empty());
}

/// On the native path a live lease's heartbeat is the same `GETEX` as on Lua (it costs Redis
/// less than `SL.HEARTBEAT`: BENCHMARKS.md), and where the Lua path would run `touch` (the
/// account key's life near its end) one `SL.HEARTBEAT` renews both, with no script at all.
#[tokio::test]
async fn a_native_heartbeat_is_one_getex_and_sl_heartbeat_only_where_lua_would_touch() {
    let redis = RedisServer::start_with_module(&[]);
    let store = store_on(redis.url(), Access::default());
    until_path(&store, "native").await;
    let tv = granted(&store, &play("tv"), 1).await;
    redis.command("CONFIG RESETSTAT").unwrap();
    for _ in 0..20 {
        match store.heartbeat("family", &tv).await {
            Ok(HeartbeatOutcome::Renewed { .. }) => {}
            other => panic!("the live lease is renewed: {other:?}"),
        }
    }
    assert_eq!(redis.calls("getex"), 20);
    assert_eq!(redis.calls("sl.heartbeat"), 0);
    assert_eq!(redis.calls("evalsha"), 0);

    // The lease key says the account key's life ends now (as it would a TTL before its end).
    let lease = screenlimit_limiter::store::redis::lease_key("family", &tv.nonce);
    let mut conn = redis::Client::open(redis.url())
        .unwrap()
        .get_connection()
        .unwrap();
    let _: () = redis::cmd("SET")
        .arg(&lease)
        .arg(1)
        .arg("KEEPTTL")
        .query(&mut conn)
        .unwrap();
    match store.heartbeat("family", &tv).await {
        Ok(HeartbeatOutcome::Renewed { .. }) => {}
        other => panic!("still a renewal: {other:?}"),
    }
    assert_eq!(redis.calls("getex"), 21);
    assert_eq!(
        redis.calls("sl.heartbeat"),
        1,
        "the account key's life renewed natively"
    );
    assert_eq!(redis.calls("evalsha"), 0, "no touch script");
    let account_until: u64 = redis::cmd("GET").arg(&lease).query(&mut conn).unwrap();
    let account_ends: i64 = redis::cmd("PEXPIRETIME")
        .arg(screenlimit_limiter::store::redis::account_key("family"))
        .query(&mut conn)
        .unwrap();
    assert_eq!(
        account_until as i64, account_ends,
        "the lease key holds the account key's new end again"
    );
    // And the next heartbeat is a plain renewal again.
    store.heartbeat("family", &tv).await.unwrap();
    assert_eq!(redis.calls("sl.heartbeat"), 1);
}

/// `accounts` live streams, one each, granted on `store`.
async fn streams_on(store: &RedisStore, accounts: usize) -> Vec<(String, StreamRef)> {
    let mut streams = Vec::new();
    for i in 0..accounts {
        let cmd = AcquireCmd {
            account_id: format!("renew-{i}"),
            ..play("tv")
        };
        streams.push((cmd.account_id.clone(), granted(store, &cmd, 1).await));
    }
    streams
}

/// Every stream's heartbeat at once (so that they wait in one batch); each must be renewed.
async fn heartbeats_at_once(store: &RedisStore, streams: &[(String, StreamRef)]) {
    let beats = streams
        .iter()
        .map(|(account, stream)| store.heartbeat(account, stream));
    for (outcome, (account, _)) in futures::future::join_all(beats)
        .await
        .into_iter()
        .zip(streams)
    {
        assert!(
            matches!(outcome, Ok(HeartbeatOutcome::Renewed { .. })),
            "{account}: {outcome:?}"
        );
    }
}

/// The renewals that wait in one batch go to a module shard as one `SL.RENEW` (fewer commands
/// than heartbeats, every lease renewed to a full TTL), unless the module's ACL does not grant
/// it (the probe says so: a `GETEX` each), and a grant taken back under a running limiter sends
/// that batch's renewals again as `GETEX`es: no heartbeat fails.
#[tokio::test]
async fn a_batch_of_renewals_is_one_sl_renew_where_the_module_has_it() {
    let redis = RedisServer::start_with_module(&[]);
    let store = store_on(redis.url(), Access::default());
    until_path(&store, "native").await;
    let streams = streams_on(&store, 60).await;
    let mut conn = redis::Client::open(redis.url())
        .unwrap()
        .get_connection()
        .unwrap();
    // Leases left with a second to live: the renewal must give them their TTL back.
    for (account, stream) in &streams {
        let lease = screenlimit_limiter::store::redis::lease_key(account, &stream.nonce);
        let _: () = redis::cmd("PEXPIRE")
            .arg(&lease)
            .arg(1_000)
            .query(&mut conn)
            .unwrap();
    }
    redis.command("CONFIG RESETSTAT").unwrap();
    heartbeats_at_once(&store, &streams).await;
    let (renews, getexes) = (redis.calls("sl.renew"), redis.calls("getex"));
    assert!(renews >= 1, "no SL.RENEW: {getexes} GETEX");
    assert!(
        renews + getexes < 10,
        "60 renewals in one or two batches: {renews} SL.RENEW, {getexes} GETEX"
    );
    for (account, stream) in &streams {
        let lease = screenlimit_limiter::store::redis::lease_key(account, &stream.nonce);
        let left: i64 = redis::cmd("PTTL").arg(&lease).query(&mut conn).unwrap();
        assert!(left > 25_000, "{account}: the lease has {left} ms left");
    }

    // A user whose ACL grants the module's commands but not SL.RENEW (an older grant).
    let without_renew = LIMITER_MODULE_ACL_RULES.replace("+sl.renew", "");
    let reply = redis
        .command(&format!(
            "ACL SETUSER older {LIMITER_ACL_RULES} {without_renew} >secret-older"
        ))
        .unwrap_or_default();
    assert!(reply.starts_with("+OK"), "{reply}");
    let mut config = StoreConfig::default();
    config.auth.username = Some("older".into());
    config.auth.password = Some("secret-older".into());
    let older = store_on(redis.url(), Access::resolve(&config).unwrap());
    older.check_access().await.unwrap();
    assert_eq!(path_of(&older), Some("native"));
    redis.command("CONFIG RESETSTAT").unwrap();
    heartbeats_at_once(&older, &streams).await;
    assert_eq!(redis.calls("sl.renew"), 0, "the probe said no SL.RENEW");
    assert_eq!(redis.calls("getex"), 60);

    // The grant taken back under the first store, which still believes in SL.RENEW.
    let reply = redis
        .command("ACL SETUSER default -sl.renew")
        .unwrap_or_default();
    assert!(reply.starts_with("+OK"), "{reply}");
    redis.command("CONFIG RESETSTAT").unwrap();
    heartbeats_at_once(&store, &streams).await;
    assert!(redis.calls("getex") >= 59, "sent again as GETEX");
    heartbeats_at_once(&store, &streams).await;
    assert_eq!(
        redis.calls("getex"),
        120,
        "no SL.RENEW tried again meanwhile"
    );
}

#[tokio::test]
async fn an_acl_that_does_not_grant_the_module_s_commands_keeps_the_shard_on_lua() {
    let redis = RedisServer::start_with_module(&[]);
    for (user, rules) in [
        ("scripts-only", LIMITER_ACL_RULES.to_owned()),
        (
            "with-module",
            format!("{LIMITER_ACL_RULES} {LIMITER_MODULE_ACL_RULES}"),
        ),
    ] {
        let reply = redis
            .command(&format!("ACL SETUSER {user} {rules} >secret-{user}"))
            .unwrap_or_default();
        assert!(reply.starts_with("+OK"), "{user}: {reply}");
    }
    let signed_in = |user: &str| {
        let mut config = StoreConfig::default();
        config.auth.username = Some(user.into());
        config.auth.password = Some(format!("secret-{user}"));
        store_on(redis.url(), Access::resolve(&config).unwrap())
    };

    let granted_all = signed_in("with-module");
    granted_all.check_access().await.unwrap();
    assert_eq!(path_of(&granted_all), Some("native"));
    let tv = granted(&granted_all, &play("tv"), 1).await;
    assert!(matches!(
        granted_all.heartbeat("family", &tv).await,
        Ok(HeartbeatOutcome::Renewed { .. })
    ));

    let scripts_only = signed_in("scripts-only");
    scripts_only.check_access().await.unwrap();
    assert_eq!(path_of(&scripts_only), Some("lua"), "SL.VERSION is refused");
    granted(&scripts_only, &play("phone"), 2).await;
    assert_eq!(scripts_only.list("family").await.unwrap().active.len(), 2);
}

/// The lines of `log` that say a shard's path.
fn path_lines(log: &str) -> Vec<&str> {
    log.lines()
        .filter(|l| l.contains("store shard path"))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_shard_s_path_shows_in_the_metrics_the_fleet_view_and_one_log_line() {
    let with_module = RedisServer::start_with_module(&[]);
    let without = RedisServer::start();
    let config = redis_config(&[with_module.url(), without.url()], "");
    let config = config.replace("timeout: 25ms", "timeout: 500ms");
    let limiter = LimiterProcess::try_start(&config, &[("RUST_LOG", "info")]).unwrap();
    let api = limiter.client();
    let wanted = [
        "screenlimit_store_path{path=\"native\",shard=\"0\"} 1",
        "screenlimit_store_path{path=\"lua\",shard=\"0\"} 0",
        "screenlimit_store_path{path=\"lua\",shard=\"1\"} 1",
        "screenlimit_store_path{path=\"native\",shard=\"1\"} 0",
    ];
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    loop {
        let metrics = api.get("/metrics").await.text().await.unwrap();
        let missing: Vec<&&str> = wanted.iter().filter(|l| !metrics.contains(**l)).collect();
        if missing.is_empty() {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "missing {missing:?} in\n{metrics}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let fleet: Value = api.get("/v1/fleet").await.json().await.unwrap();
    let paths: Vec<&str> = fleet["shards"]
        .as_array()
        .unwrap_or_else(|| panic!("{fleet}"))
        .iter()
        .map(|s| s["path"].as_str().unwrap_or("none"))
        .collect();
    assert_eq!(paths, ["native", "lua"], "{fleet}");
    // Plays work on both (which account goes where is the ring's business).
    for i in 0..8 {
        let tv = api.play_on(&format!("acct-{i}"), "tv").await;
        assert_eq!(tv.status, reqwest::StatusCode::OK, "{tv:?}");
        let beat = api.heartbeat(&format!("acct-{i}"), &tv.stream_id()).await;
        assert_eq!(beat.status, reqwest::StatusCode::OK, "{beat:?}");
    }
    // Past the first health sample (5 s), which asks again: no new line.
    tokio::time::sleep(Duration::from_millis(5500)).await;
    let log = limiter.log();
    let lines = path_lines(&log);
    assert_eq!(lines.len(), 2, "one line per shard:\n{log}");
    let on = |port: u16| format!("127.0.0.1:{port}");
    assert!(
        lines
            .iter()
            .any(|l| l.contains("native commands") && l.contains(&on(with_module.port))),
        "{lines:?}"
    );
    assert!(
        lines
            .iter()
            .any(|l| l.contains("Lua scripts") && l.contains(&on(without.port))),
        "{lines:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_store_module_off_a_shard_with_the_module_stays_on_lua() {
    let with_module = RedisServer::start_with_module(&[]);
    let config = redis_config(&[with_module.url()], "");
    let config = config.replace("timeout: 25ms", "timeout: 500ms\n  module: off");
    let limiter = LimiterProcess::try_start(&config, &[("RUST_LOG", "info")]).unwrap();
    let api = limiter.client();
    let tv = api.play_on("acct", "tv").await;
    assert_eq!(tv.status, reqwest::StatusCode::OK, "{tv:?}");
    let metrics = api.get("/metrics").await.text().await.unwrap();
    assert!(
        metrics.contains("screenlimit_store_path{path=\"lua\",shard=\"0\"} 1"),
        "{metrics}"
    );
    let fleet: Value = api.get("/v1/fleet").await.json().await.unwrap();
    assert_eq!(fleet["shards"][0]["path"], "lua", "{fleet}");
    assert!(path_lines(&limiter.log()).is_empty(), "never asked");
    // And nothing the limiter did went through the module.
    let stats = with_module.command("INFO commandstats").unwrap_or_default();
    assert!(!stats.contains("cmdstat_sl."), "{stats}");
    assert!(stats.contains("cmdstat_evalsha"), "{stats}");
}

/// A Sentinel failover from a primary with the module to a replica without it, under load: the
/// limiter follows it and goes to Lua, and no answer the store gave is wrong (a heartbeat of a
/// live stream renewed, a third device refused at the cap) or an error. Answers given while no
/// primary was known are the failure policy's (degraded), as on any failover.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failover_to_a_replica_without_the_module_goes_to_lua_without_a_wrong_answer() {
    use std::sync::atomic::{AtomicBool, Ordering};
    use support::{SECRET, SentinelServer};

    let mut primary = RedisServer::start_with_module(&[]);
    let replica = RedisServer::start_replica_of(primary.port);
    let masters = [("shard-0", primary.port)];
    let sentinels: Vec<SentinelServer> = (0..3).map(|_| SentinelServer::start(&masters)).collect();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(15);
    while sentinels.iter().any(|s| s.known_replicas("shard-0") < 1) {
        assert!(
            tokio::time::Instant::now() < deadline,
            "sentinels never saw the replica"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let addresses: Vec<String> = sentinels
        .iter()
        .map(|s| format!("\"{}\"", s.url()))
        .collect();
    let config = format!(
        "store:\n  backend: redis\n  timeout: 200ms\n  circuit_probe_interval: 100ms\n  sentinel:\n    addresses: [{}]\n    masters: [shard-0]\n    poll_interval: 100ms\n\
         stream_id_secret: \"{SECRET}\"\nlease: {{ heartbeat_interval: 1s, ttl: 3s }}\n",
        addresses.join(", ")
    );
    let limiter = LimiterProcess::try_start(&config, &[("RUST_LOG", "info")]).unwrap();
    let api = limiter.client();
    let fleet_path = || async {
        let fleet: Value = api.get("/v1/fleet").await.json().await.unwrap();
        fleet["shards"][0]["path"].as_str().unwrap_or("").to_owned()
    };
    let fleet_endpoint = || async {
        let fleet: Value = api.get("/v1/fleet").await.json().await.unwrap();
        fleet["shards"][0]["endpoint"]
            .as_str()
            .unwrap_or("")
            .to_owned()
    };
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while fleet_path().await != "native" {
        assert!(tokio::time::Instant::now() < deadline, "never native");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let accounts: Vec<String> = (0..10).map(|i| format!("fo-{i}")).collect();
    let mut held = Vec::new();
    for account in &accounts {
        let tv = api.play_on(account, "tv").await;
        assert_eq!(tv.status, reqwest::StatusCode::OK, "{tv:?}");
        held.push((account.clone(), tv.stream_id()));
    }
    // The replica holds every lease before its primary dies.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while replica.command("DBSIZE") != primary.command("DBSIZE") {
        assert!(
            tokio::time::Instant::now() < deadline,
            "replica never synced: DBSIZE {:?} on the replica, {:?} on the primary",
            replica.command("DBSIZE"),
            primary.command("DBSIZE")
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }

    let stop = Arc::new(AtomicBool::new(false));
    let load = {
        let (api, held, stop) = (api.clone(), held.clone(), stop.clone());
        tokio::spawn(async move {
            let (mut fine, mut degraded, mut wrong) = (0, 0, Vec::new());
            while !stop.load(Ordering::Relaxed) {
                for (account, tv) in &held {
                    let beat = api.heartbeat(account, tv).await;
                    let phone = api.play_on(account, "phone").await;
                    for (reply, right) in [(beat, 200), (phone, 409)] {
                        match (reply.status.as_u16(), reply.body["degraded"] == true) {
                            (_, true) => degraded += 1,
                            (status, false) if status == right => fine += 1,
                            _ => wrong.push(reply),
                        }
                    }
                }
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            (fine, degraded, wrong)
        })
    };
    tokio::time::sleep(Duration::from_millis(500)).await;
    let old_endpoint = format!("127.0.0.1:{}", primary.port);
    primary.kill();
    let killed = tokio::time::Instant::now();
    // Followed: another master, and it said it has no module.
    while fleet_endpoint().await.starts_with(&old_endpoint) || fleet_path().await != "lua" {
        assert!(
            killed.elapsed() < Duration::from_secs(20),
            "the limiter never went to Lua on the promoted replica"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let moved_after = killed.elapsed();
    // Two heartbeat rounds on the new primary.
    tokio::time::sleep(Duration::from_secs(2)).await;
    stop.store(true, Ordering::Relaxed);
    let (fine, degraded, wrong) = load.await.unwrap();
    println!(
        "failover to a replica without the module: on Lua {moved_after:?} after the kill; {fine} right answers from the store, {degraded} degraded (no primary known)"
    );
    assert!(wrong.is_empty(), "wrong answers or errors: {wrong:?}");
    assert!(fine > 0);
    let log = limiter.log();
    let lines = path_lines(&log);
    assert!(
        lines
            .iter()
            .any(|l| l.contains("no longer the module's native commands")),
        "{log}"
    );
    assert!(lines.len() <= 3, "a line per change: {lines:?}");
    for (account, tv) in &held {
        let beat = api.heartbeat(account, tv).await;
        assert_eq!(beat.status, reqwest::StatusCode::OK, "{beat:?}");
        assert_ne!(beat.body["degraded"], true, "{beat:?}");
    }
}

/// The README gives the module's ACL rules as the limiter's constant has them.
#[test]
fn the_readme_grants_the_module_s_commands_as_the_limiter_needs() {
    let readme = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../README.md"))
        .expect("README.md");
    assert!(
        readme.contains(LIMITER_MODULE_ACL_RULES),
        "README.md lacks `{LIMITER_MODULE_ACL_RULES}`"
    );
}
