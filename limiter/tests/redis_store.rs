//! What only the Redis store has to show: sharding by consistent hash, one EVALSHA per operation,
//! recovery when the server lost its scripts, keys that expire when an account goes idle, an
//! account's history written only by the rare events it records, capped and expiring.

mod support;

use std::sync::Arc;
use std::time::Duration;

use screenlimit_limiter::ids::{StreamIdCodec, StreamRef};
use screenlimit_limiter::model::{
    AUDIT_PER_ACCOUNT, AcquireCmd, AcquireOutcome, AuditKind, Device, ForceStopCmd,
    HeartbeatOutcome, HistoryEvent, HistoryLimits, OverrideCmd, OverrideGrant, Plan,
    ReleaseOutcome, Timing,
};
use screenlimit_limiter::plan_book::PlanBook;
use screenlimit_limiter::rules::{LiveRules, Rules};
use screenlimit_limiter::store::LeaseStore;
use screenlimit_limiter::store::redis::ring::shard_for;
use screenlimit_limiter::store::redis::{
    FLEET_AUDIT_KEY, RedisOptions, RedisStore, ShardSpec, account_audit_key, account_key,
    history_key,
};
use support::{LimiterProcess, RedisServer, redis_config};

fn store_on(servers: &[&RedisServer], ttl: Duration) -> Arc<RedisStore> {
    store_with_window(servers, ttl, Duration::ZERO)
}

fn store_with_window(servers: &[&RedisServer], ttl: Duration, window: Duration) -> Arc<RedisStore> {
    let options = RedisOptions {
        shards: ShardSpec::Urls(servers.iter().map(|s| s.url()).collect()),
        deadline: Duration::from_secs(2),
        batch_window: window,
        admission: true,
        failure_threshold: 3,
        probe_interval: Duration::from_millis(100),
        access: Default::default(),
        module: true,
    };
    RedisStore::new(
        &options,
        &PlanBook::new(Plan::new("basic", 1), []),
        Timing::from_ttl(ttl),
    )
    .unwrap()
}

fn play(account: &str, device: &str) -> AcquireCmd {
    AcquireCmd {
        account_id: account.into(),
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

fn exists(server: &RedisServer, key: &str) -> bool {
    server.command(&format!("EXISTS {key}")).unwrap().trim() == ":1"
}

#[tokio::test]
async fn each_account_lives_on_the_shard_the_consistent_hash_names() {
    let servers = [
        RedisServer::start(),
        RedisServer::start(),
        RedisServer::start(),
    ];
    let store = store_on(&servers.iter().collect::<Vec<_>>(), Duration::from_secs(30));
    let mut per_shard = [0usize; 3];
    for i in 0..300 {
        let account = format!("acct-{i}");
        assert!(matches!(
            store.acquire(&play(&account, "tv")).await.unwrap(),
            AcquireOutcome::Granted { .. }
        ));
        let owner = shard_for(&account, 3);
        per_shard[owner] += 1;
        for (index, server) in servers.iter().enumerate() {
            assert_eq!(
                exists(server, &account_key(&account)),
                index == owner,
                "{account} on shard {index}?"
            );
        }
        assert_eq!(store.list(&account).await.unwrap().active.len(), 1);
    }
    assert!(
        per_shard.iter().all(|&n| n > 60),
        "accounts spread over all shards: {per_shard:?}"
    );
}

#[tokio::test]
async fn every_operation_is_one_evalsha_and_lost_scripts_are_reloaded() {
    let server = RedisServer::start();
    let store = store_on(&[&server], Duration::from_secs(30));
    let tv = play("acct", "tv");
    store.acquire(&tv).await.unwrap();
    let stream = StreamRef {
        device_id: "tv".into(),
        nonce: tv.nonce,
        plan: Default::default(),
    };
    store.heartbeat("acct", &stream).await.unwrap();
    store.list("acct").await.unwrap();

    server.command("CONFIG RESETSTAT").unwrap();
    store.acquire(&play("acct", "tv")).await.unwrap();
    store.list("acct").await.unwrap();
    let stats = server.command("INFO commandstats").unwrap();
    assert!(stats.contains("cmdstat_evalsha:calls=2,"), "{stats}");
    assert!(
        !stats.contains("cmdstat_eval:") && !stats.contains("cmdstat_script"),
        "{stats}"
    );

    // A restarted or failed-over server has no scripts: the store reloads them and goes on.
    server.command("SCRIPT FLUSH").unwrap();
    let replay = play("acct", "tv");
    assert!(matches!(
        store.acquire(&replay).await.unwrap(),
        AcquireOutcome::Granted { .. }
    ));
    let replay = StreamRef {
        device_id: "tv".into(),
        nonce: replay.nonce,
        plan: Default::default(),
    };
    let beat = store.heartbeat("acct", &replay).await.unwrap();
    assert!(matches!(beat, HeartbeatOutcome::Renewed { .. }), "{beat:?}");
}

/// Heartbeats that reach a shard together share round trips (one batch of commands); the ones only the
/// full script can answer (a revoked stream, a released one) still get their own answer.
#[tokio::test]
async fn heartbeats_arriving_together_share_calls_and_each_gets_its_own_answer() {
    let server = RedisServer::start();
    let store = store_on(&[&server], Duration::from_secs(30));
    let mut streams = Vec::new();
    for i in 0..200 {
        let account = format!("acct-{i}");
        let cmd = play(&account, "tv");
        store.acquire(&cmd).await.unwrap();
        let stream = StreamRef {
            device_id: "tv".into(),
            nonce: cmd.nonce,
            plan: Default::default(),
        };
        streams.push((account, stream));
    }
    for (account, stream) in &streams[..10] {
        let cmd = ForceStopCmd {
            account_id: account.clone(),
            stream: stream.clone(),
            stream_id: "stream".into(),
            actor: "support@example.com".into(),
            reason: "test".into(),
        };
        store.force_stop(&cmd).await.unwrap();
    }
    for (account, stream) in &streams[10..20] {
        store.release(account, stream).await.unwrap();
    }

    server.command("CONFIG RESETSTAT").unwrap();
    let [(0, batches_before, commands_before)] = store.batch_totals()[..] else {
        panic!("{:?}", store.batch_totals())
    };
    let beats = streams
        .iter()
        .map(|(account, stream)| store.heartbeat(account, stream));
    let outcomes = futures::future::join_all(beats).await;
    let count = |want: fn(&HeartbeatOutcome) -> bool| {
        outcomes
            .iter()
            .filter(|o| want(o.as_ref().unwrap()))
            .count()
    };
    assert_eq!(count(|o| matches!(o, HeartbeatOutcome::Revoked)), 10);
    assert_eq!(count(|o| matches!(o, HeartbeatOutcome::Expired)), 10);
    assert_eq!(
        count(|o| matches!(o, HeartbeatOutcome::Renewed { .. })),
        180
    );
    assert!(
        outcomes[..20]
            .iter()
            .all(|o| !matches!(o, Ok(HeartbeatOutcome::Renewed { .. })))
    );

    // Each heartbeat is one native command (GETEX of its lease key); the 20 that found no live
    // lease then ran the full script (one EVALSHA each, and the first
    // found the script not yet loaded: NOSCRIPT, loaded, sent again). All of it went in a few
    // round trips: what the metrics export as batches.
    let stats = server.command("INFO commandstats").unwrap();
    let calls = |command: &str| -> u64 {
        stats
            .split(&format!("cmdstat_{command}:calls="))
            .nth(1)
            .and_then(|rest| rest.split(',').next())
            .and_then(|n| n.parse().ok())
            .unwrap_or_else(|| panic!("{stats}"))
    };
    assert_eq!(calls("getex"), 200, "{stats}");
    assert!((20..=40).contains(&calls("evalsha")), "{stats}");
    let [(0, batches, commands)] = store.batch_totals()[..] else {
        panic!("{:?}", store.batch_totals())
    };
    let (batches, commands) = (batches - batches_before, commands - commands_before);
    assert_eq!(commands, 220, "every heartbeat went through a batch");
    assert!(batches <= 10, "{batches} batches for {commands} commands");
}

/// Scripts write an account's value so that Redis holds it without slack: `APPEND`, for one,
/// would let the allocation grow greedily (it once cost 35 B per stream at 1 M streams).
#[tokio::test]
async fn an_account_value_is_stored_without_slack() {
    let server = RedisServer::start();
    let store = store_on(&[&server], Duration::from_secs(30));
    let key = account_key("family");
    let usage = |key: &str| -> i64 {
        let reply = server.command(&format!("MEMORY USAGE {key}")).unwrap();
        reply.trim().trim_start_matches(':').parse().unwrap()
    };
    // COPY duplicates the value into an allocation of exactly its size (same key length).
    let assert_tight = |after: &str| {
        server
            .command(&format!("COPY {key} tl:{{family}} REPLACE"))
            .unwrap();
        let (stored, tight) = (usage(&key), usage("tl:{family}"));
        assert!(
            stored <= tight,
            "after {after}: {stored} B, its exact copy {tight} B"
        );
    };
    let mut streams = Vec::new();
    for device in ["tv", "phone", "tablet", "laptop"] {
        let mut cmd = play("family", device);
        cmd.plan = Some(Plan::new("premium", 4));
        assert!(matches!(
            store.acquire(&cmd).await.unwrap(),
            AcquireOutcome::Granted { .. }
        ));
        assert_tight(device);
        streams.push(StreamRef {
            device_id: device.into(),
            nonce: cmd.nonce,
            plan: Default::default(),
        });
    }
    store.heartbeat("family", &streams[0]).await.unwrap();
    assert_tight("a heartbeat");
    store.release("family", &streams[1]).await.unwrap();
    assert_tight("a stop");
}

#[tokio::test]
async fn an_idle_account_key_expires_by_itself() {
    let server = RedisServer::start();
    let ttl = Duration::from_millis(300);
    let store = store_on(&[&server], ttl);
    store.acquire(&play("idle", "tv")).await.unwrap();
    let key = account_key("idle");
    let pttl: i64 = server
        .command(&format!("PTTL {key}"))
        .unwrap()
        .trim()
        .trim_start_matches(':')
        .parse()
        .unwrap();
    assert!(
        pttl > 0 && pttl <= 6 * ttl.as_millis() as i64,
        "the key carries an expiry of six TTLs at most: {pttl}ms"
    );
    // The lease key goes with the lease; the account key six TTLs after its last write.
    tokio::time::sleep(ttl + Duration::from_millis(100)).await;
    assert_eq!(
        keys_served(&server),
        1,
        "the lease key expired with the lease"
    );
    tokio::time::sleep(ttl * 5 + Duration::from_millis(200)).await;
    assert!(
        !exists(&server, &key),
        "no sweeper needed: Redis dropped the idle account"
    );
}

/// A reply of `server.command` as an integer (`:42`).
/// The keys the server still serves: `KEYS *` leaves out a key past its expiry, which `DBSIZE`
/// counts until the server reclaims it (Valkey 8 does so later than Redis).
fn keys_served(server: &RedisServer) -> i64 {
    let reply = server.command("KEYS *").unwrap();
    reply
        .strip_prefix('*')
        .and_then(|rest| rest.split("\r\n").next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("KEYS *: {reply}"))
}

fn integer(server: &RedisServer, command: &str) -> i64 {
    let reply = server.command(command).unwrap();
    reply
        .trim()
        .trim_start_matches(':')
        .parse()
        .unwrap_or_else(|_| panic!("{command}: {reply}"))
}

/// A temporary-limit change is logged by the script that makes it, in one call, on the
/// account's own list (its hash tag, its caps, its expiry) and the shard's; entries written
/// before audit kinds existed read as force-stops.
#[tokio::test]
async fn limit_changes_share_the_force_stop_audit_lists_and_their_bounds() {
    let server = RedisServer::start();
    let store = store_on(&[&server], Duration::from_secs(30));
    let change = |grant: Option<u32>| OverrideCmd {
        account_id: "acct-x".into(),
        grant: grant.map(|limit| OverrideGrant {
            limit,
            duration_ms: 60_000,
        }),
        actor: "bo@support".into(),
        reason: "family visit".into(),
    };
    store.set_override(&change(Some(2))).await.unwrap();
    server.command("CONFIG RESETSTAT").unwrap();
    store.set_override(&change(None)).await.unwrap();
    let stats = server.command("INFO commandstats").unwrap();
    // The account's list (and its history) is written by the script that makes the change, the
    // fleet list by a second small script (on a Redis Cluster it lives in another slot); their
    // commands count here too.
    assert!(stats.contains("cmdstat_evalsha:calls=2,"), "{stats}");
    assert!(stats.contains("cmdstat_lpush:calls=3,"), "{stats}");

    let list = account_audit_key("acct-x");
    assert_eq!(list, "sl:audit:{acct-x}", "the account's hash tag");
    for i in 0..60 {
        store.set_override(&change(Some(2 + i % 3))).await.unwrap();
    }
    assert_eq!(
        integer(&server, &format!("LLEN {list}")),
        AUDIT_PER_ACCOUNT as i64
    );
    assert_eq!(integer(&server, &format!("LLEN {FLEET_AUDIT_KEY}")), 62);
    let pttl = integer(&server, &format!("PTTL {list}"));
    assert!(pttl > 29 * 24 * 3600 * 1000, "kept 30 days: {pttl} ms");

    server
        .command(
            r#"LPUSH sl:audit:{acct-old} '{"at":1,"account_id":"acct-old","stream_id":"s.tv","device_id":"tv","device_meta":"","actor":"ana","reason":""}'"#,
        )
        .unwrap();
    let old = store.audit(Some("acct-old"), None, 10).await.unwrap();
    assert_eq!(
        (old.len(), old[0].kind, old[0].limit_to),
        (1, AuditKind::ForceStop, None)
    );
    let granted = store
        .audit(Some("acct-old"), Some(AuditKind::LimitGranted), 10)
        .await
        .unwrap();
    assert!(granted.is_empty());
}

/// With a batch window, commands that come one after another within it share one round trip,
/// even when none of them had to wait for a batch in flight.
#[tokio::test]
async fn a_batch_window_gathers_commands_that_come_one_after_another() {
    let server = RedisServer::start();
    let store = store_with_window(
        &[&server],
        Duration::from_secs(60),
        Duration::from_millis(200),
    );
    // Warm up: the scripts get loaded and the connection made.
    store.acquire(&play("warm", "tv")).await.unwrap();
    let [(0, batches_before, _)] = store.batch_totals()[..] else {
        panic!("{:?}", store.batch_totals())
    };
    let mut plays = Vec::new();
    for i in 0..10 {
        let store = store.clone();
        plays.push(tokio::spawn(async move {
            store.acquire(&play(&format!("a-{i}"), "tv")).await
        }));
        // Spaced out, but well inside one window.
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    for play in plays {
        assert!(matches!(
            play.await.unwrap().unwrap(),
            AcquireOutcome::Granted { .. }
        ));
    }
    let [(0, batches, _)] = store.batch_totals()[..] else {
        panic!("{:?}", store.batch_totals())
    };
    assert_eq!(batches - batches_before, 1, "ten plays, one round trip");
}

/// On Redis the limiter does not count lease keys: it estimates live streams per shard from the
/// heartbeats it answers (Little's law), so a shard with no accounts shows none.
#[tokio::test]
async fn live_streams_are_estimated_per_shard_from_heartbeats() {
    let servers = [RedisServer::start(), RedisServer::start()];
    let urls: Vec<String> = servers.iter().map(|s| s.url()).collect();
    let limiter = LimiterProcess::start(&redis_config(
        &urls,
        "lease:\n  heartbeat_interval: 500ms\n  ttl: 2s\n",
    ));
    let api = limiter.client();
    let accounts: Vec<String> = (0..)
        .map(|i| format!("live-{i}"))
        .filter(|a| shard_for(a, 2) == 0)
        .take(6)
        .collect();
    let mut streams = Vec::new();
    for account in &accounts {
        let play = api.play_on(account, "tv").await;
        assert_eq!(play.status, reqwest::StatusCode::OK, "{play:?}");
        streams.push((account.clone(), play.stream_id()));
    }
    // Heartbeat every stream once per interval until a window's estimate has seen them.
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    let live = loop {
        for (account, stream) in &streams {
            assert_eq!(
                api.heartbeat(account, stream).await.status,
                reqwest::StatusCode::OK
            );
        }
        let fleet: serde_json::Value = api.get("/v1/fleet").await.json().await.unwrap();
        let live = fleet["live_streams"].clone();
        assert_eq!(live["method"], "heartbeat_rate", "{fleet}");
        assert_eq!(live["shards"][1], 0, "no account lives on shard 1: {live}");
        if live["shards"][0].as_u64().unwrap_or(0) >= 3 {
            break live;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the estimate never reached half of the 6 streams: {live}"
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    };
    let estimate = live["shards"][0].as_u64().unwrap();
    assert!(
        estimate <= 12,
        "6 streams heartbeating every 500 ms: {live}"
    );
    assert!(live["window_sec"].as_f64().unwrap() >= 1.0, "{live}");
    let metrics = api.get("/metrics").await.text().await.unwrap();
    assert!(
        metrics.contains("screenlimit_live_streams{method=\"heartbeat_rate\",shard=\"1\"} 0"),
        "{metrics}"
    );
    assert!(
        metrics.contains("screenlimit_live_streams{method=\"heartbeat_rate\",shard=\"0\"}"),
        "{metrics}"
    );
}

/// A store on `server` alone that keeps `limits` of history, plans Basic (1 stream).
fn store_keeping(server: &RedisServer, limits: HistoryLimits) -> Arc<RedisStore> {
    let options = RedisOptions {
        shards: ShardSpec::Urls(vec![server.url()]),
        deadline: Duration::from_secs(2),
        batch_window: Duration::ZERO,
        admission: true,
        failure_threshold: 3,
        probe_interval: Duration::from_millis(100),
        access: Default::default(),
        module: true,
    };
    let mut rules = Rules::fixed(
        &PlanBook::new(Plan::new("basic", 1), []),
        Timing::from_ttl(Duration::from_secs(30)),
    );
    rules.set_history(limits);
    RedisStore::with_rules(&options, LiveRules::new(rules)).unwrap()
}

/// Granted plays, renewals and stops leave the history alone on both paths: no history key, no
/// list command (the scripts) and no more work; a refused play writes one entry, the list keeps
/// the newest `max_events` and expires `retention` after the newest.
async fn history_on(server: RedisServer, native: bool) {
    let store = store_keeping(
        &server,
        HistoryLimits {
            max_events: 3,
            retention_ms: 2_000,
        },
    );
    if native {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(15);
        while store.shard_states().first().and_then(|(_, s)| s.path) != Some("native") {
            assert!(tokio::time::Instant::now() < deadline, "never native");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
    let list = history_key("acct-h");
    assert_eq!(list, "sl:history:{acct-h}", "the account's hash tag");
    server.command("CONFIG RESETSTAT").unwrap();
    assert!(matches!(
        store.acquire(&play("acct-h", "tv")).await.unwrap(),
        AcquireOutcome::Granted { .. }
    ));
    let again = play("acct-h", "tv");
    let AcquireOutcome::Granted { plan, .. } = store.acquire(&again).await.unwrap() else {
        panic!("the same device plays again")
    };
    let tv = StreamRef {
        device_id: "tv".into(),
        nonce: again.nonce,
        plan,
    };
    for _ in 0..5 {
        assert!(matches!(
            store.heartbeat("acct-h", &tv).await.unwrap(),
            HeartbeatOutcome::Renewed { .. }
        ));
    }
    assert!(
        !exists(&server, &list),
        "a grant or a renewal wrote history"
    );
    for command in ["lpush", "ltrim", "lrange", "pexpire"] {
        assert_eq!(server.calls(command), 0, "{command} on the grant path");
    }

    for i in 0..5 {
        let refused = store.acquire(&play("acct-h", &format!("phone-{i}"))).await;
        assert!(matches!(refused.unwrap(), AcquireOutcome::Denied { .. }));
        if i == 0 && !native {
            assert_eq!(server.calls("lpush"), 1, "one entry for one refusal");
        }
    }
    assert_eq!(integer(&server, &format!("LLEN {list}")), 3);
    let pttl = integer(&server, &format!("PTTL {list}"));
    assert!(
        (1..=2_000).contains(&pttl),
        "kept 2 s past the newest: {pttl}"
    );
    let devices: Vec<String> = store
        .history("acct-h", 10)
        .await
        .unwrap()
        .into_iter()
        .map(|e| match e.event {
            HistoryEvent::Refused {
                device, holders, ..
            } => {
                assert_eq!(holders.len(), 1);
                assert_eq!(holders[0].device_id, "tv");
                device.device_id
            }
            other => panic!("{other:?}"),
        })
        .collect();
    assert_eq!(devices, ["phone-4", "phone-3", "phone-2"]);
    assert_eq!(
        store.release("acct-h", &tv).await.unwrap(),
        ReleaseOutcome::Released
    );
    tokio::time::sleep(Duration::from_millis(2_200)).await;
    assert!(
        !exists(&server, &list),
        "the history outlived its retention"
    );
    assert!(store.history("acct-h", 10).await.unwrap().is_empty());
}

#[tokio::test]
async fn history_is_written_by_refusals_alone_capped_and_expiring_on_lua() {
    history_on(RedisServer::start(), false).await;
}

#[tokio::test]
async fn history_is_written_by_refusals_alone_capped_and_expiring_natively() {
    history_on(RedisServer::start_with_module(&[]), true).await;
}
