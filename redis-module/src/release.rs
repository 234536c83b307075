//! `SL.RELEASE`: a graceful stop frees the slot now and remembers the stream as released
//! (`release_fast.lua`, then `release.lua`).
//!
//! SL.RELEASE key ttl keep device nonce history-bounds
//! Answers 1 released, 0 not held. The leases the general code forgets that ended unstopped go
//! into the account's history (`history.rs`).

use redis_module::RedisValue;

use crate::account::{Account, Edit, Extended, find_device};
use crate::args::Arg;
use crate::error::Error;
use crate::history::{self, History};
use crate::keys::Keys;
use crate::layout::{LIVE, RELEASED, RecordAt, u48_bytes};
use crate::reply::int;

pub fn release(keys: &Keys, all: &[Arg]) -> Result<RedisValue, Error> {
    let (args, bounds) = history::args(all, 5)?;
    let (device, nonce) = (args.short(3, "device")?, args.nonce(4, "nonce")?);
    let account = Account {
        keys,
        key: args.key(0),
        now: keys.now(),
        ttl: args.ms(1, "ttl")?,
        keep: args.ms(2, "keep")?,
    };
    // Fast path: patch the live record's state and end in place. The key, its life extended
    // as it is read, is replicated as one `SET … PXAT` of its new value (the script's
    // `PEXPIREAT` and `SETRANGE` together).
    match account.read_extending()? {
        Extended::V2 { key, first, .. } => {
            if let Some((p, ends)) = live_lease(key.value(), first, device, nonce)?
                && ends + account.ttl > account.now
            {
                let mut patch = [RELEASED, 0, 0, 0, 0, 0, 0];
                patch[1..].copy_from_slice(&u48_bytes(account.now + account.keep));
                key.patch(p, &patch)?;
                account.del_lease(nonce)?;
                return Ok(int(1));
            }
            key.keep()?;
        }
        Extended::OtherVersion(key) => key.keep()?,
        Extended::None(_) => {}
    }
    let Some(scan) = account.scan()? else {
        return Ok(int(0));
    };
    let Some(i) = find_device(&scan.v, &scan.recs, device) else {
        return Ok(int(0));
    };
    let rec = scan.recs[i];
    if rec.state != LIVE || rec.at.nonce(&scan.v) != nonce {
        return Ok(int(0));
    }
    let mut edits = vec![None; scan.recs.len()];
    edits[i] = Some(Edit::With(rec.at.tombstone(
        &scan.v,
        RELEASED,
        account.now + account.keep,
    )));
    let reaped_into = match scan.reaped.is_empty() {
        true => None,
        false => Some(History::of(keys, account.key, account.now, bounds)?),
    };
    account.end_lease(&scan.v, &rec)?;
    account.save(Some(&scan), &scan.h, &edits, None)?;
    if let Some(history) = reaped_into {
        history.reaped(&scan.v, &scan.reaped)?;
    }
    Ok(int(1))
}

/// The device's first record when it is a live lease with this nonce, and its stored end
/// (`live_lease` in fast.lua).
fn live_lease(
    v: &[u8],
    mut p: usize,
    device: &[u8],
    nonce: &[u8],
) -> Result<Option<(usize, i64)>, Error> {
    while p < v.len() {
        let at = RecordAt::read(v, p)?;
        if at.device(v) == device {
            if at.state(v) != LIVE || at.nonce(v) != nonce {
                return Ok(None);
            }
            return Ok(Some((p, at.ends(v))));
        }
        p = at.stop;
    }
    Ok(None)
}
