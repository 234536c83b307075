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
            .arg(50)
            .arg(600_000)
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
    // The limiter asks whether the commands take the history's bounds; a limiter from before
    // them sends none, and is answered as before, without history.
    let asked: i64 = redis::cmd("SL.VERSION")
        .arg(screenlimit_limiter::store::redis::HISTORY_FEATURE)
        .query(&mut c)
        .unwrap();
    assert_eq!(asked, version);
    assert!(
        redis::cmd("SL.VERSION")
            .arg("teleport")
            .query::<i64>(&mut c)
            .is_err()
    );
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
