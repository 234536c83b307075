//! Environment variables over the file: for containers and quick local runs.

use std::time::Duration;

use super::error::{ConfigError, invalid};
use super::file::Config;
use super::plans::FailurePolicy;
use super::store::{Backend, ClusterConfig, StoreModule, default_cluster_refresh};

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
    ("SCREENLIMIT_MAX_CONNECTION_AGE", "http.max_connection_age"),
    ("SCREENLIMIT_LISTEN_BACKLOG", "http.listen_backlog"),
    ("SCREENLIMIT_MAX_QUEUE_DELAY", "http.max_queue_delay"),
    (
        "SCREENLIMIT_REDIS_ALLOW_EVICTION",
        "store.allow_eviction (true or false)",
    ),
    ("SCREENLIMIT_STORE_MODULE", "store.module (auto or off)"),
    ("SCREENLIMIT_HISTORY_MAX_EVENTS", "history.max_events"),
    ("SCREENLIMIT_HISTORY_RETENTION", "history.retention"),
    ("SCREENLIMIT_DRAIN_PERIOD", "http.drain_period"),
    ("SCREENLIMIT_SHUTDOWN_TIMEOUT", "http.shutdown_timeout"),
];

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
    pub(super) fn apply_env(
        &mut self,
        env: impl Fn(&str) -> Option<String>,
    ) -> Result<(), ConfigError> {
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
            "SCREENLIMIT_HISTORY_MAX_EVENTS",
            "history.max_events",
            &mut self.history.max_events,
        )?;
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
            "SCREENLIMIT_MAX_CONNECTION_AGE",
            "http.max_connection_age",
            &mut self.http.max_connection_age,
        )?;
        duration(
            "SCREENLIMIT_MAX_QUEUE_DELAY",
            "http.max_queue_delay",
            &mut self.http.max_queue_delay,
        )?;
        duration(
            "SCREENLIMIT_HISTORY_RETENTION",
            "history.retention",
            &mut self.history.retention,
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
}
