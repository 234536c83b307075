//! The module against the Lua scripts, step by step: a seeded random history of plays (many
//! accounts, devices racing for the slots, take-overs, plan changes, device-type caps, plays in
//! shadow granted past the limit and the caps, on the fast path and in the general code),
//! heartbeats with good and stale nonces (some of accounts learning, which take a lease back
//! past the limit), a batch's renewals in one `SL.RENEW`, stops, force-stops, overrides and
//! leases left to expire runs on two real servers, one answering with the scripts as the limiter sends them
//! (the heartbeat as `GETEX` of the lease key, `touch` and the full script), one with the
//! module's SL.* commands. After every step both give the same answer, and the account's keys
//! hold the same values with the same expiry times, audit entries the same fields, history
//! entries the same bytes (times within the tolerance). The history is kept short, so that it is
//! trimmed often, and the run must have seen every kind of entry. One play or
//! stop in ten on the module's server goes through the script instead, as from a limiter not yet
//! rolled: the commands go on from what the scripts wrote. At the end a replica of the module's
//! server, which has no module, holds exactly the same keys: effects were replicated.
//!
//! Both servers read the host's clock, so times differ by the few ms between the two calls of
//! a step: times compare within `TOLERANCE_MS`. So that no decision can fall inside that gap,
//! steps come in short bursts `PERIOD` apart, and every time a step sets (a lease's end, a
//! tombstone's, a key's life, an override's end) is a multiple of the TTL or an override
//! duration away, none of which is near a multiple of `PERIOD`: every later decision about it
//! is far from the gap between the servers.

mod support;

use std::collections::{BTreeSet, HashMap};
use std::time::{Duration, Instant};

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use redis::{Connection, Value};
use support::Server;

const TTL_MS: i64 = 1_100;
const KEEP_MS: i64 = 2 * TTL_MS;
/// TTL mod PERIOD = PERIOD / 7: 1, 2, 4 and 6 TTLs (ends, tombstones and stale records, the
/// lease key's "account key lives" margin, key life) all fall at least PERIOD / 7 = 50 ms from
/// a multiple of PERIOD, so at least 50 - BURST = 25 ms from any later step.
const PERIOD: Duration = Duration::from_millis(350);
const BURST: Duration = Duration::from_millis(25);
const BURSTS: u32 = 44;
/// Override durations: half a PERIOD off its multiples (the longest outlasts the key's life).
const OVERRIDE_MS: [i64; 2] = [1_575, 7_175];
const TOLERANCE_MS: i64 = 20;
/// History bounds: few entries, so that trimming happens all the time.
const HISTORY_KEPT: usize = 4;
const HISTORY_RETENTION_MS: i64 = 600_000;

/// The history's bounds every command that may write the history ends with, one argument.
fn history_args() -> [Vec<u8>; 1] {
    [format!("{HISTORY_KEPT}:{HISTORY_RETENTION_MS}").into()]
}

thread_local! {
    /// The longest a step's two calls took so far (ms): on a machine busy enough to stall
    /// between them, the times they set differ by that much, and the tolerance follows.
    static SLOWEST_STEP_MS: std::cell::Cell<i64> = const { std::cell::Cell::new(0) };
}

/// Runs one step's calls, noting how long they took.
fn timed<T>(calls: impl FnOnce() -> T) -> T {
    let start = Instant::now();
    let out = calls();
    let ms = start.elapsed().as_millis() as i64;
    SLOWEST_STEP_MS.with(|slowest| slowest.set(slowest.get().max(ms)));
    out
}

const ACCOUNTS: usize = 8;
/// Device ids and their type codes.
const DEVICES: [(&str, u8); 6] = [
    ("tv", 0),
    ("phone-1", 1),
    ("phone-2", 1),
    ("tablet", 2),
    ("laptop", 3),
    ("console", 4),
];
/// Plans: name, limit, device caps by type code.
const PLANS: [(&str, u8, [u8; 6]); 3] = [
    ("basic", 1, [0; 6]),
    ("family", 3, [0, 1, 0, 0, 0, 0]),
    ("premium", 4, [0, 2, 1, 0, 0, 1]),
];
const DEFAULT_PLAN: (&str, u8) = ("family", 3);
/// Accounts in shadow: most of their plays are sent with the enforcement argument, so they grow
/// past their limit and their device caps (a play there now and then is enforced, as after a
/// switch back); elsewhere a play is in shadow now and then.
const SHADOW_ACCOUNTS: [usize; 2] = [6, 7];
/// The enforcement argument of a play in shadow, after the history's bounds.
const SHADOW: &[u8] = b"shadow";
/// The mode argument of a heartbeat of an account learning, after the history's bounds.
const LEARNING: &[u8] = b"learning";
/// A support action's reason, with what JSON must escape and what it need not.
const REASON: &str = "said \"stop\" / tab\there \\ 📺\n\u{1}";

fn account_key(account: usize) -> String {
    format!("sl:{{a{account}}}")
}

fn history_key(account: usize) -> String {
    format!("sl:history:{{a{account}}}")
}

/// Two history entries: the same bytes but for their times (the entry's, an expired lease's
/// end, a temporary limit's end), which are close.
fn same_history_entry(a: &[u8], b: &[u8]) -> bool {
    let u48 = |v: &[u8], i: usize| {
        v[i..i + 6]
            .iter()
            .fold(0i64, |n, &x| (n << 8) | i64::from(x))
    };
    if a.len() != b.len() || a.len() < 8 || a[..2] != b[..2] || !close(u48(a, 2), u48(b, 2)) {
        return false;
    }
    let timed = match a[1] {
        5 => Some(8),
        6 | 7 => Some(9),
        _ => None,
    };
    match timed {
        Some(t) if a.len() >= t + 6 => {
            a[8..t] == b[8..t] && close(u48(a, t), u48(b, t)) && a[t + 6..] == b[t + 6..]
        }
        Some(_) => false,
        None => a[8..] == b[8..],
    }
}

fn lease_key(account: usize, nonce: &[u8; 16]) -> Vec<u8> {
    let mut key = account_key(account).into_bytes();
    key.extend_from_slice(&nonce[..8]);
    key
}

/// The caps book as the limiter builds it (`caps_book` in the store).
fn caps_book() -> Vec<u8> {
    let mut book = Vec::new();
    for (name, _, caps) in PLANS.iter().filter(|p| p.2 != [0; 6]) {
        book.push(name.len() as u8);
        book.extend_from_slice(name.as_bytes());
        book.extend_from_slice(caps);
    }
    book
}

/// A play's details as `encode_details` writes them: type, display name, profile, title.
fn details(kind: u8, meta: &str) -> Vec<u8> {
    let mut body = vec![kind, meta.len() as u8];
    body.extend_from_slice(meta.as_bytes());
    body.extend_from_slice(&[0, 0]);
    let mut out = vec![body.len() as u8];
    out.extend_from_slice(&body);
    out
}

#[derive(Clone)]
struct Stream {
    account: usize,
    device: usize,
    nonce: [u8; 16],
    plan: (&'static str, u8),
}

/// The two servers and how each is asked.
struct Pair {
    lua: Connection,
    module: Connection,
    shas: HashMap<&'static str, String>,
}

/// One `EVALSHA` of the script `op`, as the limiter sends it.
fn script(
    shas: &HashMap<&'static str, String>,
    c: &mut Connection,
    op: &str,
    keys: &[Vec<u8>],
    args: &[Vec<u8>],
) -> Value {
    let mut cmd = redis::cmd("EVALSHA");
    cmd.arg(&shas[op]).arg(keys.len());
    for k in keys {
        cmd.arg(k);
    }
    for a in args {
        cmd.arg(a);
    }
    cmd.query(c).unwrap_or_else(|e| panic!("{op}: {e}"))
}

impl Pair {
    /// The script `op` on the Lua server.
    fn lua(&mut self, op: &str, keys: &[Vec<u8>], args: &[Vec<u8>]) -> Value {
        script(&self.shas, &mut self.lua, op, keys, args)
    }

    /// The module's command on the module's server.
    fn native(&mut self, command: &str, key: &[u8], args: &[Vec<u8>]) -> Value {
        let mut cmd = redis::cmd(command);
        cmd.arg(key);
        for a in args {
            cmd.arg(a);
        }
        cmd.query(&mut self.module)
            .unwrap_or_else(|e| panic!("{command}: {e}"))
    }

    /// The script `op` on the module's server (a limiter not yet rolled to the module).
    fn lua_on_module(&mut self, op: &str, key: &[u8], args: &[Vec<u8>]) -> Value {
        script(&self.shas, &mut self.module, op, &[key.to_vec()], args)
    }

    /// A module command that names several keys.
    fn native_keys(&mut self, command: &str, keys: &[Vec<u8>], args: &[Vec<u8>]) -> Value {
        let mut cmd = redis::cmd(command);
        for a in keys.iter().chain(args) {
            cmd.arg(a);
        }
        cmd.query(&mut self.module)
            .unwrap_or_else(|e| panic!("{command}: {e}"))
    }
}

fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64
}

fn num(v: &Value) -> i64 {
    match v {
        Value::Int(n) => *n,
        other => panic!("expected an integer, got {other:?}"),
    }
}

fn close(a: i64, b: i64) -> bool {
    let tolerance = TOLERANCE_MS.max(SLOWEST_STEP_MS.with(|s| s.get()) + 5);
    (a - b).abs() <= tolerance
}

/// Two account values: the same bytes but for the times, which are close.
fn same_account_value(a: &[u8], b: &[u8]) -> Result<(), String> {
    let u48 = |v: &[u8], i: usize| {
        v[i..i + 6]
            .iter()
            .fold(0i64, |n, &x| (n << 8) | i64::from(x))
    };
    if a.len() != b.len() || a.len() < 3 || a[..3] != b[..3] {
        return Err("header or length differs".into());
    }
    let mut p = 3 + a[2] as usize;
    if a[..p] != b[..p] {
        return Err("plan differs".into());
    }
    if a[0] >= 2 {
        if a[p] != b[p] || !close(u48(a, p + 1), u48(b, p + 1)) {
            return Err("override differs".into());
        }
        p += 7;
    }
    while p < a.len() {
        let stop = p + 30 + a[p + 29] as usize;
        let stop = stop + 1 + a[stop] as usize;
        if a[p] != b[p] {
            return Err(format!("record at {p}: state differs"));
        }
        if !close(u48(a, p + 1), u48(b, p + 1)) || !close(u48(a, p + 7), u48(b, p + 7)) {
            return Err(format!("record at {p}: times differ"));
        }
        if a[p + 13..stop] != b[p + 13..stop] {
            return Err(format!("record at {p}: nonce, device or details differ"));
        }
        p = stop;
    }
    Ok(())
}

/// Two replies: equal, but for times (integers past 2001 in ms), which are close, and raw
/// records, whose times are.
fn same_reply(a: &Value, b: &Value) -> bool {
    match (a, b) {
        (Value::Int(x), Value::Int(y)) => x == y || (*x > 1_000_000_000_000 && close(*x, *y)),
        (Value::BulkString(x), Value::BulkString(y)) => {
            x == y
                || (x.len() > 30
                    && x[0] == 0
                    && same_account_value(&header_for(x), &header_for(y)).is_ok())
        }
        (Value::Array(x), Value::Array(y)) => {
            x.len() == y.len() && x.iter().zip(y).all(|(a, b)| same_reply(a, b))
        }
        (x, y) => x == y,
    }
}

/// Two audit entries (JSON): the same fields and values, times (past 2001 in ms) close. The
/// scripts' `cjson` and the module write fields in different orders; the limiter reads either.
fn same_json(a: &[u8], b: &[u8]) -> bool {
    fn same(a: &serde_json::Value, b: &serde_json::Value) -> bool {
        use serde_json::Value::{Number, Object};
        match (a, b) {
            (Object(x), Object(y)) => {
                x.len() == y.len() && x.iter().all(|(k, v)| y.get(k).is_some_and(|w| same(v, w)))
            }
            (Number(x), Number(y)) => match (x.as_i64(), y.as_i64()) {
                (Some(x), Some(y)) => x == y || (x > 1_000_000_000_000 && close(x, y)),
                _ => x == y,
            },
            (x, y) => x == y,
        }
    }
    match (serde_json::from_slice(a), serde_json::from_slice(b)) {
        (Ok(x), Ok(y)) => same(&x, &y),
        _ => false,
    }
}

/// The audit entries two answers carry at `at`, if any, are the same.
fn same_entries(a: &Value, b: &Value, at: usize) -> bool {
    match (a, b) {
        (Value::Array(x), Value::Array(y)) => match (x.get(at), y.get(at)) {
            (Some(Value::BulkString(x)), Some(Value::BulkString(y))) => same_json(x, y),
            (None, None) => true,
            _ => false,
        },
        _ => false,
    }
}

/// A raw record behind an empty version-1 header, to compare it as an account value.
fn header_for(record: &[u8]) -> Vec<u8> {
    let mut v = vec![1, 0, 0];
    v.extend_from_slice(record);
    v
}

/// The account's keys on one server: name → (value, or a list's entries, and expiry time).
fn keys_of(c: &mut Connection, account: usize) -> HashMap<Vec<u8>, (Value, i64)> {
    let mut names: Vec<Vec<u8>> = redis::cmd("KEYS")
        .arg(format!("{}*", account_key(account)))
        .query(c)
        .unwrap();
    names.push(format!("sl:audit:{{a{account}}}").into_bytes());
    names.push(history_key(account).into_bytes());
    let mut out = HashMap::new();
    for name in names {
        let kind: String = redis::cmd("TYPE").arg(&name).query(c).unwrap();
        let value = match kind.as_str() {
            "none" => continue,
            "string" => redis::cmd("GET").arg(&name).query(c).unwrap(),
            "list" => redis::cmd("LRANGE")
                .arg(&name)
                .arg(0)
                .arg(-1)
                .query(c)
                .unwrap(),
            other => panic!("unexpected {other} key"),
        };
        let expiry: i64 = redis::cmd("PEXPIRETIME").arg(&name).query(c).unwrap();
        out.insert(name, (value, expiry));
    }
    out
}

fn compare_keys(pair: &mut Pair, account: usize) -> Result<(), String> {
    let (a, b) = (
        keys_of(&mut pair.lua, account),
        keys_of(&mut pair.module, account),
    );
    let mut names: Vec<_> = a.keys().chain(b.keys()).collect();
    names.sort();
    names.dedup();
    for name in names {
        let shown = String::from_utf8_lossy(name);
        let (Some((va, ea)), Some((vb, eb))) = (a.get(name), b.get(name)) else {
            return Err(format!(
                "{shown}: on one server only (lua {}, module {})",
                a.contains_key(name),
                b.contains_key(name)
            ));
        };
        let same_value = match (va, vb) {
            (Value::BulkString(x), Value::BulkString(y))
                if name == account_key(account).as_bytes() =>
            {
                same_account_value(x, y).map_err(|e| format!("{shown}: {e}"))?;
                true
            }
            (Value::BulkString(x), Value::BulkString(y)) => {
                let n = |v: &[u8]| std::str::from_utf8(v).unwrap().parse::<i64>().unwrap();
                close(n(x), n(y))
            }
            (Value::Array(x), Value::Array(y)) => {
                let history = name == history_key(account).as_bytes();
                x.len() == y.len()
                    && x.iter().zip(y).all(|(x, y)| match (x, y) {
                        (Value::BulkString(x), Value::BulkString(y)) if history => {
                            same_history_entry(x, y)
                        }
                        (Value::BulkString(x), Value::BulkString(y)) => same_json(x, y),
                        _ => false,
                    })
            }
            (x, y) => x == y,
        };
        if !same_value {
            return Err(format!("{shown}: values differ: {va:?} / {vb:?}"));
        }
        let same_expiry = ea == eb || (*ea > 0 && *eb > 0 && close(*ea, *eb));
        if !same_expiry {
            return Err(format!("{shown}: expiry differs: {ea} / {eb}"));
        }
    }
    Ok(())
}

/// The history so far, for the failure message.
struct Log(Vec<String>);

impl Log {
    fn fail(&self, what: String) -> ! {
        let start = self.0.len().saturating_sub(25);
        panic!("{what}\nlast steps:\n{}", self.0[start..].join("\n"));
    }
}

#[derive(Default, Debug)]
struct Seen {
    granted: u32,
    denied_limit: u32,
    denied_cap: u32,
    renewed: u32,
    reregistered: u32,
    expired: u32,
    revoked: u32,
    released: u32,
    not_held: u32,
    force_stopped: u32,
    overrides: u32,
    lists: u32,
    /// Lua renewals that needed `touch` (the account key's life ran short).
    touched: u32,
    /// Leases renewed by an `SL.RENEW` of several keys.
    renewed_in_one: u32,
    /// Plays in shadow granted over the account's limit, and over a device-type cap.
    shadow_limit: u32,
    shadow_cap: u32,
    /// Plays in shadow granted over a limit by the general code: that took a stream over (the
    /// take-over's entry right after the shadow refusal's), and that forgot leases past their
    /// time (the expired leases' entries right before it).
    shadow_took_over: u32,
    shadow_reaped: u32,
    /// Learning heartbeats: leases taken back, of them on an account then over its limit (an
    /// ordinary heartbeat would have been told expired), and streams still told revoked.
    learned: u32,
    learned_over_limit: u32,
    learning_revoked: u32,
    /// History entries seen (kind, and a refusal's rule), and whether a list reached its cap.
    history: BTreeSet<(u8, u8)>,
    history_full: bool,
}

struct History {
    rng: StdRng,
    streams: Vec<Stream>,
    /// Account 0's streams: played once, then only renewed, every burst, so that their lease
    /// keys age past the account key's margin and renewals need `touch`.
    steady: Vec<Stream>,
    seen: Seen,
    log: Log,
    book: Vec<u8>,
    /// The last play was granted in shadow over a limit (its entries are looked at after it).
    granted_in_shadow: bool,
}

impl History {
    /// A stream to act on: mostly one that was granted, sometimes a stranger's nonce.
    fn some_stream(&mut self) -> Stream {
        if self.streams.is_empty() || self.rng.random_bool(0.15) {
            return Stream {
                account: self.rng.random_range(1..ACCOUNTS),
                device: self.rng.random_range(0..DEVICES.len()),
                nonce: self.rng.random(),
                plan: DEFAULT_PLAN,
            };
        }
        let i = self.rng.random_range(0..self.streams.len());
        self.streams[i].clone()
    }

    fn step(&mut self, pair: &mut Pair) {
        let roll = self.rng.random_range(0..100);
        let account = timed(|| match roll {
            0..45 => self.acquire(pair),
            45..66 => self.heartbeat(pair),
            66..75 => self.renew_batch(pair),
            75..87 => self.release(pair),
            87..92 => self.list(pair),
            92..96 => self.force_stop(pair),
            _ => self.set_override(pair),
        });
        self.after_step(pair, account);
    }

    /// Both servers' keys of the account compared, and its history's kinds noted.
    fn after_step(&mut self, pair: &mut Pair, account: usize) {
        if let Err(e) = compare_keys(pair, account) {
            self.log
                .fail(format!("after step {}: {e}", self.log.0.len()));
        }
        match std::mem::take(&mut self.granted_in_shadow) {
            true => self.note_shadow_general(pair, account),
            false => drop(self.note_history(pair, account)),
        }
    }

    /// Notes the kinds of entry the account's history holds (both servers hold the same), and
    /// returns them, newest first.
    fn note_history(&mut self, pair: &mut Pair, account: usize) -> Vec<Vec<u8>> {
        let entries: Vec<Vec<u8>> = redis::cmd("LRANGE")
            .arg(history_key(account))
            .arg(0)
            .arg(-1)
            .query(&mut pair.lua)
            .unwrap();
        if entries.len() > HISTORY_KEPT {
            self.log
                .fail(format!("a{account}'s history outgrew its cap: {entries:?}"));
        }
        self.seen.history_full |= entries.len() == HISTORY_KEPT;
        for e in &entries {
            let rule = if matches!(e[1], 1 | 8) { e[8] } else { 0 };
            self.seen.history.insert((e[1], rule));
        }
        entries
    }

    /// After a play granted in shadow over a limit, notes whether the general code wrote its
    /// entries around the shadow refusal's (the newest with its time): a take-over's after it,
    /// expired leases' before it.
    fn note_shadow_general(&mut self, pair: &mut Pair, account: usize) {
        let entries = self.note_history(pair, account);
        let Some(i) = entries.iter().position(|e| e[1] == 8) else {
            self.log.fail(format!(
                "a{account}: a play granted in shadow left no entry of kind 8"
            ));
        };
        let at = &entries[i][2..8];
        let same_call = |e: &Vec<u8>| &e[2..8] == at;
        if i > 0 && entries[i - 1][1] == 2 && same_call(&entries[i - 1]) {
            self.seen.shadow_took_over += 1;
        }
        if entries
            .get(i + 1)
            .is_some_and(|e| e[1] == 5 && same_call(e))
        {
            self.seen.shadow_reaped += 1;
        }
    }

    /// Account 0: its two plays at first, then a heartbeat for each.
    fn steady_round(&mut self, pair: &mut Pair) {
        if self.steady.is_empty() {
            for device in [0, 1] {
                let before = self.streams.len();
                self.acquire_on(pair, 0, device);
                assert_eq!(
                    self.streams.len(),
                    before + 1,
                    "account 0's plays were refused"
                );
                self.steady.push(self.streams.pop().unwrap());
            }
        }
        for s in self.steady.clone() {
            timed(|| self.heartbeat_of(pair, s, false));
            if let Err(e) = compare_keys(pair, 0) {
                self.log
                    .fail(format!("after step {}: {e}", self.log.0.len()));
            }
        }
    }

    fn answers(&self, op: &str, lua: &Value, module: &Value) {
        if !same_reply(lua, module) {
            self.log
                .fail(format!("{op}: lua answered {lua:?}, the module {module:?}"));
        }
    }

    fn acquire(&mut self, pair: &mut Pair) -> usize {
        let account = self.rng.random_range(1..ACCOUNTS);
        let device = self.rng.random_range(0..DEVICES.len());
        self.acquire_on(pair, account, device)
    }

    fn acquire_on(&mut self, pair: &mut Pair, account: usize, device: usize) -> usize {
        let nonce: [u8; 16] = self.rng.random();
        // Mostly no plan named (the account's own); sometimes one, which may change it.
        // Account 0's steady plays name no plan and take nothing over.
        let steady = account == 0;
        let plan = match self.rng.random_range(0..4) {
            _ if steady => None,
            0 => Some(PLANS[self.rng.random_range(0..PLANS.len())]),
            _ => None,
        };
        let replace = match !steady && self.rng.random_bool(0.15) {
            true => Some(self.some_stream()),
            false => None,
        };
        let shadow_account = SHADOW_ACCOUNTS.contains(&account);
        // An account in shadow, over its limit, takes its own streams over now and then: the
        // play is still over the limit once the target is revoked.
        // Each device's latest play there: an earlier one's record is gone.
        let mut own: Vec<Stream> = Vec::new();
        if shadow_account && replace.is_none() {
            for s in self.streams.iter().rev().filter(|s| s.account == account) {
                if !own.iter().any(|o| o.device == s.device) {
                    own.push(s.clone());
                }
            }
        }
        let replace = match own.is_empty() || !self.rng.random_bool(0.2) {
            true => replace,
            false => Some(own[self.rng.random_range(0..own.len())].clone()),
        };
        let shadow = match shadow_account {
            _ if steady => false,
            true => self.rng.random_bool(0.85),
            false => self.rng.random_bool(0.1),
        };
        self.play(pair, account, device, nonce, plan, replace, shadow)
    }

    /// A play of `device` on `account` with this nonce, naming `plan` (or none), taking over
    /// `replace` (or nothing), the account in `shadow` or enforced.
    #[allow(clippy::too_many_arguments)]
    fn play(
        &mut self,
        pair: &mut Pair,
        account: usize,
        device: usize,
        nonce: [u8; 16],
        plan: Option<(&'static str, u8, [u8; 6])>,
        replace: Option<Stream>,
        shadow: bool,
    ) -> usize {
        let (id, kind) = DEVICES[device];
        let mut args: Vec<Vec<u8>> = vec![TTL_MS.to_string().into(), KEEP_MS.to_string().into()];
        match plan {
            Some((name, limit, _)) => args.extend([name.into(), limit.to_string().into()]),
            None => args.extend([Vec::new(), b"0".to_vec()]),
        }
        args.extend([
            DEFAULT_PLAN.0.into(),
            DEFAULT_PLAN.1.to_string().into(),
            id.into(),
            nonce.to_vec(),
            details(kind, &format!("{id}'s screen")),
        ]);
        match &replace {
            Some(t) => args.extend([DEVICES[t.device].0.into(), t.nonce.to_vec()]),
            None => args.extend([Vec::new(), Vec::new()]),
        }
        match plan {
            Some((_, _, caps)) => args.extend([caps.to_vec(), Vec::new()]),
            None => args.extend([Vec::new(), self.book.clone()]),
        }
        args.extend(history_args());
        if shadow {
            args.push(SHADOW.to_vec());
        }
        let key = account_key(account).into_bytes();
        let lua = pair.lua("acquire", std::slice::from_ref(&key), &args);
        let module = match self.rng.random_bool(0.1) {
            true => pair.lua_on_module("acquire", &key, &args),
            false => pair.native("SL.ACQUIRE", &key, &args),
        };
        self.log.0.push(format!(
            "acquire a{account} {id} plan {:?} replace {:?}{} → {lua:?}",
            plan.map(|p| p.0),
            replace.as_ref().map(|t| DEVICES[t.device].0),
            if shadow { " in shadow" } else { "" }
        ));
        self.answers("acquire", &lua, &module);
        if let Value::Array(items) = &lua {
            let code = num(&items[0]);
            // In shadow nothing is refused; enforced, nothing is granted over a limit.
            if (shadow && code == 0) || (!shadow && code == 2) {
                self.log
                    .fail(format!("acquire: answered {code} in shadow {shadow}"));
            }
            match (code, num(&items[2])) {
                (1 | 2, _) => {
                    if code == 1 {
                        self.seen.granted += 1;
                    } else if num(&items[6]) == 0 {
                        self.seen.shadow_limit += 1;
                    } else {
                        self.seen.shadow_cap += 1;
                    }
                    self.granted_in_shadow |= code == 2;
                    let Value::BulkString(name) = &items[4] else {
                        unreachable!()
                    };
                    let name = PLANS
                        .iter()
                        .map(|p| p.0)
                        .find(|p| p.as_bytes() == name)
                        .unwrap_or(DEFAULT_PLAN.0);
                    let limit = num(&items[5]) as u8;
                    self.streams.push(Stream {
                        account,
                        device,
                        nonce,
                        plan: (name, limit),
                    });
                }
                (_, 0) => self.seen.denied_limit += 1,
                _ => self.seen.denied_cap += 1,
            }
        }
        account
    }

    fn heartbeat(&mut self, pair: &mut Pair) -> usize {
        let s = self.some_stream();
        let learning = self.rng.random_bool(0.3);
        self.heartbeat_of(pair, s, learning)
    }

    /// A heartbeat of `s`, of an account `learning` or not: on the Lua path only the full script
    /// carries the mode, after the history's bounds.
    fn heartbeat_of(&mut self, pair: &mut Pair, s: Stream, learning: bool) -> usize {
        let key = account_key(s.account).into_bytes();
        let lease = lease_key(s.account, &s.nonce);
        // The Lua path as the limiter takes it: native renewal, `touch`, the full script.
        let renewed_natively = match redis::cmd("GETEX")
            .arg(&lease)
            .arg("PX")
            .arg(TTL_MS)
            .query::<Option<String>>(&mut pair.lua)
            .unwrap()
        {
            Some(text) => {
                let fresh = text
                    .parse::<i64>()
                    .is_ok_and(|until| until >= now_ms() + 2 * TTL_MS);
                fresh || {
                    self.seen.touched += 1;
                    let touched = pair.lua(
                        "touch",
                        &[key.clone(), lease.clone()],
                        &[KEEP_MS.to_string().into()],
                    );
                    num(&touched) == 1
                }
            }
            None => false,
        };
        let mut args: Vec<Vec<u8>> = vec![
            TTL_MS.to_string().into(),
            KEEP_MS.to_string().into(),
            s.plan.0.into(),
            s.plan.1.to_string().into(),
            DEVICES[s.device].0.into(),
            s.nonce.to_vec(),
        ];
        args.extend(history_args());
        if learning {
            args.push(LEARNING.to_vec());
        }
        let lua = match renewed_natively {
            true => None,
            false => Some(pair.lua("heartbeat", std::slice::from_ref(&key), &args)),
        };
        let module = pair.native("SL.HEARTBEAT", &key, &args);
        self.log.0.push(format!(
            "heartbeat a{} {}{} → lua {lua:?} (native {renewed_natively}), module {module:?}",
            s.account,
            DEVICES[s.device].0,
            if learning { " learning" } else { "" }
        ));
        let code = match (&lua, &module) {
            (None, Value::Array(m)) => {
                // A native renewal answers no time; the module's must be one TTL from now.
                if num(&m[0]) != 1 || !close(num(&m[1]), now_ms() + TTL_MS) {
                    self.log.fail(format!(
                        "heartbeat: lua renewed natively, the module answered {module:?}"
                    ));
                }
                1
            }
            (Some(lua), module) => {
                self.answers("heartbeat", lua, module);
                let Value::Array(items) = lua else {
                    unreachable!()
                };
                num(&items[0])
            }
            (None, other) => self
                .log
                .fail(format!("heartbeat: module answered {other:?}")),
        };
        match code {
            1 => self.seen.renewed += 1,
            2 => self.seen.reregistered += 1,
            3 => self.seen.expired += 1,
            _ => self.seen.revoked += 1,
        }
        match (learning, code) {
            (true, 2) => {
                self.seen.learned += 1;
                if self.over_limit(pair, s.account) {
                    self.seen.learned_over_limit += 1;
                }
            }
            (true, 4) => self.seen.learning_revoked += 1,
            _ => {}
        }
        s.account
    }

    /// Whether the account holds more leases than its limit in force (the Lua server's `list`,
    /// which only reads).
    fn over_limit(&mut self, pair: &mut Pair, account: usize) -> bool {
        let args: Vec<Vec<u8>> = vec![
            TTL_MS.to_string().into(),
            DEFAULT_PLAN.0.into(),
            DEFAULT_PLAN.1.to_string().into(),
        ];
        let key = account_key(account).into_bytes();
        match pair.lua("list", &[key], &args) {
            Value::Array(items) if items.len() >= 5 => items.len() - 5 > num(&items[1]) as usize,
            other => self.log.fail(format!("list answered {other:?}")),
        }
    }

    /// A batch's renewals as the limiter sends them: a `GETEX` each to the Lua server, one
    /// `SL.RENEW` to the module's. The same values (lease keys hold times: within the
    /// tolerance), and every account touched holds the same keys after. What a renewal that found
    /// its account key near its end leads to (`touch`, `SL.HEARTBEAT`) is the heartbeat step's.
    fn renew_batch(&mut self, pair: &mut Pair) -> usize {
        let streams: Vec<Stream> = (0..self.rng.random_range(2..7))
            .map(|_| self.some_stream())
            .collect();
        let mut renew = redis::cmd("SL.RENEW");
        let mut lua = Vec::new();
        for s in &streams {
            let lease = lease_key(s.account, &s.nonce);
            let value: Value = redis::cmd("GETEX")
                .arg(&lease)
                .arg("PX")
                .arg(TTL_MS)
                .query(&mut pair.lua)
                .unwrap();
            lua.push(value);
            renew.arg(&lease);
        }
        let module: Value = renew.arg(TTL_MS).query(&mut pair.module).unwrap();
        self.log.0.push(format!(
            "renew {:?} → lua {lua:?}, module {module:?}",
            streams.iter().map(|s| s.account).collect::<Vec<_>>()
        ));
        let same = match &module {
            Value::Array(values) if values.len() == lua.len() => {
                values.iter().zip(&lua).all(|pair| match pair {
                    (Value::BulkString(m), Value::BulkString(l)) => {
                        let n = |v: &[u8]| std::str::from_utf8(v).unwrap().parse::<i64>().unwrap();
                        close(n(m), n(l))
                    }
                    (m, l) => m == l,
                })
            }
            _ => false,
        };
        if !same {
            self.log.fail(format!(
                "renew: lua answered {lua:?}, the module {module:?}"
            ));
        }
        self.seen.renewed_in_one += lua.iter().filter(|v| **v != Value::Nil).count() as u32;
        for s in &streams[1..] {
            if let Err(e) = compare_keys(pair, s.account) {
                self.log.fail(format!("after renew: {e}"));
            }
        }
        streams[0].account
    }

    fn release(&mut self, pair: &mut Pair) -> usize {
        let s = self.some_stream();
        let key = account_key(s.account).into_bytes();
        let mut args: Vec<Vec<u8>> = vec![
            TTL_MS.to_string().into(),
            KEEP_MS.to_string().into(),
            DEVICES[s.device].0.into(),
            s.nonce.to_vec(),
        ];
        args.extend(history_args());
        let lua = pair.lua("release", std::slice::from_ref(&key), &args);
        let module = match self.rng.random_bool(0.1) {
            true => pair.lua_on_module("release", &key, &args),
            false => pair.native("SL.RELEASE", &key, &args),
        };
        self.log.0.push(format!(
            "release a{} {} → {lua:?}",
            s.account, DEVICES[s.device].0
        ));
        self.answers("release", &lua, &module);
        match num(&lua) {
            1 => self.seen.released += 1,
            _ => self.seen.not_held += 1,
        }
        s.account
    }

    fn list(&mut self, pair: &mut Pair) -> usize {
        let account = self.rng.random_range(1..ACCOUNTS);
        let key = account_key(account).into_bytes();
        let args: Vec<Vec<u8>> = vec![
            TTL_MS.to_string().into(),
            DEFAULT_PLAN.0.into(),
            DEFAULT_PLAN.1.to_string().into(),
        ];
        let lua = pair.lua("list", std::slice::from_ref(&key), &args);
        let module = pair.native("SL.LIST", &key, &args);
        self.log.0.push(format!("list a{account} → {lua:?}"));
        self.answers("list", &lua, &module);
        self.seen.lists += 1;
        account
    }

    fn force_stop(&mut self, pair: &mut Pair) -> usize {
        let s = self.some_stream();
        let keys = [
            account_key(s.account).into_bytes(),
            format!("sl:audit:{{a{}}}", s.account).into_bytes(),
        ];
        let mut args: Vec<Vec<u8>> = vec![
            TTL_MS.to_string().into(),
            KEEP_MS.to_string().into(),
            DEVICES[s.device].0.into(),
            s.nonce.to_vec(),
            format!("a{}", s.account).into(),
            b"stream".to_vec(),
            b"support".to_vec(),
            REASON.as_bytes().to_vec(),
            b"3".to_vec(),
            b"3600000".to_vec(),
        ];
        args.extend(history_args());
        let lua = pair.lua("force_stop", &keys, &args);
        let module = pair.native_keys("SL.FORCE_STOP", &keys, &args);
        self.log.0.push(format!(
            "force_stop a{} {} → {lua:?}",
            s.account, DEVICES[s.device].0
        ));
        let code = |v: &Value| match v {
            Value::Array(items) => num(&items[0]),
            other => panic!("force_stop answered {other:?}"),
        };
        if code(&lua) != code(&module) || !same_entries(&lua, &module, 1) {
            self.log
                .fail(format!("force_stop: lua {lua:?}, module {module:?}"));
        }
        if code(&lua) == 1 {
            self.seen.force_stopped += 1;
        }
        s.account
    }

    fn set_override(&mut self, pair: &mut Pair) -> usize {
        let account = self.rng.random_range(1..ACCOUNTS);
        let limit = self.rng.random_range(0..=5u8);
        let duration = OVERRIDE_MS[self.rng.random_range(0..OVERRIDE_MS.len())];
        self.set_override_on(pair, account, limit, duration)
    }

    /// A temporary limit of `limit` for `duration` ms on `account` (0: the one in force removed).
    fn set_override_on(
        &mut self,
        pair: &mut Pair,
        account: usize,
        limit: u8,
        duration: i64,
    ) -> usize {
        let keys = [
            account_key(account).into_bytes(),
            format!("sl:audit:{{a{account}}}").into_bytes(),
        ];
        let mut args: Vec<Vec<u8>> = vec![
            TTL_MS.to_string().into(),
            KEEP_MS.to_string().into(),
            DEFAULT_PLAN.0.into(),
            DEFAULT_PLAN.1.to_string().into(),
            limit.to_string().into(),
            duration.to_string().into(),
            format!("a{account}").into(),
            b"support".to_vec(),
            REASON.as_bytes().to_vec(),
            b"3".to_vec(),
            b"3600000".to_vec(),
        ];
        args.extend(history_args());
        let lua = pair.lua("set_override", &keys, &args);
        let module = pair.native_keys("SL.SET_OVERRIDE", &keys, &args);
        self.log.0.push(format!(
            "set_override a{account} {limit} for {duration} ms → {lua:?}"
        ));
        let head = |v: &Value| match v {
            Value::Array(items) => (num(&items[0]), num(&items[1])),
            other => panic!("set_override answered {other:?}"),
        };
        let ((la, lb), (ma, mb)) = (head(&lua), head(&module));
        if la != ma || !(lb == mb || close(lb, mb)) || !same_entries(&lua, &module, 2) {
            self.log
                .fail(format!("set_override: lua {lua:?}, module {module:?}"));
        }
        self.seen.overrides += 1;
        account
    }
}

/// Every key of the server, with its value (or list length) and exact expiry time.
fn everything(c: &mut Connection) -> Vec<(Vec<u8>, Value, i64)> {
    let mut names: Vec<Vec<u8>> = redis::cmd("KEYS").arg("*").query(c).unwrap();
    names.sort();
    names
        .into_iter()
        .filter_map(|name| {
            let kind: String = redis::cmd("TYPE").arg(&name).query(c).unwrap();
            let value = match kind.as_str() {
                "string" => redis::cmd("GET").arg(&name).query(c).unwrap(),
                "list" => redis::cmd("LRANGE")
                    .arg(&name)
                    .arg(0)
                    .arg(-1)
                    .query(c)
                    .unwrap(),
                _ => return None,
            };
            let expiry: i64 = redis::cmd("PEXPIRETIME").arg(&name).query(c).unwrap();
            Some((name, value, expiry))
        })
        .collect()
}

#[test]
fn the_module_answers_and_writes_as_the_lua_scripts_do() {
    let lua_server = Server::start(&[]);
    let module_server = Server::with_module(&[]);
    let replica = Server::start(&["--replicaof", "127.0.0.1", &module_server.port.to_string()]);
    let mut lua = lua_server.connect();
    let shas = support::load_scripts(&mut lua).into_iter().collect();
    let mut module = module_server.connect();
    support::load_scripts(&mut module);
    let mut pair = Pair { lua, module, shas };

    let seed = std::env::var("DIFF_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(26);
    let mut history = History {
        rng: StdRng::seed_from_u64(seed),
        streams: Vec::new(),
        steady: Vec::new(),
        seen: Seen::default(),
        log: Log(Vec::new()),
        book: caps_book(),
        granted_in_shadow: false,
    };
    let start = Instant::now() + Duration::from_millis(50);
    let mut skipped = 0;
    for burst in 0..BURSTS {
        let at = start + PERIOD * burst;
        std::thread::sleep(at.saturating_duration_since(Instant::now()));
        // A burst that starts late could reach a decision's time: left out.
        if at.elapsed() > Duration::from_millis(5) {
            skipped += 1;
            continue;
        }
        history.steady_round(&mut pair);
        while at.elapsed() < BURST {
            history.step(&mut pair);
        }
    }
    // The rarest kinds of entry on a run's schedule, when it missed them (a take-over needs a
    // live stream to take over from, a removal a temporary limit in force): once each, on a
    // fresh account, both paths compared as in any step.
    let fresh = ACCOUNTS;
    if !history.seen.history.contains(&(2, 0)) {
        let taken = history.play(&mut pair, fresh, 0, [1; 16], None, None, false);
        let target = history
            .streams
            .last()
            .cloned()
            .filter(|s| s.account == taken);
        history.play(&mut pair, fresh, 1, [2; 16], None, target, false);
        history.after_step(&mut pair, fresh);
    }
    if !history.seen.history.contains(&(7, 0)) {
        history.set_override_on(&mut pair, fresh, 2, OVERRIDE_MS[1]);
        history.set_override_on(&mut pair, fresh, 0, OVERRIDE_MS[1]);
        history.after_step(&mut pair, fresh);
    }
    // An enforced play refused by a device-type cap (the family plan's one phone): on a slow
    // machine, when the bursts' fewer steps missed it.
    if history.seen.denied_cap == 0 || !history.seen.history.contains(&(1, 2)) {
        let account = ACCOUNTS + 4;
        history.play(&mut pair, account, 1, [11; 16], Some(PLANS[1]), None, false);
        history.play(&mut pair, account, 2, [12; 16], Some(PLANS[1]), None, false);
        history.after_step(&mut pair, account);
    }
    // The same for plays in shadow, each on a fresh account: over a device-type cap (the
    // family plan's one phone), and in the general code, a take-over still over the limit once
    // its target is revoked (the shadow refusal's entry, then the take-over's) and a play that
    // forgets a lease past its time (the expired lease's entry, then the shadow refusal's).
    let basic = Some(PLANS[0]);
    if !history.seen.history.contains(&(8, 2)) {
        let account = ACCOUNTS + 1;
        history.play(&mut pair, account, 1, [3; 16], Some(PLANS[1]), None, false);
        history.play(&mut pair, account, 2, [4; 16], Some(PLANS[1]), None, true);
        history.after_step(&mut pair, account);
    }
    if history.seen.shadow_took_over == 0 {
        let account = ACCOUNTS + 2;
        history.play(&mut pair, account, 0, [5; 16], basic, None, false);
        let target = history.streams.last().cloned();
        history.play(&mut pair, account, 1, [6; 16], basic, None, true);
        history.after_step(&mut pair, account);
        history.play(&mut pair, account, 2, [7; 16], basic, target, true);
        history.after_step(&mut pair, account);
    }
    if history.seen.shadow_reaped == 0 {
        // Times as in the bursts: the first lease ends at 1 TTL and is forgotten at 2, the second
        // starts at 1.5 and ends at 2.5, the play in shadow comes at 2.2.
        let account = ACCOUNTS + 3;
        let at = Instant::now();
        let ttl = Duration::from_millis(TTL_MS as u64);
        history.play(&mut pair, account, 0, [8; 16], basic, None, false);
        std::thread::sleep((at + ttl * 3 / 2).saturating_duration_since(Instant::now()));
        history.play(&mut pair, account, 1, [9; 16], basic, None, false);
        history.after_step(&mut pair, account);
        std::thread::sleep((at + ttl * 11 / 5).saturating_duration_since(Instant::now()));
        history.play(&mut pair, account, 2, [10; 16], basic, None, true);
        history.after_step(&mut pair, account);
    }
    // A learning heartbeat on a full account: a stream the account does not hold (its home just
    // moved) is taken back past the limit, on both paths alike.
    if history.seen.learned_over_limit == 0 {
        let account = ACCOUNTS + 5;
        history.play(&mut pair, account, 0, [13; 16], basic, None, false);
        history.after_step(&mut pair, account);
        let stranger = Stream {
            account,
            device: 1,
            nonce: [14; 16],
            plan: (PLANS[0].0, PLANS[0].1),
        };
        history.heartbeat_of(&mut pair, stranger, true);
        history.after_step(&mut pair, account);
    }
    // A mode that is not `learning`: refused by both alike, before anything is written.
    for (name, c) in [("lua", &mut pair.lua), ("module", &mut pair.module)] {
        let mut args: Vec<Vec<u8>> = vec![
            TTL_MS.to_string().into(),
            KEEP_MS.to_string().into(),
            PLANS[0].0.into(),
            PLANS[0].1.to_string().into(),
            DEVICES[2].0.into(),
            [15; 16].to_vec(),
        ];
        args.extend(history_args());
        args.push(b"Learning".to_vec());
        let key = account_key(ACCOUNTS + 5).into_bytes();
        let mut cmd = match name {
            "lua" => {
                let mut cmd = redis::cmd("EVALSHA");
                cmd.arg(&pair.shas["heartbeat"]).arg(1);
                cmd
            }
            _ => redis::cmd("SL.HEARTBEAT"),
        };
        cmd.arg(&key).arg(&args);
        let refused = cmd
            .query::<Value>(c)
            .expect_err("a mode that is not learning");
        assert!(
            refused.to_string().contains("bad argument learning"),
            "{name}: {refused}"
        );
    }
    let seen = &history.seen;
    eprintln!(
        "seed {seed}: {} steps, {skipped} bursts skipped, slowest step {} ms, {seen:?}",
        history.log.0.len(),
        SLOWEST_STEP_MS.with(|s| s.get())
    );
    assert!(
        skipped < BURSTS / 4,
        "the machine was too busy: {skipped} bursts skipped"
    );
    for (what, n) in [
        ("granted", seen.granted),
        ("denied by the limit", seen.denied_limit),
        ("denied by a cap", seen.denied_cap),
        ("renewed", seen.renewed),
        ("re-registered", seen.reregistered),
        ("expired", seen.expired),
        ("revoked", seen.revoked),
        ("released", seen.released),
        ("force-stopped", seen.force_stopped),
        ("renewed through touch", seen.touched),
        ("renewed in one SL.RENEW", seen.renewed_in_one),
        ("granted in shadow over the limit", seen.shadow_limit),
        ("granted in shadow over a cap", seen.shadow_cap),
        (
            "granted in shadow, taking a stream over",
            seen.shadow_took_over,
        ),
        ("granted in shadow, forgetting leases", seen.shadow_reaped),
        (
            "re-registered learning, over the limit",
            seen.learned_over_limit,
        ),
    ] {
        assert!(n > 0, "the history never saw a play {what}: {seen:?}");
    }
    // Every kind of history entry, on both paths alike: refusals by the plan's limit (0), a
    // temporary limit (1) and a device-type cap (2), take-overs, force-stops, revocations told,
    // expired leases reaped, temporary limits granted and removed, the refusals plays in shadow
    // would have been (by the plan's limit and by a cap); and lists trimmed to the cap.
    for expected in [
        (1, 0),
        (1, 1),
        (1, 2),
        (2, 0),
        (3, 0),
        (4, 0),
        (5, 0),
        (6, 0),
        (7, 0),
        (8, 0),
        (8, 2),
    ] {
        assert!(
            seen.history.contains(&expected),
            "no history entry of kind {expected:?}: {seen:?}"
        );
    }
    assert!(seen.history_full, "no history ever reached its cap");

    // The replica, which has no module, applied the effects: the very same keys and times.
    let mut primary = module_server.connect();
    let acked: i64 = redis::cmd("WAIT")
        .arg(1)
        .arg(5_000)
        .query(&mut primary)
        .unwrap();
    assert_eq!(acked, 1, "the replica never caught up");
    let mut replica_conn = replica.connect();
    assert_eq!(everything(&mut primary), everything(&mut replica_conn));
}
