//! Support actions' audit entries: the JSON the scripts build with `cjson.encode` (the same
//! fields and values; the limiter reads them with serde, so field order and escapes may differ),
//! pushed onto the account's audit list as `push_audit` in `common.lua` does.

use crate::args::Arg;
use crate::error::Error;
use crate::keys::Keys;

/// A JSON object being written, fields in the order they are added.
pub struct Entry(Vec<u8>);

impl Entry {
    pub fn new() -> Entry {
        Entry(vec![b'{'])
    }

    fn key(&mut self, name: &str) {
        if self.0.len() > 1 {
            self.0.push(b',');
        }
        self.0.push(b'"');
        self.0.extend_from_slice(name.as_bytes());
        self.0.extend_from_slice(b"\":");
    }

    pub fn text(mut self, name: &str, value: &[u8]) -> Entry {
        self.key(name);
        self.0.push(b'"');
        for &b in value {
            match b {
                b'"' => self.0.extend_from_slice(b"\\\""),
                b'\\' => self.0.extend_from_slice(b"\\\\"),
                b'\n' => self.0.extend_from_slice(b"\\n"),
                b'\r' => self.0.extend_from_slice(b"\\r"),
                b'\t' => self.0.extend_from_slice(b"\\t"),
                0..0x20 | 0x7f => self.0.extend_from_slice(format!("\\u{b:04x}").as_bytes()),
                _ => self.0.push(b), // other bytes as they are, as cjson writes them
            }
        }
        self.0.push(b'"');
        self
    }

    pub fn number(mut self, name: &str, value: i64) -> Entry {
        self.key(name);
        self.0.extend_from_slice(value.to_string().as_bytes());
        self
    }

    pub fn finish(mut self) -> Vec<u8> {
        self.0.push(b'}');
        self.0
    }
}

/// The account's audit list, checked before the command writes anything: a key of another
/// type is refused up front (the script would fail after its account write). Nothing the
/// command writes before the push can change its type: the list is another key than the
/// account's and its lease keys (`names.rs`).
pub fn check_list(keys: &Keys, list: &Arg) -> Result<(), Error> {
    match keys.is_list_or_empty(list) {
        true => Ok(()),
        false => Err(Error::WrongType),
    }
}

/// `LPUSH` the entry, keep the newest `per_account`, and let the list live until `until`, the
/// retention past its newest entry (`push_audit`). A push refused is an error reply, never an
/// entry answered that no list holds.
pub fn push(
    keys: &Keys,
    list: &Arg,
    entry: &[u8],
    per_account: i64,
    until: i64,
) -> Result<(), Error> {
    keys.list_push_capped(list, entry, per_account as usize)?;
    keys.expire_at(list, until).map(drop)
}
