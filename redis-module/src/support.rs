//! Support actions: `SL.FORCE_STOP` (`force_stop.lua`) and `SL.SET_OVERRIDE`
//! (`set_override.lua`), each logging an audit entry on the account's list and returning it for
//! the fleet list (which, on a Redis Cluster, lives in another slot: the limiter adds it there).
//!
//! SL.FORCE_STOP key audit-key ttl keep device nonce account-id stream-id actor reason
//!               per-account retention history-bounds
//! Answers {1, entry} stopped, {2} already stopped, {0} unknown.
//!
//! SL.SET_OVERRIDE key audit-key ttl keep default-plan default-limit limit duration account-id
//!                 actor reason per-account retention history-bounds
//! Answers {override limit, override end} ({0, 0} cleared), with the entry logged if any.
//!
//! Both also record the change (with its actor) and the leases forgotten that ended unstopped in
//! the account's history (`history.rs`).

use redis_module::RedisValue;

use crate::account::{Account, Edit, find_device};
use crate::args::{Arg, Args};
use crate::audit::{self, Entry};
use crate::error::Error;
use crate::history::{self, History};
use crate::keys::Keys;
use crate::layout::{Header, REVOKED, byte, push_u48, slice};
use crate::reply::{int, text};

/// The audit list's cap and retention, the last two arguments of both commands.
fn audit_args(args: &Args, at: usize) -> Result<(i64, i64), Error> {
    Ok((
        args.count(at, "entries kept per account")?,
        args.ms(at + 1, "audit retention")?,
    ))
}

pub fn force_stop(keys: &Keys, all: &[Arg]) -> Result<RedisValue, Error> {
    let (args, bounds) = history::args(all, 12)?;
    let (device, nonce) = (args.short(4, "device")?, args.nonce(5, "nonce")?);
    let (per_account, retention) = audit_args(&args, 10)?;
    let list = args.key(1);
    audit::check_list(keys, list)?;
    let account = Account {
        keys,
        key: args.key(0),
        now: keys.now(),
        ttl: args.ms(2, "ttl")?,
        keep: args.ms(3, "keep")?,
    };
    let Some(scan) = account.scan()? else {
        return Ok(RedisValue::Array(vec![int(0)]));
    };
    let Some(i) = find_device(&scan.v, &scan.recs, device) else {
        return Ok(RedisValue::Array(vec![int(0)]));
    };
    let rec = scan.recs[i];
    if rec.state == REVOKED || rec.at.nonce(&scan.v) != nonce {
        return Ok(RedisValue::Array(vec![int(2)]));
    }
    // The display name (`meta_at`): '' when the record has no details.
    let d = rec.at.details;
    let meta = match scan.v[d] {
        0 => &[][..],
        _ => {
            let len = byte(&scan.v, d + 2)? as usize;
            slice(&scan.v, d + 3, d + 3 + len)?
        }
    };
    let mut edits = vec![None; scan.recs.len()];
    edits[i] = Some(Edit::With(rec.at.tombstone(
        &scan.v,
        REVOKED,
        account.now + account.keep,
    )));
    let entry = Entry::new()
        .number("at", account.now)
        .text("kind", b"force_stop")
        .text("account_id", args.bytes(6))
        .text("stream_id", args.bytes(7))
        .text("device_id", device)
        .text("device_meta", meta)
        .text("actor", args.bytes(8))
        .text("reason", args.bytes(9))
        .finish();
    let history = History::of(keys, account.key, account.now, bounds)?;
    account.end_lease(&scan.v, &rec)?;
    account.save(Some(&scan), &scan.h, &edits, None)?;
    history.reaped(&scan.v, &scan.reaped)?;
    let mut stopped = Vec::with_capacity(64);
    history::device(&mut stopped, &scan.v, rec.at);
    stopped.extend_from_slice(args.bytes(8));
    history.push(history::FORCE_STOP, &stopped)?;
    audit::push(keys, list, &entry, per_account, account.now + retention)?;
    Ok(RedisValue::Array(vec![
        int(1),
        RedisValue::StringBuffer(entry),
    ]))
}

pub fn set_override(keys: &Keys, all: &[Arg]) -> Result<RedisValue, Error> {
    let (args, bounds) = history::args(all, 13)?;
    let (default_plan, default_limit) = (
        args.short(4, "default plan")?,
        args.small(5, "default limit")?,
    );
    let (limit, duration) = (
        args.small(6, "override limit")?,
        args.ms_or_zero(7, "duration")?,
    );
    let (per_account, retention) = audit_args(&args, 11)?;
    let list = args.key(1);
    audit::check_list(keys, list)?;
    let account = Account {
        keys,
        key: args.key(0),
        now: keys.now(),
        ttl: args.ms(2, "ttl")?,
        keep: args.ms(3, "keep")?,
    };
    let now = account.now;
    let scan = account.scan()?;
    let mut h = match &scan {
        Some(s) => s.h.clone(),
        None => Header::fresh(default_plan, default_limit),
    };
    let (before, had_ends) = (h.limit_at(now), h.ovr_ends);
    let had = if h.ovr_ends > now { h.ovr_limit } else { 0 };
    h.ovr_limit = limit;
    h.ovr_ends = if limit > 0 { now + duration } else { 0 };
    let history = History::of(keys, account.key, now, bounds)?;
    account.save(scan.as_ref(), &h, &[], None)?;
    if let Some(scan) = &scan {
        history.reaped(&scan.v, &scan.reaped)?;
    }
    let change = match (limit > 0, had > 0) {
        (true, _) => Some((history::LIMIT_GRANTED, limit, h.ovr_ends)),
        (false, true) => Some((history::LIMIT_REMOVED, had, had_ends)),
        (false, false) => None,
    };
    if let Some((kind, limit, until)) = change {
        let mut body = vec![limit as u8]; // a limit fits a byte (args.rs)
        push_u48(&mut body, until);
        body.extend_from_slice(args.bytes(9));
        history.push(kind, &body)?;
    }
    let entry = if limit > 0 {
        Some(
            Entry::new()
                .text("kind", b"limit_granted")
                .number("limit_from", before)
                .number("limit_to", limit)
                .number("limit_until", h.ovr_ends),
        )
    } else if had > 0 {
        Some(
            Entry::new()
                .text("kind", b"limit_removed")
                .number("limit_from", had)
                .number("limit_to", h.limit)
                .number("limit_until", had_ends),
        )
    } else {
        None
    };
    let mut out = vec![int(h.ovr_limit), int(h.ovr_ends)];
    if let Some(entry) = entry {
        let entry = entry
            .number("at", now)
            .text("account_id", args.bytes(8))
            .text("actor", args.bytes(9))
            .text("reason", args.bytes(10))
            .finish();
        audit::push(keys, list, &entry, per_account, now + retention)?;
        out.push(text(&entry));
    }
    Ok(RedisValue::Array(out))
}
