//! The account's key and its lease keys, read and written as the Lua prelude (`common.lua`) and
//! the fast-path helpers (`fast.lua`) do: the same steps in the same order, so that both paths
//! leave the same bytes and expiry times behind.

use crate::args::Arg;
use crate::error::Error;
use crate::keys::{Keys, Name, Open};
use crate::layout::{Header, LEASE_KEY_NONCE_BYTES, LIVE, RecordAt, key_life, u48};

/// One account during a command: its key, the keyspace, and the times in force.
pub struct Account<'a> {
    pub keys: &'a Keys,
    pub key: &'a Arg,
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
    /// Live records forgotten (leases that ended unstopped): start and end, for the history
    /// once the account is saved without them.
    pub reaped: Vec<(usize, i64)>,
}

/// What `save` puts in a record's place.
#[derive(Clone)]
pub enum Edit {
    Drop,
    With(Vec<u8>),
}

/// The account key read by the fast paths (`read_extending`): open once for the command.
pub enum Extended<'a> {
    /// No key: open, to be written.
    None(Open<'a>),
    /// Not version 2: the fast paths leave it to the general code.
    OtherVersion(Extending<'a>),
    V2 {
        key: Extending<'a>,
        first: usize,
        override_left: i64,
    },
}

/// The account key, read, and the life the read gives it (`read_extending`: `GETEX … PX`, then
/// `PEXPIRE` when an override outlasts that life). The new expiry is applied once: by `keep`,
/// or with the key's new value (`rewrite`), whose `SET … PXAT` carries it, or, on any other way
/// out (an error on a garbled value), when this is dropped, as the script's `GETEX` stays
/// applied whatever follows it.
pub struct Extending<'a> {
    key: Open<'a>,
    /// The key's expiry once read.
    pub at: i64,
    applied: bool,
}

impl Drop for Extending<'_> {
    fn drop(&mut self) {
        if !self.applied {
            // Replicated only if applied; a refusal (the key exists, open to write: none
            // expected) leaves the key and its replicas as they were.
            let _ = self.key.set_expire(self.at);
        }
    }
}

impl Extending<'_> {
    /// The value as stored (Redis's memory, read in place).
    pub fn value(&self) -> &[u8] {
        // The key exists and holds a string: checked when it was read.
        self.key.bytes().ok().flatten().unwrap_or(&[])
    }

    /// Applies the new expiry alone (the key's value unchanged).
    pub fn keep(mut self) -> Result<(), Error> {
        self.applied = true;
        self.key.set_expire(self.at)
    }

    /// Stores `value` with the new expiry (`SET … KEEPTTL` after the read's extension).
    pub fn rewrite(mut self, value: &Name) -> Result<(), Error> {
        self.applied = true;
        self.key.set(value, Some(self.at))
    }

    /// Overwrites bytes of the value in place and applies the new expiry, replicated as one
    /// `SET … PXAT` of the whole new value (`SETRANGE` after the read's extension).
    pub fn patch(mut self, offset: usize, bytes: &[u8]) -> Result<(), Error> {
        self.applied = true;
        // The new expiry first: if the server refused it, nothing changed yet (and nothing
        // is replicated); a refused patch leaves the expiry applied and held for replication.
        self.key.set_expire(self.at)?;
        self.key.patch(offset, bytes)?;
        self.key.replicate_value(self.at)
    }
}

impl<'a> Account<'a> {
    /// The lease key of a nonce (`lease_key`): the account key and the nonce's first 8 bytes.
    pub fn lease_name(&self, nonce: &[u8]) -> Name {
        let key = self.key.as_slice();
        let nonce = &nonce[..LEASE_KEY_NONCE_BYTES.min(nonce.len())];
        let mut buffer = [0u8; 128];
        match buffer.get_mut(..key.len() + nonce.len()) {
            Some(name) => {
                name[..key.len()].copy_from_slice(key);
                name[key.len()..].copy_from_slice(nonce);
                self.keys.string(name)
            }
            None => self.keys.string(&[key, nonce].concat()),
        }
    }

    /// A live record's end as its lease key says (`lease_end`).
    pub fn lease_end(&self, nonce: &[u8], stored: i64) -> i64 {
        self.keys.expire_time(&self.lease_name(nonce)).max(stored)
    }

    /// Starts the lease's life to end at `ends`; its value, until when the account key lives.
    pub fn start_lease(&self, nonce: &[u8], ends: i64) -> Result<(), Error> {
        let until = self.keys.number(self.now + key_life(self.keep));
        let name = self.lease_name(nonce);
        self.keys.open(&name, true).set(&until, Some(ends))
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
        let (mut recs, mut reaped) = (Vec::new(), Vec::new());
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
            } else if state == LIVE {
                reaped.push((p, ends));
            }
            p = at.stop;
        }
        Ok(Some(Scan { v, h, recs, reaped }))
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
    /// that outlasts that life keeps its own. The key stays open (to write) for the caller.
    pub fn read_extending(&self) -> Result<Extended<'a>, Error> {
        let life = key_life(self.keep);
        let key = self.keys.open(self.key, true);
        let version = match key.bytes()? {
            None => return Ok(Extended::None(key)),
            Some(v) => v.first().copied(),
        };
        let mut key = Extending {
            key,
            at: self.now + life,
            applied: false,
        };
        if version != Some(2) {
            return Ok(Extended::OtherVersion(key));
        }
        let v = key.value();
        let o = 4 + crate::layout::byte(v, 2)? as usize;
        let override_left = u48(v, o)? - self.now;
        if override_left > life {
            key.at = self.now + override_left;
        }
        Ok(Extended::V2 {
            key,
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
