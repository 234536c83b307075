//! The key names a command accepts: the limiter's (`limiter/src/store/redis/keys.rs`), and
//! nothing else. Checked before a key is read or written, and before the cluster probe.
//!
//! Why: a command writes keys it does not declare (a lease key is the account key plus nonce
//! bytes), and the key API files a key wherever the command runs. Only an account key whose hash
//! tag is its whole id, `sl:{<id>}`, puts those keys in the account's slot; any other name (no
//! tag, an empty or open one, bytes after it) would put a lease key in another slot, which on a
//! Redis Cluster another node serves, and would point the probe (`<key>?`) at that node. A
//! support action's audit list must be the account's own, `sl:audit:{<id>}`: then it is another
//! key of the same slot, never the account key itself.

use crate::args::Arg;
use crate::error::Error;
use crate::layout::LEASE_KEY_NONCE_BYTES;

const ACCOUNT_PREFIX: &[u8] = b"sl:{";
const AUDIT_PREFIX: &[u8] = b"sl:audit:{";

/// The keys a command names, by position after its name.
#[derive(Clone, Copy)]
pub enum Shape {
    /// An account key first.
    Account,
    /// An account key, then its audit list.
    AccountAndAudit,
    /// Lease keys, every argument but the last.
    Leases,
}

/// An id the hash tag can hold whole: not empty, no brace.
fn clean(id: &[u8]) -> bool {
    !id.is_empty() && !id.iter().any(|&b| b == b'{' || b == b'}')
}

/// The account id of an account key `sl:{<id>}`, nothing after the closing brace.
pub fn account_id(key: &[u8]) -> Option<&[u8]> {
    let id = key.strip_prefix(ACCOUNT_PREFIX)?.strip_suffix(b"}")?;
    clean(id).then_some(id)
}

/// Whether `key` is the audit list `sl:audit:{<id>}` of the account `id`.
pub fn is_audit_of(key: &[u8], id: &[u8]) -> bool {
    key.strip_prefix(AUDIT_PREFIX)
        .and_then(|rest| rest.strip_suffix(b"}"))
        .is_some_and(|named| named == id)
}

/// Whether `key` is a lease key: `sl:{<id>}` (the tag ends at the first `}`), then exactly the
/// nonce bytes a lease key holds, whatever they are (braces too: they follow the tag).
pub fn is_lease_key(key: &[u8]) -> bool {
    let Some(rest) = key.strip_prefix(ACCOUNT_PREFIX) else {
        return false;
    };
    let Some(close) = rest.iter().position(|&b| b == b'}') else {
        return false;
    };
    clean(&rest[..close]) && rest.len() - close - 1 == LEASE_KEY_NONCE_BYTES
}

/// Refuses a call whose keys are not the limiter's. A key the call lacks is left to the arity
/// check of the command.
pub fn check(shape: Shape, args: &[Arg]) -> Result<(), Error> {
    let key = |i: usize| args.get(i).map(Arg::as_slice);
    match shape {
        Shape::Account => {
            if let Some(k) = key(1) {
                account_id(k).ok_or(Error::Key("account key"))?;
            }
        }
        Shape::AccountAndAudit => {
            if let Some(k) = key(1) {
                let id = account_id(k).ok_or(Error::Key("account key"))?;
                if key(2).is_some_and(|audit| !is_audit_of(audit, id)) {
                    return Err(Error::Key("audit key"));
                }
            }
        }
        Shape::Leases => {
            let names = args.get(1..args.len().saturating_sub(1)).unwrap_or(&[]);
            if !names.iter().all(|k| is_lease_key(k.as_slice())) {
                return Err(Error::Key("lease key"));
            }
        }
    }
    Ok(())
}
