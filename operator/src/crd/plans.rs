//! `spec.plans`, `spec.planSource` and `spec.lease`: the subscription plans with their device
//! caps and own enforcement, where each account's plan comes from, and the lease timing.

use kube::KubeSchema;
use serde::{Deserialize, Serialize};

use super::enforcement::EnforcementSpec;
use super::shared::SecretKeyRef;

/// One subscription plan.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
#[x_kube(
    validation = Rule::new("!has(self.deviceCaps) || ((!has(self.deviceCaps.tv) || self.deviceCaps.tv <= self.maxStreams) && (!has(self.deviceCaps.mobile) || self.deviceCaps.mobile <= self.maxStreams) && (!has(self.deviceCaps.tablet) || self.deviceCaps.tablet <= self.maxStreams) && (!has(self.deviceCaps.web) || self.deviceCaps.web <= self.maxStreams) && (!has(self.deviceCaps.console) || self.deviceCaps.console <= self.maxStreams) && (!has(self.deviceCaps.other) || self.deviceCaps.other <= self.maxStreams))").message("every deviceCaps entry must be at most the plan's maxStreams").field_path(".deviceCaps").reason(Reason::FieldValueInvalid)
)]
#[serde(rename_all = "camelCase")]
pub struct Plan {
    /// Plan name as play-starts send it: letters, digits, `.`, `_`, `:` or `-`, at most 64.
    #[schemars(length(min = 1, max = 64), regex(pattern = r"^[A-Za-z0-9._:-]+$"))]
    pub name: String,
    /// Most streams an account on this plan may play at once (1 to 100).
    #[schemars(range(min = 1, max = 100))]
    pub max_streams: i32,
    /// At most this many of the plan's streams on one device type, e.g. `{mobile: 1}` for
    /// "2 streams, at most 1 of them on a phone". Each cap is 1 to `maxStreams`; a device type
    /// left out is limited by `maxStreams` only. The limiter answers a refused play-start with
    /// the rule that was hit.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub device_caps: Option<DeviceCaps>,
    /// This plan's own enforcement, in place of `spec.enforcement` for its accounts (e.g. a
    /// plan kept in shadow while the others are enforced).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub enforcement: Option<EnforcementSpec>,
}

impl Plan {
    /// A plan without device caps.
    pub fn new(name: impl Into<String>, max_streams: i32) -> Self {
        Plan {
            name: name.into(),
            max_streams,
            device_caps: None,
            enforcement: None,
        }
    }
}

/// Per-device-type caps inside one plan (device types as play-starts send them).
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, Default, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct DeviceCaps {
    /// Most streams on TVs and set-top boxes (`device_type: tv`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 100))]
    pub tv: Option<i32>,
    /// Most streams on phones (`device_type: mobile`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 100))]
    pub mobile: Option<i32>,
    /// Most streams on tablets (`device_type: tablet`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 100))]
    pub tablet: Option<i32>,
    /// Most streams in web browsers (`device_type: web`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 100))]
    pub web: Option<i32>,
    /// Most streams on game consoles (`device_type: console`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 100))]
    pub console: Option<i32>,
    /// Most streams on other devices (`device_type: other`, or none given).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 100))]
    pub other: Option<i32>,
}

impl DeviceCaps {
    /// `(device type as the limiter spells it, cap)` for every cap set, in a fixed order.
    pub fn entries(&self) -> Vec<(&'static str, i32)> {
        [
            ("tv", self.tv),
            ("mobile", self.mobile),
            ("tablet", self.tablet),
            ("web", self.web),
            ("console", self.console),
            ("other", self.other),
        ]
        .into_iter()
        .filter_map(|(kind, cap)| cap.map(|c| (kind, c)))
        .collect()
    }
}

/// Where the plan source looks accounts up.
#[derive(
    Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, Default, schemars::JsonSchema,
)]
#[serde(rename_all = "camelCase")]
pub enum PlanSourceKind {
    /// The play-start names its plan (`plan` in the request body).
    #[default]
    Request,
    /// The subscription database maps the account to its plan (PostgreSQL, cached).
    Postgres,
}

/// What a play-start gets when the database knows nothing of its account.
#[derive(
    Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, Default, schemars::JsonSchema,
)]
#[serde(rename_all = "camelCase")]
pub enum UnknownAccountPolicy {
    /// Play on `defaultPlan`.
    #[default]
    DefaultPlan,
    /// Refuse with 403 `unknown_account`.
    Deny,
}

/// How each account's plan is found.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq, Eq, Default)]
#[x_kube(
    validation = Rule::new("self.kind != 'postgres' || has(self.postgres)").message("planSource.postgres.secretRef is required when planSource.kind is postgres").field_path(".postgres").reason(Reason::FieldValueRequired)
)]
#[serde(rename_all = "camelCase")]
pub struct PlanSourceSpec {
    /// `request` (the play-start names its plan) or `postgres` (the subscription database says).
    #[serde(default)]
    pub kind: PlanSourceKind,
    /// The subscription database, for `kind: postgres`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub postgres: Option<PostgresPlanSourceSpec>,
    /// The in-process cache of account → plan in each limiter pod.
    #[serde(default)]
    pub cache: PlanCacheSpec,
    /// `defaultPlan` (play on the default plan) or `deny` (403 `unknown_account`) for an
    /// account the database has no row for.
    #[serde(default)]
    pub unknown_account: UnknownAccountPolicy,
    /// Plan for an account that is not cached while the database cannot answer (the decision
    /// is marked degraded). Must be one of `plans`; empty: `defaultPlan`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 64), regex(pattern = r"^[A-Za-z0-9._:-]+$"))]
    pub fallback_plan: Option<String>,
}

/// The PostgreSQL subscription database.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct PostgresPlanSourceSpec {
    /// A key of a Secret in this namespace holding a libpq-style connection string
    /// (`postgres://user:password@host:5432/db` or `host=… user=… dbname=…`). Mounted as a
    /// file into the limiter pods; the limiter reads it at start, so restart the limiter
    /// (`kubectl rollout restart deployment <name>-limiter`) after changing the Secret.
    pub secret_ref: SecretKeyRef,
    /// Query returning the plan name (text) of the account bound to `$1`; no row means an
    /// unknown account.
    #[serde(default = "default_plan_query")]
    #[schemars(length(min = 1, max = 4096))]
    #[x_kube(validation = Rule::new("self.contains('$1')").message("planSource.postgres.query must take the account id as $1").reason(Reason::FieldValueInvalid))]
    pub query: String,
    /// Channel the billing side NOTIFYs (payload: the account id) when a plan changes; the
    /// cached plan of that account is dropped at once. A lowercase SQL identifier.
    #[serde(default = "default_notify_channel")]
    #[schemars(length(min = 1, max = 63), regex(pattern = r"^[a-z_][a-z0-9_]*$"))]
    pub notify_channel: String,
    /// Milliseconds one plan lookup may take before the fallback plan applies.
    #[serde(default = "default_plan_timeout")]
    #[schemars(range(min = 1, max = 10000))]
    pub timeout_millis: i32,
    /// Database connections per limiter pod.
    #[serde(default = "default_pool_size")]
    #[schemars(range(min = 1, max = 256))]
    pub pool_size: i32,
}

/// Cache of account → plan in each limiter pod.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
#[x_kube(
    validation = Rule::new("self.maxStaleSeconds >= self.ttlSeconds").message("planSource.cache.maxStaleSeconds must be at least ttlSeconds").field_path(".maxStaleSeconds").reason(Reason::FieldValueInvalid)
)]
#[serde(rename_all = "camelCase")]
pub struct PlanCacheSpec {
    /// Accounts whose plan each limiter pod keeps in memory (about 100 bytes each).
    #[serde(default = "default_cache_capacity")]
    #[schemars(range(min = 1, max = 1_000_000_000))]
    pub capacity: i64,
    /// Seconds before a cached plan is looked up again (a NOTIFY drops it sooner).
    #[serde(default = "default_cache_ttl")]
    #[schemars(range(min = 1, max = 86400))]
    pub ttl_seconds: i32,
    /// While the database is down, a cached plan keeps serving up to this age in seconds.
    #[serde(default = "default_cache_max_stale")]
    #[schemars(range(min = 1, max = 604800))]
    pub max_stale_seconds: i32,
}

impl Default for PlanCacheSpec {
    fn default() -> Self {
        PlanCacheSpec {
            capacity: default_cache_capacity(),
            ttl_seconds: default_cache_ttl(),
            max_stale_seconds: default_cache_max_stale(),
        }
    }
}

/// Heartbeat interval and lease TTL.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
#[x_kube(
    validation = Rule::new("self.ttlSeconds >= 2 * self.heartbeatIntervalSeconds").message("ttlSeconds must be at least twice heartbeatIntervalSeconds, so one lost heartbeat does not end a stream").field_path(".ttlSeconds").reason(Reason::FieldValueInvalid)
)]
#[serde(rename_all = "camelCase")]
pub struct LeaseSpec {
    /// Seconds between a player's heartbeats.
    #[serde(default = "default_heartbeat")]
    #[schemars(range(min = 1, max = 3600))]
    pub heartbeat_interval_seconds: i32,
    /// Seconds after the last heartbeat before a silent player's slot is free again.
    /// At least twice `heartbeatIntervalSeconds`.
    #[serde(default = "default_ttl")]
    #[schemars(range(min = 2, max = 7200))]
    pub ttl_seconds: i32,
}

impl Default for LeaseSpec {
    fn default() -> Self {
        LeaseSpec {
            heartbeat_interval_seconds: default_heartbeat(),
            ttl_seconds: default_ttl(),
        }
    }
}

fn default_heartbeat() -> i32 {
    30
}
fn default_ttl() -> i32 {
    90
}
fn default_plan_query() -> String {
    "SELECT plan FROM subscriptions WHERE account_id = $1".into()
}
fn default_notify_channel() -> String {
    "screenlimit_plan_changed".into()
}
fn default_plan_timeout() -> i32 {
    50
}
fn default_pool_size() -> i32 {
    8
}
fn default_cache_capacity() -> i64 {
    2_000_000
}
fn default_cache_ttl() -> i32 {
    300
}
fn default_cache_max_stale() -> i32 {
    3600
}
