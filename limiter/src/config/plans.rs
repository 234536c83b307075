//! `plans`, `plan_source`, `lease` and the failure policy: what a play-start is allowed.

use serde::de::{self, Deserializer, MapAccess, Unexpected, Visitor};

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

use serde::Deserialize;

use super::enforcement::EnforcementConfig;
use super::error::{ConfigError, invalid};
use crate::model::{DeviceCaps, DeviceType, Plan};

/// Largest plan a config may declare; the store encodes a limit in one byte.
pub const MAX_STREAMS_CEILING: u32 = 100;

/// `request`: the play-start names its plan. `postgres`: the subscription database says.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum PlanSourceKind {
    Request,
    Postgres,
}

/// What a play-start gets when the database knows nothing of its account.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum UnknownAccountPolicy {
    /// Play on the default plan.
    DefaultPlan,
    /// Refuse with 403 `unknown_account`.
    Deny,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct PlanSourceConfig {
    pub kind: PlanSourceKind,
    /// PostgreSQL connection string, inline (prefer `postgres_url_file` or the environment).
    pub postgres_url: Option<String>,
    /// File holding the connection string (a mounted Kubernetes Secret).
    pub postgres_url_file: Option<PathBuf>,
    /// Returns the plan name (text) of the account bound to `$1`; no row means unknown account.
    pub query: String,
    /// Channel the billing side NOTIFYs with the account id as payload when a plan changes.
    pub notify_channel: String,
    /// Deadline of one plan lookup.
    #[serde(with = "humantime_serde")]
    pub timeout: Duration,
    pub pool_size: usize,
    /// Accounts whose plan is kept in memory.
    pub cache_capacity: u64,
    /// A cached plan is looked up again after this long.
    #[serde(with = "humantime_serde")]
    pub cache_ttl: Duration,
    /// While the database is down, a cached plan keeps serving up to this age.
    #[serde(with = "humantime_serde")]
    pub cache_max_stale: Duration,
    pub unknown_account: UnknownAccountPolicy,
    /// Plan for an uncached account while the database cannot answer (default: `default_plan`).
    pub fallback_plan: Option<String>,
}

impl Default for PlanSourceConfig {
    fn default() -> Self {
        PlanSourceConfig {
            kind: PlanSourceKind::Request,
            postgres_url: None,
            postgres_url_file: None,
            query: "SELECT plan FROM subscriptions WHERE account_id = $1".into(),
            notify_channel: "screenlimit_plan_changed".into(),
            timeout: Duration::from_millis(50),
            pool_size: 8,
            cache_capacity: 2_000_000,
            cache_ttl: Duration::from_secs(300),
            cache_max_stale: Duration::from_secs(3600),
            unknown_account: UnknownAccountPolicy::DefaultPlan,
            fallback_plan: None,
        }
    }
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct LeaseConfig {
    #[serde(with = "humantime_serde")]
    pub heartbeat_interval: Duration,
    #[serde(with = "humantime_serde")]
    pub ttl: Duration,
}

impl Default for LeaseConfig {
    fn default() -> Self {
        LeaseConfig {
            heartbeat_interval: Duration::from_secs(30),
            ttl: Duration::from_secs(90),
        }
    }
}

/// What a decision does when the store cannot answer in time.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FailurePolicy {
    /// Allow the play and mark the answer degraded.
    Open,
    /// Refuse with 503 `store_unavailable`.
    Closed,
    /// Enforce the cap on this instance's own embedded store.
    LocalCap,
}

/// A plan: the short form `basic: 1`, or `standard: { max_streams: 2, device_caps: { mobile: 1 } }`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PlanRule {
    Streams(u32),
    Detailed(PlanDetail),
}

/// By hand rather than `untagged`: an error inside the long form (an unknown device type in
/// `device_caps`, a misspelt field) keeps its own message and path instead of "did not match
/// any variant".
impl<'de> Deserialize<'de> for PlanRule {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct RuleVisitor;

        impl<'de> Visitor<'de> for RuleVisitor {
            type Value = PlanRule;

            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str(
                    "a number of streams (`basic: 1`) or `{ max_streams: 2, device_caps: { mobile: 1 }, enforcement: { mode: shadow } }`",
                )
            }

            fn visit_u64<E: de::Error>(self, n: u64) -> Result<PlanRule, E> {
                u32::try_from(n)
                    .map(PlanRule::Streams)
                    .map_err(|_| E::invalid_value(Unexpected::Unsigned(n), &self))
            }

            fn visit_i64<E: de::Error>(self, n: i64) -> Result<PlanRule, E> {
                u64::try_from(n)
                    .map_err(|_| E::invalid_value(Unexpected::Signed(n), &self))
                    .and_then(|n| self.visit_u64(n))
            }

            fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<PlanRule, A::Error> {
                PlanDetail::deserialize(de::value::MapAccessDeserializer::new(map))
                    .map(PlanRule::Detailed)
            }
        }

        deserializer.deserialize_any(RuleVisitor)
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PlanDetail {
    pub max_streams: u32,
    /// At most this many of the plan's streams on one kind of device.
    #[serde(default)]
    pub device_caps: BTreeMap<DeviceType, u32>,
    /// This plan's own enforcement, in place of the top-level `enforcement` for its accounts.
    #[serde(default)]
    pub enforcement: Option<EnforcementConfig>,
}

static NO_CAPS: BTreeMap<DeviceType, u32> = BTreeMap::new();

impl PlanRule {
    pub fn max_streams(&self) -> u32 {
        match self {
            PlanRule::Streams(n) => *n,
            PlanRule::Detailed(d) => d.max_streams,
        }
    }

    /// The plan's own enforcement, if it has one.
    pub fn enforcement(&self) -> Option<&EnforcementConfig> {
        match self {
            PlanRule::Streams(_) => None,
            PlanRule::Detailed(d) => d.enforcement.as_ref(),
        }
    }

    pub fn device_caps(&self) -> &BTreeMap<DeviceType, u32> {
        match self {
            PlanRule::Streams(_) => &NO_CAPS,
            PlanRule::Detailed(d) => &d.device_caps,
        }
    }

    /// The plan as the stores use it (call after `validate`, which bounds every number).
    pub fn to_plan(&self, name: &str) -> Plan {
        let caps = self
            .device_caps()
            .iter()
            .fold(DeviceCaps::default(), |caps, (&kind, &cap)| {
                caps.with(kind, u8::try_from(cap).unwrap_or(u8::MAX))
            });
        Plan {
            name: name.to_owned(),
            limit: self.max_streams(),
            device_caps: caps,
        }
    }
}

impl FailurePolicy {
    pub fn label(self) -> &'static str {
        match self {
            FailurePolicy::Open => "open",
            FailurePolicy::Closed => "closed",
            FailurePolicy::LocalCap => "local_cap",
        }
    }
}

impl PlanSourceConfig {
    /// Checks the source against the declared `plans`, naming the field.
    pub fn validate(&self, plans: &BTreeMap<String, PlanRule>) -> Result<(), ConfigError> {
        let source = self;
        if let Some(plan) = &source.fallback_plan
            && !plans.contains_key(plan)
        {
            return Err(invalid(
                "plan_source.fallback_plan",
                format!("{plan:?} is not among the plans"),
            ));
        }
        if source.kind != PlanSourceKind::Postgres {
            return Ok(());
        }
        if source.postgres_url.is_none() && source.postgres_url_file.is_none() {
            return Err(invalid(
                "plan_source.postgres_url_file",
                "plan_source.kind is postgres: name the connection string file (or set SCREENLIMIT_PLAN_DB_URL)",
            ));
        }
        if !source.query.contains("$1") {
            return Err(invalid(
                "plan_source.query",
                "must take the account id as $1",
            ));
        }
        let channel = &source.notify_channel;
        let valid_channel = channel.len() <= 63
            && channel
                .chars()
                .next()
                .is_some_and(|c| c.is_ascii_lowercase() || c == '_')
            && channel
                .chars()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_');
        if !valid_channel {
            return Err(invalid(
                "plan_source.notify_channel",
                "must be a lowercase SQL identifier (a-z, 0-9, _)",
            ));
        }
        if source.timeout.is_zero() || source.pool_size == 0 || source.cache_capacity == 0 {
            return Err(invalid(
                "plan_source",
                "timeout, pool_size and cache_capacity must be above zero",
            ));
        }
        if source.cache_max_stale < source.cache_ttl {
            return Err(invalid(
                "plan_source.cache_max_stale",
                "must be at least plan_source.cache_ttl",
            ));
        }
        Ok(())
    }
}
