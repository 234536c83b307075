//! The limiter's configuration: one YAML file (the shape the operator renders), then environment
//! overrides, then flags. Every check names the field it rejects.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::str::FromStr;
use std::time::Duration;

use serde::Deserialize;
use serde::de::{self, Deserializer, MapAccess, Unexpected, Visitor};

use crate::model::{DeviceCaps, DeviceType, Plan};
pub use api_access::{ApiAuthConfig, CorsConfig, Credentials, PlayerTokenConfig};

mod api_access;
pub use crate::store::redis::access::{AuthConfig, TlsConfig};

/// Environment variables that override the file, for containers and quick local runs.
pub const ENV_OVERRIDES: &[(&str, &str)] = &[
    ("SCREENLIMIT_LISTEN", "listen"),
    ("SCREENLIMIT_STORE_BACKEND", "store.backend"),
    (
        "SCREENLIMIT_REDIS_SHARDS",
        "store.redis_shards (comma separated)",
    ),
    (
        "SCREENLIMIT_REDIS_CLUSTER_NODES",
        "store.cluster.nodes (comma separated)",
    ),
    ("SCREENLIMIT_FAILURE_POLICY", "failure_policy"),
    ("SCREENLIMIT_STREAM_ID_SECRET", "stream_id_secret (inline)"),
    ("SCREENLIMIT_STREAM_ID_SECRET_FILE", "stream_id_secret_file"),
    ("SCREENLIMIT_AUTH_TOKEN_FILE", "auth_token_file"),
    ("SCREENLIMIT_SUPPORT_TOKEN_FILE", "auth.support_token_file"),
    ("SCREENLIMIT_GATEWAY_TOKEN_FILE", "auth.gateway_token_file"),
    ("SCREENLIMIT_PLAN_DB_URL", "plan_source.postgres_url"),
    ("SCREENLIMIT_THREADS", "threads"),
    ("SCREENLIMIT_REDIS_USERNAME", "store.auth.username"),
    (
        "SCREENLIMIT_REDIS_PASSWORD",
        "the data nodes' password (wins over store.auth.password_file)",
    ),
    (
        "SCREENLIMIT_SENTINEL_USERNAME",
        "store.sentinel.auth.username",
    ),
    (
        "SCREENLIMIT_SENTINEL_PASSWORD",
        "the Sentinels' password (wins over store.sentinel.auth.password_file)",
    ),
    ("SCREENLIMIT_MAX_CONNECTIONS", "http.max_connections"),
    ("SCREENLIMIT_MAX_IN_FLIGHT", "http.max_in_flight"),
    (
        "SCREENLIMIT_HEADER_READ_TIMEOUT",
        "http.header_read_timeout",
    ),
    ("SCREENLIMIT_BODY_READ_TIMEOUT", "http.body_read_timeout"),
    ("SCREENLIMIT_IDLE_TIMEOUT", "http.idle_timeout"),
    ("SCREENLIMIT_WRITE_TIMEOUT", "http.write_timeout"),
    ("SCREENLIMIT_LISTEN_BACKLOG", "http.listen_backlog"),
    ("SCREENLIMIT_MAX_QUEUE_DELAY", "http.max_queue_delay"),
    (
        "SCREENLIMIT_REDIS_ALLOW_EVICTION",
        "store.allow_eviction (true or false)",
    ),
    ("SCREENLIMIT_STORE_MODULE", "store.module (auto or off)"),
    ("SCREENLIMIT_DRAIN_PERIOD", "http.drain_period"),
    ("SCREENLIMIT_SHUTDOWN_TIMEOUT", "http.shutdown_timeout"),
];

/// Largest plan a config may declare; the store encodes a limit in one byte.
pub const MAX_STREAMS_CEILING: u32 = 100;

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Config {
    /// Address the HTTP API listens on.
    pub listen: SocketAddr,
    /// Plan name -> maximum simultaneous streams.
    pub plans: BTreeMap<String, PlanRule>,
    /// Plan used when a play-start names none and the account holds no lease.
    pub default_plan: String,
    pub lease: LeaseConfig,
    pub store: StoreConfig,
    pub failure_policy: FailurePolicy,
    /// Secret that signs stream ids, inline. Every limiter instance on one store must share it.
    pub stream_id_secret: Option<String>,
    /// File holding the stream id secret (a mounted Kubernetes Secret).
    pub stream_id_secret_file: Option<PathBuf>,
    /// File holding the one bearer token that opens every API call (the older form of `auth`,
    /// kept as it was); none, and no `auth`, means no authentication.
    pub auth_token_file: Option<PathBuf>,
    /// The credentials of each audience: the support token, the gateway token, player tokens.
    pub auth: ApiAuthConfig,
    /// Largest request body accepted, in bytes.
    pub max_body_bytes: usize,
    /// Where each account's plan comes from.
    pub plan_source: PlanSourceConfig,
    /// Threads serving the API, each a single-threaded event loop with its own connections;
    /// 0 = one per CPU the process may use.
    pub threads: usize,
    /// Connection deadlines and the bounds of one instance.
    pub http: HttpConfig,
    /// A label for this version of the file, reported in `/v1/fleet` and
    /// `screenlimit_config_info` (the operator writes one per rendered config, and reads it back
    /// to tell when every instance runs it). 1-64 characters of A-Z a-z 0-9 . _ : -.
    pub revision: Option<String>,
    /// The file this config was read from: `reload.rs` watches it.
    #[serde(skip)]
    pub file: Option<PathBuf>,
    /// `listen` given by the `--listen` flag, which wins over the file on a reload too.
    #[serde(skip)]
    pub listen_flag: Option<SocketAddr>,
}

/// What one instance takes on: deadlines on every connection, and bounds on connections and on
/// requests in flight. The defaults fit a limiter behind a load balancer that pools connections.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct HttpConfig {
    /// From the first byte of a request to the end of its headers; a slower client's
    /// connection is closed.
    #[serde(with = "humantime_serde")]
    pub header_read_timeout: Duration,
    /// From the end of the headers to the end of the body; a slower client is answered
    /// 408 `request_timeout` and its connection closed.
    #[serde(with = "humantime_serde")]
    pub body_read_timeout: Duration,
    /// How long a connection may wait for its next request (and a new connection for its first
    /// byte) before it is closed. Keep it above the load balancer's own idle timeout.
    #[serde(with = "humantime_serde")]
    pub idle_timeout: Duration,
    /// How long a write of an answer may make no progress (a client that sends but does not
    /// read) before the connection is closed.
    #[serde(with = "humantime_serde")]
    pub write_timeout: Duration,
    /// Connections the kernel queues for `accept` (capped by `net.core.somaxconn`). A burst of
    /// new connections beyond it loses SYNs, and each client so dropped waits a full second
    /// before its retry: keep it above the largest burst of connections expected.
    pub listen_backlog: u32,
    /// Largest request line + headers, in bytes; beyond it the answer is 431 and the connection
    /// is closed.
    pub max_header_bytes: usize,
    /// Open connections this instance keeps; one more is accepted and closed at once.
    pub max_connections: usize,
    /// Requests this instance serves at once; beyond it a request is shed at once by the
    /// failure policy (never queued).
    pub max_in_flight: usize,
    /// A serving lane (thread) further behind than this, because its CPU cannot keep up, sheds
    /// the requests it takes in by the failure policy until it has caught up; `0s` (the
    /// default): never. Off by default because under `open` a shed play is allowed without the
    /// store: a burst a slow instance takes a while to work through must not admit past the cap.
    #[serde(with = "humantime_serde")]
    pub max_queue_delay: Duration,
    /// After SIGTERM, how long the instance keeps accepting and answering (with `/readyz` 503
    /// and `Connection: close` on every answer) before it stops accepting: the time the load
    /// balancers and the Service's endpoints take to stop sending it new requests. `0s`: stop
    /// accepting at once.
    #[serde(with = "humantime_serde")]
    pub drain_period: Duration,
    /// After the drain period, how long requests in flight get to finish before the process
    /// exits anyway.
    #[serde(with = "humantime_serde")]
    pub shutdown_timeout: Duration,
    /// The web players (origins) whose pages may call the player routes from a browser.
    pub cors: CorsConfig,
}

impl Default for HttpConfig {
    fn default() -> Self {
        HttpConfig {
            header_read_timeout: Duration::from_secs(5),
            body_read_timeout: Duration::from_secs(10),
            idle_timeout: Duration::from_secs(75),
            write_timeout: Duration::from_secs(10),
            listen_backlog: 8_192,
            max_header_bytes: 16 * 1024,
            max_connections: 10_000,
            max_in_flight: 4_096,
            max_queue_delay: Duration::ZERO,
            drain_period: Duration::from_secs(5),
            shutdown_timeout: Duration::from_secs(10),
            cors: CorsConfig::default(),
        }
    }
}

/// Bounds of `http.max_header_bytes`.
pub const HEADER_BYTES_RANGE: std::ops::RangeInclusive<usize> = 1024..=(1 << 20);

/// Bounds of `http.listen_backlog` (the kernel caps it at `net.core.somaxconn` anyway).
pub const LISTEN_BACKLOG_RANGE: std::ops::RangeInclusive<u32> = 16..=65_535;

/// Longest `http.drain_period`: a pod's grace period must cover it.
pub const MAX_DRAIN_PERIOD: Duration = Duration::from_secs(300);

/// Bounds of `http.shutdown_timeout`.
pub const SHUTDOWN_TIMEOUT_RANGE: std::ops::RangeInclusive<Duration> =
    Duration::from_millis(100)..=Duration::from_secs(600);

/// Most `threads` a config may ask for.
pub const MAX_THREADS: usize = 256;

/// `request`: the play-start names its plan. `postgres`: the subscription database says.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum PlanSourceKind {
    Request,
    Postgres,
}

/// What a play-start gets when the database knows nothing of its account.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum UnknownAccountPolicy {
    /// Play on the default plan.
    DefaultPlan,
    /// Refuse with 403 `unknown_account`.
    Deny,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct PlanSourceConfig {
    pub kind: PlanSourceKind,
    /// PostgreSQL connection string, inline (prefer `postgres_url_file` or the environment).
    pub postgres_url: Option<String>,
    /// File holding the connection string (a mounted Kubernetes Secret).
    pub postgres_url_file: Option<PathBuf>,
    /// Returns the plan name (text) of the account bound to `$1`; no row means unknown account.
    pub query: String,
    /// Channel the billing side NOTIFYs with the account id as payload when a plan changes.
    pub notify_channel: String,
    /// Deadline of one plan lookup.
    #[serde(with = "humantime_serde")]
    pub timeout: Duration,
    pub pool_size: usize,
    /// Accounts whose plan is kept in memory.
    pub cache_capacity: u64,
    /// A cached plan is looked up again after this long.
    #[serde(with = "humantime_serde")]
    pub cache_ttl: Duration,
    /// While the database is down, a cached plan keeps serving up to this age.
    #[serde(with = "humantime_serde")]
    pub cache_max_stale: Duration,
    pub unknown_account: UnknownAccountPolicy,
    /// Plan for an uncached account while the database cannot answer (default: `default_plan`).
    pub fallback_plan: Option<String>,
}

impl Default for PlanSourceConfig {
    fn default() -> Self {
        PlanSourceConfig {
            kind: PlanSourceKind::Request,
            postgres_url: None,
            postgres_url_file: None,
            query: "SELECT plan FROM subscriptions WHERE account_id = $1".into(),
            notify_channel: "screenlimit_plan_changed".into(),
            timeout: Duration::from_millis(50),
            pool_size: 8,
            cache_capacity: 2_000_000,
            cache_ttl: Duration::from_secs(300),
            cache_max_stale: Duration::from_secs(3600),
            unknown_account: UnknownAccountPolicy::DefaultPlan,
            fallback_plan: None,
        }
    }
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct LeaseConfig {
    #[serde(with = "humantime_serde")]
    pub heartbeat_interval: Duration,
    #[serde(with = "humantime_serde")]
    pub ttl: Duration,
}

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

fn default_cluster_refresh() -> Duration {
    Duration::from_secs(5)
}

fn default_sentinel_poll() -> Duration {
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

/// What a decision does when the store cannot answer in time.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FailurePolicy {
    /// Allow the play and mark the answer degraded.
    Open,
    /// Refuse with 503 `store_unavailable`.
    Closed,
    /// Enforce the cap on this instance's own embedded store.
    LocalCap,
}

/// A plan: the short form `basic: 1`, or `standard: { max_streams: 2, device_caps: { mobile: 1 } }`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PlanRule {
    Streams(u32),
    Detailed(PlanDetail),
}

/// By hand rather than `untagged`: an error inside the long form (an unknown device type in
/// `device_caps`, a misspelt field) keeps its own message and path instead of "did not match
/// any variant".
impl<'de> Deserialize<'de> for PlanRule {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct RuleVisitor;

        impl<'de> Visitor<'de> for RuleVisitor {
            type Value = PlanRule;

            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str(
                    "a number of streams (`basic: 1`) or `{ max_streams: 2, device_caps: { mobile: 1 } }`",
                )
            }

            fn visit_u64<E: de::Error>(self, n: u64) -> Result<PlanRule, E> {
                u32::try_from(n)
                    .map(PlanRule::Streams)
                    .map_err(|_| E::invalid_value(Unexpected::Unsigned(n), &self))
            }

            fn visit_i64<E: de::Error>(self, n: i64) -> Result<PlanRule, E> {
                u64::try_from(n)
                    .map_err(|_| E::invalid_value(Unexpected::Signed(n), &self))
                    .and_then(|n| self.visit_u64(n))
            }

            fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<PlanRule, A::Error> {
                PlanDetail::deserialize(de::value::MapAccessDeserializer::new(map))
                    .map(PlanRule::Detailed)
            }
        }

        deserializer.deserialize_any(RuleVisitor)
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PlanDetail {
    pub max_streams: u32,
    /// At most this many of the plan's streams on one kind of device.
    #[serde(default)]
    pub device_caps: BTreeMap<DeviceType, u32>,
}

static NO_CAPS: BTreeMap<DeviceType, u32> = BTreeMap::new();

impl PlanRule {
    pub fn max_streams(&self) -> u32 {
        match self {
            PlanRule::Streams(n) => *n,
            PlanRule::Detailed(d) => d.max_streams,
        }
    }

    pub fn device_caps(&self) -> &BTreeMap<DeviceType, u32> {
        match self {
            PlanRule::Streams(_) => &NO_CAPS,
            PlanRule::Detailed(d) => &d.device_caps,
        }
    }

    /// The plan as the stores use it (call after `validate`, which bounds every number).
    pub fn to_plan(&self, name: &str) -> Plan {
        let caps = self
            .device_caps()
            .iter()
            .fold(DeviceCaps::default(), |caps, (&kind, &cap)| {
                caps.with(kind, u8::try_from(cap).unwrap_or(u8::MAX))
            });
        Plan {
            name: name.to_owned(),
            limit: self.max_streams(),
            device_caps: caps,
        }
    }
}

impl FailurePolicy {
    pub fn label(self) -> &'static str {
        match self {
            FailurePolicy::Open => "open",
            FailurePolicy::Closed => "closed",
            FailurePolicy::LocalCap => "local_cap",
        }
    }
}

impl Default for Config {
    fn default() -> Self {
        Config {
            listen: "127.0.0.1:8080".parse().expect("literal address"),
            plans: [("basic", 1), ("standard", 2), ("premium", 4)]
                .into_iter()
                .map(|(name, n)| (name.to_owned(), PlanRule::Streams(n)))
                .collect(),
            default_plan: "basic".into(),
            lease: LeaseConfig::default(),
            store: StoreConfig::default(),
            failure_policy: FailurePolicy::Open,
            stream_id_secret: None,
            stream_id_secret_file: None,
            auth_token_file: None,
            auth: ApiAuthConfig::default(),
            max_body_bytes: 8 * 1024,
            plan_source: PlanSourceConfig::default(),
            threads: 0,
            http: HttpConfig::default(),
            revision: None,
            file: None,
            listen_flag: None,
        }
    }
}

impl Default for LeaseConfig {
    fn default() -> Self {
        LeaseConfig {
            heartbeat_interval: Duration::from_secs(30),
            ttl: Duration::from_secs(90),
        }
    }
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

#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("cannot read config file {path}: {source}")]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("config file {path}, field `{field}`: {message}")]
    Parse {
        path: PathBuf,
        field: String,
        message: String,
    },
    #[error("config field `{field}`: cannot read {path}: {source}")]
    ReadFile {
        field: &'static str,
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("config field `{field}`: {message}")]
    Invalid {
        field: &'static str,
        message: String,
    },
}

/// A file the config names in `field`, as text.
fn read_named_file(field: &'static str, path: &Path) -> Result<String, ConfigError> {
    std::fs::read_to_string(path).map_err(|source| ConfigError::ReadFile {
        field,
        path: path.to_owned(),
        source,
    })
}

fn invalid(field: &'static str, message: impl Into<String>) -> ConfigError {
    ConfigError::Invalid {
        field,
        message: message.into(),
    }
}

/// The number in the environment variable `name`, if set, into `into`; a value that does not
/// parse is an error naming `field`.
fn parsed_env<T>(
    env: &impl Fn(&str) -> Option<String>,
    name: &str,
    field: &'static str,
    into: &mut T,
) -> Result<(), ConfigError>
where
    T: std::str::FromStr,
    T::Err: std::fmt::Display,
{
    if let Some(value) = env(name) {
        *into = value
            .trim()
            .parse()
            .map_err(|e| invalid(field, format!("{name}={value:?}: {e}")))?;
    }
    Ok(())
}

impl Config {
    /// Reads the file (or the defaults without one), applies the environment, and validates.
    pub fn load(
        path: Option<&Path>,
        env: impl Fn(&str) -> Option<String>,
    ) -> Result<Config, ConfigError> {
        let mut config = match path {
            Some(path) => Self::from_file(path)?,
            None => Config::default(),
        };
        config.file = path.map(Path::to_owned);
        config.apply_env(env)?;
        config.validate()?;
        Ok(config)
    }

    /// Reads every file the config names (plan database URL, stream id secret, API token) and
    /// checks what is in it, so that a missing file or a bad value stops the start with the
    /// field named, like any other config error. The binary calls it after `load`, which stays
    /// free of these reads: it also checks configs rendered for other machines (the operator's
    /// tests).
    pub fn check_named_files(&self) -> Result<(), ConfigError> {
        self.resolve_stream_id_secret()?;
        self.resolve_credentials()?;
        if let Some(players) = &self.auth.players {
            crate::player_tokens::PlayerTokens::from_config(players)?;
        }
        if self.store.backend == Backend::Redis {
            crate::store::redis::access::Access::resolve(&self.store)?;
        }
        if self.plan_source.kind == PlanSourceKind::Postgres
            && let Some(url) = self.resolve_plan_db_url()?
        {
            let field = match self.plan_source.postgres_url_file {
                Some(_) => "plan_source.postgres_url_file",
                None => "plan_source.postgres_url",
            };
            // The parser's message never repeats the connection string (it may hold a password).
            tokio_postgres::Config::from_str(&url).map_err(|e| {
                invalid(
                    field,
                    format!("not a PostgreSQL connection string (postgres://user:password@host:5432/db or key=value pairs): {e}"),
                )
            })?;
        }
        Ok(())
    }

    pub fn from_file(path: &Path) -> Result<Config, ConfigError> {
        let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
            path: path.to_owned(),
            source,
        })?;
        Self::from_yaml(&text).map_err(|(field, message)| ConfigError::Parse {
            path: path.to_owned(),
            field,
            message,
        })
    }

    /// Parses YAML text; on error returns the path of the offending field and the reason.
    pub fn from_yaml(text: &str) -> Result<Config, (String, String)> {
        if text.trim().is_empty() {
            return Ok(Config::default());
        }
        let deserializer = serde_yaml_ng::Deserializer::from_str(text);
        serde_path_to_error::deserialize(deserializer).map_err(|err| {
            // A key that could not be read (an unknown device type) shows as `?`: the message
            // names it.
            let field = err.path().to_string().trim_end_matches(".?").to_owned();
            (field, err.into_inner().to_string())
        })
    }

    fn apply_env(&mut self, env: impl Fn(&str) -> Option<String>) -> Result<(), ConfigError> {
        if let Some(listen) = env("SCREENLIMIT_LISTEN") {
            self.listen = listen
                .parse()
                .map_err(|e| invalid("listen", format!("SCREENLIMIT_LISTEN={listen:?}: {e}")))?;
        }
        if let Some(backend) = env("SCREENLIMIT_STORE_BACKEND") {
            self.store.backend = match backend.as_str() {
                "memory" => Backend::Memory,
                "redis" => Backend::Redis,
                other => {
                    return Err(invalid(
                        "store.backend",
                        format!("SCREENLIMIT_STORE_BACKEND={other:?}: expected memory or redis"),
                    ));
                }
            };
        }
        if let Some(module) = env("SCREENLIMIT_STORE_MODULE") {
            self.store.module = match module.as_str() {
                "auto" => StoreModule::Auto,
                "off" => StoreModule::Off,
                other => {
                    return Err(invalid(
                        "store.module",
                        format!("SCREENLIMIT_STORE_MODULE={other:?}: expected auto or off"),
                    ));
                }
            };
        }
        if let Some(shards) = env("SCREENLIMIT_REDIS_SHARDS") {
            self.store.redis_shards = shards
                .split(',')
                .map(str::trim)
                .filter(|s| !s.is_empty())
                .map(String::from)
                .collect();
        }
        if let Some(nodes) = env("SCREENLIMIT_REDIS_CLUSTER_NODES") {
            let nodes = nodes
                .split(',')
                .map(str::trim)
                .filter(|s| !s.is_empty())
                .map(String::from)
                .collect();
            match &mut self.store.cluster {
                Some(cluster) => cluster.nodes = nodes,
                None => {
                    self.store.cluster = Some(ClusterConfig {
                        nodes,
                        refresh_interval: default_cluster_refresh(),
                    })
                }
            }
        }
        if let Some(policy) = env("SCREENLIMIT_FAILURE_POLICY") {
            self.failure_policy = match policy.as_str() {
                "open" => FailurePolicy::Open,
                "closed" => FailurePolicy::Closed,
                "local_cap" => FailurePolicy::LocalCap,
                other => {
                    return Err(invalid(
                        "failure_policy",
                        format!(
                            "SCREENLIMIT_FAILURE_POLICY={other:?}: expected open, closed or local_cap"
                        ),
                    ));
                }
            };
        }
        if let Some(secret) = env("SCREENLIMIT_STREAM_ID_SECRET") {
            self.stream_id_secret = Some(secret);
        }
        if let Some(file) = env("SCREENLIMIT_STREAM_ID_SECRET_FILE") {
            self.stream_id_secret_file = Some(file.into());
        }
        if let Some(url) = env("SCREENLIMIT_PLAN_DB_URL") {
            self.plan_source.postgres_url = Some(url);
        }
        if let Some(file) = env("SCREENLIMIT_AUTH_TOKEN_FILE") {
            self.auth_token_file = Some(file.into());
        }
        if let Some(file) = env("SCREENLIMIT_SUPPORT_TOKEN_FILE") {
            self.auth.support_token_file = Some(file.into());
        }
        if let Some(file) = env("SCREENLIMIT_GATEWAY_TOKEN_FILE") {
            self.auth.gateway_token_file = Some(file.into());
        }
        parsed_env(&env, "SCREENLIMIT_THREADS", "threads", &mut self.threads)?;
        parsed_env(
            &env,
            "SCREENLIMIT_REDIS_ALLOW_EVICTION",
            "store.allow_eviction",
            &mut self.store.allow_eviction,
        )?;
        self.store.auth.apply_env(&env, "SCREENLIMIT_REDIS");
        if let Some(sentinel) = &mut self.store.sentinel {
            sentinel.auth.apply_env(&env, "SCREENLIMIT_SENTINEL");
        }
        parsed_env(
            &env,
            "SCREENLIMIT_MAX_CONNECTIONS",
            "http.max_connections",
            &mut self.http.max_connections,
        )?;
        parsed_env(
            &env,
            "SCREENLIMIT_MAX_IN_FLIGHT",
            "http.max_in_flight",
            &mut self.http.max_in_flight,
        )?;
        parsed_env(
            &env,
            "SCREENLIMIT_LISTEN_BACKLOG",
            "http.listen_backlog",
            &mut self.http.listen_backlog,
        )?;
        let duration = |name: &str, field: &'static str, into: &mut Duration| {
            if let Some(value) = env(name) {
                *into = humantime::parse_duration(value.trim())
                    .map_err(|e| invalid(field, format!("{name}={value:?}: {e}")))?;
            }
            Ok::<(), ConfigError>(())
        };
        duration(
            "SCREENLIMIT_HEADER_READ_TIMEOUT",
            "http.header_read_timeout",
            &mut self.http.header_read_timeout,
        )?;
        duration(
            "SCREENLIMIT_BODY_READ_TIMEOUT",
            "http.body_read_timeout",
            &mut self.http.body_read_timeout,
        )?;
        duration(
            "SCREENLIMIT_IDLE_TIMEOUT",
            "http.idle_timeout",
            &mut self.http.idle_timeout,
        )?;
        duration(
            "SCREENLIMIT_WRITE_TIMEOUT",
            "http.write_timeout",
            &mut self.http.write_timeout,
        )?;
        duration(
            "SCREENLIMIT_MAX_QUEUE_DELAY",
            "http.max_queue_delay",
            &mut self.http.max_queue_delay,
        )?;
        duration(
            "SCREENLIMIT_DRAIN_PERIOD",
            "http.drain_period",
            &mut self.http.drain_period,
        )?;
        duration(
            "SCREENLIMIT_SHUTDOWN_TIMEOUT",
            "http.shutdown_timeout",
            &mut self.http.shutdown_timeout,
        )?;
        Ok(())
    }

    fn validate_http(&self) -> Result<(), ConfigError> {
        let http = &self.http;
        for (field, value) in [
            ("http.header_read_timeout", http.header_read_timeout),
            ("http.body_read_timeout", http.body_read_timeout),
            ("http.idle_timeout", http.idle_timeout),
            ("http.write_timeout", http.write_timeout),
        ] {
            if value < Duration::from_millis(10) || value > Duration::from_secs(3600) {
                return Err(invalid(
                    field,
                    format!(
                        "{} must be between 10ms and 1h",
                        humantime::format_duration(value)
                    ),
                ));
            }
        }
        if !HEADER_BYTES_RANGE.contains(&http.max_header_bytes) {
            return Err(invalid(
                "http.max_header_bytes",
                format!(
                    "{} must be between {} and {}",
                    http.max_header_bytes,
                    HEADER_BYTES_RANGE.start(),
                    HEADER_BYTES_RANGE.end()
                ),
            ));
        }
        if http.max_connections == 0 {
            return Err(invalid("http.max_connections", "must be at least 1"));
        }
        if http.max_in_flight == 0 {
            return Err(invalid("http.max_in_flight", "must be at least 1"));
        }
        if !http.max_queue_delay.is_zero()
            && !(Duration::from_millis(1)..=Duration::from_secs(10)).contains(&http.max_queue_delay)
        {
            return Err(invalid(
                "http.max_queue_delay",
                format!(
                    "{} must be 0s (off) or between 1ms and 10s",
                    humantime::format_duration(http.max_queue_delay)
                ),
            ));
        }
        if http.drain_period > MAX_DRAIN_PERIOD {
            return Err(invalid(
                "http.drain_period",
                format!(
                    "{} must be at most {} (0s: stop accepting at once)",
                    humantime::format_duration(http.drain_period),
                    humantime::format_duration(MAX_DRAIN_PERIOD)
                ),
            ));
        }
        if !SHUTDOWN_TIMEOUT_RANGE.contains(&http.shutdown_timeout) {
            return Err(invalid(
                "http.shutdown_timeout",
                format!(
                    "{} must be between 100ms and 10m",
                    humantime::format_duration(http.shutdown_timeout)
                ),
            ));
        }
        if !LISTEN_BACKLOG_RANGE.contains(&http.listen_backlog) {
            return Err(invalid(
                "http.listen_backlog",
                format!(
                    "{} must be between {} and {}",
                    http.listen_backlog,
                    LISTEN_BACKLOG_RANGE.start(),
                    LISTEN_BACKLOG_RANGE.end()
                ),
            ));
        }
        Ok(())
    }

    pub fn validate(&self) -> Result<(), ConfigError> {
        api_access::validate(&self.auth, self.auth_token_file.as_ref(), &self.http.cors)?;
        if self.plans.is_empty() {
            return Err(invalid(
                "plans",
                "declare at least one plan, e.g. `plans: { basic: 1 }`",
            ));
        }
        for (name, rule) in &self.plans {
            if crate::ids::validate_token(name).is_err() {
                return Err(invalid(
                    "plans",
                    format!("plan name {name:?} must be 1-64 characters of A-Z a-z 0-9 . _ : -"),
                ));
            }
            let max = rule.max_streams();
            if !(1..=MAX_STREAMS_CEILING).contains(&max) {
                return Err(invalid(
                    "plans",
                    format!("plan {name:?} allows {max} streams; use 1 to {MAX_STREAMS_CEILING}"),
                ));
            }
            for (kind, &cap) in rule.device_caps() {
                if !(1..=max).contains(&cap) {
                    return Err(invalid(
                        "plans",
                        format!(
                            "plan {name:?} caps {kind:?} devices at {cap}; use 1 to its max_streams ({max})"
                        ),
                    ));
                }
            }
        }
        if !self.plans.contains_key(&self.default_plan) {
            let known: Vec<_> = self.plans.keys().map(String::as_str).collect();
            return Err(invalid(
                "default_plan",
                format!(
                    "{:?} is not among the plans ({})",
                    self.default_plan,
                    known.join(", ")
                ),
            ));
        }
        let lease = &self.lease;
        if lease.heartbeat_interval < Duration::from_millis(100) {
            return Err(invalid(
                "lease.heartbeat_interval",
                "must be at least 100ms",
            ));
        }
        if lease.ttl < lease.heartbeat_interval * 2 {
            return Err(invalid(
                "lease.ttl",
                format!(
                    "{} must be at least 2 x lease.heartbeat_interval ({}), so one lost heartbeat does not end a stream",
                    humantime::format_duration(lease.ttl),
                    humantime::format_duration(lease.heartbeat_interval)
                ),
            ));
        }
        if self.store.timeout.is_zero() {
            return Err(invalid(
                "store.timeout",
                "must be greater than zero, e.g. 25ms",
            ));
        }
        if self.store.circuit_failure_threshold == 0 {
            return Err(invalid(
                "store.circuit_failure_threshold",
                "must be at least 1",
            ));
        }
        if self.store.circuit_probe_interval.is_zero() {
            return Err(invalid(
                "store.circuit_probe_interval",
                "must be greater than zero",
            ));
        }
        self.validate_store()?;
        for (i, url) in self.store.redis_shards.iter().enumerate() {
            if !(url.starts_with("redis://") || url.starts_with("rediss://")) {
                return Err(invalid(
                    "store.redis_shards",
                    format!("shard {i} ({url:?}) must be a redis:// or rediss:// URL"),
                ));
            }
        }
        crate::store::redis::access::validate(&self.store)?;
        self.validate_plan_source()?;
        self.validate_http()?;
        if let Some(revision) = &self.revision
            && crate::ids::validate_token(revision).is_err()
        {
            return Err(invalid(
                "revision",
                format!("{revision:?} must be 1-64 characters of A-Z a-z 0-9 . _ : -"),
            ));
        }
        if self.max_body_bytes < 512 {
            return Err(invalid("max_body_bytes", "must be at least 512"));
        }
        if self.threads > MAX_THREADS {
            return Err(invalid(
                "threads",
                format!(
                    "{} is too many; use 0 (one per CPU) to {MAX_THREADS}",
                    self.threads
                ),
            ));
        }
        Ok(())
    }

    /// How many threads serve the API: `threads`, or one per CPU the process may use.
    pub fn threads(&self) -> usize {
        match self.threads {
            0 => std::thread::available_parallelism().map_or(1, |n| n.get()),
            n => n,
        }
    }

    fn validate_store(&self) -> Result<(), ConfigError> {
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

    fn validate_plan_source(&self) -> Result<(), ConfigError> {
        let source = &self.plan_source;
        if let Some(plan) = &source.fallback_plan
            && !self.plans.contains_key(plan)
        {
            return Err(invalid(
                "plan_source.fallback_plan",
                format!("{plan:?} is not among the plans"),
            ));
        }
        if source.kind != PlanSourceKind::Postgres {
            return Ok(());
        }
        if source.postgres_url.is_none() && source.postgres_url_file.is_none() {
            return Err(invalid(
                "plan_source.postgres_url_file",
                "plan_source.kind is postgres: name the connection string file (or set SCREENLIMIT_PLAN_DB_URL)",
            ));
        }
        if !source.query.contains("$1") {
            return Err(invalid(
                "plan_source.query",
                "must take the account id as $1",
            ));
        }
        let channel = &source.notify_channel;
        let valid_channel = channel.len() <= 63
            && channel
                .chars()
                .next()
                .is_some_and(|c| c.is_ascii_lowercase() || c == '_')
            && channel
                .chars()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_');
        if !valid_channel {
            return Err(invalid(
                "plan_source.notify_channel",
                "must be a lowercase SQL identifier (a-z, 0-9, _)",
            ));
        }
        if source.timeout.is_zero() || source.pool_size == 0 || source.cache_capacity == 0 {
            return Err(invalid(
                "plan_source",
                "timeout, pool_size and cache_capacity must be above zero",
            ));
        }
        if source.cache_max_stale < source.cache_ttl {
            return Err(invalid(
                "plan_source.cache_max_stale",
                "must be at least plan_source.cache_ttl",
            ));
        }
        Ok(())
    }

    /// The plan database's connection string: file, then inline.
    pub fn resolve_plan_db_url(&self) -> Result<Option<String>, ConfigError> {
        let source = &self.plan_source;
        if let Some(path) = &source.postgres_url_file {
            let text = read_named_file("plan_source.postgres_url_file", path)?;
            return Ok(Some(text.trim().to_owned()));
        }
        Ok(source.postgres_url.clone())
    }

    /// The stream id secret, read from the file when one is named.
    pub fn resolve_stream_id_secret(&self) -> Result<Option<Vec<u8>>, ConfigError> {
        if let Some(path) = &self.stream_id_secret_file {
            let bytes = std::fs::read(path).map_err(|source| ConfigError::ReadFile {
                field: "stream_id_secret_file",
                path: path.clone(),
                source,
            })?;
            let trimmed = bytes.trim_ascii().to_vec();
            if trimmed.len() < 16 {
                return Err(invalid(
                    "stream_id_secret_file",
                    "the secret must be at least 16 bytes",
                ));
            }
            return Ok(Some(trimmed));
        }
        match &self.stream_id_secret {
            Some(secret) if secret.len() < 16 => Err(invalid(
                "stream_id_secret",
                "the secret must be at least 16 bytes",
            )),
            Some(secret) => Ok(Some(secret.as_bytes().to_vec())),
            None => Ok(None),
        }
    }

    /// The support and gateway tokens, read from their files (`auth_token_file`: one token
    /// for both).
    pub fn resolve_credentials(&self) -> Result<Credentials, ConfigError> {
        api_access::resolve(&self.auth, self.auth_token_file.as_ref())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn no_env(_: &str) -> Option<String> {
        None
    }

    #[test]
    fn allow_eviction_is_off_by_default_and_comes_from_the_file_or_the_environment() {
        let no_env = |_: &str| None;
        assert!(!Config::load(None, no_env).unwrap().store.allow_eviction);
        let config = Config::from_yaml("store: { allow_eviction: true }\n").unwrap();
        assert!(config.store.allow_eviction);
        let env = |name: &str| (name == "SCREENLIMIT_REDIS_ALLOW_EVICTION").then(|| "true".into());
        assert!(Config::load(None, env).unwrap().store.allow_eviction);
        let bad = |name: &str| (name == "SCREENLIMIT_REDIS_ALLOW_EVICTION").then(|| "yes".into());
        let err = Config::load(None, bad).unwrap_err();
        assert!(
            matches!(
                err,
                ConfigError::Invalid {
                    field: "store.allow_eviction",
                    ..
                }
            ),
            "{err}"
        );
    }

    #[test]
    fn the_module_is_used_where_loaded_unless_switched_off() {
        let no_env = |_: &str| None;
        let module = |config: Config| config.store.module;
        assert_eq!(
            module(Config::load(None, no_env).unwrap()),
            StoreModule::Auto
        );
        let off = Config::from_yaml("store: { module: off }\n").unwrap();
        assert_eq!(module(off), StoreModule::Off);
        let env = |name: &str| (name == "SCREENLIMIT_STORE_MODULE").then(|| "off".into());
        assert_eq!(module(Config::load(None, env).unwrap()), StoreModule::Off);
        let (field, message) = Config::from_yaml("store: { module: on }\n").unwrap_err();
        assert_eq!(field, "store.module");
        assert!(message.contains("auto"), "{message}");
        let bad = |name: &str| (name == "SCREENLIMIT_STORE_MODULE").then(|| "native".into());
        let err = Config::load(None, bad).unwrap_err();
        assert!(
            matches!(
                err,
                ConfigError::Invalid {
                    field: "store.module",
                    ..
                }
            ),
            "{err}"
        );
    }

    #[test]
    fn the_documented_shape_parses() {
        let yaml = r#"
listen: 127.0.0.1:9090
plans: { basic: 1, standard: 2, premium: 4 }
default_plan: standard
lease:
  heartbeat_interval: 1500ms
  ttl: 5s
store:
  backend: redis
  redis_shards: ["redis://127.0.0.1:6379"]
  timeout: 25ms
failure_policy: local_cap
stream_id_secret: "0123456789abcdef0123"
"#;
        let config = Config::from_yaml(yaml).unwrap();
        config.validate().unwrap();
        assert_eq!(config.lease.heartbeat_interval, Duration::from_millis(1500));
        assert_eq!(config.plans["premium"], PlanRule::Streams(4));
        assert_eq!(config.failure_policy, FailurePolicy::LocalCap);
        assert_eq!(config.store.backend, Backend::Redis);
    }

    #[test]
    fn no_file_means_the_defaults() {
        let config = Config::load(None, no_env).unwrap();
        assert_eq!(config.listen.to_string(), "127.0.0.1:8080");
        assert_eq!(config.default_plan, "basic");
        assert_eq!(config.lease.ttl, Duration::from_secs(90));
        assert_eq!(config.store.timeout, Duration::from_millis(25));
        assert_eq!(config.store.backend, Backend::Memory);
    }

    #[test]
    fn threads_default_to_one_per_cpu_and_can_be_set() {
        let config = Config::load(None, no_env).unwrap();
        assert_eq!(config.threads, 0);
        let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
        assert_eq!(config.threads(), cpus);
        let config = Config::from_yaml("threads: 3\n").unwrap();
        config.validate().unwrap();
        assert_eq!(config.threads(), 3);
        let env = |name: &str| (name == "SCREENLIMIT_THREADS").then(|| "1".to_owned());
        assert_eq!(Config::load(None, env).unwrap().threads(), 1);
        let bad_env = |name: &str| (name == "SCREENLIMIT_THREADS").then(|| "many".to_owned());
        let too_many = Config::from_yaml("threads: 100000\n").unwrap();
        for err in [
            Config::load(None, bad_env).unwrap_err(),
            too_many.validate().unwrap_err(),
        ] {
            let names_threads = matches!(
                &err,
                ConfigError::Invalid {
                    field: "threads",
                    ..
                }
            );
            assert!(names_threads, "{err}");
        }
    }

    #[test]
    fn parse_errors_name_the_field() {
        let (field, _) = Config::from_yaml("lease:\n  ttl: soon\n").unwrap_err();
        assert_eq!(field, "lease.ttl");
        let (field, message) = Config::from_yaml("store:\n  backend: etcd\n").unwrap_err();
        assert_eq!(field, "store.backend");
        assert!(message.contains("memory"), "{message}");
        let (field, _) = Config::from_yaml("lisen: 1.2.3.4:5\n").unwrap_err();
        assert_eq!(field, "lisen", "an unknown field is named");
    }

    #[test]
    fn validation_names_the_field() {
        let cases: &[(&str, &str)] = &[
            ("default_plan: gold\n", "default_plan"),
            ("plans: { basic: 0 }\n", "plans"),
            (
                "lease: { heartbeat_interval: 30s, ttl: 45s }\n",
                "lease.ttl",
            ),
            ("store: { backend: redis }\n", "store.redis_shards"),
            (
                "store: { backend: redis, redis_shards: [\"redis://x:1\"] }\n",
                "stream_id_secret_file",
            ),
            (
                "store: { redis_shards: [\"redis://x:1\"] }\n",
                "store.redis_shards",
            ),
            ("store: { timeout: 0s }\n", "store.timeout"),
        ];
        for (yaml, field) in cases {
            let err = Config::from_yaml(yaml).unwrap().validate().unwrap_err();
            assert!(
                matches!(&err, ConfigError::Invalid { field: f, .. } if f == field),
                "{yaml}: {err}"
            );
        }
    }

    #[test]
    fn http_bounds_have_defaults_env_overrides_and_named_errors() {
        let config = Config::load(None, no_env).unwrap();
        assert_eq!(config.http.header_read_timeout, Duration::from_secs(5));
        assert_eq!(config.http.max_in_flight, 4_096);
        assert_eq!(config.http.write_timeout, Duration::from_secs(10));
        assert_eq!(config.http.listen_backlog, 8_192);
        assert!(config.http.max_queue_delay.is_zero(), "off by default");
        let yaml = "http: { header_read_timeout: 2s, body_read_timeout: 3s, idle_timeout: 90s, write_timeout: 4s, listen_backlog: 100, max_queue_delay: 30ms, max_header_bytes: 4096, max_connections: 50, max_in_flight: 10 }\n";
        let config = Config::from_yaml(yaml).unwrap();
        config.validate().unwrap();
        assert_eq!(config.http.idle_timeout, Duration::from_secs(90));
        assert_eq!(config.http.max_connections, 50);
        assert_eq!(config.http.write_timeout, Duration::from_secs(4));
        assert_eq!(config.http.listen_backlog, 100);
        assert_eq!(config.http.max_queue_delay, Duration::from_millis(30));
        let env = |name: &str| match name {
            "SCREENLIMIT_MAX_IN_FLIGHT" => Some("7".to_owned()),
            "SCREENLIMIT_MAX_CONNECTIONS" => Some("9".to_owned()),
            "SCREENLIMIT_HEADER_READ_TIMEOUT" => Some("250ms".to_owned()),
            "SCREENLIMIT_BODY_READ_TIMEOUT" => Some("1s".to_owned()),
            "SCREENLIMIT_IDLE_TIMEOUT" => Some("2s".to_owned()),
            "SCREENLIMIT_WRITE_TIMEOUT" => Some("3s".to_owned()),
            "SCREENLIMIT_LISTEN_BACKLOG" => Some("512".to_owned()),
            "SCREENLIMIT_MAX_QUEUE_DELAY" => Some("40ms".to_owned()),
            _ => None,
        };
        let config = Config::load(None, env).unwrap();
        assert_eq!(config.http.max_in_flight, 7);
        assert_eq!(config.http.max_connections, 9);
        assert_eq!(config.http.header_read_timeout, Duration::from_millis(250));
        assert_eq!(config.http.body_read_timeout, Duration::from_secs(1));
        assert_eq!(config.http.idle_timeout, Duration::from_secs(2));
        assert_eq!(config.http.write_timeout, Duration::from_secs(3));
        assert_eq!(config.http.listen_backlog, 512);
        assert_eq!(config.http.max_queue_delay, Duration::from_millis(40));
        let bad_env = |name: &str| (name == "SCREENLIMIT_IDLE_TIMEOUT").then(|| "soon".to_owned());
        let err = Config::load(None, bad_env).unwrap_err();
        assert!(
            matches!(
                err,
                ConfigError::Invalid {
                    field: "http.idle_timeout",
                    ..
                }
            ),
            "{err}"
        );
        let cases: &[(&str, &str)] = &[
            (
                "http: { header_read_timeout: 0s }\n",
                "http.header_read_timeout",
            ),
            (
                "http: { body_read_timeout: 2h }\n",
                "http.body_read_timeout",
            ),
            ("http: { max_header_bytes: 100 }\n", "http.max_header_bytes"),
            ("http: { max_connections: 0 }\n", "http.max_connections"),
            ("http: { max_in_flight: 0 }\n", "http.max_in_flight"),
            ("http: { write_timeout: 1ms }\n", "http.write_timeout"),
            ("http: { listen_backlog: 1 }\n", "http.listen_backlog"),
            ("http: { max_queue_delay: 1h }\n", "http.max_queue_delay"),
        ];
        for (yaml, field) in cases {
            let err = Config::from_yaml(yaml).unwrap().validate().unwrap_err();
            assert!(
                matches!(&err, ConfigError::Invalid { field: f, .. } if f == field),
                "{yaml}: {err}"
            );
        }
    }

    #[test]
    fn plans_take_a_short_and_a_detailed_form() {
        let yaml =
            "plans:\n  basic: 1\n  standard: { max_streams: 2, device_caps: { mobile: 1 } }\n";
        let config = Config::from_yaml(yaml).unwrap();
        config.validate().unwrap();
        let standard = config.plans["standard"].to_plan("standard");
        assert_eq!(standard.limit, 2);
        assert_eq!(standard.device_caps.cap(DeviceType::Mobile), Some(1));
        assert_eq!(standard.device_caps.cap(DeviceType::Tv), None);
        let too_high = "plans:\n  basic: { max_streams: 1, device_caps: { tv: 2 } }\n";
        let err = Config::from_yaml(too_high).unwrap().validate().unwrap_err();
        assert!(err.to_string().contains("caps Tv devices at 2"), "{err}");
        let (field, message) =
            Config::from_yaml("plans:\n  basic: { max_streams: 1, caps: {} }\n").unwrap_err();
        assert_eq!(field, "plans.basic.caps");
        assert!(message.contains("unknown field `caps`"), "{message}");
    }

    #[test]
    fn a_postgres_plan_source_needs_its_connection_string() {
        let yaml = "plan_source: { kind: postgres }\n";
        let err = Config::from_yaml(yaml).unwrap().validate().unwrap_err();
        assert!(
            matches!(
                err,
                ConfigError::Invalid {
                    field: "plan_source.postgres_url_file",
                    ..
                }
            ),
            "{err}"
        );
        let bad_channel =
            "plan_source: { kind: postgres, postgres_url: x, notify_channel: \"drop table\" }\n";
        let err = Config::from_yaml(bad_channel)
            .unwrap()
            .validate()
            .unwrap_err();
        assert!(
            matches!(
                err,
                ConfigError::Invalid {
                    field: "plan_source.notify_channel",
                    ..
                }
            ),
            "{err}"
        );
    }

    #[test]
    fn drain_settings_are_bounded_with_the_field_named() {
        let config = Config::from_yaml("http: { drain_period: 0s, shutdown_timeout: 1s }").unwrap();
        config.validate().unwrap();
        for (yaml, field) in [
            ("http: { drain_period: 6m }", "http.drain_period"),
            ("http: { shutdown_timeout: 10ms }", "http.shutdown_timeout"),
        ] {
            let err = Config::from_yaml(yaml).unwrap().validate().unwrap_err();
            assert!(
                matches!(err, ConfigError::Invalid { field: f, .. } if f == field),
                "{yaml}: {err}"
            );
        }
        let env = |name: &str| (name == "SCREENLIMIT_DRAIN_PERIOD").then(|| "750ms".to_owned());
        let config = Config::load(None, env).unwrap();
        assert_eq!(config.http.drain_period, Duration::from_millis(750));
    }

    #[test]
    fn environment_overrides_the_file() {
        let env = |name: &str| match name {
            "SCREENLIMIT_LISTEN" => Some("0.0.0.0:8000".to_owned()),
            "SCREENLIMIT_STORE_BACKEND" => Some("redis".to_owned()),
            "SCREENLIMIT_REDIS_SHARDS" => Some("redis://a:1, redis://b:2".to_owned()),
            "SCREENLIMIT_FAILURE_POLICY" => Some("closed".to_owned()),
            "SCREENLIMIT_STREAM_ID_SECRET" => Some("s".repeat(32)),
            _ => None,
        };
        let config = Config::load(None, env).unwrap();
        assert_eq!(config.listen.port(), 8000);
        assert_eq!(
            config.store.redis_shards,
            vec!["redis://a:1", "redis://b:2"]
        );
        assert_eq!(config.failure_policy, FailurePolicy::Closed);
    }

    #[test]
    fn a_cluster_is_configured_alone_with_node_urls_and_the_field_named() {
        let secret = "stream_id_secret: s\n";
        let yaml = format!(
            "store: {{ backend: redis, cluster: {{ nodes: [\"redis://c0:6379\", \"redis://c1:6379\"] }} }}\n{secret}"
        );
        let config = Config::from_yaml(&yaml).unwrap();
        config.validate().unwrap();
        let cluster = config.store.cluster.as_ref().unwrap();
        assert_eq!(cluster.nodes.len(), 2);
        assert_eq!(cluster.refresh_interval, Duration::from_secs(5));
        let cases: &[(&str, &str)] = &[
            (
                "store: { cluster: { nodes: [\"redis://c0:1\"] } }\n",
                "store.cluster",
            ),
            (
                "store: { backend: redis, redis_shards: [\"redis://a:1\"], cluster: { nodes: [\"redis://c0:1\"] } }\n",
                "store.cluster",
            ),
            (
                "store: { backend: redis, sentinel: { addresses: [\"redis://s:1\"], masters: [m] }, cluster: { nodes: [\"redis://c0:1\"] } }\n",
                "store.cluster",
            ),
            (
                "store: { backend: redis, cluster: { nodes: [] } }\n",
                "store.cluster.nodes",
            ),
            (
                "store: { backend: redis, cluster: { nodes: [\"c0:6379\"] } }\n",
                "store.cluster.nodes",
            ),
            (
                "store: { backend: redis, cluster: { nodes: [\"redis://:secret@c0:6379\"] } }\n",
                "store.cluster.nodes",
            ),
            (
                "store: { backend: redis, cluster: { nodes: [\"redis://c0:1\"], refresh_interval: 10ms } }\n",
                "store.cluster.refresh_interval",
            ),
        ];
        for (yaml, field) in cases {
            let yaml = format!("{yaml}{secret}");
            let err = Config::from_yaml(&yaml).unwrap().validate().unwrap_err();
            assert!(
                matches!(&err, ConfigError::Invalid { field: f, .. } if f == field),
                "{yaml}: {err}"
            );
            assert!(!err.to_string().contains("secret@"), "{err}");
        }
        let (field, _) =
            Config::from_yaml("store: { cluster: { nodes: [], seeds: [] } }\n").unwrap_err();
        assert_eq!(field, "store.cluster.seeds", "an unknown field is refused");
    }

    #[test]
    fn the_environment_names_the_cluster_nodes() {
        let env = |name: &str| match name {
            "SCREENLIMIT_STORE_BACKEND" => Some("redis".to_owned()),
            "SCREENLIMIT_REDIS_CLUSTER_NODES" => Some("redis://c0:1, redis://c1:2".to_owned()),
            "SCREENLIMIT_STREAM_ID_SECRET" => Some("s".repeat(32)),
            _ => None,
        };
        let config = Config::load(None, env).unwrap();
        let cluster = config.store.cluster.unwrap();
        assert_eq!(cluster.nodes, ["redis://c0:1", "redis://c1:2"]);
        assert_eq!(cluster.refresh_interval, Duration::from_secs(5));
    }
}
