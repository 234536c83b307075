//! The `StreamLimiter` custom resource: its spec (what a platform team writes) and its status
//! (what the operator reports). The `///` docs become the CRD's field descriptions, the
//! `schemars`/`x_kube` attributes its OpenAPI bounds and CEL rules.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::ResourceRequirements;
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
    printcolumn(name = "Age", type_ = "date", json_path = ".metadata.creationTimestamp")
)]
#[x_kube(
    validation = Rule::new("self.plans.exists(p, p.name == self.defaultPlan)").message("defaultPlan must name one of the plans").field_path(".defaultPlan").reason(Reason::FieldValueInvalid),
    validation = Rule::new("!has(self.planSource) || !has(self.planSource.fallbackPlan) || self.plans.exists(p, p.name == self.planSource.fallbackPlan)").message("planSource.fallbackPlan must name one of the plans").field_path(".planSource.fallbackPlan").reason(Reason::FieldValueInvalid),
    validation = Rule::new("!has(self.limiter) || !has(self.limiter.batchWindowMicros) || !has(self.failurePolicy) || !has(self.failurePolicy.storeTimeoutMillis) || self.limiter.batchWindowMicros * 2 <= self.failurePolicy.storeTimeoutMillis * 1000").message("limiter.batchWindowMicros must be at most half of failurePolicy.storeTimeoutMillis").field_path(".limiter.batchWindowMicros").reason(Reason::FieldValueInvalid)
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
    /// random bytes and never rotates it.
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
}

/// Monitoring through the Prometheus Operator (`monitoring.coreos.com/v1`).
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq, Eq, Default)]
#[serde(rename_all = "camelCase")]
pub struct MonitoringSpec {
    /// A `ServiceMonitor` `<name>-limiter` scraping every limiter pod's `/metrics`.
    #[serde(default)]
    pub service_monitor: ServiceMonitorSpec,
    /// A `PrometheusRule` `<name>-limiter` with the limiter's and the operator's alerts (each
    /// links its runbook in docs/runbooks.md).
    #[serde(default)]
    pub prometheus_rule: PrometheusRuleSpec,
}

/// The limiter's `ServiceMonitor`.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct ServiceMonitorSpec {
    /// Create the `ServiceMonitor`.
    #[serde(default)]
    pub enabled: bool,
    /// How often Prometheus scrapes each pod, e.g. `30s` or `1m`.
    #[serde(default = "default_scrape_interval")]
    #[schemars(
        length(min = 2, max = 8),
        regex(pattern = r"^[1-9][0-9]{0,4}(ms|s|m|h)$")
    )]
    pub interval: String,
    /// Extra labels on the object: what your Prometheus selects (`serviceMonitorSelector`),
    /// e.g. `{release: kube-prometheus-stack}`. Keys under `app.kubernetes.io/` are the
    /// operator's own.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    #[schemars(extend("maxProperties" = 16))]
    #[x_kube(validation = Rule::new("self.all(k, !k.startsWith('app.kubernetes.io/'))").message("monitoring labels may not set app.kubernetes.io/ keys: the operator finds its objects by them").reason(Reason::FieldValueForbidden))]
    pub labels: BTreeMap<String, String>,
}

impl Default for ServiceMonitorSpec {
    fn default() -> Self {
        ServiceMonitorSpec {
            enabled: false,
            interval: default_scrape_interval(),
            labels: BTreeMap::new(),
        }
    }
}

/// The limiter's `PrometheusRule`.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq, Eq, Default)]
#[serde(rename_all = "camelCase")]
pub struct PrometheusRuleSpec {
    /// Create the `PrometheusRule`.
    #[serde(default)]
    pub enabled: bool,
    /// Extra labels on the object: what your Prometheus selects (`ruleSelector`). Keys under
    /// `app.kubernetes.io/` are the operator's own.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    #[schemars(extend("maxProperties" = 16))]
    #[x_kube(validation = Rule::new("self.all(k, !k.startsWith('app.kubernetes.io/'))").message("monitoring labels may not set app.kubernetes.io/ keys: the operator finds its objects by them").reason(Reason::FieldValueForbidden))]
    pub labels: BTreeMap<String, String>,
    /// When the alerts fire.
    #[serde(default)]
    pub thresholds: AlertThresholdsSpec,
}

/// When the alerts fire; the defaults fit the limiter's budgets.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct AlertThresholdsSpec {
    /// `ScreenlimitPlaysDegraded`: percent of play-starts allowed without the store (failure
    /// policy) over 5 minutes.
    #[serde(default = "default_degraded_percent")]
    #[schemars(range(min = 1, max = 100))]
    pub degraded_percent: i32,
    /// `ScreenlimitPlayStartSlow`: play-start p99 budget in milliseconds.
    #[serde(default = "default_play_start_p99")]
    #[schemars(range(min = 1, max = 10000))]
    pub play_start_p99_millis: i32,
    /// `ScreenlimitStoreErrors`: store errors per second on one shard, summed over the pods.
    #[serde(default = "default_one")]
    #[schemars(range(min = 1, max = 1000000))]
    pub store_errors_per_second: i32,
    /// `ScreenlimitDenialsUnusual`: how many times its one-day share the denied share of
    /// play-starts may reach over 15 minutes.
    #[serde(default = "default_denial_factor")]
    #[schemars(range(min = 2, max = 100))]
    pub denial_factor: i32,
}

impl Default for AlertThresholdsSpec {
    fn default() -> Self {
        AlertThresholdsSpec {
            degraded_percent: default_degraded_percent(),
            play_start_p99_millis: default_play_start_p99(),
            store_errors_per_second: default_one(),
            denial_factor: default_denial_factor(),
        }
    }
}

fn default_scrape_interval() -> String {
    "30s".into()
}
fn default_degraded_percent() -> i32 {
    1
}
fn default_play_start_p99() -> i32 {
    50
}
fn default_denial_factor() -> i32 {
    3
}

/// Ingress NetworkPolicies for the pods of this resource (`<name>-redis`, `<name>-sentinel`,
/// `<name>-limiter`, `<name>-admin-ui`).
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct NetworkPoliciesSpec {
    /// Render the NetworkPolicies (default true). Redis and Sentinel pods then accept only
    /// this resource's limiter pods, each other and the Sentinels; the limiter accepts the pods
    /// of its own namespace and `limiterClients`; the admin UI only `adminUIClients` (none:
    /// nothing over the pod network; `kubectl port-forward` still works). They take effect only
    /// where the cluster's network plugin enforces NetworkPolicies.
    #[serde(default = "default_true")]
    pub enabled: bool,
    /// Pods outside this namespace that may call the limiter (port `http`, 8080): e.g. the
    /// playback API's namespace, your Prometheus. Pods of the resource's own namespace always
    /// may.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 16))]
    pub limiter_clients: Vec<NetworkPeer>,
    /// The only pods that may reach the admin UI (port `http`, 8081): your ingress
    /// controller, e.g. `{namespaceLabels: {kubernetes.io/metadata.name: ingress-nginx}}`.
    #[serde(
        default,
        rename = "adminUIClients",
        skip_serializing_if = "Vec::is_empty"
    )]
    #[schemars(length(max = 16))]
    pub admin_ui_clients: Vec<NetworkPeer>,
}

impl Default for NetworkPoliciesSpec {
    fn default() -> Self {
        NetworkPoliciesSpec {
            enabled: true,
            limiter_clients: Vec::new(),
            admin_ui_clients: Vec::new(),
        }
    }
}

/// Pods allowed in by a NetworkPolicy, as a NetworkPolicy peer: the pods with `podLabels`
/// (none: every pod) in the namespaces with `namespaceLabels` (none: the resource's own
/// namespace).
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
#[x_kube(
    validation = Rule::new("has(self.namespaceLabels) || has(self.podLabels)").message("give namespaceLabels, podLabels or both").reason(Reason::FieldValueRequired)
)]
#[serde(rename_all = "camelCase")]
pub struct NetworkPeer {
    /// Labels of the namespaces, e.g. `{kubernetes.io/metadata.name: playback}`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace_labels: Option<BTreeMap<String, String>>,
    /// Labels of the pods, e.g. `{app: playback-api}`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pod_labels: Option<BTreeMap<String, String>>,
}

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
}

impl Plan {
    /// A plan without device caps.
    pub fn new(name: impl Into<String>, max_streams: i32) -> Self {
        Plan {
            name: name.into(),
            max_streams,
            device_caps: None,
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

/// Redis mode.
#[derive(
    Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, Default, schemars::JsonSchema,
)]
#[serde(rename_all = "camelCase")]
pub enum RedisMode {
    /// The operator runs one StatefulSet and Service per shard.
    #[default]
    Managed,
    /// You run Redis; give the shard URLs, or a Redis Cluster's nodes, in `redis.external`.
    External,
}

/// Redis shards holding the leases, sharded by account.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[x_kube(
    validation = Rule::new("self.mode != 'external' || has(self.external)").message("redis.external is required when redis.mode is external").field_path(".external").reason(Reason::FieldValueRequired),
    validation = Rule::new("self.mode != 'external' || !has(self.external) || !has(self.external.urls) || size(self.external.urls) == self.shards").message("redis.external.urls must list exactly redis.shards URLs").field_path(".external.urls").reason(Reason::FieldValueInvalid)
)]
#[serde(rename_all = "camelCase")]
pub struct RedisSpec {
    /// `managed` (the operator runs the shards) or `external` (you give their URLs).
    #[serde(default)]
    pub mode: RedisMode,
    /// Number of shards. Accounts are spread over shards by a consistent hash, so adding or
    /// removing one moves about 1/N of the accounts (their live leases re-register on the
    /// next heartbeat).
    #[serde(default = "default_shards")]
    #[schemars(range(min = 1, max = 64))]
    pub shards: i32,
    /// Replicas per managed shard, besides its primary (0 to 4). `0`: one Redis pod per
    /// shard, no failover. `1` or more: every shard's pods are watched by a Sentinel set
    /// (`redis.sentinel`) that promotes a replica when the primary fails, and the limiter finds
    /// each shard's primary through Sentinel. The operator never changes which pod is primary.
    #[serde(default)]
    #[schemars(range(min = 0, max = 4))]
    pub replicas_per_shard: i32,
    /// The Sentinel set that owns failover when `replicasPerShard >= 1` (ignored otherwise).
    #[serde(default)]
    pub sentinel: SentinelSpec,
    /// Redis image for managed shards.
    #[serde(default = "default_redis_image")]
    #[schemars(length(min = 1, max = 512))]
    pub image: String,
    /// CPU and memory for each managed Redis pod.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "resources_schema")]
    pub resources: Option<ResourceRequirements>,
    /// Shard URLs, or a Redis Cluster's seed nodes, for `external` mode.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub external: Option<ExternalRedisSpec>,
    /// TLS between the limiter, Redis and the Sentinels, from a Secret you provide.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tls: Option<RedisTlsSpec>,
    /// Load screenlimit's Redis module (native commands, cheaper for Redis than the Lua scripts)
    /// into the managed shards: an init container copies it from the limiter image. The limiter
    /// uses it on every shard that has it and the Lua scripts elsewhere, so turning it off (or
    /// a shard without it) changes cost, never answers. Ignored in `external` mode (load it
    /// yourself: README, "Native commands"; managed services do not allow modules).
    #[serde(default = "default_true")]
    pub module: bool,
    /// Whether a managed shard keeps its data across a restart of its Redis container:
    /// `none` (the default: a restarted shard comes back empty; leases re-register on their next
    /// heartbeat, but revocations less than 2 lease TTLs old are forgotten, README "Invariant 4
    /// and the store") or `appendOnly` (an append-only file, `appendfsync everysec`, on the
    /// pod's `/data` emptyDir: a crashed and restarted container reloads it; a pod deleted or
    /// moved to another node still starts empty, and with replicas Sentinel covers that).
    /// Costs Redis CPU (BENCHMARKS.md, "Append-only file") and node disk writes. Ignored in
    /// `external` mode.
    #[serde(default)]
    pub persistence: RedisPersistence,
}

/// What a managed shard writes to its volume.
#[derive(
    Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, Default, schemars::JsonSchema,
)]
#[serde(rename_all = "camelCase")]
pub enum RedisPersistence {
    /// Nothing: the data lives in memory only.
    #[default]
    None,
    /// An append-only file (`appendonly yes`, `appendfsync everysec`) in `/data`.
    AppendOnly,
}

/// TLS for Redis from a Secret in cert-manager's layout (`tls.crt`, `tls.key`, `ca.crt`).
///
/// `managed` mode: every Redis pod and Sentinel serves TLS only (`tls-port`, `port 0`) with
/// `tls.crt`/`tls.key`, replicas and Sentinels connect over TLS, and the limiter gets
/// `rediss://` addresses and trusts `ca.crt`. The certificate must name every address the
/// limiter dials: `<name>-redis-<i>.<ns>.svc` and `*.<name>-redis-<i>.<ns>.svc` per shard, and
/// with Sentinel `*.<name>-sentinel.<ns>.svc`. Clients authenticate with their ACL passwords,
/// not certificates (`tls-auth-clients no`). `external` mode: only `ca.crt` is used, as the
/// CA the limiter trusts for your `rediss://` URLs.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct RedisTlsSpec {
    /// Secret in this namespace with `tls.crt`, `tls.key` and `ca.crt` (a cert-manager
    /// Certificate's Secret). Pods read it at start: restart them after a renewal.
    #[schemars(length(min = 1, max = 253))]
    pub secret_name: String,
}

/// Redis Sentinel for managed shards with replicas: one StatefulSet of Sentinels that monitor
/// every shard's primary under the name `<name>-shard-<i>` and fail over on their own.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[x_kube(
    validation = Rule::new("self.quorum <= self.replicas").message("redis.sentinel.quorum must be at most redis.sentinel.replicas").field_path(".quorum").reason(Reason::FieldValueInvalid)
)]
#[serde(rename_all = "camelCase")]
pub struct SentinelSpec {
    /// Sentinel pods (odd, 3 or more in production: a failover needs a majority of them).
    #[serde(default = "default_sentinels")]
    #[schemars(range(min = 1, max = 9))]
    pub replicas: i32,
    /// Sentinels that must agree a primary is down before a failover starts.
    #[serde(default = "default_quorum")]
    #[schemars(range(min = 1, max = 9))]
    pub quorum: i32,
    /// Milliseconds without an answer before a Sentinel considers a primary down.
    #[serde(default = "default_down_after")]
    #[schemars(range(min = 1000, max = 600000))]
    pub down_after_millis: i32,
    /// Milliseconds a failover may take before another Sentinel retries it.
    #[serde(default = "default_failover_timeout")]
    #[schemars(range(min = 5000, max = 3600000))]
    pub failover_timeout_millis: i32,
    /// CPU and memory for each Sentinel pod (it runs from `redis.image`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "resources_schema")]
    pub resources: Option<ResourceRequirements>,
}

impl Default for SentinelSpec {
    fn default() -> Self {
        SentinelSpec {
            replicas: default_sentinels(),
            quorum: default_quorum(),
            down_after_millis: default_down_after(),
            failover_timeout_millis: default_failover_timeout(),
            resources: None,
        }
    }
}

/// Redis you run yourself: shard URLs, or the seed nodes of a Redis Cluster, inline or from a
/// Secret, and the credentials the limiter logs in with.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
#[x_kube(
    validation = Rule::new("!((has(self.urls) || has(self.urlsSecret)) && (has(self.clusterNodes) || has(self.clusterNodesSecret)))").message("redis.external mixes shard URLs (urls, urlsSecret) and a Redis Cluster (clusterNodes, clusterNodesSecret): the limiter places accounts by its own hash over shards, or by the cluster's slots, not both").reason(Reason::FieldValueInvalid),
    validation = Rule::new("[has(self.urls), has(self.urlsSecret), has(self.clusterNodes), has(self.clusterNodesSecret)].exists_one(x, x)").message("set exactly one of redis.external.urls, urlsSecret, clusterNodes and clusterNodesSecret").reason(Reason::FieldValueInvalid)
)]
#[serde(rename_all = "camelCase")]
pub struct ExternalRedisSpec {
    /// Shard URLs (`redis://host:port` or `rediss://…`) in shard order. Only ever append:
    /// the order decides which shard holds which account.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 64), inner(length(min = 1, max = 512)))]
    #[x_kube(validation = Rule::new("self.all(u, u.startsWith('redis://') || u.startsWith('rediss://'))").message("every URL must start with redis:// or rediss://").reason(Reason::FieldValueInvalid))]
    pub urls: Option<Vec<RedisUrl>>,
    /// A key of a Secret in this namespace holding the shard URLs, comma separated, in shard
    /// order. Passed to the limiter as `SCREENLIMIT_REDIS_SHARDS`; restart the limiter after
    /// changing it. The limiter refuses a password inside a URL: use `auth`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub urls_secret: Option<SecretKeyRef>,
    /// Seed nodes of a Redis Cluster (or a Valkey cluster, or a managed cluster-mode service),
    /// instead of shard URLs: `redis://host:port` or `rediss://…`, any nodes of the cluster
    /// (list several). The limiter reads the slot map from them and sends each account to its
    /// slot's primary, following failovers and resharding; `redis.shards` is then ignored.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 64), inner(length(min = 1, max = 512)))]
    #[x_kube(validation = Rule::new("self.all(u, u.startsWith('redis://') || u.startsWith('rediss://'))").message("every cluster node URL must start with redis:// or rediss://").reason(Reason::FieldValueInvalid))]
    pub cluster_nodes: Option<Vec<RedisUrl>>,
    /// A key of a Secret in this namespace holding the cluster's seed node URLs, comma
    /// separated. Passed to the limiter as `SCREENLIMIT_REDIS_CLUSTER_NODES`; restart the
    /// limiter after changing it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cluster_nodes_secret: Option<SecretKeyRef>,
    /// The user and password the limiter logs in with (a Redis 6+ ACL user; grant it the
    /// limiter's ACL, see the README).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub auth: Option<ExternalRedisAuth>,
}

/// Credentials for external Redis: the password is mounted from a Secret into the limiter pods
/// as a file (`store.auth.password_file`); restart the limiter after changing it.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct ExternalRedisAuth {
    /// ACL user name; none: the `default` user (`requirepass`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 128))]
    pub username: Option<String>,
    /// A key of a Secret in this namespace holding the password.
    pub password_secret_ref: SecretKeyRef,
}

/// A Redis URL.
pub type RedisUrl = String;

/// Player tokens: which keys sign them and what they must say. The key Secret is mounted (never
/// inlined) and read again by the limiter when the kubelet updates it (a key rotation).
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
#[x_kube(
    validation = Rule::new("has(self.hs256Secret) != has(self.jwksSecret)").message("give the keys as hs256Secret or as jwksSecret, one of them").reason(Reason::FieldValueRequired)
)]
#[serde(rename_all = "camelCase")]
pub struct PlayerAuthSpec {
    /// A key of a Secret holding the HS256 secret (at least 32 bytes).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hs256_secret: Option<SecretKeyRef>,
    /// A key of a Secret holding a JWKS document with the RS256, ES256 or EdDSA public keys.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub jwks_secret: Option<SecretKeyRef>,
    /// The `iss` every token must carry.
    #[schemars(length(min = 1, max = 512))]
    pub issuer: String,
    /// The `aud` every token must name.
    #[schemars(length(min = 1, max = 512))]
    pub audience: String,
    /// The claim holding the account id.
    #[serde(default = "default_account_claim")]
    #[schemars(length(min = 1, max = 128))]
    pub account_claim: String,
    /// A claim holding the device id; when set, a play-start must name that device.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 128))]
    pub device_claim: Option<String>,
}

fn default_account_claim() -> String {
    "sub".into()
}

/// The web pages (origins) whose scripts may call the player routes.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct CorsSpec {
    /// Exact origins as browsers send them, e.g. `https://watch.example.com`; no wildcard.
    #[x_kube(validation = Rule::new("self.all(o, !o.contains('*') && (o.startsWith('https://') || o.startsWith('http://')))").message("list exact origins (https://host[:port]); a wildcard is refused").reason(Reason::FieldValueInvalid))]
    #[schemars(length(max = 64))]
    pub allowed_origins: Vec<String>,
}

/// A key in a Secret of the resource's namespace.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct SecretKeyRef {
    /// Secret name.
    #[schemars(length(min = 1, max = 253))]
    pub name: String,
    /// Key inside the Secret.
    #[schemars(length(min = 1, max = 253))]
    pub key: String,
}

/// The limiter Deployment.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[x_kube(
    validation = Rule::new("(!has(self.playerAuth) && !has(self.gatewayTokenSecret)) || has(self.authTokenSecret)").message("playerAuth and gatewayTokenSecret need authTokenSecret (the support token): without it the support routes would be open").reason(Reason::FieldValueRequired)
)]
#[serde(rename_all = "camelCase")]
pub struct LimiterSpec {
    /// Limiter pods. They are stateless; a PodDisruptionBudget lets drains take one at a time.
    #[serde(default = "default_limiter_replicas")]
    #[schemars(range(min = 1, max = 1000))]
    pub replicas: i32,
    /// Limiter image.
    #[serde(default = "default_limiter_image")]
    #[schemars(length(min = 1, max = 512))]
    pub image: String,
    /// CPU and memory for each limiter pod.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "resources_schema")]
    pub resources: Option<ResourceRequirements>,
    /// A key of a Secret holding the bearer token every API call must carry. Empty: no
    /// authentication (keep the Service private). With `playerAuth` or `gatewayTokenSecret` it
    /// is the support token (the dashboard's), which opens the support routes only.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub auth_token_secret: Option<SecretKeyRef>,
    /// A key of a Secret holding the gateway token (the limiter's `auth.gateway_token_file`): a
    /// trusted gateway's credential, opening the player routes for any account and no support
    /// route. Needs `authTokenSecret`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gateway_token_secret: Option<SecretKeyRef>,
    /// Player tokens (the limiter's `auth.players`): JWTs from the video service's own auth open
    /// the player routes for their own account. Needs `authTokenSecret`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub player_auth: Option<PlayerAuthSpec>,
    /// Web players' origins allowed to call the player routes from a browser (the limiter's
    /// `http.cors`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cors: Option<CorsSpec>,
    /// Microseconds a limiter pod's batch of commands for one shard waits for company before it
    /// goes (commands that arrive meanwhile share its round trip, which is most of what a
    /// command costs Redis). 0: at once. At most half of `failurePolicy.storeTimeoutMillis`.
    #[serde(default)]
    #[schemars(range(min = 0, max = 10000))]
    pub batch_window_micros: i32,
    /// Deadlines on every connection and the bounds of one limiter pod (the limiter's `http`
    /// config). Beyond `maxInFlight` a pod sheds requests at once by the failure policy.
    #[serde(default)]
    pub http: LimiterHttpSpec,
    /// A HorizontalPodAutoscaler (autoscaling/v2, CPU utilization) for the limiter Deployment.
    /// While enabled it owns the replica count and `replicas` is ignored.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub autoscaling: Option<AutoscalingSpec>,
}

/// The limiter's connection deadlines and per-pod bounds; the defaults fit a pod behind a load
/// balancer that pools connections.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct LimiterHttpSpec {
    /// From a request's first byte to the end of its headers; slower: the connection is closed.
    #[serde(default = "default_header_read_timeout")]
    #[schemars(range(min = 10, max = 3600000))]
    pub header_read_timeout_millis: i32,
    /// From the end of the headers to the end of the body; slower: 408 and closed.
    #[serde(default = "default_body_read_timeout")]
    #[schemars(range(min = 10, max = 3600000))]
    pub body_read_timeout_millis: i32,
    /// How long a connection may wait for its next request. Keep it above the load balancer's
    /// own idle timeout.
    #[serde(default = "default_idle_timeout")]
    #[schemars(range(min = 1, max = 3600))]
    pub idle_timeout_seconds: i32,
    /// Largest request line + headers; beyond: 431.
    #[serde(default = "default_max_header_bytes")]
    #[schemars(range(min = 1024, max = 1048576))]
    pub max_header_bytes: i32,
    /// Open connections per pod; one more is accepted and closed at once.
    #[serde(default = "default_max_connections")]
    #[schemars(range(min = 1, max = 1000000))]
    pub max_connections: i32,
    /// Requests served at once per pod; beyond: shed at once by the failure policy.
    #[serde(default = "default_max_in_flight")]
    #[schemars(range(min = 1, max = 1000000))]
    pub max_in_flight: i32,
    /// How long writing an answer may make no progress (a client that does not read) before
    /// the connection is closed.
    #[serde(default = "default_write_timeout")]
    #[schemars(range(min = 10, max = 3600000))]
    pub write_timeout_millis: i32,
    /// Connections the kernel queues for accept (capped by the node's `net.core.somaxconn`);
    /// keep it above the largest burst of new connections.
    #[serde(default = "default_listen_backlog")]
    #[schemars(range(min = 16, max = 65535))]
    pub listen_backlog: i32,
    /// A serving thread further behind than this (its CPU cannot keep up) sheds what it takes
    /// in by the failure policy until it has caught up; 0 (the default): never. About 20 keeps
    /// the store's load flat and the answered p99 near a 50 ms budget at the limit of a pod's
    /// CPU (BENCHMARKS.md, "Overload"); under `open` a shed play is allowed past the cap.
    #[serde(default = "default_max_queue_delay")]
    #[schemars(range(min = 0, max = 10000))]
    pub max_queue_delay_millis: i32,
    /// After SIGTERM, how long a limiter pod keeps answering, unready and with
    /// `Connection: close` on every answer, before it stops accepting: the time the Service's
    /// endpoints (kube-proxy, ingress controllers, gateways) take to stop sending it requests.
    /// The pods' `terminationGracePeriodSeconds` is this + `shutdownTimeoutSeconds` + 5.
    #[serde(default = "default_drain_period")]
    #[schemars(range(min = 0, max = 300))]
    pub drain_period_seconds: i32,
    /// After the drain period, how long requests in flight get to finish before the pod exits.
    #[serde(default = "default_shutdown_timeout")]
    #[schemars(range(min = 1, max = 600))]
    pub shutdown_timeout_seconds: i32,
}

impl LimiterHttpSpec {
    /// The limiter pods' grace period: the drain, the in-flight requests' time, and a margin
    /// for the process to exit before the kubelet's SIGKILL.
    pub fn termination_grace_period_seconds(&self) -> i64 {
        i64::from(self.drain_period_seconds) + i64::from(self.shutdown_timeout_seconds) + 5
    }
}

/// The limiter's HorizontalPodAutoscaler. CPU utilization is measured against the pods' CPU
/// request, so `limiter.resources.requests.cpu` must be set.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
#[x_kube(
    validation = Rule::new("self.minReplicas <= self.maxReplicas").message("limiter.autoscaling.minReplicas must be at most maxReplicas").field_path(".minReplicas").reason(Reason::FieldValueInvalid)
)]
#[serde(rename_all = "camelCase")]
pub struct AutoscalingSpec {
    /// Create the autoscaler.
    #[serde(default)]
    pub enabled: bool,
    /// Fewest limiter pods; at most `maxReplicas`.
    #[serde(default = "default_limiter_replicas")]
    #[schemars(range(min = 1, max = 1000))]
    pub min_replicas: i32,
    /// Most limiter pods.
    #[serde(default = "default_max_replicas")]
    #[schemars(range(min = 1, max = 1000))]
    pub max_replicas: i32,
    /// Average CPU utilization (percent of the request) the autoscaler aims at.
    #[serde(default = "default_target_cpu")]
    #[schemars(range(min = 10, max = 100))]
    pub target_cpu_utilization_percent: i32,
}

/// The admin UI Deployment.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[x_kube(
    validation = Rule::new("!self.enabled || has(self.authSecretName)").message("adminUI.authSecretName is required when the admin UI is enabled").field_path(".authSecretName").reason(Reason::FieldValueRequired)
)]
#[serde(rename_all = "camelCase")]
pub struct AdminUiSpec {
    /// Run the admin UI.
    #[serde(default)]
    pub enabled: bool,
    /// Admin UI pods.
    #[serde(default = "default_one")]
    #[schemars(range(min = 1, max = 10))]
    pub replicas: i32,
    /// Admin UI image.
    #[serde(default = "default_admin_ui_image")]
    #[schemars(length(min = 1, max = 512))]
    pub image: String,
    /// Secret holding the admin UI's credentials, mounted at `/etc/screenlimit/admin-auth`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 253))]
    pub auth_secret_name: Option<String>,
    /// CPU and memory for each admin UI pod.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "resources_schema")]
    pub resources: Option<ResourceRequirements>,
    /// Addresses or networks (CIDR) of the proxies in front of the admin UI (the ingress
    /// controller's pods) whose `X-Forwarded-For` it believes. Sign-in throttling counts per client
    /// address: without this, every sign-in through the ingress shares the ingress's address.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 32), inner(length(min = 1, max = 43)))]
    pub trusted_proxies: Vec<String>,
    /// The admin UI's address as people open it (`https://support.example.com`, no path): an
    /// https URL marks its cookies Secure; with `oidc`, the identity provider sends people back
    /// to `{externalUrl}/oidc/callback` (register that URL at the provider).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 2048))]
    pub external_url: Option<String>,
    /// Sign-in through the company's OpenID Connect provider (Okta, Entra ID, Google Workspace,
    /// Keycloak, Dex). Needs `externalUrl`. The auth Secret's `users` key becomes optional.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub oidc: Option<AdminUiOidcSpec>,
    /// A Prometheus that scrapes the limiter (with `monitoring.serviceMonitor`, the one that
    /// selects it), e.g. `http://prometheus-operated.monitoring.svc:9090`: the fleet page then
    /// draws its charts over 1 h, 6 h or 24 h from Prometheus's `query_range` (without it: the
    /// last 10 minutes the dashboard sampled itself).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 2048))]
    #[x_kube(validation = Rule::new("self.startsWith('http://') || self.startsWith('https://')").message("adminUI.prometheusUrl must start with http:// or https://").reason(Reason::FieldValueInvalid))]
    pub prometheus_url: Option<String>,
}

/// The admin UI's OpenID Connect sign-in.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct AdminUiOidcSpec {
    /// The provider's issuer URL (https; its `/.well-known/openid-configuration` is read).
    #[schemars(length(min = 1, max = 2048))]
    pub issuer_url: String,
    /// The admin UI's client id at the provider.
    #[schemars(length(min = 1, max = 255))]
    pub client_id: String,
    /// A key of a Secret holding the client secret; none for a public client.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub client_secret: Option<SecretKeyRef>,
    /// The ID token claim listing the user's groups.
    #[serde(default = "default_roles_claim")]
    #[schemars(length(min = 1, max = 255))]
    pub roles_claim: String,
    /// Groups that grant the `support` role (force-stop, temporary limits).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 64), inner(length(min = 1, max = 255)))]
    pub support_groups: Vec<String>,
    /// Groups that grant the `viewer` role; someone in no listed group gets no access.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 64), inner(length(min = 1, max = 255)))]
    pub viewer_groups: Vec<String>,
    /// Scopes asked for besides `openid`, `profile` and `groups`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 16), inner(length(min = 1, max = 255)))]
    pub extra_scopes: Vec<String>,
    /// The sign-in button reads "Sign in with {displayName}".
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 64))]
    pub display_name: Option<String>,
}

fn default_roles_claim() -> String {
    "groups".to_owned()
}

/// What a decision does when Redis cannot answer in time.
#[derive(
    Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, Default, schemars::JsonSchema,
)]
#[serde(rename_all = "camelCase")]
pub enum FailureMode {
    /// Allow the play (never block a paying user because the store hiccuped).
    #[default]
    Open,
    /// Refuse the play with 503 until Redis answers again.
    Closed,
    /// Enforce the cap on each limiter pod's own memory.
    LocalCap,
}

/// Failure policy and store deadline.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct FailurePolicySpec {
    /// `open` (default), `closed` or `localCap`.
    #[serde(default)]
    pub mode: FailureMode,
    /// Milliseconds one Redis call may take before the failure policy decides.
    #[serde(default = "default_store_timeout")]
    #[schemars(range(min = 1, max = 10000))]
    pub store_timeout_millis: i32,
}

/// What the operator observed at its last reconcile.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct StreamLimiterStatus {
    /// The `metadata.generation` this status describes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// `Ready`, `Progressing` and `Degraded`, with reasons and messages.
    #[serde(default)]
    pub conditions: Vec<Condition>,
    /// Managed shards, in shard order.
    #[serde(default)]
    pub shards: Vec<ShardStatus>,
    /// Managed shards whose pods are all ready.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ready_shards: Option<i32>,
    /// Limiter replicas ready to serve.
    #[serde(default)]
    pub limiter_ready_replicas: i32,
    /// Sentinel pods ready (managed shards with replicas only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sentinel_ready_replicas: Option<i32>,
    /// Hash of the part of the limiter config that rolls the pods, now rolled out.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub config_hash: Option<String>,
    /// The revision of the limiter config last rendered (a hash of its live part: plans,
    /// caps, lease timing, failure policy), which the pods take in without a restart.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub config_revision: Option<String>,
    /// Ready limiter pods that report running `configRevision` (condition `ConfigApplied`
    /// turns true when they all do).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub limiter_pods_on_config_revision: Option<i32>,
}

/// Readiness of one managed shard.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ShardStatus {
    /// Shard index (its position in the limiter's shard list).
    pub index: i32,
    /// The shard's StatefulSet and Service name.
    pub name: String,
    /// Whether every pod is ready on the current revision.
    pub ready: bool,
    /// Pods ready.
    pub ready_replicas: i32,
    /// Pods wanted (the primary and its replicas).
    pub replicas: i32,
    /// The name Sentinel monitors the shard's primary under (`<name>-shard-<i>`), when
    /// Sentinel owns failover. Ask Sentinel which pod is primary now:
    /// `redis-cli -h <name>-sentinel -p 26379 sentinel get-master-addr-by-name <sentinelMaster>`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sentinel_master: Option<String>,
}

/// A condition in the Kubernetes style.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Condition {
    /// `Ready`, `Progressing` or `Degraded`.
    #[serde(rename = "type")]
    pub type_: String,
    /// `True`, `False` or `Unknown`.
    pub status: String,
    /// Machine-readable reason in CamelCase.
    pub reason: String,
    /// What happened and what to do about it.
    pub message: String,
    /// When `status` last changed (RFC 3339).
    pub last_transition_time: String,
    /// The generation the condition was computed for.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
}

/// A compact schema for container resources: `requests` and `limits` as maps of quantities
/// (the full upstream schema repeats a long Quantity description four times over).
fn resources_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
    let quantities = serde_json::json!({
        "type": "object",
        "additionalProperties": {"x-kubernetes-int-or-string": true}
    });
    let mut requests = quantities.clone();
    requests["description"] = "Minimum CPU and memory, e.g. `{cpu: 100m, memory: 64Mi}`.".into();
    let mut limits = quantities;
    limits["description"] = "Maximum CPU and memory, e.g. `{memory: 256Mi}`.".into();
    schemars::json_schema!({
        "type": "object",
        "nullable": true,
        "description": "Container resources, as in a Pod spec.",
        "properties": {"requests": requests, "limits": limits}
    })
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
fn default_heartbeat() -> i32 {
    30
}
fn default_ttl() -> i32 {
    90
}
fn default_shards() -> i32 {
    1
}
fn default_true() -> bool {
    true
}
fn default_one() -> i32 {
    1
}
fn default_limiter_replicas() -> i32 {
    2
}
fn default_header_read_timeout() -> i32 {
    5_000
}
fn default_body_read_timeout() -> i32 {
    10_000
}
fn default_idle_timeout() -> i32 {
    75
}
fn default_max_header_bytes() -> i32 {
    16 * 1024
}
fn default_max_connections() -> i32 {
    10_000
}
fn default_max_in_flight() -> i32 {
    4_096
}
fn default_write_timeout() -> i32 {
    10_000
}
fn default_listen_backlog() -> i32 {
    8_192
}
fn default_max_queue_delay() -> i32 {
    0
}
fn default_drain_period() -> i32 {
    5
}
fn default_shutdown_timeout() -> i32 {
    10
}
fn default_max_replicas() -> i32 {
    10
}
fn default_target_cpu() -> i32 {
    70
}
fn default_store_timeout() -> i32 {
    25
}
fn default_sentinels() -> i32 {
    3
}
fn default_quorum() -> i32 {
    2
}
fn default_down_after() -> i32 {
    5000
}
fn default_failover_timeout() -> i32 {
    60000
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
fn default_redis_image() -> String {
    "redis:7.4".into()
}
fn default_limiter_image() -> String {
    concat!("ghcr.io/screenlimit/limiter:", env!("CARGO_PKG_VERSION")).into()
}
fn default_admin_ui_image() -> String {
    concat!("ghcr.io/screenlimit/admin-ui:", env!("CARGO_PKG_VERSION")).into()
}

impl Default for LeaseSpec {
    fn default() -> Self {
        LeaseSpec {
            heartbeat_interval_seconds: default_heartbeat(),
            ttl_seconds: default_ttl(),
        }
    }
}

impl Default for RedisSpec {
    fn default() -> Self {
        RedisSpec {
            mode: RedisMode::Managed,
            shards: default_shards(),
            replicas_per_shard: 0,
            sentinel: SentinelSpec::default(),
            image: default_redis_image(),
            resources: None,
            external: None,
            tls: None,
            module: true,
            persistence: RedisPersistence::None,
        }
    }
}

impl Default for LimiterSpec {
    fn default() -> Self {
        LimiterSpec {
            replicas: default_limiter_replicas(),
            image: default_limiter_image(),
            resources: None,
            auth_token_secret: None,
            gateway_token_secret: None,
            player_auth: None,
            cors: None,
            batch_window_micros: 0,
            http: LimiterHttpSpec::default(),
            autoscaling: None,
        }
    }
}

impl Default for LimiterHttpSpec {
    fn default() -> Self {
        LimiterHttpSpec {
            header_read_timeout_millis: default_header_read_timeout(),
            body_read_timeout_millis: default_body_read_timeout(),
            idle_timeout_seconds: default_idle_timeout(),
            max_header_bytes: default_max_header_bytes(),
            max_connections: default_max_connections(),
            max_in_flight: default_max_in_flight(),
            write_timeout_millis: default_write_timeout(),
            listen_backlog: default_listen_backlog(),
            max_queue_delay_millis: default_max_queue_delay(),
            drain_period_seconds: default_drain_period(),
            shutdown_timeout_seconds: default_shutdown_timeout(),
        }
    }
}

impl AutoscalingSpec {
    /// Whether an autoscaler should exist.
    pub fn on(spec: &Option<AutoscalingSpec>) -> Option<&AutoscalingSpec> {
        spec.as_ref().filter(|a| a.enabled)
    }
}

impl Default for AdminUiSpec {
    fn default() -> Self {
        AdminUiSpec {
            enabled: false,
            replicas: 1,
            image: default_admin_ui_image(),
            auth_secret_name: None,
            resources: None,
            trusted_proxies: Vec::new(),
            external_url: None,
            oidc: None,
            prometheus_url: None,
        }
    }
}

impl Default for FailurePolicySpec {
    fn default() -> Self {
        FailurePolicySpec {
            mode: FailureMode::Open,
            store_timeout_millis: default_store_timeout(),
        }
    }
}

impl Default for StreamLimiterSpec {
    fn default() -> Self {
        StreamLimiterSpec {
            plans: default_plans(),
            default_plan: default_default_plan(),
            plan_source: PlanSourceSpec::default(),
            lease: LeaseSpec::default(),
            redis: RedisSpec::default(),
            limiter: LimiterSpec::default(),
            admin_ui: AdminUiSpec::default(),
            failure_policy: FailurePolicySpec::default(),
            stream_id_secret_name: None,
            network_policies: NetworkPoliciesSpec::default(),
            monitoring: MonitoringSpec::default(),
        }
    }
}
