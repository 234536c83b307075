//! Each key a command names is declared with the access the command really has (key specs):
//! `SL.LIST` reads its account key (`RO access`), the writing commands read and update it
//! (`RW access update`), the support actions add to their audit list (`RW insert`), `SL.RENEW`
//! reads and renews its lease keys (`RW access update`, arguments 1..-2). So an ACL user with
//! read-only key permissions (`%R~sl:*`) may list an account and nothing more.

mod support;

use redis::Value;
use support::{Engine, Server, call};

fn text(v: &Value) -> String {
    match v {
        Value::SimpleString(s) => s.clone(),
        Value::BulkString(b) => String::from_utf8_lossy(b).into_owned(),
        Value::Int(n) => n.to_string(),
        other => format!("{other:?}"),
    }
}

/// The flags of each key spec `COMMAND INFO` shows for a command.
fn key_spec_flags(c: &mut redis::Connection, command: &str) -> Vec<Vec<String>> {
    let info: Vec<Value> = redis::cmd("COMMAND")
        .arg("INFO")
        .arg(command)
        .query(c)
        .unwrap();
    let Some(Value::Array(info)) = info.first() else {
        panic!("{command}: no COMMAND INFO");
    };
    let Some(Value::Array(specs)) = info.get(8) else {
        panic!("{command}: no key specs in {info:?}");
    };
    specs
        .iter()
        .map(|spec| {
            let fields = match spec {
                Value::Array(f) => f.clone(),
                Value::Map(m) => m.iter().flat_map(|(k, v)| [k.clone(), v.clone()]).collect(),
                other => panic!("{command}: a key spec {other:?}"),
            };
            let at = fields
                .iter()
                .position(|f| text(f) == "flags")
                .expect("flags");
            match &fields[at + 1] {
                Value::Array(flags) => flags.iter().map(text).collect(),
                other => panic!("{command}: flags {other:?}"),
            }
        })
        .collect()
}

/// First key, last key and step, as `COMMAND INFO` (and an old cluster client) reads them.
fn legacy_range(c: &mut redis::Connection, command: &str) -> [i64; 3] {
    let info: Vec<Vec<Value>> = redis::cmd("COMMAND")
        .arg("INFO")
        .arg(command)
        .query(c)
        .unwrap();
    let n = |i: usize| match &info[0][i] {
        Value::Int(n) => *n,
        other => panic!("{command}: {other:?}"),
    };
    [n(3), n(4), n(5)]
}

const READS: &[&str] = &["RO", "access"];
const UPDATES: &[&str] = &["RW", "access", "update"];
const APPENDS: &[&str] = &["RW", "insert"];

/// A command, the flags of each of its key specs, its legacy key range.
type Declared = (&'static str, &'static [&'static [&'static str]], [i64; 3]);

const EXPECTED: [Declared; 7] = [
    ("sl.list", &[READS], [1, 1, 1]),
    ("sl.acquire", &[UPDATES], [1, 1, 1]),
    ("sl.heartbeat", &[UPDATES], [1, 1, 1]),
    ("sl.release", &[UPDATES], [1, 1, 1]),
    ("sl.renew", &[UPDATES], [1, -2, 1]),
    ("sl.force_stop", &[UPDATES, APPENDS], [1, 2, 1]),
    ("sl.set_override", &[UPDATES, APPENDS], [1, 2, 1]),
];

fn declared(engine: Engine) {
    let server = Server::with_module_on(engine, &[]);
    let mut c = server.connect();
    let mut wrong = Vec::new();
    for (command, flags, range) in EXPECTED {
        let flags: Vec<Vec<String>> = flags
            .iter()
            .map(|f| f.iter().map(|s| s.to_string()).collect())
            .collect();
        let got = key_spec_flags(&mut c, command);
        if got != flags {
            wrong.push(format!("{command}: key specs {got:?}, not {flags:?}"));
        }
        let got = legacy_range(&mut c, command);
        if got != range {
            wrong.push(format!("{command}: keys {got:?}, not {range:?}"));
        }
    }
    let keys: Vec<String> = redis::cmd("COMMAND")
        .arg("GETKEYS")
        .arg("SL.RENEW")
        .arg("sl:{a}12345678")
        .arg("sl:{b}12345678")
        .arg(1000)
        .query(&mut c)
        .unwrap();
    if keys != ["sl:{a}12345678", "sl:{b}12345678"] {
        wrong.push(format!("SL.RENEW's keys: {keys:?}"));
    }

    // A user who may only read sl:* keys lists an account, and plays nothing.
    redis::cmd("ACL")
        .arg("SETUSER")
        .arg("ro")
        .arg("on")
        .arg("nopass")
        .arg("%R~sl:*")
        .arg("+@all")
        .exec(&mut c)
        .unwrap();
    let mut ro = redis::Client::open(format!("redis://ro:x@127.0.0.1:{}", server.port))
        .unwrap()
        .get_connection()
        .unwrap();
    let mut send = |command: &str| {
        let mut cmd = redis::cmd(command);
        for a in call(command, b"sl:{a}", b"sl:audit:{a}") {
            cmd.arg(a);
        }
        cmd.query::<Value>(&mut ro).map_err(|e| e.to_string())
    };
    let listed = send("SL.LIST");
    if listed.is_err() {
        wrong.push(format!("a %R~sl:* user's SL.LIST: {listed:?}"));
    }
    for command in ["SL.ACQUIRE", "SL.RELEASE", "SL.SET_OVERRIDE"] {
        let refused = send(command);
        if !refused.as_ref().is_err_and(|e| e.contains("NoPerm")) {
            wrong.push(format!("a %R~sl:* user's {command}: {refused:?}"));
        }
    }
    assert!(wrong.is_empty(), "{engine:?}:\n{}", wrong.join("\n"));
}

#[test]
fn each_key_is_declared_with_the_access_the_command_has() {
    for engine in Engine::present("key specs") {
        declared(engine);
    }
}
