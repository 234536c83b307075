//! The module takes only the key names the limiter sends: an account key `sl:{<id>}` (no brace
//! in the id, nothing after it), the audit list `sl:audit:{<the same id>}`, lease keys
//! `sl:{<id>}` and 8 nonce bytes. Anything else is refused before a key is read or written: a
//! lease key (the account key plus nonce bytes) hashes by the account's tag only when the
//! account key has one, and a support action's audit list must be another key of the same slot.

mod support;

use redis::{Connection, Value};
use support::junk::{account_key, audit_key, bad_names, lease_key};
use support::{Engine, KEYED, NONCE, Replicated, Server, call};

fn send(c: &mut Connection, command: &str, args: &[Vec<u8>]) -> Result<Value, String> {
    let mut cmd = redis::cmd(command);
    for a in args {
        cmd.arg(a);
    }
    cmd.query::<Value>(c).map_err(|e| e.to_string())
}

fn short(key: &[u8]) -> String {
    String::from_utf8_lossy(&key[..key.len().min(40)]).into_owned()
}

/// Every command refuses an account key the limiter never sends, before it reads the key (a key
/// of another type there is not `WRONGTYPE`) and without writing anything.
fn bad_account_keys(engine: Engine) {
    let server = Server::with_module_on(engine, &[]);
    let mut c = server.connect();
    let mut wrong = Vec::new();
    for held in [false, true] {
        for name in bad_names() {
            redis::cmd("FLUSHALL").exec(&mut c).unwrap();
            if held {
                redis::cmd("HSET")
                    .arg(&name)
                    .arg("f")
                    .arg("v")
                    .exec(&mut c)
                    .unwrap();
            }
            for command in KEYED {
                let args = call(command, &name, b"sl:audit:{a}");
                let answer = send(&mut c, command, &args);
                let size: i64 = redis::cmd("DBSIZE").query(&mut c).unwrap();
                let refused = answer
                    .as_ref()
                    .is_err_and(|e| e.contains("screenlimit: bad account key"));
                if !refused || size != i64::from(held) {
                    wrong.push(format!(
                        "{command} {:?}{}: {answer:?}, {size} keys after",
                        short(&name),
                        if held { " (a hash)" } else { "" }
                    ));
                }
            }
        }
    }
    assert!(
        wrong.is_empty(),
        "{engine:?}, not refused:\n{}",
        wrong.join("\n")
    );
}

/// A support action refuses an audit list that is not its account's, the account key named
/// twice among them, and leaves the account as it was.
fn bad_audit_keys(engine: Engine) {
    let server = Server::with_module_on(engine, &[]);
    let mut c = server.connect();
    let account = account_key("a");
    let mut wrong = Vec::new();
    let bad: [&[u8]; 8] = [
        b"sl:{a}",
        b"sl:audit:{b}",
        b"sl:audit:{a}x",
        b"sl:audit:{}",
        b"sl:audit:a",
        b"audit:{a}",
        b"sl:audit:{a",
        b"plain",
    ];
    for audit in bad {
        for command in ["SL.FORCE_STOP", "SL.SET_OVERRIDE"] {
            redis::cmd("FLUSHALL").exec(&mut c).unwrap();
            send(&mut c, "SL.ACQUIRE", &call("SL.ACQUIRE", &account, b"")).unwrap();
            let before = support::keyspace(&mut c);
            let answer = send(&mut c, command, &call(command, &account, audit));
            let refused = answer
                .as_ref()
                .is_err_and(|e| e.contains("screenlimit: bad audit key"));
            if !refused || support::keyspace(&mut c) != before {
                wrong.push(format!("{command} sl:{{a}} {:?}: {answer:?}", short(audit)));
            }
        }
    }
    assert!(
        wrong.is_empty(),
        "{engine:?}, not refused:\n{}",
        wrong.join("\n")
    );
}

/// `SL.RENEW` takes lease keys only: `sl:{<id>}` and exactly 8 bytes, any bytes (braces too);
/// one bad key refuses the call, and nothing is renewed.
fn renew_keys(engine: Engine) {
    let server = Server::with_module_on(engine, &[]);
    let mut c = server.connect();
    let good = [
        lease_key("a", b"}}}}}}}}"),
        lease_key("b", b"{{{{{{{{"),
        lease_key("a", &NONCE),
    ];
    for key in &good {
        redis::cmd("SET")
            .arg(key)
            .arg("1")
            .arg("PX")
            .arg(60_000)
            .exec(&mut c)
            .unwrap();
    }
    let expiries = |c: &mut Connection| -> Vec<i64> {
        good.iter()
            .map(|k| redis::cmd("PEXPIRETIME").arg(k).query(c).unwrap())
            .collect()
    };
    let before = expiries(&mut c);
    let with = |tail: &[u8]| {
        let mut key = account_key("a");
        key.extend_from_slice(tail);
        key
    };
    let mut bad: Vec<Vec<u8>> = vec![
        account_key("a"),
        with(b"1234567"),
        with(b"123456789"),
        b"plain12345678".to_vec(),
        b"sl:{}12345678".to_vec(),
        b"sl:{a{b}12345678".to_vec(),
        b"sl:{open12345678".to_vec(),
        b"x:sl:{a}12345678".to_vec(),
    ];
    bad.extend(bad_names());
    let mut wrong = Vec::new();
    for key in bad {
        let mut args = good.to_vec();
        args.push(key.clone());
        args.push(b"120000".to_vec());
        let answer = send(&mut c, "SL.RENEW", &args);
        let refused = answer
            .as_ref()
            .is_err_and(|e| e.contains("screenlimit: bad lease key"));
        if !refused || expiries(&mut c) != before {
            wrong.push(format!("SL.RENEW … {:?}: {answer:?}", short(&key)));
        }
    }
    assert!(
        wrong.is_empty(),
        "{engine:?}, not refused:\n{}",
        wrong.join("\n")
    );
    // Well-formed lease keys of several accounts, one named twice: renewed.
    let mut args = good.to_vec();
    args.push(good[0].clone());
    args.push(b"120000".to_vec());
    let answer = send(&mut c, "SL.RENEW", &args).unwrap();
    assert_eq!(
        answer,
        Value::Array(vec![Value::BulkString(b"1".to_vec()); 4])
    );
}

#[test]
fn account_keys_the_limiter_never_sends_are_refused() {
    for engine in Engine::present("bad account keys") {
        bad_account_keys(engine);
    }
}

#[test]
fn audit_lists_of_another_name_are_refused() {
    for engine in Engine::present("bad audit keys") {
        bad_audit_keys(engine);
    }
}

#[test]
fn renew_takes_lease_keys_only() {
    for engine in Engine::present("bad lease keys") {
        renew_keys(engine);
    }
}

/// The account key given as its own audit list, and an audit list of another type: an error
/// reply, nothing a replica would refuse replicated. The replica dies (SIGABRT) on a replicated
/// effect it cannot apply, so it stays up only if every effect was one it could.
#[test]
fn a_replica_never_gets_an_effect_it_would_refuse() {
    for engine in Engine::present("the strict replica") {
        let mut pair = Replicated::start(engine);
        let mut c = pair.primary.connect();
        let mut wrong = Vec::new();
        let account = account_key("k");
        for command in ["SL.SET_OVERRIDE", "SL.FORCE_STOP"] {
            let answer = send(&mut c, command, &call(command, &account, &account));
            if !answer
                .as_ref()
                .is_err_and(|e| e.contains("screenlimit: bad audit key"))
            {
                wrong.push(format!("{command} sl:{{k}} sl:{{k}} answered {answer:?}"));
            }
        }
        // A string where the audit list goes: refused before the account is written.
        redis::cmd("SET")
            .arg(audit_key("s"))
            .arg("x")
            .exec(&mut c)
            .unwrap();
        let args = call("SL.SET_OVERRIDE", &account_key("s"), &audit_key("s"));
        let answer = send(&mut c, "SL.SET_OVERRIDE", &args);
        if !answer.as_ref().is_err_and(|e| e.contains("WRONGTYPE")) {
            wrong.push(format!("an audit list that is a string: {answer:?}"));
        }
        let exists: i64 = redis::cmd("EXISTS")
            .arg(account_key("s"))
            .query(&mut c)
            .unwrap();
        if exists != 0 {
            wrong.push("the account was written beside a refused audit list".into());
        }
        if let Err(e) = pair.check() {
            wrong.push(e);
        }
        assert!(wrong.is_empty(), "{engine:?}:\n{}", wrong.join("\n"));
    }
}
