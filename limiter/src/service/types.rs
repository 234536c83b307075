//! What the use cases take and answer: a play-start request, the decisions and views they return,
//! and their errors.

use crate::live::LiveStreams;
use crate::model::{DenyRule, Device, HeartbeatOutcome, Lease, LimitOverride};
use crate::plans::PlanError;
use crate::reload::status::ConfigView;
use crate::store::{ShardHealth, StoreError};

#[derive(Debug, thiserror::Error)]
pub enum ServiceError {
    #[error("plan {0:?} is not configured")]
    UnknownPlan(String),
    #[error("the subscription database does not know this account")]
    UnknownAccount,
    #[error("no such stream on this account")]
    UnknownStream,
    #[error("the stream store is unavailable: {0}")]
    StoreUnavailable(StoreError),
    #[error("this instance is over its bound of requests in flight")]
    Overloaded,
}

/// Whether a call may use the store, or was shed by the server (`overload.rs`) and must be
/// answered by the failure policy without it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Load {
    Normal,
    Shed,
}

pub use crate::regions::named::HomeHint;

/// A play-start request after input validation.
#[derive(Debug, Clone)]
pub struct PlayStart {
    pub account_id: String,
    pub device: Device,
    pub plan: Option<String>,
    pub replace_stream_id: Option<String>,
    /// What the call says of the account's home region (several regions).
    pub home: HomeHint,
}

/// A lease with the stream id a client uses to name it.
#[derive(Debug, Clone)]
pub struct ActiveStream {
    pub stream_id: String,
    pub lease: Lease,
}

#[derive(Debug, Clone)]
pub enum PlayDecision {
    Granted {
        stream_id: String,
        limit: u32,
        /// Unknown when the store was skipped under the `open` policy.
        active_count: Option<u32>,
        degraded: bool,
        /// For an account in shadow: whether the limits would have refused this play.
        shadow: Option<ShadowVerdict>,
    },
    Denied {
        limit: u32,
        rule: DenyRule,
        active: Vec<ActiveStream>,
    },
}

/// How a play of an account in shadow was judged: the rule that would have refused it, if any
/// (none also when the store did not answer and the failure policy decided).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ShadowVerdict {
    pub would_refuse: Option<DenyRule>,
}

#[derive(Debug, Clone, Copy)]
pub struct Renewal {
    pub outcome: HeartbeatOutcome,
    pub degraded: bool,
}

#[derive(Debug, Clone)]
pub struct AccountStreams {
    pub plan: String,
    /// Whether the account's plays over a limit are refused (else it is in shadow).
    pub enforced: bool,
    pub limit: u32,
    pub limit_override: Option<LimitOverride>,
    pub active: Vec<ActiveStream>,
    /// The region whose store decides the account, with several regions.
    pub home_region: Option<String>,
}

/// What the dashboard's fleet overview shows about this instance and its store.
#[derive(Debug, serde::Serialize, utoipa::ToSchema)]
pub struct FleetView {
    pub instance: InstanceInfo,
    pub failure_policy: String,
    pub plans: std::collections::BTreeMap<String, u32>,
    pub default_plan: String,
    /// Who is refused over a limit, and who is in shadow.
    pub enforcement: EnforcementView,
    pub lease_ttl_sec: f64,
    pub heartbeat_interval_sec: f64,
    /// The config this instance runs: its generation, revision and reload outcomes.
    pub config: ConfigView,
    pub shards: Vec<ShardHealth>,
    /// Decision counters since this instance started; sample twice for rates.
    pub decisions: std::collections::BTreeMap<String, u64>,
    /// Live streams per shard: counted on the embedded store, estimated from this instance's
    /// heartbeats on Redis (sum over instances for the fleet).
    pub live_streams: LiveStreams,
    /// With several regions: this one, the weights, how each peer answers.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub regions: Option<crate::regions::map::RegionsView>,
}

/// The enforcement in force: the share of accounts enforced, in percent (100 every account,
/// 0 none: shadow), and the plans that have their own.
#[derive(Debug, serde::Serialize, utoipa::ToSchema)]
pub struct EnforcementView {
    pub enforce_percent: u8,
    pub plans: std::collections::BTreeMap<String, u8>,
}

#[derive(Debug, serde::Serialize, utoipa::ToSchema)]
pub struct InstanceInfo {
    pub version: String,
    pub uptime_sec: u64,
    pub backend: String,
}

impl From<PlanError> for ServiceError {
    fn from(error: PlanError) -> Self {
        match error {
            PlanError::UnknownPlan(name) => ServiceError::UnknownPlan(name),
            PlanError::UnknownAccount => ServiceError::UnknownAccount,
        }
    }
}
