//! One Redis shard: where its master is (a fixed URL, or whatever its Sentinels say), the
//! connection to it, the queue that gathers its commands into batches, and its circuit breaker.
//! A background task per shard follows Sentinel failovers and probes an open circuit
//! (`shard/maintenance.rs`).
//!
//! The process keeps one connection per shard: every serving lane's commands for the shard go
//! out on it together (see `batch.rs`), so Redis reads and answers many per round trip.

pub(super) mod maintenance;

use std::sync::atomic::AtomicUsize;
use std::sync::{Arc, RwLock};
use std::time::Duration;

use redis::aio::{ConnectionManager, ConnectionManagerConfig};

use super::access::{self, Access, Contact};
use super::batch::ShardQueue;
use super::breaker::Breaker;
use super::health::{self, ShardState, StartRules};
use super::hold::RenewalHold;
use super::path::{self, ShardPath};
use crate::config::ConfigError;

/// How a shard's master is found.
enum Locator {
    Fixed,
    /// A Redis Cluster primary, at the address the slot map names.
    ClusterNode,
    /// Sentinels (asked in order) and the master name they monitor.
    Sentinel {
        sentinels: Vec<ConnectionManager>,
        master: String,
        /// The masters they name are reached over TLS when the Sentinels are (`rediss://`).
        master_tls: bool,
    },
}

struct Current {
    endpoint: String,
    /// Made lazily: it connects on first use.
    connection: ConnectionManager,
}

impl Current {
    fn new(client: redis::Client, config: &ConnectionManagerConfig) -> Result<Current, String> {
        let (endpoint, connection) = lazy_manager(client, config)?;
        Ok(Current {
            endpoint,
            connection,
        })
    }
}

pub struct Shard {
    pub index: usize,
    locator: Locator,
    /// `None` until Sentinel has named a master.
    current: RwLock<Option<Current>>,
    pub breaker: Breaker,
    /// Commands waiting for the shard's next batch.
    pub queue: ShardQueue,
    /// Renewals waiting for their window (`hold.rs`).
    pub hold: RenewalHold,
    /// Full, read-only, its memory (`health.rs`).
    pub state: ShardState,
    /// Native commands or Lua scripts (`path.rs`).
    pub path: ShardPath,
    config: ConnectionManagerConfig,
    access: Arc<Access>,
}

/// Connections retry little and fail fast: the store deadline and the breaker do the rest.
pub fn manager_config(deadline: Duration) -> ConnectionManagerConfig {
    ConnectionManagerConfig::new()
        .set_connection_timeout(Some(deadline.max(Duration::from_millis(250))))
        .set_response_timeout(Some(deadline * 4))
        .set_number_of_retries(2)
        .set_max_delay(Duration::from_millis(200))
}

fn lazy_manager(
    client: redis::Client,
    config: &ConnectionManagerConfig,
) -> Result<(String, ConnectionManager), String> {
    let endpoint = client.get_connection_info().addr().to_string();
    let connection = ConnectionManager::new_lazy_with_config(client, config.clone())
        .map_err(|e| e.to_string())?;
    Ok((endpoint, connection))
}

impl Shard {
    /// With `store.module: auto`, the shard is asked for its path and counted in
    /// `native_shards` while on the native one; without (`None`), it stays on Lua.
    pub fn with_module(mut self, native_shards: Option<Arc<AtomicUsize>>) -> Shard {
        self.path = ShardPath::new(native_shards);
        self
    }

    /// Asks the shard's master which path its calls take (`path.rs`).
    pub async fn learn_path(&self, deadline: Duration) {
        let connection = self.connection();
        path::learn(
            &self.path,
            connection,
            self.index,
            || self.endpoint(),
            deadline,
        )
        .await;
    }

    pub fn fixed(
        index: usize,
        url: &str,
        access: &Arc<Access>,
        deadline: Duration,
        failure_threshold: u32,
    ) -> Result<Shard, String> {
        let config = manager_config(deadline);
        let current = access
            .data_client(url)
            .and_then(|client| Current::new(client, &config))
            .map_err(|e| format!("store.redis_shards[{index}]: {e}"))?;
        Ok(Shard {
            index,
            locator: Locator::Fixed,
            current: RwLock::new(Some(current)),
            breaker: Breaker::new(failure_threshold),
            queue: ShardQueue::default(),
            hold: RenewalHold::default(),
            state: ShardState::default(),
            path: ShardPath::new(None),
            config,
            access: access.clone(),
        })
    }

    /// A cluster primary at `host:port`, reached like the seed nodes (TLS when they are).
    pub fn cluster_node(
        index: usize,
        host: &str,
        port: u16,
        tls: bool,
        access: &Arc<Access>,
        deadline: Duration,
        failure_threshold: u32,
    ) -> Result<Shard, String> {
        let config = manager_config(deadline);
        let mut current = access
            .data_client_at(host, port, tls)
            .and_then(|client| Current::new(client, &config))
            .map_err(|e| format!("store.cluster: node {host}:{port}: {e}"))?;
        current.endpoint = match host.contains(':') {
            true => format!("[{host}]:{port}"),
            false => format!("{host}:{port}"),
        };
        Ok(Shard {
            index,
            locator: Locator::ClusterNode,
            current: RwLock::new(Some(current)),
            breaker: Breaker::new(failure_threshold),
            queue: ShardQueue::default(),
            hold: RenewalHold::default(),
            state: ShardState::default(),
            path: ShardPath::new(None),
            config,
            access: access.clone(),
        })
    }

    pub fn sentinel(
        index: usize,
        sentinel_urls: &[String],
        master: &str,
        access: &Arc<Access>,
        deadline: Duration,
        failure_threshold: u32,
    ) -> Result<Shard, String> {
        let config = manager_config(deadline);
        let sentinels = sentinel_urls
            .iter()
            .map(|url| {
                let client = access.sentinel_client(url)?;
                lazy_manager(client, &config).map(|(_, c)| c)
            })
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| format!("store.sentinel.addresses: {e}"))?;
        Ok(Shard {
            index,
            locator: Locator::Sentinel {
                sentinels,
                master: master.to_owned(),
                master_tls: sentinel_urls.iter().any(|url| url.starts_with("rediss://")),
            },
            current: RwLock::new(None),
            breaker: Breaker::new(failure_threshold),
            queue: ShardQueue::default(),
            hold: RenewalHold::default(),
            state: ShardState::default(),
            path: ShardPath::new(None),
            config,
            access: access.clone(),
        })
    }

    /// The connection to the shard's master, if one is known.
    pub fn connection(&self) -> Option<ConnectionManager> {
        self.current
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .as_ref()
            .map(|c| c.connection.clone())
    }

    /// Where the shard's master is, for health views (no credentials).
    pub fn endpoint(&self) -> String {
        let current = self.current.read().unwrap_or_else(|e| e.into_inner());
        let at = current
            .as_ref()
            .map_or("unknown", |c| c.endpoint.as_str())
            .to_owned();
        match &self.locator {
            Locator::Fixed | Locator::ClusterNode => at,
            Locator::Sentinel { master, .. } => format!("{at} (sentinel master {master})"),
        }
    }

    /// `host:port` of the master, or "unknown".
    pub fn address(&self) -> String {
        let current = self.current.read().unwrap_or_else(|e| e.into_inner());
        current
            .as_ref()
            .map_or("unknown", |c| c.endpoint.as_str())
            .to_owned()
    }

    /// Asks the Sentinels where the master is and switches to it once it says it is a master.
    /// Returns true when the shard moved.
    pub(super) async fn follow_master(&self, deadline: Duration) -> bool {
        let Locator::Sentinel {
            sentinels,
            master,
            master_tls,
        } = &self.locator
        else {
            return false;
        };
        let Some((host, port)) = ask_sentinels(sentinels, master, deadline).await else {
            return false;
        };
        let endpoint = format!("{host}:{port}");
        if self
            .current
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .as_ref()
            .is_some_and(|c| c.endpoint == endpoint)
        {
            return false;
        }
        let client = self.access.data_client_at(&host, port, *master_tls);
        let Ok(mut next) = client.and_then(|client| Current::new(client, &self.config)) else {
            return false;
        };
        next.endpoint.clone_from(&endpoint);
        // Never write to a replica: switch only once the new address answers as master.
        if !is_master(&next.connection, deadline).await {
            return false;
        }
        // Scripts until the new master has said whether it has the module (asked at once).
        self.path.forget();
        let previous = self
            .current
            .write()
            .unwrap_or_else(|e| e.into_inner())
            .replace(next);
        let from = previous.map_or_else(|| "none".to_owned(), |c| c.endpoint);
        tracing::warn!(
            shard = self.index,
            master,
            from,
            to = endpoint,
            "shard master changed (Sentinel)"
        );
        self.state.primary_confirmed();
        self.breaker.close();
        true
    }

    pub fn is_sentinel(&self) -> bool {
        matches!(self.locator, Locator::Sentinel { .. })
    }

    /// A first contact at start: a fixed shard loads every script (the password, the TLS setup
    /// and the ACL all show there); a Sentinel shard asks each Sentinel for its master (their
    /// own password), then loads the scripts on that master. A config mistake is an error; a
    /// server out of reach is [`Contact::Down`].
    pub async fn first_contact(
        &self,
        sources: &[(&'static str, String)],
        deadline: Duration,
    ) -> Result<Contact, ConfigError> {
        let Locator::Sentinel {
            sentinels,
            master,
            master_tls,
        } = &self.locator
        else {
            let Some(connection) = self.connection() else {
                return Ok(Contact::Down("no connection".into()));
            };
            let at = format!("shard {} ({})", self.index, self.endpoint());
            let rules = StartRules {
                primary_required: matches!(self.locator, Locator::Fixed),
                allow_eviction: self.access.allow_eviction,
            };
            return self.look(connection, sources, &at, rules, deadline).await;
        };
        let mut named = None;
        for (i, sentinel) in sentinels.iter().enumerate() {
            let mut command = redis::cmd("SENTINEL");
            command.arg("get-master-addr-by-name").arg(master);
            let mut connection = sentinel.clone();
            let asked = command.query_async::<Option<(String, u16)>>(&mut connection);
            match tokio::time::timeout(deadline, asked).await {
                Ok(Ok(address)) => named = named.or(address),
                Ok(Err(e)) => {
                    let at = format!("store.sentinel.addresses[{i}]");
                    access::judge(&e, &at, "store.sentinel.auth")?;
                }
                Err(_) => {}
            }
        }
        // The master a Sentinel names is reached with the data nodes' credentials and TLS.
        let Some((host, port)) = named else {
            return Ok(Contact::Down(format!("no Sentinel named master {master}")));
        };
        let at = format!("shard {} (master {master} at {host}:{port})", self.index);
        let client = self
            .access
            .data_client_at(&host, port, *master_tls)
            .map_err(|e| ConfigError::Invalid {
                field: "store.sentinel.addresses",
                message: format!("{at}: {e}"),
            })?;
        let rules = StartRules {
            primary_required: false, // Sentinel names only masters, and follows failovers
            allow_eviction: self.access.allow_eviction,
        };
        match tokio::time::timeout(deadline, client.get_multiplexed_async_connection()).await {
            Ok(Ok(connection)) => self.look(connection, sources, &at, rules, deadline).await,
            Ok(Err(e)) => access::judge(&e, &at, "store.auth"),
            Err(_) => Ok(Contact::Down(format!(
                "{at}: no answer within {deadline:?}"
            ))),
        }
    }
}

impl Shard {
    /// The scripts loaded, then the shard's role and memory policy judged (`health.rs`).
    async fn look<C>(
        &self,
        connection: C,
        sources: &[(&'static str, String)],
        at: &str,
        rules: StartRules,
        deadline: Duration,
    ) -> Result<Contact, ConfigError>
    where
        C: redis::aio::ConnectionLike + Send + Clone,
    {
        let contact = load_scripts(connection.clone(), sources, at, deadline).await?;
        if let Contact::Fine = contact {
            let sample = health::first_look(connection.clone(), at, rules, deadline).await?;
            health::record_first_look(&self.state, sample);
            let endpoint = || self.endpoint();
            path::learn(&self.path, Some(connection), self.index, endpoint, deadline).await;
        }
        Ok(contact)
    }
}

/// Loads every script on `connection`: the password, the TLS setup and the ACL all show there.
pub async fn load_scripts(
    mut connection: impl redis::aio::ConnectionLike + Send,
    sources: &[(&'static str, String)],
    at: &str,
    deadline: Duration,
) -> Result<Contact, ConfigError> {
    // A PING first: Redis drops a connection that sends large commands before signing in, so
    // the scripts alone would hide a missing password behind a broken pipe. One command at a
    // time, so that a refusal comes back as the server's error.
    let all = async {
        redis::cmd("PING")
            .query_async::<String>(&mut connection)
            .await?;
        for (_, source) in sources {
            let mut load = redis::cmd("SCRIPT");
            load.arg("LOAD").arg(source);
            load.query_async::<String>(&mut connection).await?;
        }
        Ok::<(), redis::RedisError>(())
    };
    match tokio::time::timeout(deadline, all).await {
        Ok(Ok(())) => Ok(Contact::Fine),
        Ok(Err(e)) => access::judge(&e, at, "store.auth"),
        Err(_) => Ok(Contact::Down(format!(
            "{at}: no answer within {deadline:?}"
        ))),
    }
}

async fn ask_sentinels(
    sentinels: &[ConnectionManager],
    master: &str,
    deadline: Duration,
) -> Option<(String, u16)> {
    for sentinel in sentinels {
        let mut connection = sentinel.clone();
        let mut command = redis::cmd("SENTINEL");
        command.arg("get-master-addr-by-name").arg(master);
        let asked = tokio::time::timeout(
            deadline,
            command.query_async::<Option<(String, u16)>>(&mut connection),
        );
        if let Ok(Ok(Some(address))) = asked.await {
            return Some(address);
        }
    }
    None
}

async fn is_master(connection: &ConnectionManager, deadline: Duration) -> bool {
    let mut connection = connection.clone();
    let command = redis::cmd("ROLE");
    let role = tokio::time::timeout(
        deadline,
        command.query_async::<Vec<redis::Value>>(&mut connection),
    )
    .await;
    matches!(role, Ok(Ok(values)) if matches!(values.first(), Some(redis::Value::BulkString(b)) if b == b"master"))
}

/// Asks the shard how many keys it holds: a liveness check that also says something.
pub async fn key_count(shard: &Shard, deadline: Duration) -> Option<u64> {
    let mut connection = shard.connection()?;
    let command = redis::cmd("DBSIZE");
    match tokio::time::timeout(deadline, command.query_async::<u64>(&mut connection)).await {
        Ok(Ok(keys)) => Some(keys),
        Ok(Err(error)) => {
            if path::broken(&error) {
                shard.path.forget(); // see path.rs
            }
            None
        }
        Err(_) => None,
    }
}
