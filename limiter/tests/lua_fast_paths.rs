//! The fast paths must answer exactly as the general code: acquire's and release's, in front of
//! their general code, and the native renewal (`GETEX` of the lease key, whose value says until
//! when the account key lives), which the limiter tries before the full heartbeat script. A seeded random history of plays (own device again, take-overs, plan changes,
//! device-type caps), renewals with good and stale nonces, stops, force-stops, overrides and clock
//! jumps, some plays of an account in shadow (let through over the limit), is run twice in one Redis: on one account through the scripts the limiter loads, on its
//! twin through the general code alone. Both read the same frozen clock (`TIME` is swapped for a
//! key the test advances), so every reply must be equal, and so must every listing, and the
//! entries both write in the account's history (refusals by the fast path's own code, take-overs,
//! force-stops, temporary limits) byte for byte. Only the general code forgets records (and with
//! them records expired leases), so those entries, and the revocations told after them, may
//! differ between the twins and are left out of that comparison; so is a force-stopped device's
//! type and name (see `compared_history`).

mod support;

use redis::{Script, Value};
use screenlimit_limiter::store::redis::Scripts;
use support::RedisServer;

const LUA: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/src/store/redis/lua/");
const TTL_MS: u64 = 1_000;
const DEVICES: [&str; 6] = ["tv", "phone-1", "phone-2", "tablet", "laptop", "console"];
const PLANS: [(&str, u8); 3] = [("basic", 1), ("standard", 2), ("premium", 4)];

/// History bounds every call ends with: more entries than a run writes, so none is trimmed.
fn history_args() -> [Vec<u8>; 1] {
    [b"100000:600000".to_vec()]
}

/// A twin's history without its expired leases and revocations (see above), newest first.
fn compared_history(redis: &mut redis::Connection, twin: &str, account: u64) -> Vec<Vec<u8>> {
    let entries: Vec<Vec<u8>> = redis::cmd("LRANGE")
        .arg(format!("sl:history:{{{twin}-{account}}}"))
        .arg(0)
        .arg(-1)
        .query(redis)
        .unwrap();
    entries
        .into_iter()
        .filter(|e| !matches!(e[1], 4 | 5))
        .map(|e| match e[1] {
            // A force-stop of a released stream names the device as its tombstone keeps it: with
            // its details where the fast path released it (a patch in place), without where the
            // general code did. Its id and the actor must agree.
            3 => {
                let id_end = 9 + e[8] as usize;
                let actor = id_end + 2 + e[id_end + 1] as usize;
                [&e[..id_end], &e[actor..]].concat()
            }
            _ => e,
        })
        .collect()
}

/// The general code of an operation alone: the helpers every script with a fast path starts
/// with (definitions only), the prelude and the operation, from their files.
fn general(op: &str) -> String {
    ["fast", "common", op]
        .iter()
        .map(|part| std::fs::read_to_string(format!("{LUA}{part}.lua")).unwrap())
        .collect()
}

/// The script the limiter loads for an operation (with its fast path where it has one).
fn shipped(op: &str) -> String {
    let (_, source) = Scripts::sources()
        .into_iter()
        .find(|(name, _)| *name == op)
        .unwrap();
    source.to_owned()
}

/// A support action's answer without the audit entry it returns for the fleet list: the entry
/// names the stopped record's display name, which may differ between the twins for a record no
/// list shows (one past its end), and the lists are what the twins must agree on.
fn without_entry(reply: Value, answer_len: usize) -> Value {
    match reply {
        Value::Array(mut items) => {
            items.truncate(answer_len);
            Value::Array(items)
        }
        other => other,
    }
}

/// A script reading the test's clock instead of the server's.
fn frozen(source: String) -> Script {
    let frozen = source.replace(
        "redis.call('TIME')",
        "redis.call('LRANGE', 'test:clock', 0, 1)",
    );
    assert!(
        frozen.contains("test:clock"),
        "a script that reads no clock"
    );
    Script::new(&frozen)
}

/// xorshift64*: the history must be the same on every run so that a failure can be replayed.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
    fn chance(&mut self, percent: u64) -> bool {
        self.below(100) < percent
    }
    fn nonce(&mut self) -> Vec<u8> {
        (0..16).map(|_| self.next() as u8).collect()
    }
}

/// Details as record.rs encodes them: length, type, then length-prefixed meta, profile, title.
fn details(kind: u8, device: &str) -> Vec<u8> {
    let fields = [device, "profile-1", "title:tt0111161"];
    let mut out = vec![0, kind];
    for field in fields {
        out.push(field.len() as u8);
        out.extend_from_slice(field.as_bytes());
    }
    out[0] = (out.len() - 1) as u8;
    out
}

/// The limiter's native renewal, on the test's clock: `GETEX <lease key> PX <ttl>`, the lease
/// key's value or nil. Lease keys expire on the script clock (`PXAT`), which runs weeks ahead of
/// Redis's, so a lease key is gone when its expiry is behind that clock. KEYS: account, lease key.
/// ARGV: ttl.
const NATIVE_RENEWAL: &str = r#"
local t = redis.call('LRANGE', 'test:clock', 0, 1)
local now = t[1] * 1000 + math.floor(t[2] / 1000)
if redis.call('PEXPIRETIME', KEYS[2]) <= now then return false end
redis.call('PEXPIREAT', KEYS[2], now + ARGV[1])
return redis.call('GET', KEYS[2])
"#;

/// Each operation as the limiter loads it and, where that has a fast path, as the general code.
struct Twins {
    acquire_fast: Script,
    acquire_general: Script,
    native_renewal: Script,
    touch: Script,
    heartbeat: Script,
    release_fast: Script,
    release: Script,
    force_stop: Script,
    set_override: Script,
    list: Script,
}

#[test]
fn the_fast_paths_answer_exactly_as_the_general_code() {
    let server = RedisServer::start();
    let mut redis = redis::Client::open(server.url())
        .unwrap()
        .get_connection()
        .unwrap();
    let scripts = Twins {
        acquire_fast: frozen(shipped("acquire")),
        acquire_general: frozen(general("acquire")),
        native_renewal: Script::new(NATIVE_RENEWAL),
        touch: Script::new(&shipped("touch")),
        heartbeat: frozen(general("heartbeat")),
        release_fast: frozen(shipped("release")),
        release: frozen(general("release")),
        force_stop: frozen(general("force_stop")),
        set_override: frozen(general("set_override")),
        list: frozen(general("list")),
    };
    let mut rng = Rng(0x5eed_1234_abcd_0001);
    let mut clock_ms: u64 = 1_800_000_000_000;
    // The nonce each (account, device) was last granted, to renew, stop or take over with.
    let mut granted: std::collections::HashMap<(u64, usize), Vec<u8>> = Default::default();
    let (mut fast_admits, mut denials, mut renewals, mut native_renewals) = (0, 0, 0, 0);
    let mut shadow_admits = 0;
    let mut history_entries = 0;
    // Per account, the times where something it holds ends: a live lease (from its listing), a
    // lease's memory (one TTL later), a tombstone's memory, an override.
    let mut edges: [Vec<u64>; 3] = Default::default();

    for step in 0..5_000 {
        // Mostly small steps inside a TTL; sometimes exactly onto (or one ms beside) an edge of
        // one account, where `<` and `<=` differ, and then the step acts on that account; now
        // and then past every edge.
        let account = rng.below(3);
        clock_ms = match rng.below(100) {
            0..=1 => clock_ms + TTL_MS + rng.below(2 * TTL_MS),
            2..=9 => {
                let ahead: Vec<u64> = edges[account as usize]
                    .iter()
                    .copied()
                    .filter(|&t| t > clock_ms + 1)
                    .collect();
                match ahead.is_empty() {
                    true => clock_ms,
                    false => ahead[rng.below(ahead.len() as u64) as usize] + rng.below(3) - 1,
                }
            }
            _ => clock_ms + rng.below(TTL_MS / 50),
        };
        edges[account as usize].retain(|&t| t >= clock_ms);
        let clock = [
            (clock_ms / 1000).to_string(),
            ((clock_ms % 1000) * 1000).to_string(),
        ];
        redis::pipe()
            .del("test:clock")
            .rpush("test:clock", &clock)
            .query::<()>(&mut redis)
            .unwrap();

        // Key lifetimes are real time, set from the frozen clock a moment apart.
        let pttl = |twin: &str, redis: &mut redis::Connection| {
            redis::cmd("PTTL")
                .arg(format!("sl:{{{twin}-{account}}}"))
                .query::<i64>(redis)
                .unwrap()
        };
        let (ours_before, theirs_before) = (pttl("fast", &mut redis), pttl("general", &mut redis));
        let op = rng.below(100);
        // Renewals mostly come from devices that were granted a lease on this account.
        let playing: Vec<usize> = (0..DEVICES.len())
            .filter(|&d| granted.contains_key(&(account, d)))
            .collect();
        let device = match (op, playing.is_empty()) {
            (45..80, false) if rng.chance(80) => playing[rng.below(playing.len() as u64) as usize],
            _ => rng.below(DEVICES.len() as u64) as usize,
        };
        let known = granted.get(&(account, device)).cloned();
        let nonce = match (&known, rng.chance(85)) {
            (Some(nonce), true) => nonce.clone(),
            _ => rng.nonce(),
        };
        let on = |twin: &str| format!("sl:{{{twin}-{account}}}");
        // A share of the plays are of an account in shadow: one more argument.
        let shadow = rng.chance(25);
        let call =
            |script: &Script, twin: &str, args: &[Vec<u8>], redis: &mut redis::Connection| {
                let mut invocation = script.prepare_invoke();
                invocation.key(on(twin));
                if std::ptr::eq(script, &scripts.force_stop)
                    || std::ptr::eq(script, &scripts.set_override)
                {
                    invocation.key(format!("sl:audit:{{{twin}-{account}}}"));
                }
                if std::ptr::eq(script, &scripts.native_renewal) {
                    let mut lease = on(twin).into_bytes();
                    lease.extend_from_slice(&args[1][..8]);
                    invocation.key(lease);
                }
                for arg in args {
                    invocation.arg(arg.as_slice());
                }
                if !std::ptr::eq(script, &scripts.native_renewal)
                    && !std::ptr::eq(script, &scripts.list)
                {
                    for arg in history_args() {
                        invocation.arg(arg);
                    }
                }
                let acquire = std::ptr::eq(script, &scripts.acquire_fast)
                    || std::ptr::eq(script, &scripts.acquire_general);
                if acquire && shadow {
                    invocation.arg("shadow");
                }
                invocation.invoke::<Value>(redis).unwrap()
            };
        let ttl = TTL_MS.to_string().into_bytes();
        let keep = (2 * TTL_MS).to_string().into_bytes();
        let device_id = DEVICES[device].as_bytes().to_vec();

        let (name, ours, theirs) = if op < 45 {
            let (plan, limit) = match rng.chance(15) {
                true => PLANS[rng.below(3) as usize],
                false => ("", 0),
            };
            let mut random_caps = || -> Vec<u8> {
                match rng.chance(30) {
                    true => (0..6).map(|_| rng.below(3) as u8).collect(),
                    false => vec![],
                }
            };
            // The named plan's caps, or with no plan named the book of every plan's caps.
            let (caps, book) = match plan {
                "" => {
                    let mut book = Vec::new();
                    for (name, _) in PLANS {
                        let caps = random_caps();
                        if !caps.is_empty() {
                            book.push(name.len() as u8);
                            book.extend_from_slice(name.as_bytes());
                            book.extend_from_slice(&caps);
                        }
                    }
                    (vec![], book)
                }
                _ => (random_caps(), vec![]),
            };
            let (replace_device, replace_nonce) = match rng.chance(15) {
                true => {
                    let target = rng.below(DEVICES.len() as u64) as usize;
                    let nonce = granted.get(&(account, target)).cloned();
                    (
                        DEVICES[target].as_bytes().to_vec(),
                        nonce.unwrap_or_else(|| rng.nonce()),
                    )
                }
                false => (vec![], vec![]),
            };
            let nonce = rng.nonce();
            let args = [
                ttl.clone(),
                keep.clone(),
                plan.as_bytes().to_vec(),
                limit.to_string().into_bytes(),
                b"standard".to_vec(),
                b"2".to_vec(),
                device_id.clone(),
                nonce.clone(),
                details(rng.below(6) as u8, DEVICES[device]),
                replace_device,
                replace_nonce,
                caps,
                book,
            ];
            let ours = call(&scripts.acquire_fast, "fast", &args, &mut redis);
            let theirs = call(&scripts.acquire_general, "general", &args, &mut redis);
            match &ours {
                Value::Array(reply) if reply.first() == Some(&Value::Int(1)) => {
                    granted.insert((account, device), nonce);
                    fast_admits += 1;
                }
                Value::Array(reply) if reply.first() == Some(&Value::Int(2)) => {
                    granted.insert((account, device), nonce);
                    shadow_admits += 1;
                }
                _ => denials += 1,
            }
            ("acquire", ours, theirs)
        } else if op < 80 {
            let plan = PLANS[rng.below(3) as usize];
            let args = [
                ttl.clone(),
                keep.clone(),
                plan.0.as_bytes().to_vec(),
                plan.1.to_string().into_bytes(),
                device_id.clone(),
                nonce.clone(),
            ];
            // As the limiter does it: the native renewal first; `touch` when the account key's
            // end (the lease key's value) is within two TTLs; the full script when the lease key
            // or the account key is gone. A renewed lease ends a TTL from now, as the full script
            // would answer.
            let mut lease = on("fast").into_bytes();
            lease.extend_from_slice(&nonce[..8]);
            let renew_args = [ttl.clone(), nonce];
            let account_until = match call(&scripts.native_renewal, "fast", &renew_args, &mut redis)
            {
                Value::Nil => None,
                Value::BulkString(until) => String::from_utf8(until)
                    .ok()
                    .and_then(|u| u.parse::<u64>().ok()),
                other => panic!("the native renewal answered {other:?}"),
            };
            let renewed = match account_until {
                Some(until) if until >= clock_ms + 2 * TTL_MS => true,
                Some(_) => {
                    let touched: i64 = scripts
                        .touch
                        .key(on("fast"))
                        .key(&lease)
                        .arg(&keep)
                        .invoke(&mut redis)
                        .unwrap();
                    touched == 1
                }
                None => false,
            };
            let ours = match renewed {
                true => {
                    native_renewals += 1;
                    Value::Array(vec![Value::Int(1), Value::Int((clock_ms + TTL_MS) as i64)])
                }
                false => call(&scripts.heartbeat, "fast", &args, &mut redis),
            };
            let theirs = call(&scripts.heartbeat, "general", &args, &mut redis);
            if matches!(&ours, Value::Array(reply) if reply.first() == Some(&Value::Int(1))) {
                renewals += 1;
            }
            ("heartbeat", ours, theirs)
        } else if op < 90 {
            let args = [ttl.clone(), keep.clone(), device_id.clone(), nonce];
            edges[account as usize].push(clock_ms + 2 * TTL_MS);
            let ours = call(&scripts.release_fast, "fast", &args, &mut redis);
            let theirs = call(&scripts.release, "general", &args, &mut redis);
            ("release", ours, theirs)
        } else if op < 96 {
            let args = [
                ttl.clone(),
                keep.clone(),
                device_id.clone(),
                nonce,
                account.to_string().into_bytes(),
                b"stream".to_vec(),
                b"support@example.com".to_vec(),
                b"test".to_vec(),
                b"50".to_vec(),
                b"60000".to_vec(),
            ];
            edges[account as usize].push(clock_ms + 2 * TTL_MS);
            let ours = call(&scripts.force_stop, "fast", &args, &mut redis);
            let theirs = call(&scripts.force_stop, "general", &args, &mut redis);
            (
                "force_stop",
                without_entry(ours, 1),
                without_entry(theirs, 1),
            )
        } else {
            let limit = rng.below(6);
            let duration = rng.below(10 * TTL_MS) + 1;
            edges[account as usize].push(clock_ms + duration);
            let args = [
                ttl.clone(),
                keep.clone(),
                b"standard".to_vec(),
                b"2".to_vec(),
                limit.to_string().into_bytes(),
                duration.to_string().into_bytes(),
                account.to_string().into_bytes(),
                b"support@example.com".to_vec(),
                b"test".to_vec(),
                b"50".to_vec(),
                b"60000".to_vec(),
            ];
            let ours = call(&scripts.set_override, "fast", &args, &mut redis);
            let theirs = call(&scripts.set_override, "general", &args, &mut redis);
            (
                "set_override",
                without_entry(ours, 2),
                without_entry(theirs, 2),
            )
        };
        assert_eq!(ours, theirs, "step {step}: {name} answers differently");
        let (ours, theirs) = (
            compared_history(&mut redis, "fast", account),
            compared_history(&mut redis, "general", account),
        );
        assert_eq!(
            ours, theirs,
            "step {step}: the histories differ after {name}"
        );
        history_entries = history_entries.max(ours.len());

        let list_args = [ttl.clone(), b"standard".to_vec(), b"2".to_vec()];
        let ours = call(&scripts.list, "fast", &list_args, &mut redis);
        let theirs = call(&scripts.list, "general", &list_args, &mut redis);
        assert_eq!(
            ours, theirs,
            "step {step}: the accounts differ after {name}"
        );
        let theirs_listing = theirs;
        let mut override_end = 0;
        if let Value::Array(listing) = &theirs_listing {
            if let Value::Int(end) = listing[3] {
                override_end = end;
            }
            for record in &listing[5..] {
                let Value::BulkString(record) = record else {
                    panic!("a raw record, not {record:?}")
                };
                let ends = record[1..7]
                    .iter()
                    .fold(0, |acc, &b| (acc << 8) | u64::from(b));
                edges[account as usize].extend([ends, ends + TTL_MS]);
            }
            edges[account as usize].sort_unstable();
            edges[account as usize].dedup();
        }
        let (ours, theirs) = (pttl("fast", &mut redis), pttl("general", &mut redis));
        // The account key outlives every live lease: native renewals leave it alone, so this is
        // what their two-TTL margin on its end (the lease key's value) must keep.
        if let Value::Array(listing) = &theirs_listing {
            for record in &listing[5..] {
                let Value::BulkString(record) = record else {
                    continue;
                };
                let ends = record[1..7]
                    .iter()
                    .fold(0, |acc, &b| (acc << 8) | u64::from(b));
                assert!(
                    ours >= ends.saturating_sub(clock_ms) as i64,
                    "step {step}: after {name} the account key lives {ours} ms, a lease ends in {} ms",
                    ends - clock_ms
                );
            }
        }
        // A write gives the key six TTLs, or the override's longer end; a native renewal never
        // extends it. A key may live longer than that only because the frozen clock runs faster
        // than Redis's own: its lifetime came from an earlier write.
        let needed = (override_end - clock_ms as i64).max(6 * TTL_MS as i64);
        assert!(
            ours < theirs.max(needed).max(ours_before) + 500
                && theirs < needed.max(theirs_before) + 500,
            "step {step}: after {name} the key lives {ours} ms against {theirs} ms"
        );
    }
    // The history must have exercised what it claims to compare.
    assert!(fast_admits > 300, "{fast_admits} admissions");
    assert!(denials > 150, "{denials} denials");
    assert!(shadow_admits > 30, "{shadow_admits} let through in shadow");
    assert!(renewals > 300, "{renewals} renewals");
    assert!(native_renewals > 100, "{native_renewals} native renewals");
    assert!(
        history_entries > 20,
        "{history_entries} history entries at most"
    );
    eprintln!(
        "{fast_admits} admissions, {shadow_admits} let through in shadow, {denials} denials, {renewals} renewals ({native_renewals} native)"
    );
}
