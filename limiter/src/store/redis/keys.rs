//! The key names of the store's layout (each in its account's or user's hash slot) and how long
//! the lists and generations outlive their last entry.

use std::time::Duration;

use crate::ids::Nonce;

/// The key holding an account's leases; the hash tag keeps it on one Redis Cluster slot.
pub fn account_key(account_id: &str) -> String {
    format!("sl:{{{account_id}}}")
}

/// The key whose life is one live lease's life (`lease_key` in `fast.lua`): the account key and
/// the first 8 bytes of the stream's nonce, in the account's slot. A heartbeat extends it with
/// one native `GETEX ... PX`; its value is the time until which the account key surely lives.
pub fn lease_key(account_id: &str, nonce: &Nonce) -> Vec<u8> {
    let mut key = account_key(account_id).into_bytes();
    key.extend_from_slice(&nonce[..8]);
    key
}

/// The account's own audit list, in the same slot as its leases.
pub fn account_audit_key(account_id: &str) -> String {
    format!("sl:audit:{{{account_id}}}")
}

/// The account's recent history (`history.rs`), in the same slot as its leases. The scripts and
/// the module name it from the account key (`history_key` in `fast.lua`): no play carries it.
pub fn history_key(account_id: &str) -> String {
    format!("sl:history:{{{account_id}}}")
}

/// The fleet audit list: the newest support actions and sign-in events. Each shard of a list
/// keeps its own (beside the account or user an entry concerns) and the fleet view merges them;
/// a Redis Cluster keeps one, in this key's slot.
pub const FLEET_AUDIT_KEY: &str = "sl:audit";

/// A dashboard user's session generation (`session_event.lua`), in the user's own slot.
pub fn session_key(user: &str) -> String {
    format!("sl:session:{{{user}}}")
}

/// A dashboard user's failed sign-ins still counted (`session_event.lua`), beside its session
/// generation in the user's slot; it lives as long as the dashboards' failure window.
pub fn signin_failures_key(user: &str) -> String {
    format!("sl:signin-failures:{{{user}}}")
}

/// How long a session generation outlives its user's last sign-in event: longer than any
/// dashboard session may last (`MAX_DASHBOARD_SESSION_SEC`, and a day more).
pub(super) const SESSION_GENERATION_LIFE: Duration =
    Duration::from_secs(crate::model::MAX_DASHBOARD_SESSION_SEC + 24 * 3600);

/// How long an account's audit list outlives its last entry.
pub(super) const AUDIT_RETENTION: Duration = Duration::from_secs(30 * 24 * 3600);
