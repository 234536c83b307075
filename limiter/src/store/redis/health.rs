//! Whether a shard can hold the gate, from what the shard itself says: full (`OOM` replies),
//! a replica (`ROLE`, `READONLY` replies), set to evict its keys (`maxmemory-policy`), and how
//! much memory it uses against its `maxmemory`.
//!
//! At start ([`first_look`]) a replica named as a shard and an evicting policy that the config
//! does not accept stop the limiter (exit 2); at run time the replies a shard gives
//! (`watch::classify`) and a sample of `INFO memory` every [`SAMPLE_INTERVAL`]
//! (`watch::sample`) keep [`ShardState`] current, and each change is logged once: never a line
//! per request. This file holds the state and the readings and names no shard, so that `shard.rs`
//! holds a `ShardState` without being imported back; `health/watch.rs` updates a shard's state.

pub(super) mod watch;

use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use redis::Value;
use redis::aio::ConnectionLike;

use super::access;
use crate::config::ConfigError;
use crate::store::shard_health::ShardMemory;

/// How often each shard's memory and policy are read (memory fills over minutes, not seconds;
/// a sample is one `INFO memory`).
pub const SAMPLE_INTERVAL: Duration = Duration::from_secs(5);

/// One reading of `INFO memory`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MemorySample {
    pub used: u64,
    /// 0: no limit.
    pub max: u64,
    /// `maxmemory_policy`, when the server shows it (some managed services hide it).
    pub policy: Option<String>,
}

impl MemorySample {
    /// Reads the fields of an `INFO memory` reply; `None` without `used_memory`.
    pub fn parse(info: &str) -> Option<MemorySample> {
        let field = |name: &str| {
            info.lines()
                .filter_map(|line| line.trim_end().split_once(':'))
                .find(|(key, _)| *key == name)
                .map(|(_, value)| value.to_owned())
        };
        Some(MemorySample {
            used: field("used_memory")?.parse().ok()?,
            max: field("maxmemory").and_then(|v| v.parse().ok()).unwrap_or(0),
            policy: field("maxmemory_policy"),
        })
    }

    /// Whether the policy lets Redis delete keys to make room: `allkeys-*` and `volatile-*` do
    /// (leases and tombstones carry a TTL, so even the `volatile-*` ones take them); only
    /// `noeviction` refuses the write instead.
    pub fn evicting(&self) -> bool {
        self.policy.as_deref().is_some_and(is_evicting)
    }
}

pub fn is_evicting(policy: &str) -> bool {
    policy.starts_with("allkeys-") || policy.starts_with("volatile-")
}

/// What the limiter knows of one shard's own state; updated by replies, samples and probes.
#[derive(Default)]
pub struct ShardState {
    read_only: AtomicBool,
    /// The shard answered `NOREPLICAS`: too few replicas in sync to write.
    no_replicas: AtomicBool,
    out_of_memory: AtomicBool,
    /// `OOM` replies so far, and as many as the last sample saw (the episode ends with a sample
    /// interval without one).
    oom_replies: AtomicU64,
    oom_replies_sampled: AtomicU64,
    memory: Mutex<Option<MemorySample>>,
    /// The policy's last reading said "evicting" (its change is logged once).
    evicting: AtomicBool,
    /// `INFO` was refused or lacked the policy (said once).
    unreadable_said: AtomicBool,
}

impl ShardState {
    pub fn read_only(&self) -> bool {
        self.read_only.load(Ordering::Relaxed)
    }

    pub fn no_replicas(&self) -> bool {
        self.no_replicas.load(Ordering::Relaxed)
    }

    pub fn out_of_memory(&self) -> bool {
        self.out_of_memory.load(Ordering::Relaxed)
    }

    pub fn memory(&self) -> Option<ShardMemory> {
        let sample = self.memory.lock().unwrap_or_else(|e| e.into_inner());
        sample.as_ref().map(|s| ShardMemory {
            used_bytes: s.used,
            max_bytes: s.max,
            policy: s.policy.clone(),
        })
    }

    fn record(&self, sample: MemorySample) {
        *self.memory.lock().unwrap_or_else(|e| e.into_inner()) = Some(sample);
    }

    /// A new master (Sentinel): whatever the old address was, the new one is a primary.
    pub fn primary_confirmed(&self) {
        self.read_only.store(false, Ordering::Relaxed);
        self.no_replicas.store(false, Ordering::Relaxed);
    }
}

/// What the limiter asks of a shard at its first contact.
#[derive(Debug, Clone, Copy)]
pub struct StartRules {
    /// A shard named by URL must be a primary (Sentinel and Cluster find their own).
    pub primary_required: bool,
    /// `store.allow_eviction`.
    pub allow_eviction: bool,
}

/// At start, after the scripts are loaded: a replica named as a shard, or an evicting policy
/// the config does not accept, is a config error naming the shard and the setting. A policy
/// that cannot be read is said once and let be. Returns the memory read, if any.
pub async fn first_look<C>(
    connection: C,
    at: &str,
    rules: StartRules,
    deadline: Duration,
) -> Result<Option<MemorySample>, ConfigError>
where
    C: ConnectionLike + Send + Clone,
{
    if rules.primary_required {
        match role(connection.clone(), deadline).await {
            Ok(Some(Role::Replica(of))) => {
                return Err(ConfigError::Invalid {
                    field: "store.redis_shards",
                    message: format!(
                        "{at} is a read-only replica (ROLE: replica of {of}): every write would \
                         be refused and every play decided by the failure policy; name its \
                         primary, or list the servers under store.sentinel"
                    ),
                });
            }
            Ok(_) => {}
            Err(e) => {
                access::judge(&e, at, "store.auth")?;
            }
        }
    }
    let sample = match info_memory(connection, deadline).await {
        Ok(sample) => sample,
        Err(e) if e.code() == Some("NOPERM") => None,
        Err(e) => {
            access::judge(&e, at, "store.auth")?;
            return Ok(None); // out of reach: the failure policy covers it
        }
    };
    let Some(policy) = sample.as_ref().and_then(|s| s.policy.clone()) else {
        tracing::warn!(
            shard = at,
            "cannot read the store shard's maxmemory-policy (INFO memory; grant +info): eviction is not checked"
        );
        return Ok(sample);
    };
    if is_evicting(&policy) {
        if !rules.allow_eviction {
            return Err(ConfigError::Invalid {
                field: "store.allow_eviction",
                message: format!(
                    "{at} runs maxmemory-policy {policy}: when it is full Redis deletes leases \
                     and tombstones, and plays past the cap are admitted without a word; set \
                     maxmemory-policy noeviction on it (README, \"Sizing Redis\"), or accept \
                     over-admission under memory pressure with store.allow_eviction: true"
                ),
            });
        }
        tracing::warn!(
            shard = at,
            policy,
            "store shard evicts keys under memory pressure (accepted by store.allow_eviction): plays may be admitted past the cap when it is full"
        );
    } else if sample.as_ref().is_some_and(|s| s.max == 0) {
        tracing::info!(
            shard = at,
            "store shard has no maxmemory: it grows until its host runs out of memory (README, \"Sizing Redis\")"
        );
    }
    Ok(sample)
}

/// Keeps what [`first_look`] read in the shard's state.
pub fn record_first_look(state: &ShardState, sample: Option<MemorySample>) {
    if let Some(sample) = sample {
        state.evicting.store(sample.evicting(), Ordering::Relaxed);
        state.record(sample);
    }
}

#[derive(Debug, PartialEq, Eq)]
enum Role {
    Primary,
    /// Of `host:port`.
    Replica(String),
}

/// `ROLE`: primary, replica (of whom), or `None` for anything else (a Sentinel).
async fn role(
    mut connection: impl ConnectionLike + Send,
    deadline: Duration,
) -> redis::RedisResult<Option<Role>> {
    let command = redis::cmd("ROLE");
    let asked = command.query_async::<Vec<Value>>(&mut connection);
    let reply = tokio::time::timeout(deadline, asked)
        .await
        .map_err(|_| no_answer("ROLE"))??;
    let text = |v: Option<&Value>| match v {
        Some(Value::BulkString(b)) => String::from_utf8_lossy(b).into_owned(),
        Some(Value::SimpleString(s)) => s.clone(),
        Some(Value::Int(n)) => n.to_string(),
        _ => String::new(),
    };
    Ok(match text(reply.first()).as_str() {
        "master" => Some(Role::Primary),
        "slave" => Some(Role::Replica(format!(
            "{}:{}",
            text(reply.get(1)),
            text(reply.get(2))
        ))),
        _ => None,
    })
}

/// A deadline passed: a timeout, as `access::judge` reads it (an outage, not a config error).
fn no_answer(what: &str) -> redis::RedisError {
    std::io::Error::new(std::io::ErrorKind::TimedOut, format!("{what}: no answer")).into()
}

/// `INFO replication`, as far as a write needs it: a primary, and how many replicas are in sync
/// by its `min-replicas-max-lag` (`None` when `min-replicas-to-write` is off).
#[derive(Debug, PartialEq, Eq)]
struct Replication {
    primary: bool,
    good_replicas: Option<u64>,
}

impl Replication {
    fn parse(info: &str) -> Replication {
        let field = |name: &str| {
            info.lines()
                .find_map(|line| line.trim_end().strip_prefix(name)?.strip_prefix(':'))
        };
        Replication {
            primary: field("role") == Some("master"),
            good_replicas: field("min_slaves_good_slaves").and_then(|v| v.parse().ok()),
        }
    }

    /// Whether the shard takes writes again: a primary with a replica in sync (or no such rule).
    fn writable(&self) -> bool {
        self.primary && self.good_replicas != Some(0)
    }
}

async fn replication(
    mut connection: impl ConnectionLike + Send,
    deadline: Duration,
) -> redis::RedisResult<Replication> {
    let mut command = redis::cmd("INFO");
    command.arg("replication");
    let asked = command.query_async::<String>(&mut connection);
    let info = tokio::time::timeout(deadline, asked)
        .await
        .map_err(|_| no_answer("INFO"))??;
    Ok(Replication::parse(&info))
}

async fn info_memory(
    mut connection: impl ConnectionLike + Send,
    deadline: Duration,
) -> redis::RedisResult<Option<MemorySample>> {
    let mut command = redis::cmd("INFO");
    command.arg("memory");
    let asked = command.query_async::<String>(&mut connection);
    let info = tokio::time::timeout(deadline, asked)
        .await
        .map_err(|_| no_answer("INFO"))??;
    Ok(MemorySample::parse(&info))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn info_memory_gives_used_max_and_policy() {
        let info = "# Memory\r\nused_memory:1048576\r\nused_memory_human:1.00M\r\nmaxmemory:3145728\r\nmaxmemory_human:3.00M\r\nmaxmemory_policy:volatile-lru\r\n";
        let sample = MemorySample::parse(info).unwrap();
        assert_eq!(
            sample,
            MemorySample {
                used: 1_048_576,
                max: 3_145_728,
                policy: Some("volatile-lru".into())
            }
        );
        assert!(sample.evicting());
        assert_eq!(MemorySample::parse("# Memory\r\n"), None);
    }

    #[test]
    fn info_replication_says_whether_a_primary_takes_writes() {
        let primary =
            "# Replication\r\nrole:master\r\nconnected_slaves:1\r\nmin_slaves_good_slaves:1\r\n";
        assert!(Replication::parse(primary).writable());
        let alone =
            "# Replication\r\nrole:master\r\nconnected_slaves:0\r\nmin_slaves_good_slaves:0\r\n";
        assert!(!Replication::parse(alone).writable());
        let no_rule = "# Replication\r\nrole:master\r\nconnected_slaves:0\r\n";
        assert!(Replication::parse(no_rule).writable());
        let replica = "# Replication\r\nrole:slave\r\nmaster_host:10.0.0.1\r\n";
        assert!(!Replication::parse(replica).writable());
    }

    #[test]
    fn only_noeviction_refuses_instead_of_evicting() {
        for policy in [
            "allkeys-lru",
            "allkeys-lfu",
            "allkeys-random",
            "volatile-lru",
            "volatile-lfu",
            "volatile-random",
            "volatile-ttl",
        ] {
            assert!(is_evicting(policy), "{policy}");
        }
        assert!(!is_evicting("noeviction"));
    }
}
