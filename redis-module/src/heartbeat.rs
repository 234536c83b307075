//! `SL.HEARTBEAT`: the whole heartbeat in one command. First the renewal the limiter does
//! natively on the Lua path (`GETEX` of the lease key, then `touch.lua` when the account key's
//! life runs short), then, when the lease key is gone, the full heartbeat (`heartbeat.lua`).
//!
//! SL.HEARTBEAT key ttl keep plan limit device nonce [history-bounds [learning]]
//! Answers {1, expires} renewed, {2, expires} re-registered, {3} expired, {4} revoked. A
//! revocation told and the leases forgotten that ended unstopped go into the account's history
//! (`history.rs`); a renewal writes none.
//!
//! For an account whose home just moved here (learning mode), one more argument after the
//! history's bounds, exactly `learning` (anything else is refused, `bad argument learning`,
//! before a key is read, as the script refuses it first): a lost or expired lease is taken back
//! even on a full account. A revoked or replaced stream is told so all the same, and a renewal
//! is a renewal. A call without it is as before.

use redis_module::RedisValue;

use crate::account::{Account, Edit, active_count, find_device};
use crate::args::Arg;
use crate::error::Error;
use crate::history::{self, History};
use crate::keys::Keys;
use crate::layout::{Header, LIVE, RELEASED, REVOKED, key_life, new_record};
use crate::reply::int;

/// The arguments before the history's bounds, the account key included.
const ARGS: usize = 7;

/// The last argument of a heartbeat of an account in learning mode (after the history's
/// bounds), and the word `SL.VERSION` is asked about by a limiter that may send it (`lib.rs`).
pub const LEARNING: &[u8] = b"learning";

/// The arguments without the mode, and whether the account is learning: one argument after the
/// history's bounds, exactly `learning` (`heartbeat.lua` refuses anything else, first).
fn mode(all: &[Arg]) -> Result<(&[Arg], bool), Error> {
    // The command's name, its arguments, the bounds and the mode.
    match all.split_last() {
        Some((last, rest)) if all.len() == ARGS + 3 => match last.as_slice() == LEARNING {
            true => Ok((rest, true)),
            false => Err(Error::Arg("learning")),
        },
        _ => Ok((all, false)),
    }
}

pub fn heartbeat(keys: &Keys, all: &[Arg]) -> Result<RedisValue, Error> {
    let (all, learning) = mode(all)?;
    let (args, bounds) = history::args(all, ARGS)?;
    let (plan, limit) = (args.short(3, "plan")?, args.small(4, "limit")?);
    let (device, nonce) = (args.short(5, "device")?, args.nonce(6, "nonce")?);
    let account = Account {
        keys,
        key: args.key(0),
        now: keys.now(),
        ttl: args.ms(1, "ttl")?,
        keep: args.ms(2, "keep")?,
    };
    let ends = account.now + account.ttl;
    let answer = |code: i64, ends: i64| Ok(RedisValue::Array(vec![int(code), int(ends)]));
    if renew(&account, nonce)? {
        return answer(1, ends);
    }
    let scan = account.scan()?;
    let (v, recs) = match &scan {
        Some(s) => (&s.v[..], &s.recs[..]),
        None => (&[][..], &[][..]),
    };
    let history = || History::of(keys, account.key, account.now, bounds);
    let reaped = scan.as_ref().map_or(&[][..], |s| &s.reaped[..]);
    // The history of a save that forgets leases ended unstopped, read before the save.
    let reaped_into = || match reaped.is_empty() {
        true => Ok(None),
        false => history().map(Some),
    };
    let i = find_device(v, recs, device);
    if let Some(i) = i {
        let rec = recs[i];
        if rec.state == REVOKED || rec.at.nonce(v) != nonce {
            history()?.revoked(device)?;
            return Ok(RedisValue::Array(vec![int(4)]));
        }
        if rec.state == RELEASED {
            return Ok(RedisValue::Array(vec![int(3)]));
        }
        if rec.ends > account.now {
            let mut edits = vec![None; recs.len()];
            edits[i] = Some(Edit::With(rec.at.restamp(v, LIVE, ends)));
            let h = &scan.as_ref().expect("a record has an account").h;
            let reaped_into = reaped_into()?;
            account.save(scan.as_ref(), h, &edits, None)?;
            account.start_lease(nonce, ends)?;
            if let Some(history) = reaped_into {
                history.reaped(v, reaped)?;
            }
            return answer(1, ends);
        }
    }
    let h = match &scan {
        Some(s) => s.h.clone(),
        None => Header::fresh(plan, limit),
    };
    // Learning, taken back even on a full account: the new home holds none of its leases yet.
    if !learning && active_count(recs, account.now) >= h.limit_at(account.now) {
        return Ok(RedisValue::Array(vec![int(3)]));
    }
    // Taking a lease back adds state: refused, as any such write, over `maxmemory`.
    if keys.out_of_memory() {
        return Err(Error::OutOfMemory);
    }
    let reaped_into = reaped_into()?;
    match i {
        Some(i) => {
            let mut edits = vec![None; recs.len()];
            edits[i] = Some(Edit::With(recs[i].at.restamp(v, LIVE, ends)));
            account.save(scan.as_ref(), &h, &edits, None)?;
        }
        None => {
            let mut new = Vec::with_capacity(48 + device.len());
            new_record(&mut new, ends, account.now, nonce, device, &[0]);
            account.save(scan.as_ref(), &h, &[], Some(&new))?;
        }
    }
    account.start_lease(nonce, ends)?;
    if let Some(history) = reaped_into {
        history.reaped(v, reaped)?;
    }
    answer(2, ends)
}

/// The native renewal: the lease key's life renewed to one TTL from now; when its value says
/// the account key lives less than two TTLs more, the account key's life is renewed too
/// (`PEXPIRE … GT`) and the lease key told its new end (`touch.lua`). False when the lease key
/// or the account key is gone: the full heartbeat decides.
fn renew(account: &Account, nonce: &[u8]) -> Result<bool, Error> {
    let keys = account.keys;
    let name = account.lease_name(nonce);
    let mut lease = keys.open(&name, true);
    let account_until = match lease.bytes()? {
        None => return Ok(false),
        Some(value) => unsigned(value),
    };
    lease.set_expire(account.now + account.ttl)?;
    let soon = account.now + 2 * account.ttl;
    if account_until.is_some_and(|until| until >= soon as u64) {
        return Ok(true);
    }
    let life_ends = account.now + key_life(account.keep);
    let current = keys.expire_time(account.key);
    if current >= 0 && life_ends > current {
        keys.expire_at(account.key, life_ends)?;
    }
    let account_until = keys.expire_time(account.key);
    if account_until < 0 {
        return Ok(false);
    }
    lease.set(&keys.number(account_until), None)?;
    Ok(true)
}

/// The lease key's value as a `u64`, as Rust's parsing reads it (an optional `+`, then digits
/// and nothing else; `None` past `u64::MAX`), read in place without a copy or a UTF-8 check.
fn unsigned(text: &[u8]) -> Option<u64> {
    let digits = text.strip_prefix(b"+").unwrap_or(text);
    if digits.is_empty() {
        return None;
    }
    digits
        .iter()
        .try_fold(0u64, |n, &b| match b.is_ascii_digit() {
            true => n.checked_mul(10)?.checked_add(u64::from(b - b'0')),
            false => None,
        })
}
