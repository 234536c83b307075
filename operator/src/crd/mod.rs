//! The `StreamLimiter` custom resource: its spec (what a platform team writes) and its status
//! (what the operator reports). The `///` docs become the CRD's field descriptions, the
//! `schemars`/`x_kube` attributes its OpenAPI bounds and CEL rules.
//!
//! By part: `plans` (plans, plan source, lease), `enforcement` (shadow, a share enforced), `redis`, `limiter` (with the failure policy),
//! `admin_ui`, `network` (NetworkPolicies), `monitoring`, `regions` (this region and its peers),
//! `status`, and `shared` (what several parts use). Every type is re-exported here, so `crate::crd::X`
//! names it wherever it lives.

mod admin_ui;
mod enforcement;
mod limiter;
mod monitoring;
mod network;
mod plans;
mod redis;
mod regions;
mod shared;
mod status;

pub use admin_ui::*;
pub use enforcement::*;
pub use limiter::*;
pub use monitoring::*;
pub use network::*;
pub use plans::*;
pub use redis::*;
pub use regions::*;
pub use shared::*;
pub use status::*;

use kube::{CustomResource, KubeSchema};
use serde::{Deserialize, Serialize};

/// API group of the resource.
pub const GROUP: &str = "screenlimit.io";

/// Longest `StreamLimiter` name: child names such as `<name>-redis-63-0` must stay valid
/// DNS labels (63 characters).
pub const MAX_NAME_LEN: usize = 40;

/// Most plans one resource may declare.
pub const MAX_PLANS: usize = 64;

/// Most Redis shards one resource may declare.
pub const MAX_SHARDS: i32 = 64;

/// The limiter rejects plans above this many streams (it stores a limit in one byte).
pub const MAX_STREAMS_CEILING: i32 = 100;

/// A per-account concurrent-stream limiter: Redis shards, the limiter Deployment that enforces
/// the plans, and optionally the admin UI.
#[derive(CustomResource, KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[kube(
    group = "screenlimit.io",
    version = "v1alpha1",
    kind = "StreamLimiter",
    plural = "streamlimiters",
    shortname = "sl",
    category = "screenlimit",
    namespaced,
    status = "StreamLimiterStatus",
    derive = "PartialEq",
    doc = "A per-account concurrent-stream limiter: plans, lease timing, Redis shards, the limiter Deployment and the optional admin UI.",
    validation = Rule::new("size(self.metadata.name) <= 40").message("metadata.name must be at most 40 characters so that the names of the objects it owns stay valid").reason(Reason::FieldValueInvalid),
    printcolumn(name = "Ready", type_ = "string", json_path = ".status.conditions[?(@.type==\"Ready\")].status", description = "Whether every shard and the limiter are ready"),
    printcolumn(name = "Reason", type_ = "string", json_path = ".status.conditions[?(@.type==\"Ready\")].reason", description = "Why the resource is (not) ready"),
    printcolumn(name = "Mode", type_ = "string", json_path = ".spec.redis.mode", description = "Redis mode: managed or external"),
    printcolumn(name = "Shards", type_ = "integer", json_path = ".spec.redis.shards", description = "Desired Redis shards"),
    printcolumn(name = "Ready-Shards", type_ = "integer", json_path = ".status.readyShards", description = "Managed shards whose pods are all ready"),
    printcolumn(name = "Limiters", type_ = "integer", json_path = ".spec.limiter.replicas", description = "Desired limiter replicas"),
    printcolumn(name = "Ready-Limiters", type_ = "integer", json_path = ".status.limiterReadyReplicas", description = "Limiter replicas ready to serve"),
    printcolumn(name = "Regions", type_ = "string", json_path = ".status.conditions[?(@.type==\"RegionsReachable\")].reason", description = "With spec.regions: whether the limiter pods reach every peer region (PeersReachable, PeerUnreachable, PeersNotCalledYet, NoPodAsked)", priority = 1),
    printcolumn(name = "Age", type_ = "date", json_path = ".metadata.creationTimestamp")
)]
#[x_kube(
    validation = Rule::new("self.plans.exists(p, p.name == self.defaultPlan)").message("defaultPlan must name one of the plans").field_path(".defaultPlan").reason(Reason::FieldValueInvalid),
    validation = Rule::new("!has(self.planSource) || !has(self.planSource.fallbackPlan) || self.plans.exists(p, p.name == self.planSource.fallbackPlan)").message("planSource.fallbackPlan must name one of the plans").field_path(".planSource.fallbackPlan").reason(Reason::FieldValueInvalid),
    validation = Rule::new("!has(self.limiter) || !has(self.limiter.batchWindowMicros) || !has(self.failurePolicy) || !has(self.failurePolicy.storeTimeoutMillis) || self.limiter.batchWindowMicros * 2 <= self.failurePolicy.storeTimeoutMillis * 1000").message("limiter.batchWindowMicros must be at most half of failurePolicy.storeTimeoutMillis").field_path(".limiter.batchWindowMicros").reason(Reason::FieldValueInvalid),
    // An absent field counts at its default (limiter.rs, plans.rs), as the limiter would take it.
    validation = Rule::new("!has(self.regions) || has(self.streamIdSecretName)").message("regions needs streamIdSecretName: every region must sign stream ids with the same key, from a Secret you create in each cluster").field_path(".streamIdSecretName").reason(Reason::FieldValueRequired),
    validation = Rule::new("(has(self.limiter) && has(self.limiter.renewalWindowMillis) ? self.limiter.renewalWindowMillis : 20) * 4 <= ((has(self.lease) && has(self.lease.ttlSeconds) ? self.lease.ttlSeconds : 90) - (has(self.lease) && has(self.lease.heartbeatIntervalSeconds) ? self.lease.heartbeatIntervalSeconds : 30)) * 1000").message("limiter.renewalWindowMillis must be at most a quarter of lease.ttlSeconds - lease.heartbeatIntervalSeconds (in milliseconds), so no lease ends while its renewal waits").field_path(".limiter.renewalWindowMillis").reason(Reason::FieldValueInvalid),
    // A home source reads another part of the spec, which only the root reaches.
    validation = Rule::new("!has(self.regions) || !has(self.regions.homeSources) || !('planSource' in self.regions.homeSources) || (has(self.planSource) && has(self.planSource.kind) ? self.planSource.kind : 'request') == 'postgres'").message("regions.homeSources names planSource, which needs planSource.kind: postgres (the subscription query's second column names the home)").field_path(".regions.homeSources").reason(Reason::FieldValueInvalid),
    validation = Rule::new("!has(self.regions) || !has(self.regions.homeSources) || !('playerToken' in self.regions.homeSources) || (has(self.limiter) && has(self.limiter.playerAuth) && has(self.limiter.playerAuth.homeClaim))").message("regions.homeSources names playerToken, which needs limiter.playerAuth.homeClaim (the claim of the player token that names the home)").field_path(".regions.homeSources").reason(Reason::FieldValueInvalid)
)]
#[serde(rename_all = "camelCase")]
pub struct StreamLimiterSpec {
    /// Subscription plans: each names the most streams an account on it may play at once.
    /// Names are unique; play-starts name their plan, accounts without one use `defaultPlan`.
    #[serde(default = "default_plans")]
    #[schemars(length(min = 1, max = 64))]
    #[x_kube(
        validation = Rule::new("self.all(p, self.filter(q, q.name == p.name).size() == 1)").message("plan names must be unique").reason(Reason::FieldValueDuplicate),
        merge_strategy = ListMerge::Map(vec!["name".into()])
    )]
    pub plans: Vec<Plan>,

    /// Plan applied to an account whose play-start names no plan. Must be one of `plans`.
    #[serde(default = "default_default_plan")]
    #[schemars(length(min = 1, max = 64), regex(pattern = r"^[A-Za-z0-9._:-]+$"))]
    pub default_plan: String,

    /// Where each account's plan comes from: the play-start (`request`, the default) or the
    /// subscription database (`postgres`, cached in each limiter pod).
    #[serde(default)]
    pub plan_source: PlanSourceSpec,

    /// Whether a play over a limit is refused (`enforce`, for every account or the share
    /// `enforcePercent` gives) or let through and counted (`shadow`), for the plans without an
    /// `enforcement` of their own (the limiter's `enforcement`). Reaches running pods without a
    /// restart.
    #[serde(default)]
    pub enforcement: EnforcementSpec,

    /// Lease timing: how often players heartbeat and when a silent player's slot frees up.
    #[serde(default)]
    pub lease: LeaseSpec,

    /// Where leases live: Redis shards run by the operator (`managed`) or given by you (`external`).
    #[serde(default)]
    pub redis: RedisSpec,

    /// The limiter Deployment: the stream API that enforces the plans.
    #[serde(default)]
    pub limiter: LimiterSpec,

    /// The admin dashboard for support staff. Off unless `enabled`.
    #[serde(default, rename = "adminUI")]
    pub admin_ui: AdminUiSpec,

    /// What a play-start does when Redis is slow or down, and how long Redis may take.
    #[serde(default)]
    pub failure_policy: FailurePolicySpec,

    /// Secret holding the key that signs stream ids (key `stream-id-secret`). Every limiter
    /// replica must share it. Empty: the operator creates `<name>-stream-id` once with 32
    /// random bytes and never rotates it. Required with `regions`: every region must share it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 253))]
    pub stream_id_secret_name: Option<String>,

    /// NetworkPolicies that let only the pods that need them reach Redis, the Sentinels, the
    /// limiter and the admin UI. On unless `enabled: false`.
    #[serde(default)]
    pub network_policies: NetworkPoliciesSpec,

    /// Prometheus Operator objects for the limiter: a `ServiceMonitor` that scrapes its pods and
    /// a `PrometheusRule` with its alerts. Off unless enabled; created only where the cluster
    /// serves `monitoring.coreos.com/v1` (condition `MonitoringAvailable` says).
    #[serde(default)]
    pub monitoring: MonitoringSpec,

    /// This install's region among several (the limiter's `regions`; one `StreamLimiter` per
    /// cluster): its name, weight and inbound token, and its peers. Each account then has one
    /// home region whose store alone decides its count. Needs `streamIdSecretName`, the same
    /// key in every region. A change rolls the limiter pods, but for the weights, evacuations
    /// and secondaries, which the limiter applies live.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub regions: Option<RegionsSpec>,
}

impl Default for StreamLimiterSpec {
    fn default() -> Self {
        StreamLimiterSpec {
            plans: default_plans(),
            default_plan: default_default_plan(),
            plan_source: PlanSourceSpec::default(),
            enforcement: EnforcementSpec::default(),
            lease: LeaseSpec::default(),
            redis: RedisSpec::default(),
            limiter: LimiterSpec::default(),
            admin_ui: AdminUiSpec::default(),
            failure_policy: FailurePolicySpec::default(),
            stream_id_secret_name: None,
            network_policies: NetworkPoliciesSpec::default(),
            monitoring: MonitoringSpec::default(),
            regions: None,
        }
    }
}

fn default_plans() -> Vec<Plan> {
    [("basic", 1), ("standard", 2), ("premium", 4)]
        .into_iter()
        .map(|(name, max_streams)| Plan::new(name, max_streams))
        .collect()
}
fn default_default_plan() -> String {
    "basic".into()
}
