//! The lease store interface and its two backends: the embedded [`memory`] store and sharded
//! [`redis`]. Each operation is atomic per account; the store's own clock decides expiry.

mod error;
mod lease_store;
pub mod memory;
pub mod redis;
mod shard_health;

// The interface and its types live below both backends (the backends import them from there,
// not from here); re-exported so that `store::StoreError` and the rest keep their paths.
pub use self::error::StoreError;
pub use self::lease_store::LeaseStore;
pub use self::shard_health::{ShardHealth, ShardMemory, ShardStateView};

use crate::ids::StreamRef;
use crate::model::{
    AccountView, AcquireCmd, AcquireOutcome, AuditEntry, AuditKind, ForceStopCmd, ForceStopOutcome,
    HeartbeatOutcome, HistoryEntry, LimitOverride, OverrideCmd, ReleaseOutcome, SessionEventCmd,
    SessionState,
};

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

    async fn learn(
        &self,
        account_id: &str,
        stream: &StreamRef,
    ) -> Result<HeartbeatOutcome, StoreError> {
        delegate!(self, s => s.learn(account_id, stream))
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

    async fn history(
        &self,
        account_id: &str,
        limit: usize,
    ) -> Result<Vec<HistoryEntry>, StoreError> {
        delegate!(self, s => s.history(account_id, limit))
    }

    async fn set_override(&self, cmd: &OverrideCmd) -> Result<Option<LimitOverride>, StoreError> {
        delegate!(self, s => s.set_override(cmd))
    }

    async fn session_state(&self, user: &str) -> Result<SessionState, StoreError> {
        delegate!(self, s => s.session_state(user))
    }

    async fn session_event(&self, cmd: &SessionEventCmd) -> Result<SessionState, StoreError> {
        delegate!(self, s => s.session_event(cmd))
    }

    async fn health(&self) -> Vec<ShardHealth> {
        delegate!(self, s => s.health())
    }
}
