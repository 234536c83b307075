//! Junk against the module: wrong arity, huge and binary arguments in every position, keys of
//! the wrong type, account values that do not follow the layout. Every call must get an answer
//! (a result or an error reply, never a dropped connection), the server must live through all
//! of it, and no junk may reach an account value: every account the module wrote still parses.

mod support;

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use redis::{Connection, ErrorKind, Value};
use support::Server;

/// The module's commands and how many arguments each takes after its name.
const COMMANDS: [(&str, usize); 8] = [
    ("SL.VERSION", 0),
    ("SL.RENEW", 2),
    ("SL.ACQUIRE", 14),
    ("SL.HEARTBEAT", 7),
    ("SL.RELEASE", 5),
    ("SL.LIST", 4),
    ("SL.FORCE_STOP", 12),
    ("SL.SET_OVERRIDE", 13),
];

/// Accounts the test garbles itself (left out of the final layout check).
const GARBLED: [&str; 6] = [
    "sl:{hash}",
    "sl:{list}",
    "sl:{short}",
    "sl:{cut}",
    "sl:{huge-len}",
    "sl:{v9}",
];

fn valid_args(command: &str, rng: &mut StdRng) -> Vec<Vec<u8>> {
    let nonce: [u8; 16] = rng.random();
    let device = ["tv", "phone", "tablet"][rng.random_range(0..3)];
    let s = |t: &str| t.as_bytes().to_vec();
    match command {
        "SL.ACQUIRE" => vec![
            s("1000"),
            s("2000"),
            s(""),
            s("0"),
            s("basic"),
            s("2"),
            s(device),
            nonce.to_vec(),
            vec![4, 1, 0, 0, 0],
            s(""),
            s(""),
            s(""),
            s(""),
        ],
        "SL.HEARTBEAT" => vec![
            s("1000"),
            s("2000"),
            s("basic"),
            s("2"),
            s(device),
            nonce.to_vec(),
        ],
        "SL.RELEASE" => vec![s("1000"), s("2000"), s(device), nonce.to_vec()],
        // More lease keys (one of another type, sometimes), then the TTL.
        "SL.RENEW" => {
            let mut args: Vec<Vec<u8>> = (0..rng.random_range(0..4))
                .map(|i| match i {
                    2 => s(GARBLED[0]),
                    _ => {
                        let mut key = s("sl:{ok-1}");
                        key.extend_from_slice(&nonce[..8]);
                        key
                    }
                })
                .collect();
            args.push(s("1000"));
            args
        }
        "SL.LIST" => vec![s("1000"), s("basic"), s("2")],
        // The audit list: the account's, or sometimes a key of another type.
        "SL.FORCE_STOP" | "SL.SET_OVERRIDE" => {
            let list = match rng.random_bool(0.2) {
                true => s(GARBLED[2]),
                false => s("sl:audit:{ok-1}"),
            };
            let mut args = vec![list, s("1000"), s("2000")];
            match command {
                "SL.FORCE_STOP" => args.extend([s(device), nonce.to_vec(), s("ok-1"), s("stream")]),
                _ => args.extend([s("basic"), s("2"), s("3"), s("60000"), s("ok-1")]),
            }
            args.extend([s("support"), s("reason"), s("50"), s("86400000")]);
            args
        }
        _ => Vec::new(),
    }
}

/// One junk argument: empty, binary, huge, a number out of every range, or text.
fn junk(rng: &mut StdRng) -> Vec<u8> {
    match rng.random_range(0..8) {
        0 => Vec::new(),
        1 => (0..rng.random_range(1..64)).map(|_| rng.random()).collect(),
        2 => vec![rng.random(); 1 << 20], // 1 MiB
        3 => b"-1".to_vec(),
        4 => b"99999999999999999999999".to_vec(),
        5 => b"256".to_vec(),
        6 => b"1e3".to_vec(),
        _ => vec![b'\0'; 300],
    }
}

fn send(c: &mut Connection, command: &str, args: &[Vec<u8>]) -> Result<Value, String> {
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

/// Whether an account value parses whole under layout 2.
fn parses(v: &[u8]) -> bool {
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

#[test]
fn junk_gets_error_replies_and_the_server_lives() {
    let mut server = Server::with_module(&[]);
    let mut c = server.connect();
    let mut rng = StdRng::seed_from_u64(26);

    // Keys of the wrong type and values that do not follow the layout.
    redis::cmd("HSET")
        .arg(GARBLED[0])
        .arg("f")
        .arg("v")
        .exec(&mut c)
        .unwrap();
    redis::cmd("RPUSH")
        .arg(GARBLED[1])
        .arg("x")
        .exec(&mut c)
        .unwrap();
    redis::cmd("SET")
        .arg(GARBLED[2])
        .arg(&[2u8][..])
        .exec(&mut c)
        .unwrap();
    let mut cut = vec![2, 2, 5];
    cut.extend_from_slice(b"basic\0\0\0\0\0\0\0\0\0\0\0\0");
    redis::cmd("SET")
        .arg(GARBLED[3])
        .arg(&cut)
        .exec(&mut c)
        .unwrap();
    redis::cmd("SET")
        .arg(GARBLED[4])
        .arg(&[2u8, 2, 255, 1][..])
        .exec(&mut c)
        .unwrap();
    redis::cmd("SET")
        .arg(GARBLED[5])
        .arg(&[9u8; 80][..])
        .exec(&mut c)
        .unwrap();
    let keys: Vec<Vec<u8>> = GARBLED
        .iter()
        .map(|k| k.as_bytes().to_vec())
        .chain(["sl:{ok-1}", "sl:{ok-2}"].map(|k| k.as_bytes().to_vec()))
        .chain([vec![0xff; 1 << 20], Vec::new(), vec![0, 1, 2]])
        .collect();

    let (mut errors, mut answers) = (0, 0);
    for round in 0..3_000 {
        let (command, n) = COMMANDS[rng.random_range(0..COMMANDS.len())];
        let mut args = match rng.random_range(0..10) {
            // Wrong arity: too few or too many.
            0 => (0..rng.random_range(0..20))
                .map(|_| junk(&mut rng))
                .collect(),
            // One argument junk, the rest valid.
            1..7 if n > 0 => {
                let mut args = valid_args(command, &mut rng);
                let i = rng.random_range(0..args.len().max(1));
                if let Some(arg) = args.get_mut(i) {
                    *arg = junk(&mut rng);
                }
                args
            }
            // Everything junk.
            7 => (0..n.saturating_sub(1)).map(|_| junk(&mut rng)).collect(),
            // Valid, on any key.
            _ => valid_args(command, &mut rng),
        };
        if n > 0 && !args.is_empty() {
            args.insert(0, keys[rng.random_range(0..keys.len())].clone());
        }
        match send(&mut c, command, &args) {
            Ok(_) => answers += 1,
            Err(e) => {
                errors += 1;
                assert!(
                    ["screenlimit: ", "WRONGTYPE", "wrong number of arguments"]
                        .iter()
                        .any(|p| e.contains(p)),
                    "round {round}, {command}: unexpected error {e}"
                );
            }
        }
    }
    eprintln!("{answers} answers, {errors} error replies");
    assert!(
        answers > 100 && errors > 1_000,
        "junk that never reached the commands"
    );
    assert!(server.alive(), "the server did not live through the junk");

    // Nothing but well-formed records in the accounts the module wrote.
    let names: Vec<Vec<u8>> = redis::cmd("KEYS").arg("sl:{ok-*}").query(&mut c).unwrap();
    let mut checked = 0;
    for name in names.iter().filter(|n| n.ends_with(b"}")) {
        let value: Vec<u8> = redis::cmd("GET").arg(name).query(&mut c).unwrap();
        assert!(
            parses(&value),
            "{}: junk reached the value",
            String::from_utf8_lossy(name)
        );
        checked += 1;
    }
    assert!(checked > 0, "no account was ever written");
    for garbled in GARBLED {
        let kind: String = redis::cmd("TYPE").arg(garbled).query(&mut c).unwrap();
        assert_ne!(kind, "none", "{garbled} was lost");
    }
}

/// The few facts of the layout the module copies rather than shares with the limiter: the
/// version, the nonce's length, the lease key's shape. Kept equal here.
#[test]
fn the_module_speaks_the_limiters_layout() {
    use screenlimit_limiter::store::redis::{Scripts, account_key, lease_key};
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
    // A play through the module leaves the lease key where the limiter looks for it.
    let details = [4u8, 1, 0, 0, 0];
    let granted: Vec<Value> = redis::cmd("SL.ACQUIRE")
        .arg(account_key("layout"))
        .arg(1000)
        .arg(2000)
        .arg("")
        .arg(0)
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
    assert_eq!(granted[0], Value::Int(1));
    let exists: i64 = redis::cmd("EXISTS")
        .arg(lease_key("layout", &nonce))
        .query(&mut c)
        .unwrap();
    assert_eq!(
        exists, 1,
        "the module's lease key is not the limiter's lease_key()"
    );
}
