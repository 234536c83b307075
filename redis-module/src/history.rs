//! The account's history, as `history_of` in `common.lua` (and the refusal in
//! `acquire_fast.lua`) writes it: entries on `sl:history:{<id>}`, named from the account key (so
//! in its slot, like a lease key, and named by no argument), newest first, capped and kept a
//! retention past the newest. The byte layout is `limiter/src/store/redis/history.rs`'s:
//!
//!   entry:  B version (1), B kind, I6 at (ms), then the kind's body
//!   device: B id length, id, B type code, B display name length, display name
//!
//! A key of another type under that name is left alone, as the scripts leave it (their `LPUSH`
//! is a `pcall`): the history is secondary to the command's own answer.

use crate::args::{Arg, Args, MAX_COUNT, MAX_MS, decimal};
use crate::error::Error;
use crate::keys::{Keys, Name};
use crate::layout::{OTHER_KIND, RecordAt, push_u48};

const ENTRY_VERSION: u8 = 1;
const HISTORY_PREFIX: &[u8] = b"sl:history:";

pub const REFUSED: u8 = 1;
pub const TAKE_OVER: u8 = 2;
pub const FORCE_STOP: u8 = 3;
pub const REVOKED: u8 = 4;
pub const EXPIRED: u8 = 5;
pub const LIMIT_GRANTED: u8 = 6;
pub const LIMIT_REMOVED: u8 = 7;
/// A play the limits would have refused, granted because the account is in shadow: the body of
/// a refusal (`REFUSED`).
pub const SHADOW_REFUSED: u8 = 8;

/// What `SL.VERSION history` asks: whether the module takes the history's bounds. A module
/// that predates them refuses the argument, and the limiter keeps that shard on its scripts.
pub const FEATURE: &[u8] = b"history";

/// Entries kept and how long the list outlives its newest entry (ms).
#[derive(Clone, Copy)]
struct Bounds {
    max: i64,
    retention: i64,
}

impl Bounds {
    /// The history's bounds as the limiter sends them, one argument: `<entries kept>:<retention
    /// ms>` in decimal digits (`50:604800000`), entries 1 to 1,000,000 and a retention a time
    /// argument may be (`args.rs`). Anything else is refused.
    fn parse(sent: &[u8]) -> Result<Bounds, Error> {
        let junk = || Error::Arg("history bounds");
        let colon = sent.iter().position(|&b| b == b':').ok_or_else(junk)?;
        let number = |text: &[u8], max: i64| {
            let digits = !text.is_empty() && text.iter().all(u8::is_ascii_digit);
            digits
                .then(|| decimal(text))
                .flatten()
                .filter(|n| (1..=max).contains(n))
        };
        match (
            number(&sent[..colon], MAX_COUNT),
            number(&sent[colon + 1..], MAX_MS),
        ) {
            (Some(max), Some(retention)) => Ok(Bounds { max, retention }),
            _ => Err(junk()),
        }
    }
}

/// A command's arguments with or without the history's bounds after its `n` others, and the
/// bounds' bytes, not read yet: only a command that has an entry to write reads them
/// (`History::of`), so a granted play or a renewal never parses them. A limiter from before the
/// history sends none (a shard's module may be updated before its limiters), and then the
/// command writes no history. Any other count is refused.
pub fn args(all: &[Arg], n: usize) -> Result<(Args<'_>, Option<&[u8]>), Error> {
    if all.len() == n + 1 {
        return Ok((Args::new(all, n)?, None));
    }
    let args = Args::new(all, n + 1)?;
    let sent = args.bytes(n);
    Ok((args, Some(sent)))
}

/// The history list of one account during a command that has an event to record.
pub struct History<'a> {
    keys: &'a Keys,
    list: Name,
    now: i64,
    /// None: the caller sent no bounds, and nothing is written.
    bounds: Option<Bounds>,
}

impl<'a> History<'a> {
    /// The history of the account `sl:{<id>}` (checked by `names.rs`): `sl:history:{<id>}`,
    /// bounded by what the caller `sent` (`args`), read here: a command calls this once it knows
    /// it has an entry to write, and before its first write where it can, so that junk bounds
    /// are refused with nothing written.
    pub fn of(
        keys: &'a Keys,
        account_key: &Arg,
        now: i64,
        sent: Option<&[u8]>,
    ) -> Result<History<'a>, Error> {
        let bounds = sent.map(Bounds::parse).transpose()?;
        let tag = account_key.as_slice().get(3..).unwrap_or(&[]);
        let list = keys.string(&[HISTORY_PREFIX, tag].concat());
        Ok(History {
            keys,
            list,
            now,
            bounds,
        })
    }

    /// `LPUSH` the entry, `LTRIM` to the cap, `PEXPIRE` to the retention.
    pub fn push(&self, kind: u8, body: &[u8]) -> Result<(), Error> {
        let Some(bounds) = self.bounds else {
            return Ok(());
        };
        if !self.keys.is_list_or_empty(&self.list) {
            return Ok(());
        }
        let mut entry = Vec::with_capacity(8 + body.len());
        entry.extend_from_slice(&[ENTRY_VERSION, kind]);
        push_u48(&mut entry, self.now);
        entry.extend_from_slice(body);
        self.keys
            .list_push_capped(&self.list, &entry, bounds.max as usize)?;
        self.keys
            .expire_at(&self.list, self.now + bounds.retention)
            .map(drop)
    }

    /// The leases `scan` forgot that ended unstopped (start in `v`, end), once the account is
    /// saved without them (`history.reaped`).
    pub fn reaped(&self, v: &[u8], reaped: &[(usize, i64)]) -> Result<(), Error> {
        for &(p, ends) in reaped {
            let mut body = Vec::with_capacity(48);
            push_u48(&mut body, ends);
            device(&mut body, v, RecordAt::read(v, p)?);
            self.push(EXPIRED, &body)?;
        }
        Ok(())
    }

    /// A revocation told to `device`, unless it is what the newest entry says already (a
    /// player's late heartbeats after the first told).
    pub fn revoked(&self, device: &[u8]) -> Result<(), Error> {
        let mut told = Vec::with_capacity(1 + device.len());
        told.push(device.len() as u8); // arguments are checked to fit (args.rs)
        told.extend_from_slice(device);
        let repeated = self.keys.list_head(&self.list).is_some_and(|newest| {
            newest.len() >= 8 && newest[..2] == [ENTRY_VERSION, REVOKED] && newest[8..] == told[..]
        });
        match repeated {
            true => Ok(()),
            false => self.push(REVOKED, &told),
        }
    }
}

/// Appends the device of the record `at` in `v` (`history.device`): its id, type and display
/// name; "other" and none when the record has no details.
pub fn device(out: &mut Vec<u8>, v: &[u8], at: RecordAt) {
    let q = at.details;
    let id = &v[at.start + 29..q];
    out.extend_from_slice(id);
    let dlen = v[q] as usize;
    if dlen == 0 {
        out.extend_from_slice(&[OTHER_KIND, 0]);
        return;
    }
    let meta = match dlen > 1 {
        true => {
            let end = (q + 3 + v[q + 2] as usize).min(q + 1 + dlen);
            v.get(q + 3..end).unwrap_or(&[])
        }
        false => &[],
    };
    out.extend_from_slice(&[v[q + 1], meta.len() as u8]);
    out.extend_from_slice(meta);
}

/// Appends the device of a play (`history.play`): its id and its details' type and display name.
pub fn play(out: &mut Vec<u8>, device: &[u8], details: &[u8]) {
    let meta = match details.len() > 2 {
        true => {
            let end = (3 + details[2] as usize).min(details.len());
            details.get(3..end).unwrap_or(&[])
        }
        false => &[],
    };
    out.push(device.len() as u8); // arguments are checked to fit (args.rs)
    out.extend_from_slice(device);
    out.extend_from_slice(&[
        details.get(1).copied().unwrap_or(OTHER_KIND),
        meta.len() as u8,
    ]);
    out.extend_from_slice(meta);
}
