//! Junk against the module (`support/junk.rs`): on a primary whose replica would rather die
//! than apply an effect it cannot (`propagation-error-behavior panic-on-replicas`), and on a
//! two-node cluster, each on Redis and on Valkey. Every call gets an answer, every call naming
//! a key the limiter never names is refused, the servers live through all of it, the replica
//! stays in sync, every key sits in a slot its node serves, and no junk reaches a key name or an
//! account value.

mod support;

use redis::Value;
use support::cluster::Cluster;
use support::junk::{self, Routed};
use support::{Engine, Replicated, Server};

/// Junk on a primary with a strict replica.
fn on_a_replicated_primary(engine: Engine, seed: u64) {
    let mut pair = Replicated::start(engine);
    let mut c = pair.primary.connect();
    junk::prepare(&mut c);
    let (answers, errors) = junk::run(&mut c, seed, 3_000);
    eprintln!("{engine:?}: {answers} answers, {errors} error replies");
    assert!(
        answers > 100 && errors > 1_000,
        "junk that never reached the commands"
    );
    assert!(
        pair.primary.alive(),
        "the server did not live through the junk"
    );
    if let Err(e) = pair.check() {
        panic!("{engine:?}: {e}");
    }
    let accounts = junk::check_keys(&mut [c]).unwrap_or_else(|e| panic!("{engine:?}: {e}"));
    assert!(accounts > 0, "no account was ever written");
}

/// Junk on a two-node cluster, each call sent where a cluster client sends it.
fn on_a_cluster(engine: Engine, seed: u64) {
    let mut cluster = Cluster::start(engine);
    let mut routed = Routed::new(&cluster);
    junk::prepare(&mut routed);
    let (answers, errors) = junk::run(&mut routed, seed, 1_500);
    eprintln!("{engine:?} cluster: {answers} answers, {errors} error replies");
    assert!(
        answers > 50 && errors > 500,
        "junk that never reached the commands"
    );
    let mut conns = routed.conns;
    let accounts = junk::check_keys(&mut conns).unwrap_or_else(|e| panic!("{engine:?}: {e}"));
    assert!(accounts > 0, "no account was ever written");
    for node in &mut cluster.nodes {
        assert!(node.alive(), "a node did not live through the junk");
    }
    let misfiled = cluster.misfiled();
    assert!(
        misfiled.is_empty(),
        "{engine:?}: keys outside their node's slots or not filed under their slot (node, key, slot): {misfiled:?}"
    );
}

#[test]
fn junk_on_redis_gets_error_replies_and_the_replica_follows() {
    on_a_replicated_primary(Engine::Redis, 26);
}

#[test]
fn junk_on_valkey_gets_error_replies_and_the_replica_follows() {
    if Engine::present("junk on Valkey").contains(&Engine::Valkey) {
        on_a_replicated_primary(Engine::Valkey, 27);
    }
}

#[test]
fn junk_on_a_redis_cluster_stays_in_its_slots() {
    on_a_cluster(Engine::Redis, 28);
}

#[test]
fn junk_on_a_valkey_cluster_stays_in_its_slots() {
    if Engine::present("junk on a Valkey cluster").contains(&Engine::Valkey) {
        on_a_cluster(Engine::Valkey, 29);
    }
}

/// The few facts of the layout the module copies rather than shares with the limiter: the
/// version, the nonce's length, the lease key's and the history list's shape. Kept equal here.
#[test]
fn the_module_speaks_the_limiters_layout() {
    use screenlimit_limiter::store::redis::{Scripts, account_key, history_key, lease_key};
    let server = Server::with_module(&[]);
    let mut c = server.connect();
    let version: i64 = redis::cmd("SL.VERSION").query(&mut c).unwrap();
    let acquire = Scripts::sources()
        .into_iter()
        .find(|(name, _)| *name == "acquire")
        .unwrap()
        .1;
    assert!(
        acquire.contains(&format!("char({version}, limit, #plan)")),
        "the scripts write another layout version than SL.VERSION's {version}"
    );
    let nonce = [7u8; screenlimit_limiter::ids::NONCE_LEN];
    assert_eq!(nonce.len(), 16, "the module reads 16-byte nonces");
    // A play through the module leaves the lease key where the limiter looks for it, a refused
    // one its entry in the history list the limiter reads.
    let details = [4u8, 1, 0, 0, 0];
    let mut play = |device: &str, plan: &str, limit: u32, nonce: &[u8]| -> Vec<Value> {
        redis::cmd("SL.ACQUIRE")
            .arg(account_key("layout"))
            .arg(1000)
            .arg(2000)
            .arg(plan)
            .arg(limit)
            .arg("basic")
            .arg(2)
            .arg(device)
            .arg(nonce)
            .arg(&details[..])
            .arg("")
            .arg("")
            .arg("")
            .arg("")
            .arg("50:600000")
            .query(&mut c)
            .unwrap()
    };
    let granted = play("tv", "", 0, &nonce[..]);
    assert_eq!(granted[0], Value::Int(1));
    let refused = play("phone", "basic", 1, &[8u8; 16][..]);
    assert_eq!(refused[0], Value::Int(0));
    let entries: i64 = redis::cmd("LLEN")
        .arg(history_key("layout"))
        .query(&mut c)
        .unwrap();
    assert_eq!(
        entries, 1,
        "the module's history list is not the limiter's history_key()"
    );
    // The limiter asks whether the commands take what it sends, the history's bounds, an
    // account's enforcement and a heartbeat's learning mode (`learning`); a limiter from before
    // learning heartbeats asks about shadow enforcement, one from before that about the history,
    // one from before the history sends no bounds and is answered as before, without history. A
    // word the module does not know is refused as the limiter reads a module that predates it
    // (`native.rs`: `bad argument feature`), and so is a second word.
    for word in [
        screenlimit_limiter::store::redis::LEARNING_FEATURE,
        "shadow",
        "history",
    ] {
        let asked: i64 = redis::cmd("SL.VERSION").arg(word).query(&mut c).unwrap();
        assert_eq!(asked, version, "SL.VERSION {word}");
    }
    for words in [
        &["teleport"][..],
        &["Shadow"],
        &["shadow "],
        &[""],
        &["Learning"],
        &["learning "],
        &["shadow", "history"],
        &["learning", "shadow"],
    ] {
        let refused = redis::cmd("SL.VERSION")
            .arg(words)
            .query::<i64>(&mut c)
            .expect_err("a word the module does not know");
        let expected = match words.len() {
            1 => "screenlimit: bad argument feature",
            _ => "wrong number of arguments",
        };
        assert!(
            refused.to_string().contains(expected),
            "{words:?}: {refused}"
        );
    }
    let older: Vec<Value> = redis::cmd("SL.ACQUIRE")
        .arg(account_key("older"))
        .arg(1000)
        .arg(2000)
        .arg("basic")
        .arg(1)
        .arg("basic")
        .arg(2)
        .arg("tv")
        .arg(&nonce[..])
        .arg(&details[..])
        .arg("")
        .arg("")
        .arg("")
        .arg("")
        .query(&mut c)
        .unwrap();
    assert_eq!(older[0], Value::Int(1));
    let older: Vec<Value> = redis::cmd("SL.ACQUIRE")
        .arg(account_key("older"))
        .arg(1000)
        .arg(2000)
        .arg("basic")
        .arg(1)
        .arg("basic")
        .arg(2)
        .arg("phone")
        .arg(&[8u8; 16][..])
        .arg(&details[..])
        .arg("")
        .arg("")
        .arg("")
        .arg("")
        .query(&mut c)
        .unwrap();
    assert_eq!(older[0], Value::Int(0));
    let exists: i64 = redis::cmd("EXISTS")
        .arg(history_key("older"))
        .query(&mut c)
        .unwrap();
    assert_eq!(
        exists, 0,
        "a call without the history's bounds wrote history"
    );
    let exists: i64 = redis::cmd("EXISTS")
        .arg(lease_key("layout", &nonce))
        .query(&mut c)
        .unwrap();
    assert_eq!(
        exists, 1,
        "the module's lease key is not the limiter's lease_key()"
    );
}

/// The history's bounds, one argument (`<entries kept>:<retention ms>`), are read only by a call
/// that has an entry to write: a granted play carrying junk bounds is served as any other, and
/// a refusal, a revocation told, a force-stop or a temporary limit carrying them is refused with
/// a typed error before it writes anything, on every engine present.
#[test]
fn junk_history_bounds_are_read_only_for_an_entry_and_then_refused() {
    use screenlimit_limiter::store::redis::{account_key, history_key};
    for engine in Engine::present("junk history bounds") {
        let server = Server::with_module_on(engine, &[]);
        let mut c = server.connect();
        let acquire = |c: &mut redis::Connection, device: &str, nonce: [u8; 16], bounds: &[u8]| {
            basic_play("bounds", device, nonce)
                .arg(bounds)
                .query::<Value>(c)
        };
        let support = |command: &str, middle: &[&[u8]], bounds: &[u8]| {
            let mut cmd = redis::cmd(command);
            cmd.arg(account_key("bounds"))
                .arg("sl:audit:{bounds}")
                .arg(60_000)
                .arg(120_000);
            for arg in middle {
                cmd.arg(*arg);
            }
            cmd.arg("support")
                .arg("why")
                .arg(50)
                .arg(600_000)
                .arg(bounds);
            cmd
        };
        let state = |c: &mut redis::Connection| -> (Option<Vec<u8>>, i64) {
            let value = redis::cmd("GET")
                .arg(account_key("bounds"))
                .query(c)
                .unwrap();
            let history = redis::cmd("EXISTS")
                .arg(history_key("bounds"))
                .query(c)
                .unwrap();
            (value, history)
        };
        let refused = |answer: redis::RedisResult<Value>, what: &str| {
            let e = answer.expect_err(what);
            assert!(
                e.to_string().contains("bad argument history bounds"),
                "{engine:?}: {what}: {e}"
            );
        };
        // Read by nobody: a granted play.
        let granted = acquire(&mut c, "tv", [1; 16], b"junk").unwrap();
        assert!(
            matches!(&granted, Value::Array(a) if a[0] == Value::Int(1)),
            "{granted:?}"
        );
        for bad in junk::BAD_HISTORY_BOUNDS {
            let before = state(&mut c);
            refused(
                acquire(&mut c, "phone", [2; 16], bad.as_bytes()),
                &format!("a refusal with bounds {bad:?}"),
            );
            let heartbeat = redis::cmd("SL.HEARTBEAT")
                .arg(account_key("bounds"))
                .arg(60_000)
                .arg(120_000)
                .arg("basic")
                .arg(1)
                .arg("tv")
                .arg(&[3u8; 16][..])
                .arg(bad)
                .query::<Value>(&mut c);
            refused(heartbeat, &format!("a revocation told with bounds {bad:?}"));
            let stop = support(
                "SL.FORCE_STOP",
                &[b"tv", &[1u8; 16], b"bounds", b"stream"],
                bad.as_bytes(),
            )
            .query::<Value>(&mut c);
            refused(stop, &format!("a force-stop with bounds {bad:?}"));
            let limit = support(
                "SL.SET_OVERRIDE",
                &[b"basic", b"1", b"3", b"60000", b"bounds"],
                bad.as_bytes(),
            )
            .query::<Value>(&mut c);
            refused(limit, &format!("a temporary limit with bounds {bad:?}"));
            assert_eq!(
                state(&mut c),
                before,
                "{engine:?}: bounds {bad:?} refused after a write"
            );
        }
        // The same calls with bounds the module reads write their entries.
        let refusal = acquire(&mut c, "phone", [2; 16], b"5:600000").unwrap();
        assert!(
            matches!(&refusal, Value::Array(a) if a[0] == Value::Int(0)),
            "{refusal:?}"
        );
        let stop = support(
            "SL.FORCE_STOP",
            &[b"tv", &[1u8; 16], b"bounds", b"stream"],
            b"5:600000",
        )
        .query::<Value>(&mut c)
        .unwrap();
        assert!(
            matches!(&stop, Value::Array(a) if a[0] == Value::Int(1)),
            "{stop:?}"
        );
        let entries: i64 = redis::cmd("LLEN")
            .arg(history_key("bounds"))
            .query(&mut c)
            .unwrap();
        assert_eq!(entries, 2, "{engine:?}: a refusal and a force-stop");
        let ttl: i64 = redis::cmd("PTTL")
            .arg(history_key("bounds"))
            .query(&mut c)
            .unwrap();
        assert!(
            (590_000..=600_000).contains(&ttl),
            "{engine:?}: retention {ttl}"
        );
    }
}

/// `SL.ACQUIRE` of a TV on `account` under plan basic (1 stream), a one-minute lease, with its
/// first 14 arguments; the history's bounds and what follows are the caller's.
fn basic_play(account: &str, device: &str, nonce: [u8; 16]) -> redis::Cmd {
    let mut cmd = redis::cmd("SL.ACQUIRE");
    cmd.arg(screenlimit_limiter::store::redis::account_key(account))
        .arg(60_000)
        .arg(120_000)
        .arg("basic")
        .arg(1)
        .arg("basic")
        .arg(1)
        .arg(device)
        .arg(&nonce[..])
        .arg(&[4u8, 1, 0, 0, 0][..])
        .arg("")
        .arg("")
        .arg("")
        .arg("");
    cmd
}

/// `SL.ACQUIRE`'s enforcement, one argument after the history's bounds: exactly `shadow`, or
/// refused (`bad argument enforcement`, as the script) before anything is written, not even the
/// account key's life; a 17th argument is a wrong number of arguments. With it, a play over the
/// limit is granted, answered `{2, …, rule, cap}`, and its refusal that would have been is in the
/// history as kind 8; on every engine present.
#[test]
fn the_enforcement_is_shadow_or_refused_and_then_nothing_is_written() {
    use screenlimit_limiter::store::redis::{history_key, lease_key};
    for engine in Engine::present("the enforcement argument") {
        let server = Server::with_module_on(engine, &[]);
        let mut c = server.connect();
        let acquire = |c: &mut redis::Connection, device: &str, nonce: [u8; 16], more: &[&[u8]]| {
            let mut cmd = basic_play("shadow", device, nonce);
            for arg in more {
                cmd.arg(*arg);
            }
            cmd.query::<Value>(c)
        };
        let granted = acquire(&mut c, "tv", [1; 16], &[b"5:600000"]).unwrap();
        assert!(
            matches!(&granted, Value::Array(a) if a[0] == Value::Int(1)),
            "{engine:?}: {granted:?}"
        );
        let huge = vec![b's'; 1 << 20];
        let bad: [&[u8]; 8] = [
            b"",
            b"Shadow",
            b"SHADOW",
            b"shadow ",
            b"shadow\0",
            b"enforced",
            b"1",
            &huge,
        ];
        // On a play that would be refused, and on one that would be granted (another device
        // once the first is gone would be the same: the argument is checked first).
        for (device, nonce) in [("phone", [2; 16]), ("tv", [3; 16])] {
            for enforcement in bad {
                let before = support::keyspace(&mut c);
                let e = acquire(&mut c, device, nonce, &[b"5:600000", enforcement])
                    .expect_err("an enforcement that is not shadow");
                assert!(
                    e.to_string().contains("bad argument enforcement"),
                    "{engine:?}: {e}"
                );
                assert_eq!(
                    support::keyspace(&mut c),
                    before,
                    "{engine:?}: an enforcement {:?} refused after a write",
                    String::from_utf8_lossy(&enforcement[..enforcement.len().min(20)])
                );
            }
            let before = support::keyspace(&mut c);
            let e = acquire(&mut c, device, nonce, &[b"5:600000", b"shadow", b"shadow"])
                .expect_err("a 17th argument");
            assert!(
                e.to_string().contains("wrong number of arguments"),
                "{engine:?}: {e}"
            );
            assert_eq!(
                support::keyspace(&mut c),
                before,
                "{engine:?}: 17 arguments"
            );
        }
        // `shadow` where the history's bounds go is bounds the module cannot read: refused once
        // there is an entry to write, as the script refuses it.
        let e = acquire(&mut c, "phone", [2; 16], &[b"shadow"]).expect_err("shadow as bounds");
        assert!(
            e.to_string().contains("bad argument history bounds"),
            "{engine:?}: {e}"
        );
        // In shadow the play over the limit is granted, with the rule (0, the account's limit)
        // and the cap (0) that would have refused it, and its entry is a refusal of kind 8.
        let shadow = acquire(&mut c, "phone", [2; 16], &[b"5:600000", b"shadow"]).unwrap();
        let Value::Array(items) = &shadow else {
            panic!("{engine:?}: {shadow:?}")
        };
        assert_eq!(items.len(), 8, "{engine:?}: {shadow:?}");
        assert_eq!(
            [&items[..3], &items[4..]].concat(),
            [
                Value::Int(2),
                Value::Int(1),
                Value::Int(2),
                Value::BulkString(b"basic".to_vec()),
                Value::Int(1),
                Value::Int(0),
                Value::Int(0),
            ],
            "{engine:?}"
        );
        let entries: Vec<Vec<u8>> = redis::cmd("LRANGE")
            .arg(history_key("shadow"))
            .arg(0)
            .arg(-1)
            .query(&mut c)
            .unwrap();
        assert_eq!(entries.len(), 1, "{engine:?}: {entries:?}");
        assert_eq!(&entries[0][..2], &[1, 8], "{engine:?}: {entries:?}");
        // The rule (the plan's limit), the limit, the playing device, then the holder.
        assert_eq!(
            &entries[0][8..],
            b"\0\x01\x05phone\x01\0\x02tv\x01\0",
            "{engine:?}"
        );
        let leases: i64 = redis::cmd("EXISTS")
            .arg(lease_key("shadow", &[1; 16]))
            .arg(lease_key("shadow", &[2; 16]))
            .query(&mut c)
            .unwrap();
        assert_eq!(leases, 2, "{engine:?}: both plays hold a lease");
    }
}

/// `SL.HEARTBEAT` of `device` on `account` under plan basic (1 stream), a one-minute lease, with
/// its first 7 arguments; the history's bounds and what follows are the caller's.
fn basic_heartbeat(account: &str, device: &str, nonce: [u8; 16]) -> redis::Cmd {
    let mut cmd = redis::cmd("SL.HEARTBEAT");
    cmd.arg(screenlimit_limiter::store::redis::account_key(account))
        .arg(60_000)
        .arg(120_000)
        .arg("basic")
        .arg(1)
        .arg(device)
        .arg(&nonce[..]);
    cmd
}

/// `SL.HEARTBEAT`'s learning mode, one argument after the history's bounds: exactly `learning`,
/// or refused (`bad argument learning`, as the script) before anything is read or written, not
/// even a live lease's renewal; a 10th argument is a wrong number of arguments. With it, a lease
/// the account does not hold is taken back on a full account, without a history entry, and a
/// replaced stream is still told so; on every engine present.
#[test]
fn the_learning_mode_is_learning_or_refused_and_then_nothing_is_written() {
    use screenlimit_limiter::store::redis::{history_key, lease_key};
    for engine in Engine::present("the learning mode") {
        let server = Server::with_module_on(engine, &[]);
        let mut c = server.connect();
        let heartbeat =
            |c: &mut redis::Connection, device: &str, nonce: [u8; 16], more: &[&[u8]]| {
                let mut cmd = basic_heartbeat("learning", device, nonce);
                for arg in more {
                    cmd.arg(*arg);
                }
                cmd.query::<Value>(c)
            };
        let granted = basic_play("learning", "tv", [1; 16])
            .arg("5:600000")
            .query::<Value>(&mut c)
            .unwrap();
        assert!(
            matches!(&granted, Value::Array(a) if a[0] == Value::Int(1)),
            "{engine:?}: {granted:?}"
        );
        let huge = vec![b'l'; 1 << 20];
        let bad: [&[u8]; 8] = [
            b"",
            b"Learning",
            b"LEARNING",
            b"learning ",
            b"learning\0",
            b"shadow",
            b"1",
            &huge,
        ];
        // On a lease the account does not hold (taken back, learning), and on its live one (a
        // renewal): the argument is checked first.
        for (device, nonce) in [("phone", [2; 16]), ("tv", [1; 16])] {
            for mode in bad {
                let before = support::keyspace(&mut c);
                let e = heartbeat(&mut c, device, nonce, &[b"5:600000", mode])
                    .expect_err("a mode that is not learning");
                assert!(
                    e.to_string().contains("bad argument learning"),
                    "{engine:?}: {e}"
                );
                assert_eq!(
                    support::keyspace(&mut c),
                    before,
                    "{engine:?}: a mode {:?} refused after a write",
                    String::from_utf8_lossy(&mode[..mode.len().min(20)])
                );
            }
            let before = support::keyspace(&mut c);
            let e = heartbeat(
                &mut c,
                device,
                nonce,
                &[b"5:600000", b"learning", b"learning"],
            )
            .expect_err("a 10th argument");
            assert!(
                e.to_string().contains("wrong number of arguments"),
                "{engine:?}: {e}"
            );
            assert_eq!(
                support::keyspace(&mut c),
                before,
                "{engine:?}: 10 arguments"
            );
        }
        // `learning` where the history's bounds go is bounds the module cannot read: refused once
        // there is an entry to write (a replaced stream told so), as the script refuses it.
        let e = heartbeat(&mut c, "tv", [3; 16], &[b"learning"]).expect_err("learning as bounds");
        assert!(
            e.to_string().contains("bad argument history bounds"),
            "{engine:?}: {e}"
        );
        // The account is full: a lease it does not hold is expired, unless learning.
        let full = heartbeat(&mut c, "phone", [2; 16], &[b"5:600000"]).unwrap();
        assert_eq!(full, Value::Array(vec![Value::Int(3)]), "{engine:?}");
        let learnt = heartbeat(&mut c, "phone", [2; 16], &[b"5:600000", b"learning"]).unwrap();
        assert!(
            matches!(&learnt, Value::Array(a) if a.len() == 2 && a[0] == Value::Int(2)),
            "{engine:?}: {learnt:?}"
        );
        let leases: i64 = redis::cmd("EXISTS")
            .arg(lease_key("learning", &[1; 16]))
            .arg(lease_key("learning", &[2; 16]))
            .query(&mut c)
            .unwrap();
        assert_eq!(leases, 2, "{engine:?}: both streams hold a lease");
        let history: i64 = redis::cmd("EXISTS")
            .arg(history_key("learning"))
            .query(&mut c)
            .unwrap();
        assert_eq!(history, 0, "{engine:?}: a re-registration wrote history");
        // A replaced stream (the TV's device, another nonce) is told so, learning or not.
        let replaced = heartbeat(&mut c, "tv", [3; 16], &[b"5:600000", b"learning"]).unwrap();
        assert_eq!(replaced, Value::Array(vec![Value::Int(4)]), "{engine:?}");
        let entries: Vec<Vec<u8>> = redis::cmd("LRANGE")
            .arg(history_key("learning"))
            .arg(0)
            .arg(-1)
            .query(&mut c)
            .unwrap();
        assert_eq!(entries.len(), 1, "{engine:?}: {entries:?}");
        assert_eq!(&entries[0][..2], &[1, 4], "{engine:?}: {entries:?}");
    }
}
