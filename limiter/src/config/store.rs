//! `store`: which backend, its shards, Sentinel or Cluster, batching and the circuit breaker.

use super::*;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Backend {
    Memory,
    Redis,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct StoreConfig {
    pub backend: Backend,
    /// Redis shard URLs, in shard order: append new shards at the end.
    pub redis_shards: Vec<String>,
    /// Deadline for one store call.
    #[serde(with = "humantime_serde")]
    pub timeout: Duration,
    /// How long a shard's circuit stays open before it is probed again.
    #[serde(with = "humantime_serde")]
    pub circuit_probe_interval: Duration,
    /// Consecutive failures that open a shard's circuit.
    pub circuit_failure_threshold: u32,
    /// How long a shard's batch waits for company before it goes: commands that arrive
    /// meanwhile share its round trip. 0 sends at once (commands still share a round trip when
    /// they arrive while another is in flight). Counted within `timeout`.
    #[serde(with = "humantime_serde")]
    pub batch_window: Duration,
    /// What each shard's queue admits: `adaptive` (what the shard, at the pace it shows, can
    /// answer within `timeout`; the rest is decided at once by the failure policy) or `off`
    /// (every call waits for the shard up to `timeout`).
    pub admission: StoreAdmission,
    /// Sentinel-managed shards, instead of `redis_shards`.
    pub sentinel: Option<SentinelConfig>,
    /// A Redis Cluster, instead of `redis_shards` or `sentinel`: its primaries are the shards.
    pub cluster: Option<ClusterConfig>,
    /// TLS for `rediss://` addresses.
    pub tls: TlsConfig,
    /// The data nodes' user and password.
    pub auth: AuthConfig,
    /// Accept shards whose `maxmemory-policy` evicts keys (`allkeys-*`, `volatile-*`): when one
    /// is full Redis deletes leases and tombstones and plays past the cap are admitted. Without
    /// it such a shard stops the start (exit 2).
    pub allow_eviction: bool,
    /// Whether shards with the screenlimit Redis module loaded get its native commands:
    /// `auto` (each shard is asked, at start and after every reconnect or failover; the Lua
    /// scripts where it is absent) or `off` (the Lua scripts everywhere).
    pub module: StoreModule,
}

/// `store.module`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum StoreModule {
    #[default]
    Auto,
    Off,
}

/// `store.admission`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum StoreAdmission {
    #[default]
    Adaptive,
    Off,
}

/// Shards whose master Redis Sentinel tracks; the limiter follows failovers by itself.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SentinelConfig {
    /// Sentinel URLs, e.g. `redis://sentinel-0:26379`; asked in order.
    pub addresses: Vec<String>,
    /// One monitored master name per shard, in shard order (append only).
    pub masters: Vec<String>,
    /// How often Sentinel is asked where each master is.
    #[serde(default = "default_sentinel_poll", with = "humantime_serde")]
    pub poll_interval: Duration,
    /// The Sentinels' own user and password (`requirepass` in sentinel.conf), if any.
    #[serde(default)]
    pub auth: AuthConfig,
}

/// A Redis Cluster (or a Valkey cluster, or a managed cluster-mode service): an account's keys
/// share one slot, and its primary serves every operation of the account.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ClusterConfig {
    /// Seed node URLs, e.g. `redis://redis-cluster-0:6379`: asked for the slot map (any node of
    /// the cluster will do; list several so that one down does not matter).
    pub nodes: Vec<String>,
    /// How often the slot map is read when nothing asks sooner (a `MOVED`, a failing node).
    #[serde(default = "default_cluster_refresh", with = "humantime_serde")]
    pub refresh_interval: Duration,
}

pub(super) fn default_cluster_refresh() -> Duration {
    Duration::from_secs(5)
}

pub(super) fn default_sentinel_poll() -> Duration {
    Duration::from_millis(250)
}

/// `store.cluster`: alone (no `redis_shards`, no `sentinel`), on the Redis backend, with node URLs.
fn validate_cluster(store: &StoreConfig, cluster: &ClusterConfig) -> Result<(), ConfigError> {
    if store.backend == Backend::Memory {
        return Err(invalid(
            "store.cluster",
            "a cluster is configured but store.backend is memory; set store.backend: redis",
        ));
    }
    if !store.redis_shards.is_empty() || store.sentinel.is_some() {
        return Err(invalid(
            "store.cluster",
            "give the store as store.redis_shards, store.sentinel or store.cluster: one of them, \
             since each places accounts its own way",
        ));
    }
    if cluster.nodes.is_empty() {
        return Err(invalid(
            "store.cluster.nodes",
            "list at least one node of the cluster, e.g. [\"redis://redis-cluster-0:6379\"]",
        ));
    }
    if let Some((i, bad)) = cluster
        .nodes
        .iter()
        .enumerate()
        .find(|(_, url)| !(url.starts_with("redis://") || url.starts_with("rediss://")))
    {
        return Err(invalid(
            "store.cluster.nodes",
            format!("node {i} ({bad:?}) must be a redis:// or rediss:// URL"),
        ));
    }
    if cluster.refresh_interval < Duration::from_millis(100) {
        return Err(invalid(
            "store.cluster.refresh_interval",
            "must be at least 100ms",
        ));
    }
    Ok(())
}

impl Default for StoreConfig {
    fn default() -> Self {
        StoreConfig {
            backend: Backend::Memory,
            redis_shards: Vec::new(),
            timeout: Duration::from_millis(25),
            circuit_probe_interval: Duration::from_millis(500),
            circuit_failure_threshold: 3,
            batch_window: Duration::ZERO,
            admission: StoreAdmission::Adaptive,
            sentinel: None,
            cluster: None,
            tls: TlsConfig::default(),
            auth: AuthConfig::default(),
            allow_eviction: false,
            module: StoreModule::Auto,
        }
    }
}

impl Config {
    pub(super) fn validate_store(&self) -> Result<(), ConfigError> {
        let store = &self.store;
        if store.batch_window * 2 > store.timeout {
            return Err(invalid(
                "store.batch_window",
                format!(
                    "{:?} must be at most half of store.timeout ({:?}): a batch that waits longer leaves its calls no time",
                    store.batch_window, store.timeout
                ),
            ));
        }
        if let Some(cluster) = &store.cluster {
            validate_cluster(store, cluster)?;
        }
        let shards = !store.redis_shards.is_empty() || store.cluster.is_some();
        match (store.backend, shards, &store.sentinel) {
            (Backend::Memory, true, _) => Err(invalid(
                "store.redis_shards",
                "shards are listed but store.backend is memory; set store.backend: redis",
            )),
            (Backend::Memory, false, Some(_)) => Err(invalid(
                "store.sentinel",
                "Sentinel is configured but store.backend is memory; set store.backend: redis",
            )),
            (Backend::Redis, false, None) => Err(invalid(
                "store.redis_shards",
                "store.backend is redis but no shard is listed, e.g. [\"redis://127.0.0.1:6379\"] (or configure store.sentinel or store.cluster)",
            )),
            (Backend::Redis, true, Some(_)) => Err(invalid(
                "store.sentinel",
                "give shards either as store.redis_shards or through store.sentinel, not both",
            )),
            (Backend::Redis, _, _)
                if self.stream_id_secret.is_none() && self.stream_id_secret_file.is_none() =>
            {
                Err(invalid(
                    "stream_id_secret_file",
                    "store.backend is redis, so every limiter instance must share one stream id secret: \
                 set stream_id_secret_file (or SCREENLIMIT_STREAM_ID_SECRET)",
                ))
            }
            (_, _, Some(sentinel)) => {
                if sentinel.addresses.is_empty() || sentinel.masters.is_empty() {
                    return Err(invalid(
                        "store.sentinel",
                        "list at least one Sentinel address and one master name",
                    ));
                }
                if let Some(bad) = sentinel
                    .addresses
                    .iter()
                    .find(|a| !(a.starts_with("redis://") || a.starts_with("rediss://")))
                {
                    return Err(invalid(
                        "store.sentinel.addresses",
                        format!("{bad:?} must be a redis:// or rediss:// URL"),
                    ));
                }
                if let Some(bad) = sentinel
                    .masters
                    .iter()
                    .find(|m| crate::ids::validate_token(m).is_err())
                {
                    return Err(invalid(
                        "store.sentinel.masters",
                        format!("{bad:?} is not a valid master name"),
                    ));
                }
                if sentinel.poll_interval < Duration::from_millis(50) {
                    return Err(invalid(
                        "store.sentinel.poll_interval",
                        "must be at least 50ms",
                    ));
                }
                Ok(())
            }
            _ => Ok(()),
        }
    }
}
