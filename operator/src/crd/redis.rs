//! `spec.redis`: managed or external shards, Sentinel, TLS, the module and persistence.

use k8s_openapi::api::core::v1::ResourceRequirements;
use kube::KubeSchema;
use serde::{Deserialize, Serialize};

use super::shared::{SecretKeyRef, default_one, default_true, resources_schema};

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
    validation = Rule::new("self.mode != 'external' || !has(self.external) || !has(self.external.urls) || size(self.external.urls) == self.shards").message("redis.external.urls must list exactly redis.shards URLs").field_path(".external.urls").reason(Reason::FieldValueInvalid),
    validation = Rule::new("self.replicasPerShard == 0 || self.minReplicasToWrite <= self.replicasPerShard").message("redis.minReplicasToWrite must be at most redis.replicasPerShard: a primary could never write").field_path(".minReplicasToWrite").reason(Reason::FieldValueInvalid)
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
    /// With replicas: a primary takes writes only while at least this many of its replicas are
    /// in sync (Redis `min-replicas-to-write`). A primary a failover replaced (paused, cut off)
    /// then refuses writes (`NOREPLICAS`: the limiter decides by the failure policy, marked
    /// degraded) instead of acknowledging plays and stops the failover loses. The cost: while a
    /// shard has fewer replicas in sync (its only replica down, or after a failover until the
    /// old primary is back as a replica), its plays and heartbeats are degraded; two replicas
    /// per shard avoid that. 0: off. At most `replicasPerShard`; ignored without replicas.
    #[serde(default = "default_one")]
    #[schemars(range(min = 0, max = 4))]
    pub min_replicas_to_write: i32,
    /// Seconds since a replica's last acknowledgement (sent every second) after which it no
    /// longer counts as in sync (Redis `min-replicas-max-lag`): how long a primary cut off from
    /// its replicas without a closed connection keeps taking writes.
    #[serde(default = "default_min_replicas_max_lag")]
    #[schemars(range(min = 1, max = 60))]
    pub min_replicas_max_lag_seconds: i32,
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
    /// yourself: docs/redis.md, "Native commands"; managed services do not allow modules).
    #[serde(default = "default_true")]
    pub module: bool,
    /// Whether a managed shard keeps its data across a restart of its Redis container:
    /// `none` (the default: a restarted shard comes back empty; leases re-register on their next
    /// heartbeat, but revocations less than 2 lease TTLs old are forgotten,
    /// docs/failure-behaviour.md "Invariant 4 and the store") or `appendOnly` (an append-only
    /// file, `appendfsync everysec`, on the pod's `/data` emptyDir: a crashed and restarted
    /// container reloads it; a pod deleted or moved to another node still starts empty, and with
    /// replicas Sentinel covers that).
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
    /// limiter's ACL, see docs/redis.md).
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

impl Default for RedisSpec {
    fn default() -> Self {
        RedisSpec {
            mode: RedisMode::Managed,
            shards: default_shards(),
            replicas_per_shard: 0,
            sentinel: SentinelSpec::default(),
            min_replicas_to_write: default_one(),
            min_replicas_max_lag_seconds: default_min_replicas_max_lag(),
            image: default_redis_image(),
            resources: None,
            external: None,
            tls: None,
            module: true,
            persistence: RedisPersistence::None,
        }
    }
}

fn default_shards() -> i32 {
    1
}
fn default_min_replicas_max_lag() -> i32 {
    3
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
fn default_redis_image() -> String {
    "redis:7.4".into()
}
