//! The account's key and its lease keys, read and written as the Lua prelude (`common.lua`) and
//! the fast-path helpers (`fast.lua`) do: the same steps in the same order, so that both paths
//! leave the same bytes and expiry times behind.

use redis_module::RedisString;

use crate::error::Error;
use crate::keys::Keys;
use crate::layout::{Header, LIVE, RecordAt, key_life, lease_key, u48};

/// One account during a command: its key, the keyspace, and the times in force.
pub struct Account<'a> {
    pub keys: &'a Keys,
    pub key: &'a RedisString,
    pub now: i64,
    pub ttl: i64,
    /// How long a tombstone is remembered (2 TTLs).
    pub keep: i64,
}

/// A record still worth remembering: where it is, its state and its end (a live record's read
/// through its lease key once the stored end has passed).
#[derive(Clone, Copy)]
pub struct Rec {
    pub at: RecordAt,
    pub state: u8,
    pub ends: i64,
}

/// The account as `scan` returns it.
pub struct Scan {
    pub v: Vec<u8>,
    pub h: Header,
    pub recs: Vec<Rec>,
}

/// What `save` puts in a record's place.
#[derive(Clone)]
pub enum Edit {
    Drop,
    With(Vec<u8>),
}

/// The version-2 account read with its life extended (`read_extending`).
pub enum Extended {
    None,
    /// Not version 2: the fast paths leave it to the general code.
    OtherVersion,
    V2 {
        v: Vec<u8>,
        first: usize,
        override_left: i64,
    },
}

impl Account<'_> {
    fn lease_name(&self, nonce: &[u8]) -> RedisString {
        self.keys.name(&lease_key(self.key.as_slice(), nonce))
    }

    /// A live record's end as its lease key says (`lease_end`).
    pub fn lease_end(&self, nonce: &[u8], stored: i64) -> i64 {
        self.keys.expire_time(&self.lease_name(nonce)).max(stored)
    }

    /// Starts the lease's life to end at `ends`; its value, until when the account key lives.
    pub fn start_lease(&self, nonce: &[u8], ends: i64) -> Result<(), Error> {
        let until = (self.now + key_life(self.keep)).to_string();
        self.keys
            .set(&self.lease_name(nonce), until.as_bytes(), Some(ends))
    }

    /// Ends the lease of a live record (a stop, a revocation, a replacement).
    pub fn end_lease(&self, v: &[u8], rec: &Rec) -> Result<(), Error> {
        if rec.state == LIVE {
            self.keys.del(&self.lease_name(rec.at.nonce(v)))?;
        }
        Ok(())
    }

    pub fn del_lease(&self, nonce: &[u8]) -> Result<(), Error> {
        self.keys.del(&self.lease_name(nonce)).map(drop)
    }

    /// Reads the account and the records still worth remembering (`scan`).
    pub fn scan(&self) -> Result<Option<Scan>, Error> {
        let Some(v) = self.keys.get(self.key)? else {
            return Ok(None);
        };
        let (h, mut p) = Header::read(&v)?;
        let mut recs = Vec::new();
        while p < v.len() {
            let at = RecordAt::read(&v, p)?;
            let state = at.state(&v);
            let mut ends = u48(&v, p + 1)?;
            let mut forget = ends;
            if state == LIVE {
                if ends <= self.now {
                    ends = self.lease_end(at.nonce(&v), ends);
                }
                forget = ends + self.ttl;
            }
            if forget > self.now {
                recs.push(Rec { at, state, ends });
            }
            p = at.stop;
        }
        Ok(Some(Scan { v, h, recs }))
    }

    /// Writes the header and every kept record, edited, with `extra` appended; deletes the key
    /// when nothing is left to remember (`save`).
    pub fn save(
        &self,
        scan: Option<&Scan>,
        h: &Header,
        edits: &[Option<Edit>],
        extra: Option<&[u8]>,
    ) -> Result<(), Error> {
        let mut out = Vec::with_capacity(scan.map_or(64, |s| s.v.len() + 64));
        h.write(&mut out);
        let mut parts = 0;
        if let Some(scan) = scan {
            for (i, rec) in scan.recs.iter().enumerate() {
                parts += 1;
                match edits.get(i).and_then(Option::as_ref) {
                    Some(Edit::Drop) => {}
                    Some(Edit::With(bytes)) => out.extend_from_slice(bytes),
                    None => out.extend_from_slice(&scan.v[rec.at.start..rec.at.stop]),
                }
            }
        }
        if let Some(extra) = extra {
            parts += 1;
            out.extend_from_slice(extra);
        }
        let override_left = h.ovr_ends - self.now;
        if parts == 0 && override_left <= 0 {
            return self.keys.del(self.key).map(drop);
        }
        let life = key_life(self.keep).max(override_left);
        self.keys.set(self.key, &out, Some(self.now + life))
    }

    /// The account read and extended to its life (`read_extending` in fast.lua); an override
    /// that outlasts that life keeps its own.
    pub fn read_extending(&self) -> Result<Extended, Error> {
        let life = key_life(self.keep);
        let Some(v) = self.keys.get_extending(self.key, self.now + life)? else {
            return Ok(Extended::None);
        };
        if v.first() != Some(&2) {
            return Ok(Extended::OtherVersion);
        }
        let o = 4 + crate::layout::byte(&v, 2)? as usize;
        let override_left = u48(&v, o)? - self.now;
        if override_left > life {
            self.keys.expire_at(self.key, self.now + override_left)?;
        }
        Ok(Extended::V2 {
            v,
            first: o + 6,
            override_left,
        })
    }
}

/// The index in `recs` of the device's record (`find_device`).
pub fn find_device(v: &[u8], recs: &[Rec], device: &[u8]) -> Option<usize> {
    recs.iter().position(|r| r.at.device(v) == device)
}

/// Live leases unexpired at `now` (`active_count`).
pub fn active_count(recs: &[Rec], now: i64) -> i64 {
    recs.iter()
        .filter(|r| r.state == LIVE && r.ends > now)
        .count() as i64
}
