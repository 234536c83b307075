//! The Redis store: accounts spread over shards by a consistent hash, each operation one
//! `EVALSHA` of one Lua script (loaded on first use, reloaded if the server lost it), every call
//! bounded by the store deadline and guarded by a per-shard circuit breaker.

mod breaker;
pub mod ring;

use std::sync::{Arc, Weak};
use std::time::Duration;

use redis::aio::{ConnectionManager, ConnectionManagerConfig};
use redis::{FromRedisValue, Script, ScriptInvocation, Value};

use self::breaker::Breaker;
use super::{LeaseStore, ShardHealth, StoreError};
use crate::ids::{NONCE_LEN, StreamRef};
use crate::model::{
    AccountView, AcquireCmd, AcquireOutcome, Device, DeviceType, ForceStopOutcome,
    HeartbeatOutcome, Lease, Plan, ReleaseOutcome, Timing,
};

macro_rules! lease_script {
    ($op:literal) => {
        concat!(
            include_str!("lua/common.lua"),
            include_str!(concat!("lua/", $op, ".lua"))
        )
    };
}

/// The five scripts, each the shared prelude plus one operation.
pub struct Scripts {
    pub acquire: Script,
    pub heartbeat: Script,
    pub release: Script,
    pub force_stop: Script,
    pub list: Script,
}

impl Scripts {
    pub fn new() -> Self {
        Scripts {
            acquire: Script::new(lease_script!("acquire")),
            heartbeat: Script::new(lease_script!("heartbeat")),
            release: Script::new(lease_script!("release")),
            force_stop: Script::new(lease_script!("force_stop")),
            list: Script::new(lease_script!("list")),
        }
    }

    /// The source of every script by operation name, for tools such as the benchmark.
    pub fn sources() -> [(&'static str, &'static str); 5] {
        [
            ("acquire", lease_script!("acquire")),
            ("heartbeat", lease_script!("heartbeat")),
            ("release", lease_script!("release")),
            ("force_stop", lease_script!("force_stop")),
            ("list", lease_script!("list")),
        ]
    }
}

impl Default for Scripts {
    fn default() -> Self {
        Self::new()
    }
}

/// The key holding an account's leases; the hash tag keeps it on one Redis Cluster slot.
pub fn account_key(account_id: &str) -> String {
    format!("sl:{{{account_id}}}")
}

struct Shard {
    endpoint: String,
    connection: ConnectionManager,
    breaker: Breaker,
}

pub struct RedisStore {
    shards: Vec<Arc<Shard>>,
    scripts: Scripts,
    default_plan: Plan,
    timing: Timing,
    deadline: Duration,
}

#[derive(Debug, Clone)]
pub struct RedisOptions {
    pub shard_urls: Vec<String>,
    pub deadline: Duration,
    pub failure_threshold: u32,
    pub probe_interval: Duration,
}

impl RedisStore {
    /// Prepares a connection per shard without waiting for any: the limiter starts, and applies
    /// its failure policy, even while a shard is down. Must run inside a Tokio runtime.
    pub fn new(
        options: &RedisOptions,
        default_plan: Plan,
        timing: Timing,
    ) -> Result<Arc<Self>, String> {
        let mut shards = Vec::with_capacity(options.shard_urls.len());
        for (index, url) in options.shard_urls.iter().enumerate() {
            let client = redis::Client::open(url.as_str())
                .map_err(|e| format!("store.redis_shards[{index}]: {e}"))?;
            let endpoint = client.get_connection_info().addr().to_string();
            let config = ConnectionManagerConfig::new()
                .set_connection_timeout(Some(options.deadline.max(Duration::from_millis(250))))
                .set_response_timeout(Some(options.deadline * 4))
                .set_number_of_retries(2)
                .set_max_delay(Duration::from_millis(200));
            let connection = ConnectionManager::new_lazy_with_config(client, config)
                .map_err(|e| format!("store.redis_shards[{index}]: {e}"))?;
            shards.push(Arc::new(Shard {
                endpoint,
                connection,
                breaker: Breaker::new(options.failure_threshold),
            }));
        }
        let store = Arc::new(RedisStore {
            shards,
            scripts: Scripts::new(),
            default_plan,
            timing,
            deadline: options.deadline,
        });
        for shard in &store.shards {
            spawn_probe(
                Arc::downgrade(shard),
                options.probe_interval,
                options.deadline,
            );
        }
        Ok(store)
    }

    /// Each shard's circuit: (shard, open).
    pub fn circuits(&self) -> Vec<(usize, bool)> {
        self.shards
            .iter()
            .enumerate()
            .map(|(i, s)| (i, s.breaker.is_open()))
            .collect()
    }

    fn shard(&self, account_id: &str) -> (usize, &Shard) {
        let index = ring::shard_for(account_id, self.shards.len());
        (index, &self.shards[index])
    }

    async fn run<T: FromRedisValue>(
        &self,
        account_id: &str,
        invocation: &ScriptInvocation<'_>,
    ) -> Result<T, StoreError> {
        let (index, shard) = self.shard(account_id);
        if shard.breaker.is_open() {
            return Err(StoreError::CircuitOpen { shard: index });
        }
        let mut connection = shard.connection.clone();
        let result =
            tokio::time::timeout(self.deadline, invocation.invoke_async(&mut connection)).await;
        let error = match result {
            Ok(Ok(value)) => {
                shard.breaker.record_success();
                return Ok(value);
            }
            Ok(Err(e)) => StoreError::Backend {
                shard: index,
                message: e.to_string(),
            },
            Err(_) => StoreError::Timeout { shard: index },
        };
        if shard.breaker.record_failure() {
            tracing::warn!(shard = index, endpoint = %shard.endpoint, %error, "store circuit opened");
        }
        Err(error)
    }

    fn timing_args<'a, 's>(
        &self,
        invocation: &'a mut ScriptInvocation<'s>,
    ) -> &'a mut ScriptInvocation<'s> {
        invocation
            .arg(self.timing.ttl_ms)
            .arg(self.timing.revocation_ms)
    }
}

/// Pings an open shard every `interval` and closes its circuit once it answers.
fn spawn_probe(shard: Weak<Shard>, interval: Duration, deadline: Duration) {
    tokio::spawn(async move {
        loop {
            tokio::time::sleep(interval).await;
            let Some(shard) = shard.upgrade() else { return };
            if !shard.breaker.is_open() {
                continue;
            }
            if ping(&shard, deadline.max(Duration::from_millis(100))).await {
                shard.breaker.close();
                tracing::info!(endpoint = %shard.endpoint, "store circuit closed: shard answers again");
            }
        }
    });
}

async fn ping(shard: &Shard, deadline: Duration) -> bool {
    let mut connection = shard.connection.clone();
    let command = redis::cmd("PING");
    let ping = command.query_async::<String>(&mut connection);
    matches!(tokio::time::timeout(deadline, ping).await, Ok(Ok(_)))
}

fn malformed(what: &str) -> StoreError {
    StoreError::Backend {
        shard: usize::MAX,
        message: format!("malformed script reply: {what}"),
    }
}

fn int(value: &Value) -> Result<u64, StoreError> {
    match value {
        Value::Int(n) if *n >= 0 => Ok(*n as u64),
        _ => Err(malformed("expected a non-negative integer")),
    }
}

fn bytes(value: &Value) -> Result<&[u8], StoreError> {
    match value {
        Value::BulkString(b) => Ok(b),
        Value::SimpleString(s) => Ok(s.as_bytes()),
        _ => Err(malformed("expected a string")),
    }
}

fn text(value: &Value) -> Result<String, StoreError> {
    String::from_utf8(bytes(value)?.to_vec()).map_err(|_| malformed("expected UTF-8"))
}

/// Decodes the flat lease fields `push_active` in common.lua emits, eight per lease.
fn leases(fields: &[Value]) -> Result<Vec<Lease>, StoreError> {
    if !fields.len().is_multiple_of(8) {
        return Err(malformed("lease fields are not a multiple of 8"));
    }
    fields
        .chunks_exact(8)
        .map(|f| {
            let nonce: [u8; NONCE_LEN] = bytes(&f[5])?
                .try_into()
                .map_err(|_| malformed("nonce length"))?;
            Ok(Lease {
                device: Device {
                    id: text(&f[0])?,
                    kind: DeviceType::from_code(int(&f[1])? as u8),
                    meta: text(&f[2])?,
                    profile_id: text(&f[3])?,
                    title_id: text(&f[4])?,
                },
                nonce,
                started_at: int(&f[6])?,
                expires_at: int(&f[7])?,
            })
        })
        .collect()
}

impl LeaseStore for RedisStore {
    async fn acquire(&self, cmd: &AcquireCmd) -> Result<AcquireOutcome, StoreError> {
        let mut invocation = self.scripts.acquire.key(account_key(&cmd.account_id));
        self.timing_args(&mut invocation);
        match &cmd.plan {
            Some(plan) => invocation.arg(&plan.name).arg(plan.limit),
            None => invocation.arg("").arg(0),
        };
        invocation
            .arg(&self.default_plan.name)
            .arg(self.default_plan.limit)
            .arg(&cmd.device.id)
            .arg(&cmd.nonce[..])
            .arg(cmd.device.kind.code())
            .arg(&cmd.device.meta)
            .arg(&cmd.device.profile_id)
            .arg(&cmd.device.title_id);
        match &cmd.replace {
            Some(target) => invocation.arg(&target.device_id).arg(&target.nonce[..]),
            None => invocation.arg("").arg(""),
        };
        let reply: Vec<Value> = self.run(&cmd.account_id, &invocation).await?;
        match reply.as_slice() {
            [granted, limit, count, expires] if int(granted)? == 1 => Ok(AcquireOutcome::Granted {
                limit: int(limit)? as u32,
                active_count: int(count)? as u32,
                expires_at: int(expires)?,
            }),
            [denied, limit, active @ ..] if int(denied)? == 0 => Ok(AcquireOutcome::Denied {
                limit: int(limit)? as u32,
                active: leases(active)?,
            }),
            _ => Err(malformed("acquire")),
        }
    }

    async fn heartbeat(
        &self,
        account_id: &str,
        stream: &StreamRef,
    ) -> Result<HeartbeatOutcome, StoreError> {
        let mut invocation = self.scripts.heartbeat.key(account_key(account_id));
        self.timing_args(&mut invocation)
            .arg(&self.default_plan.name)
            .arg(self.default_plan.limit)
            .arg(&stream.device_id)
            .arg(&stream.nonce[..]);
        let reply: Vec<Value> = self.run(account_id, &invocation).await?;
        match reply.as_slice() {
            [code, expires] if int(code)? == 1 => Ok(HeartbeatOutcome::Renewed {
                expires_at: int(expires)?,
            }),
            [code, expires] if int(code)? == 2 => Ok(HeartbeatOutcome::Reregistered {
                expires_at: int(expires)?,
            }),
            [code] if int(code)? == 3 => Ok(HeartbeatOutcome::Expired),
            [code] if int(code)? == 4 => Ok(HeartbeatOutcome::Revoked),
            _ => Err(malformed("heartbeat")),
        }
    }

    async fn release(
        &self,
        account_id: &str,
        stream: &StreamRef,
    ) -> Result<ReleaseOutcome, StoreError> {
        let mut invocation = self.scripts.release.key(account_key(account_id));
        self.timing_args(&mut invocation)
            .arg(&stream.device_id)
            .arg(&stream.nonce[..]);
        let code: u64 = self.run(account_id, &invocation).await?;
        Ok(if code == 1 {
            ReleaseOutcome::Released
        } else {
            ReleaseOutcome::NotHeld
        })
    }

    async fn force_stop(
        &self,
        account_id: &str,
        stream: &StreamRef,
    ) -> Result<ForceStopOutcome, StoreError> {
        let mut invocation = self.scripts.force_stop.key(account_key(account_id));
        self.timing_args(&mut invocation)
            .arg(&stream.device_id)
            .arg(&stream.nonce[..]);
        let code: u64 = self.run(account_id, &invocation).await?;
        Ok(match code {
            1 => ForceStopOutcome::Stopped,
            2 => ForceStopOutcome::AlreadyStopped,
            _ => ForceStopOutcome::Unknown,
        })
    }

    async fn list(&self, account_id: &str) -> Result<AccountView, StoreError> {
        let mut invocation = self.scripts.list.key(account_key(account_id));
        invocation
            .arg(self.timing.ttl_ms)
            .arg(&self.default_plan.name)
            .arg(self.default_plan.limit);
        let reply: Vec<Value> = self.run(account_id, &invocation).await?;
        match reply.as_slice() {
            [plan, limit, active @ ..] => Ok(AccountView {
                plan: text(plan)?,
                limit: int(limit)? as u32,
                active: leases(active)?,
            }),
            _ => Err(malformed("list")),
        }
    }

    async fn health(&self) -> Vec<ShardHealth> {
        let checks = self
            .shards
            .iter()
            .enumerate()
            .map(|(index, shard)| async move {
                ShardHealth {
                    shard: index,
                    endpoint: shard.endpoint.clone(),
                    reachable: ping(shard, self.deadline.max(Duration::from_millis(100))).await,
                    circuit: shard.breaker.state(),
                }
            });
        futures::future::join_all(checks).await
    }
}
