//! What the stores are asked (a play-start, a force-stop, a temporary-limit change) and what they
//! answer.

use super::lease::{DenyRule, Device, Lease, Millis, OverrideGrant, Plan};
use crate::ids::{Nonce, PlanTag, StreamRef};

#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub struct AcquireCmd {
    pub account_id: String,
    pub device: Device,
    #[serde(with = "crate::ids::nonce_text")]
    pub nonce: Nonce,
    /// The plan the request named; `None` keeps the account's remembered plan.
    pub plan: Option<Plan>,
    /// A stream to stop so the caller takes its slot.
    pub replace: Option<StreamRef>,
    /// The account is in shadow (`enforcement`): a play the limits would refuse is granted as
    /// any other, and the refusal it would have been is answered and recorded instead.
    pub shadow: bool,
}

#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum AcquireOutcome {
    Granted {
        /// The plan the account is now held to (its id carries it).
        plan: PlanTag,
        limit: u32,
        active_count: u32,
        expires_at: Millis,
        /// In shadow: the rule that would have refused this play (the account now holds more
        /// than its limit, or than a device-type cap).
        would_refuse: Option<DenyRule>,
    },
    Denied {
        plan: PlanTag,
        limit: u32,
        rule: DenyRule,
        active: Vec<Lease>,
    },
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum HeartbeatOutcome {
    Renewed {
        expires_at: Millis,
    },
    /// The lease was gone (expired or lost with the store) and the account had room.
    Reregistered {
        expires_at: Millis,
    },
    /// The lease is gone and the account is full, or the stream was released: play again.
    Expired,
    /// Force-stopped, taken over or replaced by a newer play: stop playing.
    Revoked,
    /// Let play by another region while the account's home did not answer, and found over the
    /// account's limit once it answered again: stop playing. Only the regions answer it.
    RevokedOverLimit,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum ReleaseOutcome {
    Released,
    NotHeld,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum ForceStopOutcome {
    Stopped,
    AlreadyStopped,
    Unknown,
}

/// A force-stop as support asks for it; the audit log records who and why.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub struct ForceStopCmd {
    pub account_id: String,
    pub stream: StreamRef,
    /// The stream id as the caller named it, for the audit log.
    pub stream_id: String,
    pub actor: String,
    pub reason: String,
}

/// A temporary-limit change as support asks for it: grant `grant`, or with `None` remove the
/// account's temporary limit; the audit log records who and why.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub struct OverrideCmd {
    pub account_id: String,
    pub grant: Option<OverrideGrant>,
    pub actor: String,
    pub reason: String,
}
