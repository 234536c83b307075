//! The lease store interface and its two backends: the embedded [`memory`] store and sharded
//! [`redis`]. Each operation is atomic per account; the store's own clock decides expiry.

pub mod memory;
pub mod redis;

use std::future::Future;

use crate::ids::StreamRef;
use crate::model::{
    AccountView, AcquireCmd, AcquireOutcome, AuditEntry, AuditKind, ForceStopCmd, ForceStopOutcome,
    HeartbeatOutcome, LimitOverride, OverrideCmd, ReleaseOutcome, SessionEventCmd,
};

/// Why the store could not answer. The service turns these into the failure policy's decision.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
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
            StoreError::Shed { .. } => "shed",
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
            | StoreError::Shed { shard } => *shard,
        }
    }
}

/// Health of one shard as `/readyz` and the dashboard show it.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, utoipa::ToSchema)]
pub struct ShardHealth {
    pub shard: usize,
    /// Where the shard lives, without credentials.
    pub endpoint: String,
    pub reachable: bool,
    /// `closed` (healthy) or `open` (failing fast while a probe waits for the shard).
    pub circuit: &'static str,
    /// Keys the shard holds (about one per account with leases or recent tombstones), when
    /// reachable.
    pub keys: Option<u64>,
    /// Whether this instance is shedding the shard's calls now: the shard answers all it can,
    /// and what it could not answer within the store deadline is decided by the failure policy.
    pub overloaded: bool,
    /// The shard answered `READONLY` (a replica): its circuit stays open until it is a primary.
    pub read_only: bool,
    /// The shard answers `OOM`: what adds state goes to the failure policy.
    pub out_of_memory: bool,
    /// Its memory as last sampled (every 5 s), when it lets `INFO memory` be read.
    pub memory: Option<ShardMemory>,
    /// Which path its lease operations take: `native` (the screenlimit module's commands) or
    /// `lua` (the scripts); absent for the embedded store.
    pub path: Option<&'static str>,
}

/// A shard's memory against its limit (`INFO memory`).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, utoipa::ToSchema)]
pub struct ShardMemory {
    pub used_bytes: u64,
    /// `maxmemory`; 0: no limit (the shard grows until its host runs out).
    pub max_bytes: u64,
    /// `maxmemory-policy`, when the server shows it.
    pub policy: Option<String>,
}

/// A shard's flags and memory as last seen, for the metrics (no network).
#[derive(Debug, Clone, Default)]
pub struct ShardStateView {
    pub read_only: bool,
    pub out_of_memory: bool,
    pub memory: Option<ShardMemory>,
    /// `native` or `lua` (Redis shards).
    pub path: Option<&'static str>,
}

pub trait LeaseStore: Send + Sync + 'static {
    fn acquire(
        &self,
        cmd: &AcquireCmd,
    ) -> impl Future<Output = Result<AcquireOutcome, StoreError>> + Send;

    fn heartbeat(
        &self,
        account_id: &str,
        stream: &StreamRef,
    ) -> impl Future<Output = Result<HeartbeatOutcome, StoreError>> + Send;

    fn release(
        &self,
        account_id: &str,
        stream: &StreamRef,
    ) -> impl Future<Output = Result<ReleaseOutcome, StoreError>> + Send;

    /// Revokes the stream and, when it was playing, records the stop in the audit log.
    fn force_stop(
        &self,
        cmd: &ForceStopCmd,
    ) -> impl Future<Output = Result<ForceStopOutcome, StoreError>> + Send;

    /// The newest audit entries, of one account or of the whole fleet, of one kind or all.
    fn audit(
        &self,
        account_id: Option<&str>,
        kind: Option<AuditKind>,
        limit: usize,
    ) -> impl Future<Output = Result<Vec<AuditEntry>, StoreError>> + Send;

    fn list(
        &self,
        account_id: &str,
    ) -> impl Future<Output = Result<AccountView, StoreError>> + Send;

    /// Gives the account a temporary limit, or clears it with `None`, and records the change
    /// (if any) in the audit log in the same step. Returns the temporary limit now in force.
    fn set_override(
        &self,
        cmd: &OverrideCmd,
    ) -> impl Future<Output = Result<Option<LimitOverride>, StoreError>> + Send;

    /// A dashboard user's session generation: sessions issued under an older one have ended
    /// (0 until the user first signs out).
    fn session_generation(
        &self,
        user: &str,
    ) -> impl Future<Output = Result<u64, StoreError>> + Send;

    /// Records a dashboard sign-in event in the audit log; a sign-out also bumps the user's
    /// session generation, in the same step. Returns the generation now in force.
    fn session_event(
        &self,
        cmd: &SessionEventCmd,
    ) -> impl Future<Output = Result<u64, StoreError>> + Send;

    /// Checks every shard now, within the deadline.
    fn health(&self) -> impl Future<Output = Vec<ShardHealth>> + Send;
}

/// The configured backend, chosen at start-up.
#[derive(Clone)]
pub enum AnyStore {
    Memory(std::sync::Arc<memory::MemoryStore>),
    Redis(std::sync::Arc<redis::RedisStore>),
}

impl AnyStore {
    /// The configured backend: `local` itself for `memory`, else the Redis shards (by URL,
    /// through Sentinel, or a Redis Cluster's primaries). Must run inside a Tokio runtime.
    pub fn from_config(
        config: &crate::config::StoreConfig,
        local: std::sync::Arc<memory::MemoryStore>,
        rules: crate::rules::LiveRules,
    ) -> anyhow::Result<AnyStore> {
        use crate::config::Backend;
        use redis::{RedisOptions, RedisStore, ShardSpec};
        Ok(match config.backend {
            Backend::Memory => AnyStore::Memory(local),
            Backend::Redis => {
                let shards = match (&config.sentinel, &config.cluster) {
                    (Some(sentinel), _) => ShardSpec::Sentinel {
                        addresses: sentinel.addresses.clone(),
                        masters: sentinel.masters.clone(),
                        poll_interval: sentinel.poll_interval,
                    },
                    (None, Some(cluster)) => ShardSpec::Cluster {
                        nodes: cluster.nodes.clone(),
                        refresh_interval: cluster.refresh_interval,
                    },
                    (None, None) => ShardSpec::Urls(config.redis_shards.clone()),
                };
                let options = RedisOptions {
                    shards,
                    deadline: config.timeout,
                    batch_window: config.batch_window,
                    admission: config.admission == crate::config::StoreAdmission::Adaptive,
                    failure_threshold: config.circuit_failure_threshold,
                    probe_interval: config.circuit_probe_interval,
                    access: redis::access::Access::resolve(config)?,
                    module: config.module == crate::config::StoreModule::Auto,
                };
                AnyStore::Redis(
                    RedisStore::with_rules(&options, rules).map_err(anyhow::Error::msg)?,
                )
            }
        })
    }
}

impl AnyStore {
    /// At start: a store whose credentials, permissions or TLS setup cannot work is a config
    /// error (see `RedisStore::check_access`).
    pub async fn check_access(&self) -> Result<(), crate::config::ConfigError> {
        match self {
            AnyStore::Memory(_) => Ok(()),
            AnyStore::Redis(store) => store.check_access().await,
        }
    }

    /// Redis Cluster nodes whose address cannot be used (0 for other stores).
    pub fn unusable_cluster_nodes(&self) -> usize {
        match self {
            AnyStore::Memory(_) => 0,
            AnyStore::Redis(store) => store.unusable_cluster_nodes(),
        }
    }

    /// Each shard's circuit, without touching the network: (shard, open).
    pub fn circuits(&self) -> Vec<(usize, bool)> {
        match self {
            AnyStore::Memory(_) => vec![(0, false)],
            AnyStore::Redis(store) => store.circuits(),
        }
    }

    /// The index of the shard that owns `account_id` (0 on the embedded store; `None` on a
    /// cluster while no primary is known for its slot).
    pub fn shard_of(&self, account_id: &str) -> Option<usize> {
        match self {
            AnyStore::Memory(_) => Some(0),
            AnyStore::Redis(store) => store.shard_of(account_id),
        }
    }

    /// How many shard indices there can be (see `RedisStore::shard_indices`).
    pub fn shard_indices(&self) -> usize {
        match self {
            AnyStore::Memory(_) => 1,
            AnyStore::Redis(store) => store.shard_indices(),
        }
    }

    /// Per shard, its flags and memory as last seen (none on the embedded store).
    pub fn shard_states(&self) -> Vec<(usize, ShardStateView)> {
        match self {
            AnyStore::Memory(_) => Vec::new(),
            AnyStore::Redis(store) => store.shard_states(),
        }
    }

    /// Per shard, batches sent and the commands in them: (shard, batches, commands). The
    /// embedded store has none.
    pub fn batch_totals(&self) -> Vec<(usize, u64, u64)> {
        match self {
            AnyStore::Memory(_) => Vec::new(),
            AnyStore::Redis(store) => store.batch_totals(),
        }
    }

    /// Per shard, what its queue admits and what it shed (none on the embedded store).
    pub fn admission(&self) -> Vec<(usize, redis::Admission)> {
        match self {
            AnyStore::Memory(_) => Vec::new(),
            AnyStore::Redis(store) => store.admission(),
        }
    }
}

macro_rules! delegate {
    ($self:ident, $store:ident => $call:expr) => {
        match $self {
            AnyStore::Memory($store) => $call.await,
            AnyStore::Redis($store) => $call.await,
        }
    };
}

impl LeaseStore for AnyStore {
    async fn acquire(&self, cmd: &AcquireCmd) -> Result<AcquireOutcome, StoreError> {
        delegate!(self, s => s.acquire(cmd))
    }

    async fn heartbeat(
        &self,
        account_id: &str,
        stream: &StreamRef,
    ) -> Result<HeartbeatOutcome, StoreError> {
        delegate!(self, s => s.heartbeat(account_id, stream))
    }

    async fn release(
        &self,
        account_id: &str,
        stream: &StreamRef,
    ) -> Result<ReleaseOutcome, StoreError> {
        delegate!(self, s => s.release(account_id, stream))
    }

    async fn force_stop(&self, cmd: &ForceStopCmd) -> Result<ForceStopOutcome, StoreError> {
        delegate!(self, s => s.force_stop(cmd))
    }

    async fn audit(
        &self,
        account_id: Option<&str>,
        kind: Option<AuditKind>,
        limit: usize,
    ) -> Result<Vec<AuditEntry>, StoreError> {
        delegate!(self, s => s.audit(account_id, kind, limit))
    }

    async fn list(&self, account_id: &str) -> Result<AccountView, StoreError> {
        delegate!(self, s => s.list(account_id))
    }

    async fn set_override(&self, cmd: &OverrideCmd) -> Result<Option<LimitOverride>, StoreError> {
        delegate!(self, s => s.set_override(cmd))
    }

    async fn session_generation(&self, user: &str) -> Result<u64, StoreError> {
        delegate!(self, s => s.session_generation(user))
    }

    async fn session_event(&self, cmd: &SessionEventCmd) -> Result<u64, StoreError> {
        delegate!(self, s => s.session_event(cmd))
    }

    async fn health(&self) -> Vec<ShardHealth> {
        delegate!(self, s => s.health())
    }
}
