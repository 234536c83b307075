//! The resource's status: what the operator observed at its last reconcile.

use serde::{Deserialize, Serialize};

/// What the operator observed at its last reconcile.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct StreamLimiterStatus {
    /// The `metadata.generation` this status describes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// `Ready`, `Progressing` and `Degraded`, with reasons and messages.
    #[serde(default)]
    #[schemars(length(max = 16))]
    pub conditions: Vec<Condition>,
    /// Managed shards, in shard order.
    #[serde(default)]
    #[schemars(length(max = 64))]
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
    #[schemars(length(max = 128))]
    pub config_hash: Option<String>,
    /// The revision of the limiter config last rendered (a hash of its live part: plans,
    /// caps, enforcement, lease timing, failure policy, renewal window, history bounds), which
    /// the pods take in without a restart.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 128))]
    pub config_revision: Option<String>,
    /// Ready limiter pods that report running `configRevision` (condition `ConfigApplied`
    /// turns true when they all do).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub limiter_pods_on_config_revision: Option<i32>,
    /// With `spec.regions` only: whether this region's limiter pods reach each peer region, as
    /// the ready limiter pods report it on their `/metrics` (read with the config revision).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub regions: Option<RegionsStatus>,
}

/// How this region's limiter pods reach its peer regions.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct RegionsStatus {
    /// One entry per `spec.regions.peers`, in their order.
    #[serde(default)]
    #[schemars(length(max = 16))]
    pub peers: Vec<RegionPeerStatus>,
}

/// Whether this region's limiter pods reach one peer region.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct RegionPeerStatus {
    /// The peer's name (`spec.regions.peers[].name`).
    #[schemars(length(max = 64))]
    pub name: String,
    /// `Reachable`: the last call of at least one asked pod to the peer answered (`podsReachable`
    /// says how many); `Unreachable`: the pods have called it and the last call of every one
    /// failed (deadline, connection, no reply); `Unknown`: no asked pod has called it yet (a
    /// limiter calls a peer for the plays and heartbeats of the accounts homed there), or no pod
    /// could be asked.
    pub state: PeerState,
    /// Of the asked pods, those whose last call to the peer answered
    /// (`screenlimit_region_peer_up{peer}` 1).
    pub pods_reachable: i32,
    /// Ready limiter pods whose `/metrics` was read (the same for every peer).
    pub pods_asked: i32,
    /// The time of the last answered call to the peer, in milliseconds: the highest of the asked
    /// pods' `screenlimit_region_last_call_seconds{peer}`, rounded; absent while none has one.
    /// It is updated when it moves by more than a quarter (or 5 ms), not for every jitter.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_call_millis: Option<i64>,
}

/// Whether a peer region answers this region's limiter pods.
#[derive(
    Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, Default, schemars::JsonSchema,
)]
pub enum PeerState {
    /// The last call of at least one asked pod answered.
    Reachable,
    /// Every asked pod that called it saw its last call fail.
    Unreachable,
    /// No asked pod has called it yet, or no pod could be asked.
    #[default]
    Unknown,
}

/// Readiness of one managed shard.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ShardStatus {
    /// Shard index (its position in the limiter's shard list).
    pub index: i32,
    /// The shard's StatefulSet and Service name.
    #[schemars(length(max = 253))]
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
    #[schemars(length(max = 253))]
    pub sentinel_master: Option<String>,
}

/// A condition in the Kubernetes style (the bounds are `metav1.Condition`'s).
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Condition {
    /// `Ready`, `Progressing` or `Degraded`.
    #[serde(rename = "type")]
    #[schemars(length(max = 316))]
    pub type_: String,
    /// `True`, `False` or `Unknown`.
    #[schemars(length(max = 16))]
    pub status: String,
    /// Machine-readable reason in CamelCase.
    #[schemars(length(max = 1024))]
    pub reason: String,
    /// What happened and what to do about it.
    #[schemars(length(max = 32768))]
    pub message: String,
    /// When `status` last changed (RFC 3339).
    #[schemars(length(max = 64))]
    pub last_transition_time: String,
    /// The generation the condition was computed for.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
}
