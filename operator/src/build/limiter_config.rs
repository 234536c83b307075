//! The limiter's own config file (`limiter.yaml`), rendered from the spec. Only the fields the
//! limiter knows: it rejects unknown ones.

use std::collections::BTreeMap;

use serde::Serialize;
use sha2::{Digest, Sha256};

use super::access::{
    EXTERNAL_PASSWORD_FILE, LIMITER_AUTH_DIR, TLS_DIR, external_auth, managed, tls_secret,
};
use crate::crd::{
    EnforcementMode, EnforcementSpec, FailureMode, Plan, PlanSourceKind, RedisMode, StreamLimiter,
    UnknownAccountPolicy,
};
use crate::names::{
    LIMITER_PASSWORD_KEY, LIMITER_PORT, LIMITER_REDIS_USER, Names, REDIS_PORT,
    SENTINEL_PASSWORD_KEY, SENTINEL_PORT,
};

/// Where the stream id secret is mounted in limiter pods.
pub const STREAM_ID_SECRET_DIR: &str = "/etc/screenlimit/secret";
/// Where the limiter's bearer token is mounted.
pub const AUTH_TOKEN_DIR: &str = "/etc/screenlimit/auth";
/// Where the gateway token is mounted (as the file `token`).
pub const GATEWAY_TOKEN_DIR: &str = "/etc/screenlimit/gateway";
/// Where the player tokens' key (HS256 secret or JWKS) is mounted (as the file `keys`); a
/// whole-directory mount, so that the kubelet's updates reach the limiter (which re-reads it).
pub const PLAYER_KEYS_DIR: &str = "/etc/screenlimit/player-keys";
/// Where the config is mounted.
pub const CONFIG_DIR: &str = "/etc/screenlimit";
/// Where the plan database's connection string Secret key is mounted (as the file `url`).
pub const PLAN_DB_DIR: &str = "/etc/screenlimit/plan-db";
/// The connection string file the limiter reads.
pub const PLAN_DB_URL_FILE: &str = "/etc/screenlimit/plan-db/url";
/// Largest request body the limiter accepts.
const MAX_BODY_BYTES: u32 = 8192;
const CIRCUIT_PROBE_INTERVAL: &str = "500ms";
const CIRCUIT_FAILURE_THRESHOLD: u32 = 3;

#[derive(Serialize, Debug)]
struct LimiterConfigFile<'a> {
    listen: String,
    plans: BTreeMap<&'a str, PlanRule>,
    default_plan: &'a str,
    plan_source: PlanSource<'a>,
    lease: Lease,
    store: Store,
    failure_policy: &'static str,
    stream_id_secret_file: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    auth_token_file: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    auth: Option<ApiAuth>,
    max_body_bytes: u32,
    http: Http,
    /// This region and its peers: in the restart part (the limiter reads them at start only),
    /// but for the homes (weights, evacuations, secondaries), which are live.
    #[serde(skip_serializing_if = "Option::is_none")]
    regions: Option<super::regions::RegionsBlock<'a>>,
    /// Live: part of the revision, not of what rolls the pods (left out of the restart part, so
    /// that its coming changed no pod template).
    #[serde(skip_serializing_if = "Option::is_none")]
    history: Option<History>,
    /// Live, like `history`. Left out while every account is enforced (the limiter's default),
    /// so that a resource which never set it renders the file, and the revision, it did before.
    #[serde(skip_serializing_if = "Option::is_none")]
    enforcement: Option<Enforcement>,
    /// The hash of the live part (`live_part`): the limiter reports the revision it runs, so
    /// the status can tell when every pod runs this file.
    #[serde(skip_serializing_if = "Option::is_none")]
    revision: Option<String>,
}

/// What the limiter changes without a restart when the mounted file changes (its `rules.rs`):
/// plans with their device caps and own enforcement, the default and fallback plans, the lease
/// timing, the failure policy, the renewal window, the account history's bounds, the
/// enforcement, the regions' homes. Everything else in the file rolls the pods.
#[derive(Serialize, Debug)]
struct LivePart<'a> {
    plans: &'a BTreeMap<&'a str, PlanRule>,
    default_plan: &'a str,
    lease: &'a Lease,
    failure_policy: &'static str,
    fallback_plan: Option<&'a str>,
    renewal_window: &'a str,
    history: Option<&'a History>,
    #[serde(skip_serializing_if = "Option::is_none")]
    enforcement: Option<&'a Enforcement>,
    /// Left out without `regions`, so that the revision stays what it was there.
    #[serde(skip_serializing_if = "Option::is_none")]
    region_homes: Option<Vec<super::regions::Home<'a>>>,
}

impl<'a> LimiterConfigFile<'a> {
    fn live_part(&self) -> LivePart<'_> {
        LivePart {
            plans: &self.plans,
            default_plan: self.default_plan,
            lease: &self.lease,
            failure_policy: self.failure_policy,
            fallback_plan: self.plan_source.fallback_plan,
            renewal_window: &self.store.renewal_window,
            history: self.history.as_ref(),
            enforcement: self.enforcement.as_ref(),
            region_homes: self.regions.as_ref().map(|r| r.homes()),
        }
    }

    /// The file without its live part: what the pod template's hash covers.
    fn restart_part(mut self) -> String {
        self.plans.clear();
        self.default_plan = "";
        self.lease = Lease {
            heartbeat_interval: String::new(),
            ttl: String::new(),
        };
        self.failure_policy = "";
        self.plan_source.fallback_plan = None;
        self.store.renewal_window = String::new();
        self.history = None;
        self.enforcement = None;
        if let Some(regions) = &mut self.regions {
            regions.clear_homes();
        }
        self.revision = None;
        serde_yaml_ng::to_string(&self).expect("the limiter config always serializes")
    }
}

/// The limiter's `http` section: connection deadlines and per-pod bounds.
#[derive(Serialize, Debug)]
struct Http {
    header_read_timeout: String,
    body_read_timeout: String,
    idle_timeout: String,
    max_header_bytes: i32,
    max_connections: i32,
    max_in_flight: i32,
    write_timeout: String,
    max_connection_age: String,
    listen_backlog: i32,
    max_queue_delay: String,
    drain_period: String,
    shutdown_timeout: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    cors: Option<Cors>,
}

/// The limiter's `auth`: one credential per audience (`spec.limiter.playerAuth`,
/// `gatewayTokenSecret`; `authTokenSecret` is then the support token).
#[derive(Serialize, Debug)]
struct ApiAuth {
    support_token_file: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    gateway_token_file: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    players: Option<Players>,
}

#[derive(Serialize, Debug)]
struct Players {
    #[serde(skip_serializing_if = "Option::is_none")]
    hs256_secret_file: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    jwks_file: Option<String>,
    issuer: String,
    audience: String,
    account_claim: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    device_claim: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    home_claim: Option<String>,
}

#[derive(Serialize, Debug)]
struct Cors {
    allowed_origins: Vec<String>,
}

/// Whether the limiter takes one credential per audience.
pub fn split_credentials(spec: &crate::crd::LimiterSpec) -> bool {
    spec.player_auth.is_some() || spec.gateway_token_secret.is_some()
}

fn api_auth(spec: &crate::crd::LimiterSpec) -> Option<ApiAuth> {
    if !split_credentials(spec) {
        return None;
    }
    let keys = format!("{PLAYER_KEYS_DIR}/keys");
    Some(ApiAuth {
        support_token_file: format!("{AUTH_TOKEN_DIR}/token"),
        gateway_token_file: spec
            .gateway_token_secret
            .as_ref()
            .map(|_| format!("{GATEWAY_TOKEN_DIR}/token")),
        players: spec.player_auth.as_ref().map(|p| Players {
            hs256_secret_file: p.hs256_secret.as_ref().map(|_| keys.clone()),
            jwks_file: p.jwks_secret.as_ref().map(|_| keys.clone()),
            issuer: p.issuer.clone(),
            audience: p.audience.clone(),
            account_claim: p.account_claim.clone(),
            device_claim: p.device_claim.clone(),
            home_claim: p.home_claim.clone(),
        }),
    })
}

/// The short form `basic: 1`, or the long form `standard: {max_streams: 2, device_caps:
/// {mobile: 1}, enforcement: {mode: shadow}}` for a plan with caps or its own enforcement.
#[derive(Serialize, Debug)]
#[serde(untagged)]
enum PlanRule {
    Streams(i32),
    Detailed {
        max_streams: i32,
        #[serde(skip_serializing_if = "BTreeMap::is_empty")]
        device_caps: BTreeMap<&'static str, i32>,
        #[serde(skip_serializing_if = "Option::is_none")]
        enforcement: Option<Enforcement>,
    },
}

impl PlanRule {
    fn of(plan: &Plan) -> Self {
        let caps = plan
            .device_caps
            .as_ref()
            .map(|c| c.entries())
            .unwrap_or_default();
        if caps.is_empty() && plan.enforcement.is_none() {
            PlanRule::Streams(plan.max_streams)
        } else {
            PlanRule::Detailed {
                max_streams: plan.max_streams,
                device_caps: caps.into_iter().collect(),
                enforcement: plan.enforcement.as_ref().map(Enforcement::of),
            }
        }
    }
}

/// The limiter's `enforcement` (and a plan's): `{mode: enforce, enforce_percent: 30}`, or
/// `{mode: shadow}`.
#[derive(Serialize, Debug)]
struct Enforcement {
    mode: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    enforce_percent: Option<i32>,
}

impl Enforcement {
    fn of(spec: &EnforcementSpec) -> Self {
        Enforcement {
            mode: match spec.mode {
                EnforcementMode::Enforce => "enforce",
                EnforcementMode::Shadow => "shadow",
            },
            enforce_percent: spec.enforce_percent,
        }
    }
}

#[derive(Serialize, Debug)]
struct PlanSource<'a> {
    kind: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    postgres_url_file: Option<&'static str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    query: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    notify_channel: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    timeout: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pool_size: Option<i32>,
    cache_capacity: i64,
    cache_ttl: String,
    cache_max_stale: String,
    unknown_account: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    fallback_plan: Option<&'a str>,
}

/// The limiter's `history`: events kept per account and how long after the newest.
#[derive(Serialize, Debug)]
struct History {
    max_events: i32,
    retention: String,
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
    #[serde(skip_serializing_if = "Option::is_none")]
    sentinel: Option<Sentinel>,
    #[serde(skip_serializing_if = "Option::is_none")]
    cluster: Option<Cluster>,
    timeout: String,
    batch_window: String,
    /// Live: part of the revision, not of what rolls the pods.
    renewal_window: String,
    circuit_probe_interval: &'static str,
    circuit_failure_threshold: u32,
    #[serde(skip_serializing_if = "Option::is_none")]
    tls: Option<Tls>,
    #[serde(skip_serializing_if = "Option::is_none")]
    auth: Option<Auth>,
}

/// `store.tls`: the CA the limiter trusts (clients authenticate by password, not certificate).
#[derive(Serialize, Debug, Clone, PartialEq, Eq)]
pub struct Tls {
    pub ca_file: String,
}

/// `store.auth` / `store.sentinel.auth`: a user and the file holding its password.
#[derive(Serialize, Debug, Clone, PartialEq, Eq)]
pub struct Auth {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub username: Option<String>,
    pub password_file: String,
}

/// Sentinel-managed shards: where the Sentinels listen, and the master name of each shard in
/// shard order.
#[derive(Serialize, Debug, Clone, PartialEq, Eq)]
pub struct Sentinel {
    pub addresses: Vec<String>,
    pub masters: Vec<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub auth: Option<Auth>,
}

/// `store.cluster`: a Redis Cluster's seed nodes.
#[derive(Serialize, Debug, Clone, PartialEq, Eq)]
pub struct Cluster {
    pub nodes: Vec<String>,
}

/// The `store.cluster` section, when `redis.external.clusterNodes` lists the nodes (from
/// `clusterNodesSecret` they come through `SCREENLIMIT_REDIS_CLUSTER_NODES` instead).
pub fn cluster(sl: &StreamLimiter) -> Option<Cluster> {
    let redis = &sl.spec.redis;
    if redis.mode != RedisMode::External {
        return None;
    }
    let nodes = redis.external.as_ref()?.cluster_nodes.clone()?;
    Some(Cluster { nodes })
}

/// `redis` or, when `redis.tls` is set, `rediss`.
fn scheme(sl: &StreamLimiter) -> &'static str {
    if tls_secret(sl).is_some() {
        "rediss"
    } else {
        "redis"
    }
}

/// The limiter's credentials toward the shards: on managed shards its ACL user and the
/// generated password; on external ones what `redis.external.auth` names.
fn data_auth(sl: &StreamLimiter) -> Option<Auth> {
    if let Some(external) = external_auth(sl) {
        return Some(Auth {
            username: external.username.clone(),
            password_file: format!("{LIMITER_AUTH_DIR}/{EXTERNAL_PASSWORD_FILE}"),
        });
    }
    managed(sl).then(|| Auth {
        username: Some(LIMITER_REDIS_USER.to_owned()),
        password_file: format!("{LIMITER_AUTH_DIR}/{LIMITER_PASSWORD_KEY}"),
    })
}

/// Whether Sentinel owns the managed shards (managed mode with at least one replica each).
pub fn sentinel_enabled(sl: &StreamLimiter) -> bool {
    sl.spec.redis.mode == RedisMode::Managed && sl.spec.redis.replicas_per_shard >= 1
}

/// The `store.sentinel` section, when Sentinel owns the shards.
pub fn sentinel(sl: &StreamLimiter, names: &Names, namespace: &str) -> Option<Sentinel> {
    sentinel_enabled(sl).then(|| Sentinel {
        addresses: (0..sl.spec.redis.sentinel.replicas)
            .map(|k| {
                format!(
                    "{}://{}:{SENTINEL_PORT}",
                    scheme(sl),
                    names.sentinel_host(namespace, k)
                )
            })
            .collect(),
        masters: (0..sl.spec.redis.shards)
            .map(|i| names.shard_master(i))
            .collect(),
        auth: Some(Auth {
            username: None,
            password_file: format!("{LIMITER_AUTH_DIR}/{SENTINEL_PASSWORD_KEY}"),
        }),
    })
}

/// The Redis URL of managed shard `index` (its Service, which selects the shard's primary);
/// `rediss://` when the shards serve TLS.
pub fn managed_shard_url(sl: &StreamLimiter, names: &Names, namespace: &str, index: i32) -> String {
    format!(
        "{}://{}.{namespace}.svc:{REDIS_PORT}",
        scheme(sl),
        names.redis_shard(index)
    )
}

/// Shard URLs written into the file. Empty when they come from a Secret (through
/// `SCREENLIMIT_REDIS_SHARDS`), when Sentinel names each shard's primary, or for a Redis Cluster.
pub fn shard_urls(sl: &StreamLimiter, names: &Names, namespace: &str) -> Vec<String> {
    let redis = &sl.spec.redis;
    if sentinel_enabled(sl) {
        return Vec::new();
    }
    match redis.mode {
        RedisMode::Managed => (0..redis.shards)
            .map(|i| managed_shard_url(sl, names, namespace, i))
            .collect(),
        RedisMode::External => redis
            .external
            .as_ref()
            .and_then(|ext| ext.urls.clone())
            .unwrap_or_default(),
    }
}

fn plan_source(sl: &StreamLimiter) -> PlanSource<'_> {
    let source = &sl.spec.plan_source;
    let postgres = match source.kind {
        PlanSourceKind::Postgres => source.postgres.as_ref(),
        PlanSourceKind::Request => None,
    };
    PlanSource {
        kind: match source.kind {
            PlanSourceKind::Request => "request",
            PlanSourceKind::Postgres => "postgres",
        },
        postgres_url_file: postgres.map(|_| PLAN_DB_URL_FILE),
        query: postgres.map(|p| p.query.as_str()),
        notify_channel: postgres.map(|p| p.notify_channel.as_str()),
        timeout: postgres.map(|p| format!("{}ms", p.timeout_millis)),
        pool_size: postgres.map(|p| p.pool_size),
        cache_capacity: source.cache.capacity,
        cache_ttl: format!("{}s", source.cache.ttl_seconds),
        cache_max_stale: format!("{}s", source.cache.max_stale_seconds),
        unknown_account: match source.unknown_account {
            UnknownAccountPolicy::DefaultPlan => "default_plan",
            UnknownAccountPolicy::Deny => "deny",
        },
        fallback_plan: source.fallback_plan.as_deref(),
    }
}

/// Renders `limiter.yaml`, with its `revision`.
pub fn render(sl: &StreamLimiter, names: &Names, namespace: &str) -> String {
    let mut file = file(sl, names, namespace);
    file.revision = Some(revision(sl, names, namespace));
    let yaml = serde_yaml_ng::to_string(&file).expect("the limiter config always serializes");
    format!(
        "# Rendered by screenlimit-operator from StreamLimiter {}; edits are overwritten.\n{yaml}",
        names.instance()
    )
}

/// The revision the rendered file carries: a short hash of its live part.
pub fn revision(sl: &StreamLimiter, names: &Names, namespace: &str) -> String {
    let file = file(sl, names, namespace);
    let live = serde_yaml_ng::to_string(&file.live_part()).expect("the live part serializes");
    config_hash(&live, &[])
}

/// The rendered file without the part the limiter changes live: a change here rolls the pods.
pub fn restart_part(sl: &StreamLimiter, names: &Names, namespace: &str) -> String {
    file(sl, names, namespace).restart_part()
}

fn file<'a>(sl: &'a StreamLimiter, names: &Names, namespace: &str) -> LimiterConfigFile<'a> {
    let spec = &sl.spec;
    LimiterConfigFile {
        listen: format!("0.0.0.0:{LIMITER_PORT}"),
        plans: spec
            .plans
            .iter()
            .map(|p| (p.name.as_str(), PlanRule::of(p)))
            .collect(),
        default_plan: &spec.default_plan,
        plan_source: plan_source(sl),
        lease: Lease {
            heartbeat_interval: format!("{}s", spec.lease.heartbeat_interval_seconds),
            ttl: format!("{}s", spec.lease.ttl_seconds),
        },
        store: Store {
            backend: "redis",
            redis_shards: shard_urls(sl, names, namespace),
            sentinel: sentinel(sl, names, namespace),
            cluster: cluster(sl),
            timeout: format!("{}ms", spec.failure_policy.store_timeout_millis),
            batch_window: format!("{}us", spec.limiter.batch_window_micros),
            renewal_window: format!("{}ms", spec.limiter.renewal_window_millis),
            circuit_probe_interval: CIRCUIT_PROBE_INTERVAL,
            circuit_failure_threshold: CIRCUIT_FAILURE_THRESHOLD,
            tls: tls_secret(sl).map(|_| Tls {
                ca_file: format!("{TLS_DIR}/ca.crt"),
            }),
            auth: data_auth(sl),
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
            .filter(|_| !split_credentials(&spec.limiter))
            .map(|_| format!("{AUTH_TOKEN_DIR}/token")),
        auth: api_auth(&spec.limiter),
        max_body_bytes: MAX_BODY_BYTES,
        http: {
            let http = &spec.limiter.http;
            Http {
                header_read_timeout: format!("{}ms", http.header_read_timeout_millis),
                body_read_timeout: format!("{}ms", http.body_read_timeout_millis),
                idle_timeout: format!("{}s", http.idle_timeout_seconds),
                max_header_bytes: http.max_header_bytes,
                max_connections: http.max_connections,
                max_in_flight: http.max_in_flight,
                write_timeout: format!("{}ms", http.write_timeout_millis),
                max_connection_age: format!("{}s", http.max_connection_age_seconds),
                listen_backlog: http.listen_backlog,
                max_queue_delay: format!("{}ms", http.max_queue_delay_millis),
                drain_period: format!("{}s", http.drain_period_seconds),
                shutdown_timeout: format!("{}s", http.shutdown_timeout_seconds),
                cors: spec.limiter.cors.as_ref().map(|c| Cors {
                    allowed_origins: c.allowed_origins.clone(),
                }),
            }
        },
        regions: super::regions::config(sl),
        history: Some(History {
            max_events: spec.limiter.history.max_events,
            retention: format!("{}h", spec.limiter.history.retention_hours),
        }),
        enforcement: (!spec.enforcement.is_default()).then(|| Enforcement::of(&spec.enforcement)),
        revision: None,
    }
}

/// Short hash of `config` and `extra`: of everything that should roll the limiter pods when it
/// changes (the file's restart part and the Secrets it names), or of the live part.
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
