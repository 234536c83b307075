//! `SL.ACQUIRE`: decide a play (`acquire_fast.lua`, then `acquire.lua`), step for step.
//!
//! SL.ACQUIRE key ttl keep plan limit default-plan default-limit device nonce details
//!            replace-device replace-nonce caps caps-book [history-bounds [shadow]]
//! Answers {1, limit, active, expires, plan, plan limit} or
//! {0, limit, rule, cap, plan, plan limit, active raw records...} (rule 0 the account's limit,
//! else 1 + the capped device type). A refusal, a take-over and the leases forgotten that ended
//! unstopped go into the account's history (`history.rs`).
//!
//! For an account in shadow, one more argument after the history's bounds, exactly `shadow`
//! (anything else is refused, `bad argument enforcement`, before the account is read): a play the
//! limits would refuse is granted as any other (the caller's earlier record dropped, a
//! take-over's target revoked, the lease started) and answered
//! {2, limit, active, expires, plan, plan limit, rule, cap}, with the rule and cap that would
//! have refused it. Its history entry is the refusal's, of kind 8 (shadow-refused) instead of 1:
//! on the fast path before the grant, in the general code after the leases reaped and before
//! the take-over. A call without it (an enforced account) is as before.

use redis_module::RedisValue;

use crate::account::{Account, Edit, Extended, Scan, find_device};
use crate::args::Arg;
use crate::error::Error;
use crate::history::{self, History};
use crate::keys::Keys;
use crate::layout::{
    Header, LIVE, REVOKED, RecordAt, byte, cap_of, caps_of, key_life, kind_of_details, new_record,
    push_u48, slice, u48,
};
use crate::reply::{self, Item, int, text};

struct Play<'a> {
    plan: &'a [u8],
    limit: i64,
    default_plan: &'a [u8],
    default_limit: i64,
    device: &'a [u8],
    nonce: &'a [u8],
    details: &'a [u8],
    replace_device: &'a [u8],
    replace_nonce: &'a [u8],
    caps: &'a [u8],
    caps_book: &'a [u8],
    kind: u8,
    /// The history's bounds as sent, read only for an entry (`History::of`).
    history: Option<&'a [u8]>,
    /// The account is in shadow: a play the limits would refuse is granted all the same.
    shadow: bool,
}

/// The arguments before the history's bounds, the account key included.
const ARGS: usize = 14;

/// The last argument of a play on an account in shadow (after the history's bounds), and the
/// word `SL.VERSION` is asked about by a limiter that may send it (`lib.rs`).
pub const SHADOW: &[u8] = b"shadow";

/// The arguments without the enforcement, and whether the play is in shadow: one argument after
/// the history's bounds, exactly `shadow` (`acquire_fast.lua` refuses anything else, first).
fn enforcement(all: &[Arg]) -> Result<(&[Arg], bool), Error> {
    // The command's name, its arguments, the bounds and the enforcement.
    match all.split_last() {
        Some((last, rest)) if all.len() == ARGS + 3 => match last.as_slice() == SHADOW {
            true => Ok((rest, true)),
            false => Err(Error::Arg("enforcement")),
        },
        _ => Ok((all, false)),
    }
}

pub fn acquire(keys: &Keys, all: &[Arg]) -> Result<RedisValue, Error> {
    let (all, shadow) = enforcement(all)?;
    let (args, bounds) = history::args(all, ARGS)?;
    let details = args.details(9, "details")?;
    let play = Play {
        plan: args.short(3, "plan")?,
        limit: args.small(4, "limit")?,
        default_plan: args.short(5, "default plan")?,
        default_limit: args.small(6, "default limit")?,
        device: args.short(7, "device")?,
        nonce: args.nonce(8, "nonce")?,
        details,
        replace_device: args.short(10, "replace device")?,
        replace_nonce: args.nonce_or_empty(11, "replace nonce")?,
        caps: args.caps(12, "caps")?,
        caps_book: args.bytes(13),
        kind: kind_of_details(details),
        history: bounds,
        shadow,
    };
    if keys.out_of_memory() {
        return Err(Error::OutOfMemory);
    }
    let account = Account {
        keys,
        key: args.key(0),
        now: keys.now(),
        ttl: args.ms(1, "ttl")?,
        keep: args.ms(2, "keep")?,
    };
    if let Some(answer) = fast(&account, &play)? {
        return Ok(answer);
    }
    general(&account, &play)
}

/// Appends the new record of this play, ending at `ends`.
fn push_record(out: &mut Vec<u8>, account: &Account, play: &Play, ends: i64) {
    new_record(
        out,
        ends,
        account.now,
        play.nonce,
        play.device,
        play.details,
    );
}

/// The new record's length.
fn record_len(play: &Play) -> usize {
    30 + play.device.len() + play.details.len()
}

/// The answer of a granted play, replied at once: the play's last step. In shadow, a play the
/// limits would have refused (`would_refuse`: the rule and the cap) is answered `{2, …, rule,
/// cap}`.
fn granted(
    keys: &Keys,
    limit: i64,
    active: i64,
    ends: i64,
    plan: &[u8],
    plan_limit: i64,
    would_refuse: Option<(i64, i64)>,
) -> RedisValue {
    let (code, rule, cap) = match would_refuse {
        Some((rule, cap)) => (2, rule, cap),
        None => (1, 0, 0),
    };
    let items = [
        Item::Int(code),
        Item::Int(limit),
        Item::Int(active),
        Item::Int(ends),
        Item::Bulk(plan),
        Item::Int(plan_limit),
        Item::Int(rule),
        Item::Int(cap),
    ];
    let n = match would_refuse {
        Some(_) => items.len(),
        None => 6,
    };
    reply::now(keys, &items[..n])
}

/// A new account, or a version-2 one whose plan is unchanged, with no take-over; `None` where
/// the general code decides (after the key's life was extended, as the script does).
fn fast(account: &Account, play: &Play) -> Result<Option<RedisValue>, Error> {
    let (now, ttl) = (account.now, account.ttl);
    let ends = now + ttl;
    let (key, first, override_left) = match account.read_extending()? {
        Extended::None(mut key) => {
            let (plan, limit) = match play.plan.is_empty() {
                true => (play.default_plan, play.default_limit),
                false => (play.plan, play.limit),
            };
            if limit < 1 {
                return Ok(None);
            }
            let h = Header::fresh(plan, limit);
            let mut value = Vec::with_capacity(13 + plan.len() + record_len(play));
            h.write(&mut value);
            push_record(&mut value, account, play, ends);
            let value = account.keys.string(&value);
            key.set(&value, Some(now + key_life(account.keep)))?;
            drop(key);
            account.start_lease(play.nonce, ends)?;
            return Ok(Some(granted(
                account.keys,
                limit,
                1,
                ends,
                plan,
                limit,
                None,
            )));
        }
        Extended::OtherVersion(key) => {
            key.keep()?;
            return Ok(None);
        }
        Extended::V2 {
            key,
            first,
            override_left,
        } => (key, first, override_left),
    };
    let v = key.value();
    let plan_limit = i64::from(byte(v, 1)?);
    let plan_len = byte(v, 2)? as usize;
    let plan_name = slice(v, 3, 3 + plan_len)?;
    let same_plan = play.plan.is_empty() || (plan_name == play.plan && plan_limit == play.limit);
    if !play.replace_device.is_empty() || !same_plan {
        key.keep()?;
        return Ok(None);
    }
    let limit = match override_left > 0 {
        true => i64::from(byte(v, first - 7)?),
        false => plan_limit,
    };
    let caps = match play.plan.is_empty() {
        true => caps_of(play.caps_book, plan_name),
        false => play.caps,
    };
    let cap = cap_of(caps, play.kind);
    // One pass: count the live leases of other devices (and those of the caller's type when it
    // is capped), find the caller's own record and notice records past their time.
    let (mut active, mut same_kind, mut own, mut stale) = (0, 0, None::<RecordAt>, false);
    let mut p = first;
    while p < v.len() {
        let at = RecordAt::read(v, p)?;
        let state = at.state(v);
        let mut rec_ends = u48(v, p + 1)?;
        let mine = at.device(v) == play.device;
        if mine {
            own = Some(at);
        } else if state == LIVE {
            if rec_ends <= now {
                rec_ends = account.lease_end(at.nonce(v), rec_ends);
            }
            stale |= rec_ends + ttl <= now;
            if rec_ends > now {
                active += 1;
                if cap > 0 && at.kind(v) == play.kind {
                    same_kind += 1;
                }
            }
        } else {
            stale |= rec_ends <= now;
        }
        p = at.stop;
    }
    let refused = rule(active, limit, same_kind, cap, play.kind);
    // Refused, or in shadow let through below unless records past their time need the general
    // code: the refusal's entry either way, and the other devices' live records for a refusal,
    // as the general code lists them.
    if let Some(rule) = refused
        && !(play.shadow && stale)
    {
        // The answer's 6 numbers, then the active records (as many as the limit, mostly).
        let mut out = Vec::new();
        if !play.shadow {
            out.reserve(6 + limit.clamp(0, 16) as usize);
            out.extend([
                int(0),
                int(limit),
                int(rule),
                int(cap),
                text(plan_name),
                int(plan_limit),
            ]);
        }
        let history = History::of(account.keys, account.key, now, play.history)?;
        let mut entry = refusal(play, rule, limit, cap, override_left > 0);
        let mut p = first;
        while p < v.len() {
            let at = RecordAt::read(v, p)?;
            if own.is_none_or(|own| own.start != p) && at.state(v) == LIVE {
                let rec_ends = account.lease_end(at.nonce(v), at.ends(v));
                if rec_ends > now {
                    if !play.shadow {
                        let mut raw = Vec::with_capacity(at.stop - p);
                        raw.push(LIVE);
                        push_u48(&mut raw, rec_ends);
                        raw.extend_from_slice(&v[p + 7..at.stop]);
                        out.push(RedisValue::StringBuffer(raw));
                    }
                    history::device(&mut entry, v, at);
                }
            }
            p = at.stop;
        }
        if !play.shadow {
            key.keep()?;
            history.push(history::REFUSED, &entry)?;
            return Ok(Some(RedisValue::Array(out)));
        }
        // In shadow the entry goes first, then the grant, as in the script.
        history.push(history::SHADOW_REFUSED, &entry)?;
    }
    if stale {
        key.keep()?;
        return Ok(None);
    }
    let mut value = Vec::with_capacity(v.len() + record_len(play));
    match own {
        Some(own) => {
            value.extend_from_slice(&v[..own.start]);
            value.extend_from_slice(&v[own.stop..]);
        }
        None => value.extend_from_slice(v),
    }
    push_record(&mut value, account, play, ends);
    // The plan's name for the answer, read before the value is replaced (255 bytes at most).
    let mut plan = [0u8; 255];
    let plan = &mut plan[..plan_name.len()];
    plan.copy_from_slice(plan_name);
    // One device, one slot: its earlier lease goes, and with it that lease's key (another key
    // than the account's: its value, read in place, is not touched).
    if let Some(own) = own
        && own.state(v) == LIVE
    {
        account.del_lease(own.nonce(v))?;
    }
    key.rewrite(&account.keys.string(&value))?;
    account.start_lease(play.nonce, ends)?;
    Ok(Some(granted(
        account.keys,
        limit,
        active + 1,
        ends,
        plan,
        plan_limit,
        refused.map(|rule| (rule, cap)),
    )))
}

/// The refusal's history entry so far: the rule as the history names it (0 the plan's limit, 1 a
/// temporary one, 2 a cap), the limit (or cap) and the device; the holders follow.
fn refusal(play: &Play, rule: i64, limit: i64, cap: i64, temporary: bool) -> Vec<u8> {
    let (why, at) = match rule {
        0 => (u8::from(temporary), limit),
        _ => (2, cap),
    };
    let mut body = Vec::with_capacity(128);
    body.extend_from_slice(&[why, at as u8]); // a limit and a cap fit a byte (args.rs)
    history::play(&mut body, play.device, play.details);
    body
}

/// The rule a play breaks, if any: 0 the account's limit, 1 + type a device-type cap.
fn rule(active: i64, limit: i64, same_kind: i64, cap: i64, kind: u8) -> Option<i64> {
    if active >= limit {
        Some(0)
    } else if cap > 0 && same_kind >= cap {
        Some(1 + i64::from(kind))
    } else {
        None
    }
}

/// The general code (`acquire.lua`): reap, replace the caller's own earlier lease, stop a
/// take-over target, count, admit.
fn general(account: &Account, play: &Play) -> Result<RedisValue, Error> {
    let now = account.now;
    let scan: Option<Scan> = account.scan()?;
    let mut h = match &scan {
        Some(s) => s.h.clone(),
        None => Header::fresh(play.default_plan, play.default_limit),
    };
    if !play.plan.is_empty() {
        h.plan = play.plan.to_vec();
        h.limit = play.limit;
    }
    let limit = h.limit_at(now);
    let (v, recs) = match &scan {
        Some(s) => (&s.v[..], &s.recs[..]),
        None => (&[][..], &[][..]),
    };
    let mut edits: Vec<Option<Edit>> = vec![None; recs.len()];
    let own = find_device(v, recs, play.device);
    if let Some(own) = own {
        edits[own] = Some(Edit::Drop);
    }
    let mut target = None;
    if !play.replace_device.is_empty()
        && let Some(t) = find_device(v, recs, play.replace_device)
        && Some(t) != own
        && recs[t].state == LIVE
        && recs[t].at.nonce(v) == play.replace_nonce
    {
        edits[t] = Some(Edit::With(recs[t].at.tombstone(
            v,
            REVOKED,
            now + account.keep,
        )));
        target = Some(t);
    }
    let caps = match play.plan.is_empty() {
        true => caps_of(play.caps_book, &h.plan),
        false => play.caps,
    };
    let cap = cap_of(caps, play.kind);
    let (mut active, mut same_kind) = (0, 0);
    for (i, rec) in recs.iter().enumerate() {
        if edits[i].is_none() && rec.state == LIVE && rec.ends > now {
            active += 1;
            if cap > 0 && rec.at.kind(v) == play.kind {
                same_kind += 1;
            }
        }
    }
    let refused = rule(active, limit, same_kind, cap, play.kind);
    // The refusal's entry in the account's history: the rule as the history names it, the
    // limit, the device, the devices holding the slots.
    let refusal_entry = refused.map(|rule| {
        let mut entry = refusal(play, rule, limit, cap, h.ovr_ends > now);
        for (i, rec) in recs.iter().enumerate() {
            if edits[i].is_none() && rec.state == LIVE && rec.ends > now {
                history::device(&mut entry, v, rec.at);
            }
        }
        entry
    });
    let reaped = scan.as_ref().map_or(&[][..], |s| &s.reaped[..]);
    let history = match refused.is_none() && reaped.is_empty() && target.is_none() {
        true => None,
        false => Some(History::of(account.keys, account.key, now, play.history)?),
    };
    // Refused (a refusal always has its history), unless in shadow.
    if let (Some(rule), Some(entry), Some(history)) = (refused, &refusal_entry, &history)
        && !play.shadow
    {
        let mut out = vec![
            int(0),
            int(limit),
            int(rule),
            int(cap),
            text(&h.plan),
            int(h.limit),
        ];
        crate::list::push_active(&mut out, account, v, recs, &edits);
        history.push(history::REFUSED, entry)?;
        return Ok(RedisValue::Array(out));
    }
    // Granted; in shadow perhaps over a limit, answered with the rule that would have refused it.
    let ends = now + account.ttl;
    if let Some(own) = own {
        account.end_lease(v, &recs[own])?;
    }
    if let Some(target) = target {
        account.end_lease(v, &recs[target])?;
    }
    let mut new = Vec::with_capacity(record_len(play));
    push_record(&mut new, account, play, ends);
    account.save(scan.as_ref(), &h, &edits, Some(&new))?;
    account.start_lease(play.nonce, ends)?;
    if let Some(history) = history {
        history.reaped(v, reaped)?;
        if let Some(entry) = &refusal_entry {
            history.push(history::SHADOW_REFUSED, entry)?;
        }
        if let Some(target) = target {
            let mut entry = Vec::with_capacity(96);
            history::play(&mut entry, play.device, play.details);
            history::device(&mut entry, v, recs[target].at);
            history.push(history::TAKE_OVER, &entry)?;
        }
    }
    Ok(granted(
        account.keys,
        limit,
        active + 1,
        ends,
        &h.plan,
        h.limit,
        refused.map(|rule| (rule, cap)),
    ))
}
