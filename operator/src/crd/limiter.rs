//! `spec.limiter` and `spec.failurePolicy`: the limiter Deployment (its auth, CORS, HTTP
//! bounds and autoscaler) and what a decision does when Redis cannot answer in time.

use k8s_openapi::api::core::v1::ResourceRequirements;
use kube::KubeSchema;
use serde::{Deserialize, Serialize};

use super::shared::{SecretKeyRef, resources_schema};

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
    /// The `iss` every token must carry (not only spaces, as for the claims: the limiter refuses
    /// a blank one at start).
    #[schemars(length(min = 1, max = 512), regex(pattern = r"\S"))]
    pub issuer: String,
    /// The `aud` every token must name.
    #[schemars(length(min = 1, max = 512), regex(pattern = r"\S"))]
    pub audience: String,
    /// The claim holding the account id.
    #[serde(default = "default_account_claim")]
    #[schemars(length(min = 1, max = 128), regex(pattern = r"\S"))]
    pub account_claim: String,
    /// A claim holding the device id; when set, a play-start must name that device.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 128), regex(pattern = r"\S"))]
    pub device_claim: Option<String>,
    /// A claim naming the account's home region, for `regions.homeSources: [playerToken]`; a
    /// token without it names none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 128), regex(pattern = r"\S"))]
    pub home_claim: Option<String>,
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
    #[schemars(length(max = 64), inner(length(min = 1, max = 512)))]
    pub allowed_origins: Vec<String>,
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
    /// Milliseconds a limiter pod holds each heartbeat's lease renewal on its shard for company
    /// before it goes (the renewals of one window go as one call, one `SL.RENEW` with the Redis
    /// module): a heartbeat's answer waits up to that long, play-starts never wait behind it. 0:
    /// each renewal goes as it comes. At most a quarter of `lease.ttlSeconds -
    /// lease.heartbeatIntervalSeconds` (in milliseconds). Reaches running pods without a restart.
    #[serde(default = "default_renewal_window")]
    #[schemars(range(min = 0, max = 1000))]
    pub renewal_window_millis: i32,
    /// How much of each account's recent history (refused plays, take-overs, force-stops,
    /// revocations, expired leases, temporary limits) the store keeps (the limiter's
    /// `history`). Reaches running pods without a restart.
    #[serde(default)]
    pub history: HistorySpec,
    /// Deadlines on every connection and the bounds of one limiter pod (the limiter's `http`
    /// config). Beyond `maxInFlight` a pod sheds requests at once by the failure policy.
    #[serde(default)]
    pub http: LimiterHttpSpec,
    /// A HorizontalPodAutoscaler (autoscaling/v2, CPU utilization) for the limiter Deployment.
    /// While enabled it owns the replica count and `replicas` is ignored.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub autoscaling: Option<AutoscalingSpec>,
}

/// An account's recent history in the store: its newest events kept, and how long the history
/// outlives its newest event. Each account's history is its own Redis list (a few dozen bytes an
/// event, more for a refused play naming the devices that held the slots): see "Sizing Redis" in
/// the Redis guide before raising either.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct HistorySpec {
    /// The newest events kept per account; older ones are dropped as new ones arrive.
    #[serde(default = "default_history_max_events")]
    #[schemars(range(min = 1, max = 1000))]
    pub max_events: i32,
    /// Hours an account's history is kept after its newest event (1 hour to 90 days).
    #[serde(default = "default_history_retention_hours")]
    #[schemars(range(min = 1, max = 2160))]
    pub retention_hours: i32,
}

impl Default for HistorySpec {
    fn default() -> Self {
        HistorySpec {
            max_events: default_history_max_events(),
            retention_hours: default_history_retention_hours(),
        }
    }
}

/// The limiter's own defaults (`history`: 50 events, 7 days).
fn default_history_max_events() -> i32 {
    50
}
fn default_history_retention_hours() -> i32 {
    168
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
    /// How long a client may keep one connection (each connection's own, within ±10 %): then
    /// the next answer carries `Connection: close`, so kept-alive gateways spread over the pods a
    /// roll or the autoscaler added. 0: never.
    #[serde(default = "default_max_connection_age")]
    #[schemars(range(min = 0, max = 86400))]
    pub max_connection_age_seconds: i32,
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
            renewal_window_millis: default_renewal_window(),
            history: HistorySpec::default(),
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
            max_connection_age_seconds: default_max_connection_age(),
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

impl Default for FailurePolicySpec {
    fn default() -> Self {
        FailurePolicySpec {
            mode: FailureMode::Open,
            store_timeout_millis: default_store_timeout(),
        }
    }
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
fn default_max_connection_age() -> i32 {
    300
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
/// The limiter's own default (`store.renewal_window`, 20 ms).
fn default_renewal_window() -> i32 {
    20
}
fn default_limiter_image() -> String {
    concat!("ghcr.io/screenlimit/limiter:", env!("CARGO_PKG_VERSION")).into()
}
