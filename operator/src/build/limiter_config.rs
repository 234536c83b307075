//! The limiter's own config file (`limiter.yaml`), rendered from the spec. Only the fields the
//! limiter knows: it rejects unknown ones.

use std::collections::BTreeMap;

use serde::Serialize;
use sha2::{Digest, Sha256};

use crate::crd::{FailureMode, RedisMode, StreamLimiter};
use crate::names::{LIMITER_PORT, Names, REDIS_PORT};

/// Where the stream id secret is mounted in limiter pods.
pub const STREAM_ID_SECRET_DIR: &str = "/etc/screenlimit/secret";
/// Where the limiter's bearer token is mounted.
pub const AUTH_TOKEN_DIR: &str = "/etc/screenlimit/auth";
/// Where the config is mounted.
pub const CONFIG_DIR: &str = "/etc/screenlimit";
/// Largest request body the limiter accepts.
const MAX_BODY_BYTES: u32 = 8192;
const CIRCUIT_PROBE_INTERVAL: &str = "500ms";
const CIRCUIT_FAILURE_THRESHOLD: u32 = 3;

#[derive(Serialize, Debug)]
struct LimiterConfigFile<'a> {
    listen: String,
    plans: BTreeMap<&'a str, i32>,
    default_plan: &'a str,
    lease: Lease,
    store: Store,
    failure_policy: &'static str,
    stream_id_secret_file: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    auth_token_file: Option<String>,
    max_body_bytes: u32,
}

#[derive(Serialize, Debug)]
struct Lease {
    heartbeat_interval: String,
    ttl: String,
}

#[derive(Serialize, Debug)]
struct Store {
    backend: &'static str,
    redis_shards: Vec<String>,
    timeout: String,
    circuit_probe_interval: &'static str,
    circuit_failure_threshold: u32,
}

/// The Redis URL of managed shard `index` (its Service, which selects the shard's primary).
pub fn managed_shard_url(names: &Names, namespace: &str, index: i32) -> String {
    format!(
        "redis://{}.{namespace}.svc:{REDIS_PORT}",
        names.redis_shard(index)
    )
}

/// Shard URLs written into the file. Empty when they come from a Secret (through
/// `SCREENLIMIT_REDIS_SHARDS`).
pub fn shard_urls(sl: &StreamLimiter, names: &Names, namespace: &str) -> Vec<String> {
    let redis = &sl.spec.redis;
    match redis.mode {
        RedisMode::Managed => (0..redis.shards)
            .map(|i| managed_shard_url(names, namespace, i))
            .collect(),
        RedisMode::External => redis
            .external
            .as_ref()
            .and_then(|ext| ext.urls.clone())
            .unwrap_or_default(),
    }
}

/// Renders `limiter.yaml`.
pub fn render(sl: &StreamLimiter, names: &Names, namespace: &str) -> String {
    let spec = &sl.spec;
    let file = LimiterConfigFile {
        listen: format!("0.0.0.0:{LIMITER_PORT}"),
        plans: spec
            .plans
            .iter()
            .map(|p| (p.name.as_str(), p.max_streams))
            .collect(),
        default_plan: &spec.default_plan,
        lease: Lease {
            heartbeat_interval: format!("{}s", spec.lease.heartbeat_interval_seconds),
            ttl: format!("{}s", spec.lease.ttl_seconds),
        },
        store: Store {
            backend: "redis",
            redis_shards: shard_urls(sl, names, namespace),
            timeout: format!("{}ms", spec.failure_policy.store_timeout_millis),
            circuit_probe_interval: CIRCUIT_PROBE_INTERVAL,
            circuit_failure_threshold: CIRCUIT_FAILURE_THRESHOLD,
        },
        failure_policy: match spec.failure_policy.mode {
            FailureMode::Open => "open",
            FailureMode::Closed => "closed",
            FailureMode::LocalCap => "local_cap",
        },
        stream_id_secret_file: format!(
            "{STREAM_ID_SECRET_DIR}/{}",
            crate::names::STREAM_ID_SECRET_KEY
        ),
        auth_token_file: spec
            .limiter
            .auth_token_secret
            .as_ref()
            .map(|_| format!("{AUTH_TOKEN_DIR}/token")),
        max_body_bytes: MAX_BODY_BYTES,
    };
    let yaml = serde_yaml_ng::to_string(&file).expect("the limiter config always serializes");
    format!(
        "# Rendered by screenlimit-operator from StreamLimiter {}; edits are overwritten.\n{yaml}",
        names.instance()
    )
}

/// Short hash of everything that should roll the limiter pods when it changes.
pub fn config_hash(config: &str, extra: &[&str]) -> String {
    let mut hasher = Sha256::new();
    hasher.update(config.as_bytes());
    for part in extra {
        hasher.update([0]);
        hasher.update(part.as_bytes());
    }
    let digest = hasher.finalize();
    digest[..8].iter().map(|b| format!("{b:02x}")).collect()
}
