//! On a Redis Cluster node the commands are routed by their declared keys: the account key
//! (and a support action's audit list, in the same slot), so a cluster client finds the node,
//! and two accounts' keys in one call are refused as cross-slot before the module runs. On two
//! nodes: a key without the limiter's hash tag is refused before the migration probe (whose key
//! would hash elsewhere), and every lease key lands in its account's slot, on Redis and Valkey.

mod support;

use std::time::{Duration, Instant};

use redis::{Connection, Value};
use support::cluster::Cluster;
use support::junk::{account_key, audit_key, bad_names, lease_key};
use support::{Engine, KEYED, Server, call};

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
        "50:600000",
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
        .arg("50:600000")
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

    // A play: its lease key lands in the account's slot; a refused one (a plan of one stream
    // named) its history list.
    let play = |device: &str, plan: &str, limit: u32, c: &mut Connection| -> Vec<Value> {
        redis::cmd("SL.ACQUIRE")
            .arg("sl:{a}")
            .arg(1000)
            .arg(2000)
            .arg(plan)
            .arg(limit)
            .arg("basic")
            .arg(2)
            .arg(device)
            .arg(format!("{device:-<16}"))
            .arg(&[4u8, 1, 0, 0, 0][..])
            .arg("")
            .arg("")
            .arg("")
            .arg("")
            .arg("50:600000")
            .query(c)
            .unwrap()
    };
    assert_eq!(play("tv", "", 0, &mut c)[0], Value::Int(1));
    assert_eq!(play("phone", "basic", 1, &mut c)[0], Value::Int(0));
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
        3,
        "the account key, its lease key and its history: {in_slot:?}"
    );
    assert!(
        in_slot.contains(&"sl:history:{a}".to_string()),
        "{in_slot:?}"
    );
}

fn send(c: &mut Connection, command: &str, args: &[Vec<u8>]) -> Result<Value, String> {
    let mut cmd = redis::cmd(command);
    for a in args {
        cmd.arg(a);
    }
    cmd.query::<Value>(c).map_err(|e| e.to_string())
}

/// Account ids whose slots node 0 and node 1 serve.
fn ids_on_each_node(cluster: &Cluster) -> [String; 2] {
    let mut c = cluster.connect(0);
    let mut found: [Option<String>; 2] = [None, None];
    for i in 0.. {
        let id = format!("acct-{i}");
        let n = Cluster::owner(cluster.slot(&mut c, &account_key(&id)));
        found[n].get_or_insert(id);
        if let [Some(a), Some(b)] = &found {
            return [a.clone(), b.clone()];
        }
    }
    unreachable!()
}

fn two_nodes(engine: Engine) {
    let cluster = Cluster::start(engine);
    let mut conns = [cluster.connect(0), cluster.connect(1)];
    let mut wrong = Vec::new();

    // `plainx-3` is in slot 1742 (node 0); its probe key `plainx-3?` in slot 10618 (node 1).
    let slot = cluster.slot(&mut conns[0], b"plainx-3");
    let probe = cluster.slot(&mut conns[0], b"plainx-3?");
    assert_eq!((Cluster::owner(slot), Cluster::owner(probe)), (0, 1));
    for command in ["SL.ACQUIRE", "SL.LIST"] {
        let answer = send(&mut conns[0], command, &call(command, b"plainx-3", b""));
        if !answer
            .as_ref()
            .is_err_and(|e| e.contains("screenlimit: bad account key"))
        {
            wrong.push(format!("{command} plainx-3: {answer:?}"));
        }
    }

    // Every name the limiter never sends, at the node serving it: refused, by the module (the
    // support actions name it twice, so that the cluster itself has nothing to refuse). A play
    // last: were it taken, its lease key would stay.
    for name in bad_names() {
        let n = Cluster::owner(cluster.slot(&mut conns[0], &name));
        for command in KEYED.iter().rev() {
            let answer = send(&mut conns[n], command, &call(command, &name, &name));
            if !answer
                .as_ref()
                .is_err_and(|e| e.contains("screenlimit: bad "))
            {
                let shown = String::from_utf8_lossy(&name[..name.len().min(40)]).into_owned();
                wrong.push(format!("{command} {shown:?} on node {n}: {answer:?}"));
            }
        }
    }

    // Two plays on an account of each node, nonces of braces, one force-stopped: the account
    // key, the other's lease key, the audit list and the history, all in the account's slot,
    // filed there.
    for (n, id) in ids_on_each_node(&cluster).iter().enumerate() {
        let account = account_key(id);
        for (device, nonce) in [("tv", [b'}'; 16]), ("phone", [b'{'; 16])] {
            let mut args = call("SL.ACQUIRE", &account, b"");
            args[7] = device.as_bytes().to_vec();
            args[8] = nonce.to_vec();
            match send(&mut conns[n], "SL.ACQUIRE", &args) {
                Ok(Value::Array(a)) if a.first() == Some(&Value::Int(1)) => {}
                other => wrong.push(format!("a play on {id}: {other:?}")),
            }
            let renewed = send(
                &mut conns[n],
                "SL.RENEW",
                &[lease_key(id, &nonce), b"60000".to_vec()],
            );
            if !matches!(&renewed, Ok(Value::Array(a)) if a.len() == 1 && a[0] != Value::Nil) {
                wrong.push(format!("a renewal on {id}: {renewed:?}"));
            }
        }
        let mut args = call("SL.FORCE_STOP", &account, &audit_key(id));
        args[5] = vec![b'}'; 16];
        match send(&mut conns[n], "SL.FORCE_STOP", &args) {
            Ok(Value::Array(a)) if a.first() == Some(&Value::Int(1)) => {}
            other => wrong.push(format!("a force-stop on {id}: {other:?}")),
        }
        let slot = cluster.slot(&mut conns[n], &account);
        let count: i64 = redis::cmd("CLUSTER")
            .arg("COUNTKEYSINSLOT")
            .arg(slot)
            .query(&mut conns[n])
            .unwrap();
        if count != 4 {
            wrong.push(format!(
                "slot {slot} of {id} holds {count} keys, not the account key, a lease key, the audit list and the history"
            ));
        }
    }
    let misfiled = cluster.misfiled();
    if !misfiled.is_empty() {
        wrong.push(format!(
            "keys outside their node's slots or unfiled: {misfiled:?}"
        ));
    }
    assert!(wrong.is_empty(), "{engine:?}:\n{}", wrong.join("\n"));
}

#[test]
fn a_two_node_cluster_refuses_untagged_keys_and_keeps_leases_in_their_slot() {
    for engine in Engine::present("the two-node cluster") {
        two_nodes(engine);
    }
}
