//! The Redis store: accounts spread over shards by a consistent hash, each operation one
//! `EVALSHA` of one Lua script (loaded on first use, reloaded if the server lost it), every call
//! bounded by the store deadline and guarded by a per-shard circuit breaker. The commands of all
//! lanes for one shard share round trips (`batch.rs`).

pub mod access;
mod batch;
mod breaker;
mod call;
mod record;
pub mod ring;
mod shard;

use std::sync::{Arc, Weak};
use std::time::Duration;

use redis::aio::ConnectionLike;
use redis::{Cmd, FromRedisValue, Value};

use self::batch::Job;
use self::call::{Call, LuaScript};
use self::shard::Shard;
use super::{LeaseStore, ShardHealth, StoreError};
use crate::ids::{Nonce, PlanTag, StreamRef};
use crate::model::{
    AUDIT_PER_ACCOUNT, AUDIT_RECENT, AccountView, AcquireCmd, AcquireOutcome, AuditEntry,
    AuditKind, DenyRule, DeviceType, ForceStopCmd, ForceStopOutcome, HeartbeatOutcome, Lease,
    LimitOverride, OverrideCmd, Plan, ReleaseOutcome, SessionEventCmd, Timing,
};
use crate::plans::PlanBook;

/// A script is the shared helpers (`fast.lua`), the prelude and one operation; acquire and
/// release put a fast path between the helpers and the prelude, which returns before the prelude
/// runs when it can decide alone.
macro_rules! lease_script {
    ($op:literal) => {
        concat!(
            include_str!("lua/fast.lua"),
            include_str!("lua/common.lua"),
            include_str!(concat!("lua/", $op, ".lua"))
        )
    };
    (fast $op:literal) => {
        concat!(
            include_str!("lua/fast.lua"),
            include_str!(concat!("lua/", $op, "_fast.lua")),
            include_str!("lua/common.lua"),
            include_str!(concat!("lua/", $op, ".lua"))
        )
    };
}

/// `touch`: the account key's life renewed for a natively renewed lease (the helpers and its
/// four calls; no prelude).
const TOUCH_SCRIPT: &str = concat!(include_str!("lua/fast.lua"), include_str!("lua/touch.lua"));

/// The scripts, one per operation, and `touch`.
pub struct Scripts {
    pub acquire: LuaScript,
    pub touch: LuaScript,
    pub heartbeat: LuaScript,
    pub release: LuaScript,
    pub force_stop: LuaScript,
    pub list: LuaScript,
    pub set_override: LuaScript,
    pub session_event: LuaScript,
}

impl Scripts {
    pub fn new() -> Self {
        let [
            acquire,
            touch,
            heartbeat,
            release,
            force_stop,
            list,
            set_override,
            session_event,
        ] = Self::sources().map(|(_, source)| LuaScript::new(source));
        Scripts {
            acquire,
            touch,
            heartbeat,
            release,
            force_stop,
            list,
            set_override,
            session_event,
        }
    }

    /// The source of every script by operation name (in the order of the fields), for loading
    /// after a `NOSCRIPT` and for tools such as the benchmark.
    pub fn sources() -> [(&'static str, &'static str); 8] {
        [
            ("acquire", lease_script!(fast "acquire")),
            ("touch", TOUCH_SCRIPT),
            ("heartbeat", lease_script!("heartbeat")),
            ("release", lease_script!(fast "release")),
            ("force_stop", lease_script!("force_stop")),
            ("list", lease_script!("list")),
            ("set_override", lease_script!("set_override")),
            ("session_event", include_str!("lua/session_event.lua")),
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

/// The key whose life is one live lease's life (`lease_key` in `fast.lua`): the account key and
/// the first 8 bytes of the stream's nonce, in the account's slot. A heartbeat extends it with
/// one native `GETEX ... PX`; its value is the time until which the account key surely lives.
pub fn lease_key(account_id: &str, nonce: &Nonce) -> Vec<u8> {
    let mut key = account_key(account_id).into_bytes();
    key.extend_from_slice(&nonce[..8]);
    key
}

/// The account's own audit list, in the same slot as its leases.
pub fn account_audit_key(account_id: &str) -> String {
    format!("sl:audit:{{{account_id}}}")
}

/// Each shard's list of its newest support actions; the fleet view merges them.
pub const SHARD_AUDIT_KEY: &str = "sl:audit";

/// A dashboard user's session generation (`session_event.lua`), in the user's own slot.
pub fn session_key(user: &str) -> String {
    format!("sl:session:{{{user}}}")
}

/// How long a session generation outlives its user's last sign-in event: longer than any
/// dashboard session may last (`MAX_DASHBOARD_SESSION_SEC`, and a day more).
const SESSION_GENERATION_LIFE: Duration =
    Duration::from_secs(crate::model::MAX_DASHBOARD_SESSION_SEC + 24 * 3600);

/// How long an account's audit list outlives its last entry.
const AUDIT_RETENTION: Duration = Duration::from_secs(30 * 24 * 3600);

pub struct RedisStore {
    shards: Vec<Arc<Shard>>,
    /// The store itself, for the task that sends a batch (it must outlive any one request).
    me: Weak<RedisStore>,
    scripts: Scripts,
    default_plan: Plan,
    /// The device caps of every configured plan that has some, for plays that name no plan.
    caps_book: Vec<u8>,
    timing: Timing,
    deadline: Duration,
    batch_window: Duration,
}

#[derive(Debug, Clone)]
pub struct RedisOptions {
    pub shards: ShardSpec,
    pub deadline: Duration,
    /// How long a batch waits for company before it goes (0: at once).
    pub batch_window: Duration,
    pub failure_threshold: u32,
    pub probe_interval: Duration,
    /// TLS material and credentials, read at start.
    pub access: access::Access,
}

/// Where the shards are: fixed URLs, or master names that Sentinel resolves.
#[derive(Debug, Clone)]
pub enum ShardSpec {
    Urls(Vec<String>),
    Sentinel {
        addresses: Vec<String>,
        masters: Vec<String>,
        poll_interval: Duration,
    },
}

impl RedisStore {
    /// Prepares a connection per shard without waiting for any: the limiter starts, and applies
    /// its failure policy, even while a shard is down. Must run inside a Tokio runtime.
    pub fn new(
        options: &RedisOptions,
        plans: &PlanBook,
        timing: Timing,
    ) -> Result<Arc<Self>, String> {
        let (deadline, threshold) = (options.deadline, options.failure_threshold);
        let access = Arc::new(options.access.clone());
        let (shards, sentinel_poll) = match &options.shards {
            ShardSpec::Urls(urls) => (
                urls.iter()
                    .enumerate()
                    .map(|(i, url)| {
                        Shard::fixed(i, url, &access, deadline, threshold).map(Arc::new)
                    })
                    .collect::<Result<Vec<_>, _>>()?,
                options.probe_interval,
            ),
            ShardSpec::Sentinel {
                addresses,
                masters,
                poll_interval,
            } => (
                masters
                    .iter()
                    .enumerate()
                    .map(|(i, master)| {
                        Shard::sentinel(i, addresses, master, &access, deadline, threshold)
                            .map(Arc::new)
                    })
                    .collect::<Result<Vec<_>, _>>()?,
                *poll_interval,
            ),
        };
        let store = Arc::new_cyclic(|me| RedisStore {
            me: me.clone(),
            shards,
            scripts: Scripts::new(),
            default_plan: plans.default.clone(),
            caps_book: caps_book(plans),
            timing,
            deadline,
            batch_window: options.batch_window,
        });
        for shard in &store.shards {
            shard::spawn_maintenance(
                Arc::downgrade(shard),
                options.probe_interval,
                sentinel_poll,
                deadline,
            );
        }
        Ok(store)
    }

    /// Contacts every shard once: a wrong password, a missing ACL permission or a TLS setup that
    /// cannot work is a config error; a shard out of reach is logged (once) and left to the
    /// failure policy, since the limiter must start while its store is down.
    pub async fn check_access(&self) -> Result<(), crate::config::ConfigError> {
        let deadline = access::contact_deadline(self.deadline);
        let contacts = self
            .shards
            .iter()
            .map(|shard| shard.first_contact(deadline));
        for (shard, contact) in self
            .shards
            .iter()
            .zip(futures::future::join_all(contacts).await)
        {
            if let access::Contact::Down(reason) = contact? {
                tracing::warn!(shard = shard.index, endpoint = %shard.endpoint(), reason, "store shard out of reach at start; serving under the failure policy");
            }
        }
        Ok(())
    }

    /// Per shard, batches sent so far and the commands they carried: (shard, batches, commands).
    pub fn batch_totals(&self) -> Vec<(usize, u64, u64)> {
        self.shards
            .iter()
            .enumerate()
            .map(|(index, shard)| {
                let (batches, commands) = shard.queue.totals();
                (index, batches, commands)
            })
            .collect()
    }

    /// The index of the shard that owns `account_id`.
    pub fn shard_of(&self, account_id: &str) -> usize {
        ring::shard_for(account_id, self.shards.len())
    }

    /// Each shard's circuit: (shard, open).
    pub fn circuits(&self) -> Vec<(usize, bool)> {
        self.shards
            .iter()
            .enumerate()
            .map(|(i, s)| (i, s.breaker.is_open()))
            .collect()
    }

    /// Runs one script call on the account's shard, in the shard's next batch.
    async fn run<T: FromRedisValue>(&self, account_id: &str, call: Call) -> Result<T, StoreError> {
        let index = ring::shard_for(account_id, self.shards.len());
        let reply = self.send(index, call.into_command()).await?;
        redis::from_redis_value(reply).map_err(|e| malformed(&e.to_string()))
    }

    /// Sends one command to shard `index` in its next batch; its reply within the store deadline.
    async fn send(&self, index: usize, command: Cmd) -> Result<Value, StoreError> {
        let shard = &self.shards[index];
        if shard.breaker.is_open() {
            return Err(StoreError::CircuitOpen { shard: index });
        }
        let (answer, reply) = tokio::sync::oneshot::channel();
        if shard.queue.push(Job { command, answer }) {
            // A task of its own, so that a request that goes away cannot strand the batch.
            let store = self.me.upgrade().expect("the store outlives its requests");
            tokio::spawn(store.send_batches(index));
        }
        match tokio::time::timeout(self.deadline, reply).await {
            Ok(Ok(answer)) => answer,
            Ok(Err(_)) => Err(StoreError::Backend {
                shard: index,
                message: "the batch was dropped".into(),
            }),
            Err(_) => Err(StoreError::Timeout { shard: index }),
        }
    }

    /// Sends shard `index`'s waiting commands, batch after batch, until none wait.
    async fn send_batches(self: Arc<Self>, index: usize) {
        let queue = &self.shards[index].queue;
        loop {
            // Every batch waits for company, not only one that finds the shard idle: fewer,
            // deeper round trips are what save the shard's CPU (a command waits at most about
            // two windows and a round trip).
            if !self.batch_window.is_zero() {
                tokio::time::sleep(self.batch_window).await;
            }
            let (commands, answers): (Vec<Cmd>, Vec<_>) = queue
                .take_batch()
                .into_iter()
                .map(|job| (job.command, job.answer))
                .unzip();
            // A command whose request went away no longer listens; that is fine.
            match self.run_batch(index, commands).await {
                Ok(replies) => {
                    for (answer, reply) in answers.into_iter().zip(replies) {
                        let _ = answer.send(match reply {
                            Value::ServerError(error) => Err(StoreError::Backend {
                                shard: index,
                                message: error.to_string(),
                            }),
                            value => Ok(value),
                        });
                    }
                }
                Err(error) => {
                    for answer in answers {
                        let _ = answer.send(Err(error.clone()));
                    }
                }
            }
            if !queue.finish_batch() {
                return;
            }
        }
    }

    /// One pipeline of `commands` on shard `index`: a reply per command, in order. Scripts the
    /// server lost (a restart, a failover, `SCRIPT FLUSH`) are loaded again and the commands it
    /// refused with `NOSCRIPT` sent once more.
    async fn run_batch(&self, index: usize, commands: Vec<Cmd>) -> Result<Vec<Value>, StoreError> {
        let mut pipe = redis::pipe();
        for command in commands {
            pipe.add_command(command);
        }
        let mut replies = self.pipeline(index, &pipe).await?;
        let lost: Vec<usize> = (0..replies.len())
            .filter(|&i| matches!(&replies[i], Value::ServerError(e) if e.code() == "NOSCRIPT"))
            .collect();
        if lost.is_empty() {
            return Ok(replies);
        }
        let mut loads = redis::pipe();
        for (_, source) in Scripts::sources() {
            loads.cmd("SCRIPT").arg("LOAD").arg(source);
        }
        self.pipeline(index, &loads).await?;
        let mut again = redis::pipe();
        for (i, command) in pipe.cmd_iter().enumerate() {
            if lost.contains(&i) {
                again.add_command(command.clone());
            }
        }
        let again = self.pipeline(index, &again).await?;
        for (i, reply) in lost.into_iter().zip(again) {
            replies[i] = reply;
        }
        Ok(replies)
    }

    /// `pipe` as one write and one read under the shard's breaker and deadline: a reply per
    /// command, in order.
    async fn pipeline(
        &self,
        index: usize,
        pipe: &redis::Pipeline,
    ) -> Result<Vec<Value>, StoreError> {
        let count = pipe.len();
        let replies = self
            .guarded(index, |mut connection| async move {
                connection.req_packed_commands(pipe, 0, count).await
            })
            .await?;
        match replies.len() == count {
            true => Ok(replies),
            false => Err(malformed("a pipeline answered the wrong number of replies")),
        }
    }

    /// Runs one call on shard `index`'s master under its circuit breaker and the store deadline.
    async fn guarded<T, F, Fut>(&self, index: usize, call: F) -> Result<T, StoreError>
    where
        F: FnOnce(redis::aio::ConnectionManager) -> Fut,
        Fut: Future<Output = redis::RedisResult<T>>,
    {
        let shard = &self.shards[index];
        if shard.breaker.is_open() {
            return Err(StoreError::CircuitOpen { shard: index });
        }
        let error = match shard.connection() {
            None => StoreError::Backend {
                shard: index,
                message: "no master known yet; asking Sentinel".into(),
            },
            Some(connection) => match tokio::time::timeout(self.deadline, call(connection)).await {
                Ok(Ok(value)) => {
                    shard.breaker.record_success();
                    return Ok(value);
                }
                Ok(Err(e)) => StoreError::Backend {
                    shard: index,
                    message: e.to_string(),
                },
                Err(_) => StoreError::Timeout { shard: index },
            },
        };
        if shard.breaker.record_failure() {
            tracing::warn!(shard = index, endpoint = %shard.endpoint(), %error, "store circuit opened");
        }
        Err(error)
    }

    /// The newest `limit` entries (of `kind`, if given) of one audit list on shard `index`.
    async fn audit_list(
        &self,
        index: usize,
        key: &str,
        kind: Option<AuditKind>,
        limit: usize,
    ) -> Result<Vec<AuditEntry>, StoreError> {
        // Filtered by kind, the whole list is read: it is capped (AUDIT_RECENT at most).
        let last = match kind {
            Some(_) => -1,
            None => limit.saturating_sub(1) as i64,
        };
        let mut command = redis::cmd("LRANGE");
        command.arg(key).arg(0).arg(last);
        let command = &command;
        let raw: Vec<String> = self
            .guarded(index, |mut connection| async move {
                command.query_async(&mut connection).await
            })
            .await?;
        Ok(raw
            .iter()
            .filter_map(|json| serde_json::from_str::<AuditEntry>(json).ok())
            .filter(|e| kind.is_none_or(|k| e.kind == k))
            .take(limit)
            .collect())
    }

    /// The audit arguments every logging script ends with: caps and retention.
    fn audit_args(invocation: &mut Call) -> &mut Call {
        invocation
            .arg(AUDIT_PER_ACCOUNT)
            .arg(AUDIT_RECENT)
            .arg(AUDIT_RETENTION.as_millis() as u64)
    }

    /// The common heartbeat, one native command in the shard's next batch: `GETEX` of the lease
    /// key with a new life of one TTL. Its value says until when the account key surely lives:
    /// at least two TTLs ahead of this host's clock (a TTL to spare for clock skew), the lease is
    /// renewed and that is all; nearer, the small `touch` script renews the account key's life
    /// too (about one heartbeat in twelve with its six-TTL life). False, when the lease key or
    /// the account key is gone, sends the stream through the full heartbeat script.
    async fn renew(&self, account_id: &str, stream: &StreamRef) -> Result<bool, StoreError> {
        let index = ring::shard_for(account_id, self.shards.len());
        let lease = lease_key(account_id, &stream.nonce);
        let mut command = redis::cmd("GETEX");
        command.arg(&lease).arg("PX").arg(self.timing.ttl_ms);
        let account_until = match self.send(index, command).await? {
            Value::BulkString(bytes) => std::str::from_utf8(&bytes)
                .ok()
                .and_then(|text| text.parse::<u64>().ok()),
            _ => return Ok(false),
        };
        if account_until.is_some_and(|until| until >= now_ms() + 2 * self.timing.ttl_ms) {
            return Ok(true);
        }
        let mut call = self
            .scripts
            .touch
            .call(&[account_key(account_id).into_bytes(), lease]);
        call.arg(self.timing.revocation_ms);
        let touched: u64 = self.run(account_id, call).await?;
        Ok(touched == 1)
    }

    fn timing_args<'a>(&self, invocation: &'a mut Call) -> &'a mut Call {
        invocation
            .arg(self.timing.ttl_ms)
            .arg(self.timing.revocation_ms)
    }
}

/// This host's wall clock in ms since the epoch (0 if it is before the epoch).
fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
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

/// The caps book the acquire script reads when a play names no plan: per plan with device
/// caps, its name's length, its name, its six caps (`caps_of` in `fast.lua`).
fn caps_book(plans: &PlanBook) -> Vec<u8> {
    let mut book = Vec::new();
    for plan in plans.plans().filter(|p| p.device_caps.0 != [0; 6]) {
        let name = plan.name.as_bytes();
        book.push(u8::try_from(name.len()).expect("plan names are at most 64 bytes"));
        book.extend_from_slice(name);
        book.extend_from_slice(&plan.device_caps.0);
    }
    book
}

/// Decodes the raw live records a script returns.
fn leases(records: &[Value]) -> Result<Vec<Lease>, StoreError> {
    records
        .iter()
        .map(|r| record::decode_lease(bytes(r)?).ok_or_else(|| malformed("lease record")))
        .collect()
}

impl LeaseStore for RedisStore {
    async fn acquire(&self, cmd: &AcquireCmd) -> Result<AcquireOutcome, StoreError> {
        let mut invocation = self.scripts.acquire.call(&[account_key(&cmd.account_id)]);
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
            .arg(record::encode_details(&cmd.device));
        match &cmd.replace {
            Some(target) => invocation.arg(&target.device_id).arg(&target.nonce[..]),
            None => invocation.arg("").arg(""),
        };
        // The named plan's caps; with no plan named, the account's remembered plan (or the
        // default, for a new account) is found in the caps book inside the script.
        match &cmd.plan {
            Some(plan) => invocation.arg(&plan.device_caps.0[..]).arg(""),
            None => invocation.arg("").arg(&self.caps_book[..]),
        };
        let reply: Vec<Value> = self.run(&cmd.account_id, invocation).await?;
        match reply.as_slice() {
            [granted, limit, count, expires, plan, plan_limit] if int(granted)? == 1 => {
                Ok(AcquireOutcome::Granted {
                    plan: PlanTag {
                        name: text(plan)?,
                        limit: int(plan_limit)? as u32,
                    },
                    limit: int(limit)? as u32,
                    active_count: int(count)? as u32,
                    expires_at: int(expires)?,
                })
            }
            [denied, limit, rule, cap, plan, plan_limit, active @ ..] if int(denied)? == 0 => {
                let rule = match int(rule)? {
                    0 => DenyRule::MaxStreams,
                    kind => DenyRule::DeviceTypeCap {
                        kind: DeviceType::from_code(kind as u8 - 1),
                        cap: int(cap)? as u32,
                    },
                };
                Ok(AcquireOutcome::Denied {
                    plan: PlanTag {
                        name: text(plan)?,
                        limit: int(plan_limit)? as u32,
                    },
                    limit: int(limit)? as u32,
                    rule,
                    active: leases(active)?,
                })
            }
            _ => Err(malformed("acquire")),
        }
    }

    async fn heartbeat(
        &self,
        account_id: &str,
        stream: &StreamRef,
    ) -> Result<HeartbeatOutcome, StoreError> {
        // The common case, a native renewal; the full script answers everything else.
        if self.renew(account_id, stream).await? {
            let expires_at = 0; // not read: the store's clock is not asked for a native renewal
            return Ok(HeartbeatOutcome::Renewed { expires_at });
        }
        let mut invocation = self.scripts.heartbeat.call(&[account_key(account_id)]);
        let plan = if stream.plan.limit > 0 {
            &stream.plan
        } else {
            &self.default_plan.tag()
        };
        self.timing_args(&mut invocation)
            .arg(&plan.name)
            .arg(plan.limit)
            .arg(&stream.device_id)
            .arg(&stream.nonce[..]);
        let reply: Vec<Value> = self.run(account_id, invocation).await?;
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
        let mut invocation = self.scripts.release.call(&[account_key(account_id)]);
        self.timing_args(&mut invocation)
            .arg(&stream.device_id)
            .arg(&stream.nonce[..]);
        let code: u64 = self.run(account_id, invocation).await?;
        Ok(if code == 1 {
            ReleaseOutcome::Released
        } else {
            ReleaseOutcome::NotHeld
        })
    }

    async fn force_stop(&self, cmd: &ForceStopCmd) -> Result<ForceStopOutcome, StoreError> {
        let mut invocation = self.scripts.force_stop.call(&[
            account_key(&cmd.account_id),
            account_audit_key(&cmd.account_id),
            SHARD_AUDIT_KEY.to_owned(),
        ]);
        self.timing_args(&mut invocation)
            .arg(&cmd.stream.device_id)
            .arg(&cmd.stream.nonce[..])
            .arg(&cmd.account_id)
            .arg(&cmd.stream_id)
            .arg(&cmd.actor)
            .arg(&cmd.reason);
        Self::audit_args(&mut invocation);
        let code: u64 = self.run(&cmd.account_id, invocation).await?;
        Ok(match code {
            1 => ForceStopOutcome::Stopped,
            2 => ForceStopOutcome::AlreadyStopped,
            _ => ForceStopOutcome::Unknown,
        })
    }

    async fn audit(
        &self,
        account_id: Option<&str>,
        kind: Option<AuditKind>,
        limit: usize,
    ) -> Result<Vec<AuditEntry>, StoreError> {
        if let Some(account_id) = account_id {
            let index = ring::shard_for(account_id, self.shards.len());
            return self
                .audit_list(index, &account_audit_key(account_id), kind, limit)
                .await;
        }
        let per_shard =
            (0..self.shards.len()).map(|i| self.audit_list(i, SHARD_AUDIT_KEY, kind, limit));
        let mut merged = Vec::new();
        for entries in futures::future::join_all(per_shard).await {
            merged.extend(entries?);
        }
        merged.sort_by_key(|e| std::cmp::Reverse(e.at));
        merged.truncate(limit);
        Ok(merged)
    }

    async fn list(&self, account_id: &str) -> Result<AccountView, StoreError> {
        let mut invocation = self.scripts.list.call(&[account_key(account_id)]);
        invocation
            .arg(self.timing.ttl_ms)
            .arg(&self.default_plan.name)
            .arg(self.default_plan.limit);
        let reply: Vec<Value> = self.run(account_id, invocation).await?;
        match reply.as_slice() {
            [
                plan,
                limit,
                override_limit,
                override_ends,
                plan_limit,
                active @ ..,
            ] => Ok(AccountView {
                plan: PlanTag {
                    name: text(plan)?,
                    limit: int(plan_limit)? as u32,
                },
                limit: int(limit)? as u32,
                limit_override: match int(override_limit)? {
                    0 => None,
                    limit => Some(LimitOverride {
                        limit: limit as u32,
                        until: int(override_ends)?,
                    }),
                },
                active: leases(active)?,
            }),
            _ => Err(malformed("list")),
        }
    }

    async fn set_override(&self, cmd: &OverrideCmd) -> Result<Option<LimitOverride>, StoreError> {
        let mut invocation = self.scripts.set_override.call(&[
            account_key(&cmd.account_id),
            account_audit_key(&cmd.account_id),
            SHARD_AUDIT_KEY.to_owned(),
        ]);
        let (limit, duration_ms) = cmd.grant.map_or((0, 0), |g| (g.limit, g.duration_ms));
        self.timing_args(&mut invocation)
            .arg(&self.default_plan.name)
            .arg(self.default_plan.limit)
            .arg(limit)
            .arg(duration_ms)
            .arg(&cmd.account_id)
            .arg(&cmd.actor)
            .arg(&cmd.reason);
        Self::audit_args(&mut invocation);
        let reply: Vec<u64> = self.run(&cmd.account_id, invocation).await?;
        match reply.as_slice() {
            [0, _] => Ok(None),
            &[limit, until] => Ok(Some(LimitOverride {
                limit: limit as u32,
                until,
            })),
            _ => Err(malformed("set_override")),
        }
    }

    async fn session_generation(&self, user: &str) -> Result<u64, StoreError> {
        let index = ring::shard_for(user, self.shards.len());
        let mut command = redis::cmd("GET");
        command.arg(session_key(user));
        match self.send(index, command).await? {
            Value::Nil => Ok(0),
            value => text(&value)?
                .parse()
                .map_err(|_| malformed("session generation")),
        }
    }

    async fn session_event(&self, cmd: &SessionEventCmd) -> Result<u64, StoreError> {
        let mut invocation = self
            .scripts
            .session_event
            .call(&[session_key(&cmd.user), SHARD_AUDIT_KEY.to_owned()]);
        invocation
            .arg(u8::from(cmd.kind == AuditKind::SignOut))
            .arg(cmd.kind.as_str())
            .arg(&cmd.user)
            .arg(&cmd.address)
            .arg(&cmd.reason)
            .arg(AUDIT_RECENT)
            .arg(SESSION_GENERATION_LIFE.as_millis() as u64);
        self.run(&cmd.user, invocation).await
    }

    async fn health(&self) -> Vec<ShardHealth> {
        let checks = self
            .shards
            .iter()
            .enumerate()
            .map(|(index, shard)| async move {
                let keys =
                    shard::key_count(shard, self.deadline.max(Duration::from_millis(100))).await;
                ShardHealth {
                    shard: index,
                    endpoint: shard.endpoint(),
                    reachable: keys.is_some(),
                    circuit: shard.breaker.state(),
                    keys,
                }
            });
        futures::future::join_all(checks).await
    }
}
