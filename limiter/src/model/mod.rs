//! The lease model, and the lease rules for one account as pure functions over its records
//! (`account.rs`).
//!
//! The embedded store runs these directly; `store/redis/lua/*.lua` implements the same rules
//! inside Redis. The conformance suite (`tests/conformance.rs`) holds both to one behaviour.
//!
//! An account keeps one record per device. A record is *live* while its lease is unexpired; an
//! expired live record lingers for one more TTL so a late heartbeat can tell "expired" from
//! "revoked". Revoked and released records are tombstones kept for two TTLs. A stream id names a
//! device and a nonce: a heartbeat whose nonce differs from the device's record belongs to a
//! stream that was replaced, and is revoked.

mod account;
mod audit;
mod commands;
mod history;
mod lease;

pub use crate::ids::PlanTag;
pub use account::*;
pub use audit::*;
pub use commands::*;
pub use history::*;
pub use lease::*;
