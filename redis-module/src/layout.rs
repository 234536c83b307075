//! The account value's byte layout, as `limiter/src/store/redis/lua/common.lua` writes it and
//! `limiter/src/store/redis/record.rs` reads it (0-based offsets here, 1-based in Lua):
//!
//!   header: B version (2), B plan limit, B plan length, plan, B override limit, I6 override end
//!           (version 1 had no override fields; it is still read)
//!   record: B state, I6 ends (ms), I6 started (ms), 16 nonce, B device length, device,
//!           B details length, details
//!
//! Every read is bounds-checked: a value another writer garbled is an error, never a panic.

/// The layout version this module reads and writes (`SL.VERSION` answers it).
pub const LAYOUT_VERSION: u8 = 2;

pub const LIVE: u8 = 0;
pub const REVOKED: u8 = 1;
pub const RELEASED: u8 = 2;

pub const NONCE_LEN: usize = 16;
/// How many bytes of the nonce name a lease key (`lease_key` in `fast.lua`).
pub const LEASE_KEY_NONCE_BYTES: usize = 8;
/// The device type of a record without details ("other").
pub const OTHER_KIND: u8 = 5;

/// The stored value does not follow the layout.
#[derive(Debug)]
pub struct Malformed;

pub type Parsed<T> = Result<T, Malformed>;

pub fn byte(v: &[u8], at: usize) -> Parsed<u8> {
    v.get(at).copied().ok_or(Malformed)
}

pub fn slice(v: &[u8], from: usize, to: usize) -> Parsed<&[u8]> {
    v.get(from..to).ok_or(Malformed)
}

/// A 6-byte big-endian number (a time in ms).
pub fn u48(v: &[u8], at: usize) -> Parsed<i64> {
    Ok(slice(v, at, at + 6)?
        .iter()
        .fold(0, |acc, &b| (acc << 8) | i64::from(b)))
}

pub fn push_u48(out: &mut Vec<u8>, n: i64) {
    out.extend_from_slice(&u48_bytes(n));
}

/// A number's 6 big-endian bytes: Lua's struct.pack('>I6') keeps the low 48 bits; so does this.
pub fn u48_bytes(n: i64) -> [u8; 6] {
    let b = n.to_be_bytes();
    [b[2], b[3], b[4], b[5], b[6], b[7]]
}

/// Where the record starting at `p` keeps its parts.
#[derive(Clone, Copy, Debug)]
pub struct RecordAt {
    pub start: usize,
    /// The details' length byte.
    pub details: usize,
    /// One past the record's last byte.
    pub stop: usize,
}

impl RecordAt {
    pub fn read(v: &[u8], p: usize) -> Parsed<RecordAt> {
        let device_len = byte(v, p + 29)? as usize;
        let details = p + 30 + device_len;
        let stop = details + 1 + byte(v, details)? as usize;
        if stop > v.len() {
            return Err(Malformed);
        }
        Ok(RecordAt {
            start: p,
            details,
            stop,
        })
    }

    pub fn state(&self, v: &[u8]) -> u8 {
        v[self.start]
    }

    pub fn ends(&self, v: &[u8]) -> i64 {
        u48(v, self.start + 1).unwrap_or(0)
    }

    pub fn nonce<'v>(&self, v: &'v [u8]) -> &'v [u8] {
        &v[self.start + 13..self.start + 29]
    }

    pub fn device<'v>(&self, v: &'v [u8]) -> &'v [u8] {
        &v[self.start + 30..self.details]
    }

    /// The device type (`type_at` in common.lua): "other" when the record has no details.
    pub fn kind(&self, v: &[u8]) -> u8 {
        match v[self.details] {
            0 => OTHER_KIND,
            _ => v.get(self.details + 1).copied().unwrap_or(OTHER_KIND),
        }
    }

    /// The record with a new state and end, the rest kept (`restamp`).
    pub fn restamp(&self, v: &[u8], state: u8, ends: i64) -> Vec<u8> {
        let mut out = Vec::with_capacity(self.stop - self.start);
        out.push(state);
        push_u48(&mut out, ends);
        out.extend_from_slice(&v[self.start + 7..self.stop]);
        out
    }

    /// A tombstone: state, forget time, started, nonce and device; the details dropped.
    pub fn tombstone(&self, v: &[u8], state: u8, forget: i64) -> Vec<u8> {
        let mut out = Vec::with_capacity(self.details + 1 - self.start);
        out.push(state);
        push_u48(&mut out, forget);
        out.extend_from_slice(&v[self.start + 7..self.details]);
        out.push(0);
        out
    }
}

/// A new live record (`new_record`).
pub fn new_record(
    out: &mut Vec<u8>,
    ends: i64,
    now: i64,
    nonce: &[u8],
    device: &[u8],
    details: &[u8],
) {
    out.push(LIVE);
    push_u48(out, ends);
    push_u48(out, now);
    out.extend_from_slice(nonce);
    out.push(device.len() as u8); // arguments are checked to fit (args.rs)
    out.extend_from_slice(device);
    out.extend_from_slice(details);
}

/// An account's header as the scripts hold it.
#[derive(Clone, Debug)]
pub struct Header {
    pub plan: Vec<u8>,
    pub limit: i64,
    pub ovr_limit: i64,
    pub ovr_ends: i64,
}

impl Header {
    /// The header of an account that has no key yet (`fresh_header`).
    pub fn fresh(plan: &[u8], limit: i64) -> Header {
        Header {
            plan: plan.to_vec(),
            limit,
            ovr_limit: 0,
            ovr_ends: 0,
        }
    }

    /// Reads the header; returns it and where the records start.
    pub fn read(v: &[u8]) -> Parsed<(Header, usize)> {
        let version = byte(v, 0)?;
        let limit = byte(v, 1)?;
        let plan_len = byte(v, 2)? as usize;
        let plan = slice(v, 3, 3 + plan_len)?.to_vec();
        let mut h = Header::fresh(&plan, i64::from(limit));
        let mut p = 3 + plan_len;
        if version >= 2 {
            h.ovr_limit = i64::from(byte(v, p)?);
            h.ovr_ends = u48(v, p + 1)?;
            p += 7;
        }
        Ok((h, p))
    }

    /// The limit in force: an unexpired override replaces the plan's (`limit_of`).
    pub fn limit_at(&self, now: i64) -> i64 {
        if self.ovr_ends > now {
            self.ovr_limit
        } else {
            self.limit
        }
    }

    /// The version-2 header bytes (`header`); the numbers are checked to fit a byte before.
    pub fn write(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(&[LAYOUT_VERSION, self.limit as u8, self.plan.len() as u8]);
        out.extend_from_slice(&self.plan);
        out.push(self.ovr_limit as u8);
        push_u48(out, self.ovr_ends);
    }
}

/// The device caps of `plan` from the caps book (`caps_of` in fast.lua): entries of name length,
/// name, 6 caps; empty when the plan has none (or the book is cut short).
pub fn caps_of<'b>(book: &'b [u8], plan: &[u8]) -> &'b [u8] {
    let mut p = 0;
    while p < book.len() {
        let len = book[p] as usize;
        if book.get(p + 1..p + 1 + len) == Some(plan) {
            return book
                .get(p + 1 + len..(p + 7 + len).min(book.len()))
                .unwrap_or(&[]);
        }
        p += len + 7;
    }
    &[]
}

/// The cap on `kind` in a plan's caps (0: none).
pub fn cap_of(caps: &[u8], kind: u8) -> i64 {
    i64::from(caps.get(kind as usize).copied().unwrap_or(0))
}

/// The device type a play's details name ("other" when they are too short to say).
pub fn kind_of_details(details: &[u8]) -> u8 {
    match details.len() > 1 {
        true => details[1],
        false => OTHER_KIND,
    }
}

/// How long an account key lives after a write, from `keep` (2 TTLs): three times that.
pub fn key_life(keep: i64) -> i64 {
    3 * keep
}
