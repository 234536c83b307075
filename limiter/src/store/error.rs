//! Why a store call could not answer ([`StoreError`]), the same for both backends; below them
//! both, so that the backends name it without importing the store's root.

/// Why the store could not answer. The service turns these into the failure policy's decision.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error, serde::Serialize, serde::Deserialize)]
pub enum StoreError {
    #[error("shard {shard} did not answer within the store deadline")]
    Timeout { shard: usize },
    #[error("shard {shard} is unavailable (circuit open); probing it in the background")]
    CircuitOpen { shard: usize },
    #[error("shard {shard} failed: {message}")]
    Backend { shard: usize, message: String },
    /// Not sent: the shard is answering all it can, and this call would not have been answered
    /// within the store deadline (`store.admission`).
    #[error(
        "shard {shard} is overloaded: this call could not be answered within the store deadline, so it was not sent"
    )]
    Shed { shard: usize },
    /// The shard is at its `maxmemory` and refuses what would add state (README, "Sizing Redis").
    #[error(
        "shard {shard} is full (OOM: used memory above maxmemory) and refuses new state; free memory or raise its maxmemory"
    )]
    Oom { shard: usize },
    /// The shard's address now reaches a replica (`READONLY`): its circuit opens until it is a
    /// primary again.
    #[error(
        "shard {shard} is a read-only replica (READONLY); point the shard at its primary, or let Sentinel find it"
    )]
    ReadOnly { shard: usize },
    /// The shard refuses writes because fewer replicas are in sync than its
    /// `min-replicas-to-write` (`NOREPLICAS`): a primary a failover may have replaced, or one
    /// whose replicas are down. What it would acknowledge could be lost, so the failure policy
    /// decides instead; its circuit opens until its replicas are back.
    #[error(
        "shard {shard} refuses writes (NOREPLICAS: fewer replicas in sync than its min-replicas-to-write): it may have been replaced by a failover, or its replicas are down"
    )]
    NoReplicas { shard: usize },
    /// The account's home region did not answer in time, or answered with something other than
    /// a store answer (`regions`): the failure policy decides for its accounts until it does.
    #[error(
        "home region {region} did not answer: {message}; its accounts' plays are decided by the failure policy until it does"
    )]
    Region { region: String, message: String },
}

impl StoreError {
    /// Short label for metrics.
    pub fn kind(&self) -> &'static str {
        match self {
            StoreError::Timeout { .. } => "timeout",
            StoreError::CircuitOpen { .. } => "circuit_open",
            StoreError::Backend { .. } => "backend",
            StoreError::Oom { .. } => "oom",
            StoreError::ReadOnly { .. } => "read_only",
            StoreError::NoReplicas { .. } => "no_replicas",
            StoreError::Shed { .. } => "shed",
            StoreError::Region { .. } => "region",
        }
    }

    /// Whether the node that gave it may no longer serve its slots (gone, unreachable, demoted),
    /// so that a Redis Cluster's slot map should be read again. A full node (`oom`) is still the
    /// slot's primary, and so is one too busy to be sent more (`shed`): a spike must not make
    /// every shed call ask for the map.
    pub fn may_mean_a_new_topology(&self) -> bool {
        !matches!(self, StoreError::Oom { .. } | StoreError::Shed { .. })
    }

    /// The shard the error is about (`usize::MAX` when none could be named).
    pub fn shard(&self) -> usize {
        match self {
            StoreError::Timeout { shard }
            | StoreError::CircuitOpen { shard }
            | StoreError::Backend { shard, .. }
            | StoreError::Oom { shard }
            | StoreError::ReadOnly { shard }
            | StoreError::NoReplicas { shard }
            | StoreError::Shed { shard } => *shard,
            StoreError::Region { .. } => usize::MAX,
        }
    }
}
