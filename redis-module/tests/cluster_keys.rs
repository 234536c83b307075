//! On a Redis Cluster node the commands are routed by their declared keys: the account key
//! (and a support action's audit list, in the same slot), so a cluster client finds the node,
//! and two accounts' keys in one call are refused as cross-slot before the module runs.

mod support;

use std::time::{Duration, Instant};

use redis::Value;
use support::Server;

/// A lone cluster node serving every slot, with the module loaded.
fn lone_node() -> Server {
    // The config file lands in the server's own directory; a bus port of its own (the default,
    // port + 10000, may be another test's).
    let bus = support::free_port().to_string();
    let server = Server::with_module(&[
        "--cluster-enabled",
        "yes",
        "--cluster-config-file",
        "nodes.conf",
        "--cluster-port",
        &bus,
    ]);
    let mut c = server.connect();
    redis::cmd("CLUSTER")
        .arg("ADDSLOTSRANGE")
        .arg(0)
        .arg(16383)
        .exec(&mut c)
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let info: String = redis::cmd("CLUSTER").arg("INFO").query(&mut c).unwrap();
        if info.contains("cluster_state:ok") {
            return server;
        }
        assert!(
            Instant::now() < deadline,
            "the lone node never said cluster_state:ok"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn support_args(account: &str, list: &str) -> Vec<Vec<u8>> {
    [
        account,
        list,
        "1000",
        "2000",
        "tv",
        "0123456789abcdef",
        "a",
        "s",
        "support",
        "why",
        "50",
        "60000",
    ]
    .map(|a| a.as_bytes().to_vec())
    .to_vec()
}

#[test]
fn a_cluster_routes_the_commands_by_the_account_slot() {
    let server = lone_node();
    let mut c = server.connect();

    let keys: Vec<String> = redis::cmd("COMMAND")
        .arg("GETKEYS")
        .arg("SL.HEARTBEAT")
        .arg("sl:{a}")
        .arg(1000)
        .arg(2000)
        .arg("basic")
        .arg(2)
        .arg("tv")
        .arg("0123456789abcdef")
        .query(&mut c)
        .unwrap();
    assert_eq!(keys, ["sl:{a}"]);
    let mut getkeys = redis::cmd("COMMAND");
    getkeys
        .arg("GETKEYS")
        .arg("SL.FORCE_STOP")
        .arg(support_args("sl:{a}", "sl:audit:{a}"));
    let keys: Vec<String> = getkeys.query(&mut c).unwrap();
    assert_eq!(keys, ["sl:{a}", "sl:audit:{a}"]);

    // One account's keys: served (nothing to stop). Two accounts' keys: refused by the cluster.
    let mut same = redis::cmd("SL.FORCE_STOP");
    same.arg(support_args("sl:{a}", "sl:audit:{a}"));
    assert_eq!(
        same.query::<Value>(&mut c).unwrap(),
        Value::Array(vec![Value::Int(0)])
    );
    let mut cross = redis::cmd("SL.FORCE_STOP");
    cross.arg(support_args("sl:{a}", "sl:audit:{b}"));
    let refused = cross.query::<Value>(&mut c).unwrap_err();
    assert_eq!(refused.code(), Some("CROSSSLOT"), "{refused}");

    // A play: its lease key lands in the account's slot.
    let granted: Vec<Value> = redis::cmd("SL.ACQUIRE")
        .arg("sl:{a}")
        .arg(1000)
        .arg(2000)
        .arg("")
        .arg(0)
        .arg("basic")
        .arg(2)
        .arg("tv")
        .arg("0123456789abcdef")
        .arg(&[4u8, 1, 0, 0, 0][..])
        .arg("")
        .arg("")
        .arg("")
        .arg("")
        .query(&mut c)
        .unwrap();
    assert_eq!(granted[0], Value::Int(1));
    let slot = |key: &str| -> i64 {
        redis::cmd("CLUSTER")
            .arg("KEYSLOT")
            .arg(key)
            .query(&mut server.connect())
            .unwrap()
    };
    let in_slot: Vec<String> = redis::cmd("CLUSTER")
        .arg("GETKEYSINSLOT")
        .arg(slot("sl:{a}"))
        .arg(10)
        .query(&mut c)
        .unwrap();
    assert_eq!(
        in_slot.len(),
        2,
        "the account key and its lease key: {in_slot:?}"
    );
}
