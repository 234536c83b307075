//! Junk for the module's commands, and what must hold after it: wrong arity, huge and binary
//! arguments in every position, key names that are not the limiter's (no hash tag, an empty or
//! open one, something after it, an audit list of another account, the account key named twice),
//! keys of the wrong type (a list where the account string goes, a string where the audit list
//! goes, a list where a lease key goes, a string where the history list goes), account values
//! that do not follow the layout, history bounds out of range, an enforcement that is not
//! `shadow`, a heartbeat's mode that is not `learning`. Every call must get an answer, a
//! call naming a key the limiter never names must be refused, and no junk may reach a key name,
//! an account value or the layout of a history entry.

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use redis::{Connection, ErrorKind, Value};

use super::cluster::Cluster;

/// The module's commands and how many arguments each takes after its name, keys included.
pub const COMMANDS: [(&str, usize); 8] = [
    ("SL.VERSION", 0),
    ("SL.RENEW", 2),
    ("SL.ACQUIRE", 15),
    ("SL.HEARTBEAT", 8),
    ("SL.RELEASE", 6),
    ("SL.LIST", 4),
    ("SL.FORCE_STOP", 13),
    ("SL.SET_OVERRIDE", 14),
];

/// Accounts the module writes freely. `ok-3`'s audit list and `ok-1`'s history are strings,
/// `ok-2` has a lease key that is a list (nonce `NONCES[3]`).
pub const ACCOUNTS: [&str; 3] = ["ok-1", "ok-2", "ok-3"];

/// Accounts whose key the test garbles itself: another type, or a value off the layout.
pub const GARBLED: [&str; 6] = ["hash", "list", "short", "cut", "huge-len", "v9"];

/// Nonces from a small pool, so that heartbeats and stops find the leases plays started.
const NONCES: [[u8; 16]; 4] = [[1; 16], [b'}'; 16], [b'{'; 16], [7; 16]];

/// Long enough that nothing expires while a test compares two servers.
const TTL: &str = "60000";
const KEEP: &str = "120000";
/// History bounds (`<entries kept>:<retention ms>`): few entries, so that trimming happens too.
const HISTORY_BOUNDS: &str = "5:600000";

/// History bounds the module must refuse: out of range, signed, spaced, cut, doubled, not
/// decimal, past `i64`.
pub const BAD_HISTORY_BOUNDS: [&str; 14] = [
    "",
    ":",
    "5",
    "5:",
    ":600000",
    "0:600000",
    "5:0",
    "-5:600000",
    "+5:600000",
    "5 :600000",
    "5:600000:1",
    "1000001:600000",
    "5:100000000001",
    "5:99999999999999999999999",
];

pub fn account_key(id: &str) -> Vec<u8> {
    format!("sl:{{{id}}}").into_bytes()
}

pub fn audit_key(id: &str) -> Vec<u8> {
    format!("sl:audit:{{{id}}}").into_bytes()
}

pub fn history_key(id: &str) -> Vec<u8> {
    format!("sl:history:{{{id}}}").into_bytes()
}

pub fn lease_key(id: &str, nonce: &[u8]) -> Vec<u8> {
    let mut key = account_key(id);
    key.extend_from_slice(&nonce[..8]);
    key
}

/// Names the limiter never sends: no hash tag, an empty or open one, bytes after it, a brace in
/// the id, a tag that is not first, an audit list's name, huge, empty, binary.
pub fn bad_names() -> Vec<Vec<u8>> {
    [
        "plain-account",
        "plainx-3",
        "sl:{}",
        "sl:{open",
        "sl:{ok-1}x",
        "sl:{ok{1}",
        "sl:{ok-1}}",
        "{ok-1}",
        "x:sl:{ok-1}",
        "sl:audit:{ok-1}",
    ]
    .map(|k| k.as_bytes().to_vec())
    .into_iter()
    .chain([vec![0xff; 1 << 20], Vec::new(), vec![0, 1, 2]])
    .collect()
}

/// The account id of `sl:{id}`, the limiter's account key.
fn account_id(key: &[u8]) -> Option<&[u8]> {
    let id = key.strip_prefix(b"sl:{")?.strip_suffix(b"}")?;
    let clean = !id.is_empty() && !id.iter().any(|b| matches!(b, b'{' | b'}'));
    clean.then_some(id)
}

/// Whether the key is a lease key: `sl:{id}` and 8 nonce bytes, whatever they are.
fn is_lease_key(key: &[u8]) -> bool {
    key.len() > 8 && account_id(&key[..key.len() - 8]).is_some()
}

/// Whether `key` is a name the limiter uses: an account key, a lease key, an audit list, a
/// history list.
pub fn limiter_name(key: &[u8]) -> bool {
    let of_an_account = |prefix: &[u8]| {
        key.strip_prefix(prefix).is_some_and(|rest| {
            let mut tagged = b"sl:".to_vec();
            tagged.extend_from_slice(rest);
            account_id(&tagged).is_some()
        })
    };
    of_an_account(b"sl:audit:")
        || of_an_account(b"sl:history:")
        || account_id(key).is_some()
        || is_lease_key(key)
}

/// Whether a history entry follows its layout (`limiter/src/store/redis/history.rs`) whole.
pub fn history_parses(entry: &[u8]) -> bool {
    fn device(e: &[u8], p: usize) -> Option<usize> {
        let id = *e.get(p)? as usize;
        let meta = *e.get(p + 2 + id)? as usize;
        let end = p + 3 + id + meta;
        (end <= e.len()).then_some(end)
    }
    let body = |e: &[u8]| -> Option<bool> {
        let p = 8;
        Some(match e.get(1)? {
            // A refusal, or in shadow the refusal a granted play would have been.
            1 | 8 => {
                let mut p = device(e, p + 2)?;
                while p < e.len() {
                    p = device(e, p)?;
                }
                true
            }
            2 => device(e, device(e, p)?)? == e.len(),
            3 => device(e, p).is_some(),
            4 => p + 1 + *e.get(p)? as usize == e.len(),
            5 => device(e, p + 6)? == e.len(),
            6 | 7 => e.len() >= p + 7,
            _ => false,
        })
    };
    entry.len() >= 8 && entry[0] == 1 && body(entry) == Some(true)
}

/// Whether a call's keys are the limiter's: the account key first, a support action's audit
/// list of the same account second, `SL.RENEW`'s lease keys.
pub fn names_ok(command: &str, args: &[Vec<u8>]) -> bool {
    match command {
        "SL.VERSION" => true,
        "SL.RENEW" => args.len() < 2 || args[..args.len() - 1].iter().all(|k| is_lease_key(k)),
        "SL.FORCE_STOP" | "SL.SET_OVERRIDE" => {
            let id = args.first().and_then(|k| account_id(k));
            id.is_some_and(|id| {
                args.get(1).is_none_or(|audit| {
                    audit
                        .strip_prefix(b"sl:audit:{")
                        .and_then(|r| r.strip_suffix(b"}"))
                        == Some(id)
                })
            })
        }
        _ => args.first().is_none_or(|k| account_id(k).is_some()),
    }
}

/// Writes the keys of the wrong type and the values that do not follow the layout.
pub fn prepare(target: &mut impl Target) {
    let k = |id: &str| account_key(id);
    let mut cut = vec![2, 2, 5];
    cut.extend_from_slice(b"basic\0\0\0\0\0\0\0\0\0\0\0\0");
    let writes: [(&str, Vec<Vec<u8>>); 9] = [
        ("HSET", vec![k("hash"), b"f".to_vec(), b"v".to_vec()]),
        ("RPUSH", vec![k("list"), b"x".to_vec()]),
        ("SET", vec![k("short"), vec![2]]),
        ("SET", vec![k("cut"), cut]),
        ("SET", vec![k("huge-len"), vec![2, 2, 255, 1]]),
        ("SET", vec![k("v9"), vec![9; 80]]),
        ("SET", vec![audit_key("ok-3"), b"a string".to_vec()]),
        ("SET", vec![history_key("ok-1"), b"a string".to_vec()]),
        ("RPUSH", vec![lease_key("ok-2", &NONCES[3]), b"x".to_vec()]),
    ];
    for (command, args) in writes {
        target
            .send(command, &args)
            .expect("a write of the test's own");
    }
}

/// A call as the limiter would send it, on one of the accounts (sometimes a garbled one).
fn valid_args(command: &str, rng: &mut StdRng) -> Vec<Vec<u8>> {
    let id = match rng.random_bool(0.8) {
        true => ACCOUNTS[rng.random_range(0..ACCOUNTS.len())],
        false => GARBLED[rng.random_range(0..GARBLED.len())],
    };
    let nonce = NONCES[rng.random_range(0..NONCES.len())].to_vec();
    let device = ["tv", "phone", "tablet"][rng.random_range(0..3)];
    let s = |t: &str| t.as_bytes().to_vec();
    let mut args = vec![account_key(id)];
    match command {
        "SL.ACQUIRE" => {
            args.extend([
                s(TTL),
                s(KEEP),
                s(""),
                s("0"),
                s("basic"),
                s("2"),
                s(device),
                nonce,
                vec![4, 1, 0, 0, 0],
                s(""),
                s(""),
                s(""),
                s(""),
                s(HISTORY_BOUNDS),
            ]);
            // An account in shadow: a play over the limit is granted, its entry of kind 8.
            if rng.random_bool(0.3) {
                args.push(s("shadow"));
            }
        }
        "SL.HEARTBEAT" => {
            args.extend([
                s(TTL),
                s(KEEP),
                s("basic"),
                s("2"),
                s(device),
                nonce,
                s(HISTORY_BOUNDS),
            ]);
            // An account learning: a lease it does not hold is taken back on a full account.
            if rng.random_bool(0.3) {
                args.push(s("learning"));
            }
        }
        "SL.RELEASE" => args.extend([s(TTL), s(KEEP), s(device), nonce, s(HISTORY_BOUNDS)]),
        "SL.RENEW" => {
            args = (0..rng.random_range(0..4))
                .map(|_| {
                    let id = ACCOUNTS[rng.random_range(0..ACCOUNTS.len())];
                    lease_key(id, &NONCES[rng.random_range(0..NONCES.len())])
                })
                .collect();
            args.push(s(TTL));
        }
        "SL.LIST" => args.extend([s(TTL), s("basic"), s("2")]),
        "SL.FORCE_STOP" | "SL.SET_OVERRIDE" => {
            args.extend([audit_key(id), s(TTL), s(KEEP)]);
            match command {
                "SL.FORCE_STOP" => args.extend([s(device), nonce, s(id), s("stream")]),
                _ => args.extend([s("basic"), s("2"), s("3"), s("60000"), s(id)]),
            }
            args.extend([s("support"), s("reason"), s("50"), s("86400000")]);
            args.push(s(HISTORY_BOUNDS));
        }
        _ => args.clear(),
    }
    args
}

/// One junk argument: empty, binary, huge, a number out of every range, history bounds the
/// module refuses, or text.
fn junk(rng: &mut StdRng) -> Vec<u8> {
    match rng.random_range(0..9) {
        0 => Vec::new(),
        1 => (0..rng.random_range(1..64)).map(|_| rng.random()).collect(),
        2 => vec![rng.random(); 1 << 20], // 1 MiB
        3 => b"-1".to_vec(),
        4 => b"99999999999999999999999".to_vec(),
        5 => b"256".to_vec(),
        6 => b"1e3".to_vec(),
        7 => BAD_HISTORY_BOUNDS[rng.random_range(0..BAD_HISTORY_BOUNDS.len())]
            .as_bytes()
            .to_vec(),
        _ => vec![b'\0'; 300],
    }
}

/// One key of a valid call replaced: a name the limiter never sends, another account's audit
/// list, the account key again where its audit list goes, a lease key named twice or cut short.
fn key_junk(command: &str, args: &mut Vec<Vec<u8>>, rng: &mut StdRng) {
    let bad = bad_names();
    let other = ACCOUNTS[rng.random_range(0..ACCOUNTS.len())];
    match command {
        "SL.FORCE_STOP" | "SL.SET_OVERRIDE" => match rng.random_range(0..4) {
            0 => args[0] = bad[rng.random_range(0..bad.len())].clone(),
            1 => args[1] = args[0].clone(),
            2 => args[1] = audit_key(if other == "ok-1" { "ok-2" } else { "ok-1" }),
            _ => args[1] = bad[rng.random_range(0..bad.len())].clone(),
        },
        "SL.RENEW" if args.len() > 1 => {
            let i = rng.random_range(0..args.len() - 1);
            let mut short = account_key(other);
            short.extend_from_slice(&[b'}'; 7][..rng.random_range(0..8)]);
            let mut long = lease_key(other, &NONCES[1]);
            long.push(b'x');
            let mut plain = b"plain".to_vec();
            plain.extend_from_slice(&NONCES[0][..8]);
            args[i] = match rng.random_range(0..5) {
                0 => short,
                1 => long,
                2 => plain,
                3 => bad[rng.random_range(0..bad.len())].clone(),
                // The same key twice, and a lease key of another account beside it.
                _ => args[0].clone(),
            };
            args.insert(args.len() - 1, lease_key(other, &NONCES[2]));
        }
        "SL.VERSION" | "SL.RENEW" => {}
        _ => args[0] = bad[rng.random_range(0..bad.len())].clone(),
    }
}

/// A call: junk of some kind, or valid.
pub fn call(rng: &mut StdRng) -> (&'static str, Vec<Vec<u8>>) {
    let (command, n) = COMMANDS[rng.random_range(0..COMMANDS.len())];
    let mut args = valid_args(command, rng);
    match rng.random_range(0..10) {
        // Wrong arity: too few or too many.
        0 => args = (0..rng.random_range(0..20)).map(|_| junk(rng)).collect(),
        // One argument junk, the rest valid.
        1..4 if n > 0 => {
            let i = rng.random_range(0..args.len().max(1));
            if let Some(arg) = args.get_mut(i) {
                *arg = junk(rng);
            }
        }
        // Everything junk.
        4 => args = (0..n).map(|_| junk(rng)).collect(),
        // A key the limiter never names.
        5..7 => key_junk(command, &mut args, rng),
        _ => {}
    }
    (command, args)
}

/// Where the calls go.
pub trait Target {
    /// One command; an error reply comes back as its text. A dropped connection panics.
    fn send(&mut self, command: &str, args: &[Vec<u8>]) -> Result<Value, String>;
}

fn send_on(c: &mut Connection, command: &str, args: &[Vec<u8>]) -> Result<Value, String> {
    let mut cmd = redis::cmd(command);
    for a in args {
        cmd.arg(a);
    }
    match cmd.query::<Value>(c) {
        Ok(v) => Ok(v),
        Err(e) if e.kind() == ErrorKind::Io || e.is_connection_dropped() => {
            panic!("{command}: the connection dropped: {e}")
        }
        Err(e) => Err(e.to_string()),
    }
}

impl Target for Connection {
    fn send(&mut self, command: &str, args: &[Vec<u8>]) -> Result<Value, String> {
        send_on(self, command, args)
    }
}

/// A cluster, each call sent to the node serving its first argument's slot, as a cluster client
/// sends it (a call with a key in another slot is the cluster's to refuse).
pub struct Routed<'a> {
    pub cluster: &'a Cluster,
    pub conns: [Connection; 2],
}

impl<'a> Routed<'a> {
    pub fn new(cluster: &'a Cluster) -> Routed<'a> {
        Routed {
            cluster,
            conns: [cluster.connect(0), cluster.connect(1)],
        }
    }
}

impl Target for Routed<'_> {
    fn send(&mut self, command: &str, args: &[Vec<u8>]) -> Result<Value, String> {
        let n = match args.first() {
            Some(key) => Cluster::owner(self.cluster.slot(&mut self.conns[0], key)),
            None => 0,
        };
        send_on(&mut self.conns[n], command, args)
    }
}

/// Runs `rounds` calls: every error is one the module or the server gives junk (never
/// `TRYAGAIN`: nothing migrates), and every call naming a key the limiter never names is
/// refused. Answers and error replies counted.
pub fn run(target: &mut impl Target, seed: u64, rounds: usize) -> (usize, usize) {
    let mut rng = StdRng::seed_from_u64(seed);
    let (mut answers, mut errors) = (0, 0);
    for round in 0..rounds {
        let (command, args) = call(&mut rng);
        let shown = || {
            args.iter()
                .map(|a| String::from_utf8_lossy(&a[..a.len().min(40)]).into_owned())
                .collect::<Vec<_>>()
        };
        match target.send(command, &args) {
            Ok(answer) => {
                answers += 1;
                assert!(
                    names_ok(command, &args),
                    "round {round}: {command} {:?} names a key the limiter never names, and was answered {answer:?}",
                    shown()
                );
            }
            Err(e) => {
                errors += 1;
                assert!(
                    [
                        "screenlimit: ",
                        "WRONGTYPE",
                        "wrong number of arguments",
                        "CrossSlot"
                    ]
                    .iter()
                    .any(|p| e.contains(p)),
                    "round {round}: {command} {:?}: unexpected error {e}",
                    shown()
                );
            }
        }
    }
    (answers, errors)
}

/// Whether an account value parses whole under layout 2.
pub fn parses(v: &[u8]) -> bool {
    let Some(&plan_len) = v.get(2) else {
        return false;
    };
    let mut p = 3 + plan_len as usize + 7;
    while p < v.len() {
        let Some(&device_len) = v.get(p + 29) else {
            return false;
        };
        let d = p + 30 + device_len as usize;
        let Some(&details_len) = v.get(d) else {
            return false;
        };
        p = d + 1 + details_len as usize;
    }
    v.first() == Some(&2) && p == v.len()
}

/// What junk must not have done on a server (or a cluster's nodes): a key under a name the
/// limiter never uses, an account value off the layout, a garbled key lost. How many accounts
/// the module wrote.
pub fn check_keys(conns: &mut [Connection]) -> Result<usize, String> {
    // A cluster node answers `MOVED` for a key of the other node's slots: not here.
    let kind = |c: &mut Connection, key: &[u8]| -> String {
        redis::cmd("TYPE")
            .arg(key)
            .query(c)
            .unwrap_or_else(|_| "none".into())
    };
    for c in conns.iter_mut() {
        let names: Vec<Vec<u8>> = redis::cmd("KEYS").arg("*").query(c).unwrap();
        if let Some(name) = names.iter().find(|n| !limiter_name(n)) {
            return Err(format!(
                "a key the limiter never names was written: {:?}",
                String::from_utf8_lossy(&name[..name.len().min(40)])
            ));
        }
    }
    let mut histories = 0;
    for c in conns.iter_mut() {
        let lists: Vec<Vec<u8>> = redis::cmd("KEYS").arg("sl:history:*").query(c).unwrap();
        for list in lists {
            if kind(c, &list) != "list" {
                continue;
            }
            histories += 1;
            let entries: Vec<Vec<u8>> = redis::cmd("LRANGE")
                .arg(&list)
                .arg(0)
                .arg(-1)
                .query(c)
                .unwrap();
            if entries.len() > 5 || !entries.iter().all(|e| history_parses(e)) {
                return Err(format!(
                    "{}: junk reached the history (or it outgrew its cap): {entries:?}",
                    String::from_utf8_lossy(&list)
                ));
            }
        }
    }
    if histories == 0 {
        return Err("no history was ever written".into());
    }
    // A history key of another type is left alone.
    if !conns
        .iter_mut()
        .any(|c| kind(c, &history_key("ok-1")) == "string")
    {
        return Err("sl:history:{ok-1}, a string, was overwritten or lost".into());
    }
    let mut accounts = 0;
    for id in ACCOUNTS {
        for c in conns.iter_mut() {
            if kind(c, &account_key(id)) == "none" {
                continue;
            }
            let value: Vec<u8> = redis::cmd("GET").arg(account_key(id)).query(c).unwrap();
            if !parses(&value) {
                return Err(format!("sl:{{{id}}}: junk reached the value"));
            }
            accounts += 1;
        }
    }
    for id in GARBLED {
        if conns
            .iter_mut()
            .all(|c| kind(c, &account_key(id)) == "none")
        {
            return Err(format!("sl:{{{id}}} was lost"));
        }
    }
    Ok(accounts)
}
