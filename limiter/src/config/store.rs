//! `store`: which backend, its shards, Sentinel or Cluster, batching and the circuit breaker.

use std::time::Duration;

use redis::{ConnectionAddr, IntoConnectionInfo};
use serde::Deserialize;

use super::error::{ConfigError, invalid};

use super::store_access::{
    AuthConfig, RedisCredentials, StoreSecrets, TlsConfig, credentials, pem, read, v3_only,
};

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
    /// How long a lease's renewal waits on its shard for others to share one call (one
    /// `SL.RENEW` on the native path, one round trip of `GETEX`es on Lua) before it goes. The
    /// window is the renewals' own: play-starts never wait behind it. 0 sends each renewal as it
    /// comes. Live: a reload changes it.
    #[serde(with = "humantime_serde")]
    pub renewal_window: Duration,
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

/// `store.renewal_window` by default: what a renewal may wait is seconds (its lease lives at
/// least two heartbeat intervals), so a window this short costs a player nothing and lets the
/// renewals of a busy shard share their calls (BENCHMARKS.md, "Renewal window").
pub const DEFAULT_RENEWAL_WINDOW: Duration = Duration::from_millis(20);

/// The longest `store.renewal_window` accepted.
pub const MAX_RENEWAL_WINDOW: Duration = Duration::from_secs(1);

impl Default for StoreConfig {
    fn default() -> Self {
        StoreConfig {
            backend: Backend::Memory,
            redis_shards: Vec::new(),
            timeout: Duration::from_millis(25),
            circuit_probe_interval: Duration::from_millis(500),
            circuit_failure_threshold: 3,
            batch_window: Duration::ZERO,
            renewal_window: DEFAULT_RENEWAL_WINDOW,
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

impl StoreConfig {
    /// Checks the store's settings, naming the field; `has_stream_id_secret`: the config names one.
    pub fn validate(&self, has_stream_id_secret: bool) -> Result<(), ConfigError> {
        if self.timeout.is_zero() {
            return Err(invalid(
                "store.timeout",
                "must be greater than zero, e.g. 25ms",
            ));
        }
        if self.circuit_failure_threshold == 0 {
            return Err(invalid(
                "store.circuit_failure_threshold",
                "must be at least 1",
            ));
        }
        if self.circuit_probe_interval.is_zero() {
            return Err(invalid(
                "store.circuit_probe_interval",
                "must be greater than zero",
            ));
        }
        self.validate_topology(has_stream_id_secret)?;
        for (i, url) in self.redis_shards.iter().enumerate() {
            if !(url.starts_with("redis://") || url.starts_with("rediss://")) {
                return Err(invalid(
                    "store.redis_shards",
                    format!("shard {i} ({url:?}) must be a redis:// or rediss:// URL"),
                ));
            }
        }
        validate_access(self)
    }

    /// The backend against its shards, Sentinel or Cluster, batching and the secret they need.
    fn validate_topology(&self, has_stream_id_secret: bool) -> Result<(), ConfigError> {
        let store = self;
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
            (Backend::Redis, _, _) if !has_stream_id_secret => Err(invalid(
                "stream_id_secret_file",
                "store.backend is redis, so every limiter instance must share one stream id secret: \
                 set stream_id_secret_file (or SCREENLIMIT_STREAM_ID_SECRET)",
            )),
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

/// Checks what can be checked without reading a file: addresses carry no password, the TLS
/// settings go together and serve a `rediss://` address, user names are plain.
fn validate_access(store: &StoreConfig) -> Result<(), ConfigError> {
    let sentinel_addresses = store.sentinel.iter().flat_map(|s| &s.addresses);
    let cluster_nodes = store.cluster.iter().flat_map(|c| &c.nodes);
    let addresses = store
        .redis_shards
        .iter()
        .map(|url| ("store.redis_shards", url))
        .chain(sentinel_addresses.map(|url| ("store.sentinel.addresses", url)))
        .chain(cluster_nodes.map(|url| ("store.cluster.nodes", url)));
    let mut any_tls = false;
    for (field, url) in addresses {
        let info = url
            .as_str()
            .into_connection_info()
            .map_err(|e| invalid(field, format!("{}: {e}", without_userinfo(url))))?;
        if info.redis_settings().password().is_some() || info.redis_settings().username().is_some()
        {
            return Err(invalid(
                field,
                format!(
                    "{} carries credentials; name the user in store.auth (store.sentinel.auth for \
                     Sentinels) and give the password by file or environment, never in the config",
                    without_userinfo(url)
                ),
            ));
        }
        any_tls |= matches!(info.addr(), ConnectionAddr::TcpTls { .. });
    }
    let tls = &store.tls;
    match (&tls.client_cert_file, &tls.client_key_file) {
        (Some(_), None) => {
            return Err(invalid(
                "store.tls.client_key_file",
                "client_cert_file needs its private key",
            ));
        }
        (None, Some(_)) => {
            return Err(invalid(
                "store.tls.client_cert_file",
                "client_key_file needs its certificate",
            ));
        }
        _ => {}
    }
    let tls_named = tls.ca_file.is_some() || tls.client_cert_file.is_some();
    if tls_named && !any_tls {
        return Err(invalid(
            "store.tls",
            "is set but no address is rediss://: TLS is used for rediss:// addresses only",
        ));
    }
    let sentinel_auth = store
        .sentinel
        .iter()
        .map(|s| ("store.sentinel.auth.username", &s.auth));
    for (field, auth) in std::iter::once(("store.auth.username", &store.auth)).chain(sentinel_auth)
    {
        if let Some(name) = &auth.username
            && (name.is_empty() || name.len() > 128 || name.chars().any(|c| c.is_whitespace()))
        {
            return Err(invalid(field, "must be 1-128 characters without spaces"));
        }
    }
    Ok(())
}

/// The URL with any `user:password@` cut out, for messages.
fn without_userinfo(url: &str) -> String {
    match (url.find("://"), url.rfind('@')) {
        (Some(scheme_end), Some(at)) if at > scheme_end => {
            format!("{}{}", &url[..scheme_end + 3], &url[at + 1..])
        }
        _ => url.to_owned(),
    }
}

/// Reads the files `store.tls` and the `auth` blocks name.
pub fn read_secrets(store: &StoreConfig) -> Result<StoreSecrets, ConfigError> {
    let tls = &store.tls;
    let ca = match &tls.ca_file {
        Some(path) => Some(pem(
            read("store.tls.ca_file", path)?,
            "store.tls.ca_file",
            "CERTIFICATE",
        )?),
        None => None,
    };
    let client_identity = match (&tls.client_cert_file, &tls.client_key_file) {
        (Some(cert), Some(key)) => Some((
            v3_only(
                pem(
                    read("store.tls.client_cert_file", cert)?,
                    "store.tls.client_cert_file",
                    "CERTIFICATE",
                )?,
                cert,
            )?,
            pem(
                read("store.tls.client_key_file", key)?,
                "store.tls.client_key_file",
                "PRIVATE KEY",
            )?,
        )),
        _ => None,
    };
    let sentinel = match &store.sentinel {
        Some(s) => credentials(&s.auth, "store.sentinel.auth.password_file")?,
        None => RedisCredentials::default(),
    };
    Ok(StoreSecrets {
        ca,
        client_identity,
        data: credentials(&store.auth, "store.auth.password_file")?,
        sentinel,
    })
}
