//! The Redis store: accounts spread over shards, each operation one `EVALSHA` of one Lua script
//! (loaded on first use, reloaded if the server lost it), or on a shard that has the screenlimit
//! module loaded one native command (`native.rs`; which path a shard takes: `path.rs`), every
//! call bounded by the store deadline and guarded by a per-shard circuit breaker. The commands
//! of all lanes for one shard share round trips (`batch.rs`). The shards are a list of Redis servers (by URL or Sentinel master,
//! an account's by a consistent hash, `ring.rs`) or the primaries of a Redis Cluster (an account's
//! by its slot, `cluster.rs`).

pub mod access;
mod batch;
mod breaker;
mod call;
mod cert_version;
pub mod cluster;
pub mod health;
mod native;
mod pace;
mod path;
mod record;
pub mod ring;
mod shard;
mod unusable;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Weak};
use std::time::Duration;

use redis::aio::ConnectionLike;
use redis::{Cmd, FromRedisValue, Value};
use tokio::time::Instant;

pub use self::batch::{Admission, Priority, ShedReason};
use self::batch::{Job, Pushed, Targets};
use self::call::{Call, LuaScript};
use self::cluster::{Redirect, Topology};
use self::native::Op;
use self::shard::Shard;
use super::{LeaseStore, ShardHealth, ShardStateView, StoreError};
use crate::ids::{Nonce, PlanTag, StreamRef};
use crate::model::{
    AUDIT_PER_ACCOUNT, AUDIT_RECENT, AccountView, AcquireCmd, AcquireOutcome, AuditEntry,
    AuditKind, DenyRule, DeviceType, ForceStopCmd, ForceStopOutcome, HeartbeatOutcome, Lease,
    LimitOverride, OverrideCmd, ReleaseOutcome, SessionEventCmd, Timing,
};
use crate::plans::PlanBook;
use crate::rules::{LiveRules, Rules};

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
macro_rules! touch_script {
    () => {
        concat!(include_str!("lua/fast.lua"), include_str!("lua/touch.lua"))
    };
}

/// What every script starts with on a Redis Cluster: it stops before any write while its slot
/// migrates (see the file).
const CLUSTER_GUARD: &str = include_str!("lua/cluster_guard.lua");

/// The scripts, one per operation, `touch`, and the fleet audit list's push.
pub struct Scripts {
    pub acquire: LuaScript,
    pub touch: LuaScript,
    pub heartbeat: LuaScript,
    pub release: LuaScript,
    pub force_stop: LuaScript,
    pub list: LuaScript,
    pub set_override: LuaScript,
    pub session_event: LuaScript,
    pub fleet_audit: LuaScript,
    /// The sources as loaded (after a `NOSCRIPT`, and at start).
    loaded: Vec<(&'static str, String)>,
}

impl Scripts {
    /// The scripts for a server or a Sentinel master.
    pub fn new() -> Self {
        Self::build(false)
    }

    /// The scripts for a Redis Cluster: each starts with the migration guard (but the fleet
    /// audit push, whose key has no hash tag and which fails before its only write).
    pub fn for_cluster() -> Self {
        Self::build(true)
    }

    fn build(cluster: bool) -> Self {
        let loaded: Vec<(&'static str, String)> = Self::sources()
            .into_iter()
            .map(|(name, source)| match cluster && name != "fleet_audit" {
                // The flags line must stay first: Redis reads it only there.
                true => {
                    let (flags, body) = source.split_once('\n').expect("a flags line");
                    (name, format!("{flags}\n{CLUSTER_GUARD}{body}"))
                }
                false => (name, source.to_owned()),
            })
            .collect();
        let script = |i: usize| LuaScript::new(&loaded[i].1);
        Scripts {
            acquire: script(0),
            touch: script(1),
            heartbeat: script(2),
            release: script(3),
            force_stop: script(4),
            list: script(5),
            set_override: script(6),
            session_event: script(7),
            fleet_audit: script(8),
            loaded,
        }
    }

    /// The source of every script by operation name (in the order of the fields), as loaded on
    /// a server, for tools such as the benchmark. Each starts with its flags (`#!lua`, Redis
    /// 7): what adds state is refused by a full Redis before it runs (`OOM`); what frees state
    /// or only renews it may run there (`allow-oom`); what only reads is `no-writes`. Without
    /// the line Redis checks memory only at a script's first write, and `GETEX` (not marked
    /// `deny-oom`) comes first in ours, so they wrote past `maxmemory`.
    pub fn sources() -> [(&'static str, &'static str); 9] {
        [
            ("acquire", concat!("#!lua\n", lease_script!(fast "acquire"))),
            // A renewal adds no memory: a lease must outlive a full Redis.
            ("touch", concat!("#!lua flags=allow-oom\n", touch_script!())),
            // It may re-register a lost lease: new state.
            ("heartbeat", concat!("#!lua\n", lease_script!("heartbeat"))),
            (
                "release",
                concat!("#!lua flags=allow-oom\n", lease_script!(fast "release")),
            ),
            // Frees a slot (its audit entry is capped per account).
            (
                "force_stop",
                concat!("#!lua flags=allow-oom\n", lease_script!("force_stop")),
            ),
            (
                "list",
                concat!("#!lua flags=no-writes\n", lease_script!("list")),
            ),
            (
                "set_override",
                concat!("#!lua\n", lease_script!("set_override")),
            ),
            (
                "session_event",
                concat!("#!lua\n", include_str!("lua/session_event.lua")),
            ),
            // Sent only after a script Redis ran (a force-stop's entry must not be lost); capped.
            (
                "fleet_audit",
                concat!(
                    "#!lua flags=allow-oom\n",
                    include_str!("lua/fleet_audit.lua")
                ),
            ),
        ]
    }
}

impl Scripts {
    /// The script of an operation the module also has a command for.
    fn of(&self, op: Op) -> &LuaScript {
        match op {
            Op::Acquire => &self.acquire,
            Op::Heartbeat => &self.heartbeat,
            Op::Release => &self.release,
            Op::ForceStop => &self.force_stop,
            Op::List => &self.list,
            Op::SetOverride => &self.set_override,
        }
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

/// The fleet audit list: the newest support actions and sign-in events. Each shard of a list
/// keeps its own (beside the account or user an entry concerns) and the fleet view merges them;
/// a Redis Cluster keeps one, in this key's slot.
pub const FLEET_AUDIT_KEY: &str = "sl:audit";

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
    shards: Shards,
    /// The store itself, for the task that sends a batch (it must outlive any one request).
    me: Weak<RedisStore>,
    scripts: Scripts,
    /// The default plan, the caps book (for plays that name no plan) and the lease timing in
    /// force: a reload may change them (`rules.rs`).
    rules: LiveRules,
    deadline: Duration,
    batch_window: Duration,
    /// What each shard's queue admits (`store.admission`), `None` when off.
    admission: Option<Targets>,
    /// How many shards are on the native path now (`path.rs`); `None` with `store.module: off`.
    /// While it is 0 a call is built for its script without looking its shard up.
    native_shards: Option<Arc<AtomicUsize>>,
}

/// The shards and how an account finds its own.
enum Shards {
    /// A fixed list (URLs or Sentinel masters): an account's by the jump hash of its id.
    Ring(Vec<Arc<Shard>>),
    /// The primaries of a Redis Cluster: an account's by its slot.
    Cluster(Arc<Topology>),
}

/// Where a command goes.
#[derive(Clone, Copy)]
enum Target<'a> {
    /// The keys of one hash tag: an account's (`{account}`), a dashboard user's (`{user}`).
    Tag(&'a str),
    /// The fleet audit list an entry about this account or user goes to: its shard's own, or
    /// on a cluster the one list.
    FleetAudit(&'a str),
    /// One shard of a list, by index (reads that visit every shard).
    Shard(usize),
}

/// Cluster primaries whose live streams are counted, by index (a primary's index is given when
/// it first appears, so failovers and resharding add indices over time).
const MAX_CLUSTER_INDICES: usize = 1024;

/// How many redirections one command follows before it gives up (within its deadline).
const MAX_REDIRECTIONS: usize = 5;

/// How long a command waits before it is sent again after `TRYAGAIN` (a slot in mid-migration).
const TRY_AGAIN_PAUSE: Duration = Duration::from_millis(2);

#[derive(Debug, Clone)]
pub struct RedisOptions {
    pub shards: ShardSpec,
    pub deadline: Duration,
    /// How long a batch waits for company before it goes (0: at once).
    pub batch_window: Duration,
    /// Whether each shard's queue admits only what it can answer within the deadline
    /// (`batch.rs`); off, every command waits up to its deadline.
    pub admission: bool,
    pub failure_threshold: u32,
    pub probe_interval: Duration,
    /// TLS material and credentials, read at start.
    pub access: access::Access,
    /// `store.module: auto`: native commands on the shards that have the screenlimit module
    /// loaded (`path.rs`); false (`off`): the Lua scripts everywhere.
    pub module: bool,
}

/// Where the shards are: fixed URLs, master names that Sentinel resolves, or a Redis Cluster.
#[derive(Debug, Clone)]
pub enum ShardSpec {
    Urls(Vec<String>),
    Sentinel {
        addresses: Vec<String>,
        masters: Vec<String>,
        poll_interval: Duration,
    },
    Cluster {
        /// Seed nodes: asked for the slot map.
        nodes: Vec<String>,
        /// How often the slot map is read when nothing asks for it sooner.
        refresh_interval: Duration,
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
        Self::with_rules(options, LiveRules::new(Rules::fixed(plans, timing)))
    }

    /// Like [`RedisStore::new`], reading the default plan, caps and timing from `rules`.
    pub fn with_rules(options: &RedisOptions, rules: LiveRules) -> Result<Arc<Self>, String> {
        let (deadline, threshold) = (options.deadline, options.failure_threshold);
        let access = Arc::new(options.access.clone());
        let native_shards = options.module.then(|| Arc::new(AtomicUsize::new(0)));
        let module = |shard: Shard| shard.with_module(native_shards.clone());
        let (shards, sentinel_poll) = match &options.shards {
            ShardSpec::Urls(urls) => (
                urls.iter()
                    .enumerate()
                    .map(|(i, url)| {
                        Shard::fixed(i, url, &access, deadline, threshold)
                            .map(module)
                            .map(Arc::new)
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
                            .map(module)
                            .map(Arc::new)
                    })
                    .collect::<Result<Vec<_>, _>>()?,
                *poll_interval,
            ),
            ShardSpec::Cluster {
                nodes,
                refresh_interval,
            } => {
                let topology = Arc::new(Topology::new(
                    nodes,
                    &access,
                    deadline,
                    threshold,
                    options.probe_interval,
                    native_shards.clone(),
                )?);
                cluster::spawn_refresher(
                    Arc::downgrade(&topology),
                    *refresh_interval,
                    options.probe_interval,
                );
                return Ok(Self::assemble(
                    Shards::Cluster(topology),
                    Scripts::for_cluster(),
                    options,
                    rules,
                    native_shards,
                ));
            }
        };
        for shard in &shards {
            shard::spawn_maintenance(
                Arc::downgrade(shard),
                options.probe_interval,
                sentinel_poll,
                deadline,
            );
        }
        Ok(Self::assemble(
            Shards::Ring(shards),
            Scripts::new(),
            options,
            rules,
            native_shards,
        ))
    }

    fn assemble(
        shards: Shards,
        scripts: Scripts,
        options: &RedisOptions,
        rules: LiveRules,
        native_shards: Option<Arc<AtomicUsize>>,
    ) -> Arc<Self> {
        Arc::new_cyclic(|me| RedisStore {
            me: me.clone(),
            shards,
            scripts,
            rules,
            deadline: options.deadline,
            batch_window: options.batch_window,
            admission: options
                .admission
                .then(|| Targets::for_deadline(options.deadline)),
            native_shards,
        })
    }

    /// Contacts every shard once: a wrong password, a missing ACL permission or a TLS setup that
    /// cannot work is a config error; a shard out of reach is logged (once) and left to the
    /// failure policy, since the limiter must start while its store is down. On a cluster the
    /// seed nodes are contacted, and the slot map is read before the first request.
    pub async fn check_access(&self) -> Result<(), crate::config::ConfigError> {
        let deadline = access::contact_deadline(self.deadline);
        let shards = match &self.shards {
            Shards::Ring(shards) => shards,
            Shards::Cluster(topology) => {
                return topology.first_contact(&self.scripts.loaded, deadline).await;
            }
        };
        let contacts = shards
            .iter()
            .map(|shard| shard.first_contact(&self.scripts.loaded, deadline));
        for (shard, contact) in shards.iter().zip(futures::future::join_all(contacts).await) {
            if let access::Contact::Down(reason) = contact? {
                tracing::warn!(shard = shard.index, endpoint = %shard.endpoint(), reason, "store shard out of reach at start; serving under the failure policy");
            }
        }
        Ok(())
    }

    /// The shards now: the list, or the cluster's primaries that serve a slot.
    fn shards_now(&self) -> Vec<Arc<Shard>> {
        match &self.shards {
            Shards::Ring(shards) => shards.clone(),
            Shards::Cluster(topology) => topology.primaries(),
        }
    }

    /// Per shard, batches sent so far and the commands they carried: (shard, batches, commands).
    pub fn batch_totals(&self) -> Vec<(usize, u64, u64)> {
        self.shards_now()
            .iter()
            .map(|shard| {
                let (batches, commands) = shard.queue.totals();
                (shard.index, batches, commands)
            })
            .collect()
    }

    /// The index of the shard that owns `account_id` (on a cluster, of the primary that serves
    /// its slot now; `None` while no primary is known for it).
    pub fn shard_of(&self, account_id: &str) -> Option<usize> {
        match &self.shards {
            Shards::Ring(shards) => Some(ring::shard_for(account_id, shards.len())),
            Shards::Cluster(topology) => topology
                .owner(cluster::tag_slot(account_id))
                .map(|shard| shard.index),
        }
    }

    /// How many shard indices there can be: the list's length; on a cluster, primaries get new
    /// indices as they appear, so a bound (counts for higher ones are dropped).
    pub fn shard_indices(&self) -> usize {
        match &self.shards {
            Shards::Ring(shards) => shards.len(),
            Shards::Cluster(_) => MAX_CLUSTER_INDICES,
        }
    }

    /// Each shard's admission state: queued, bound, pace, sheds.
    pub fn admission(&self) -> Vec<(usize, Admission)> {
        self.shards_now()
            .iter()
            .map(|shard| (shard.index, shard.queue.admission(self.admission.as_ref())))
            .collect()
    }

    /// Each shard's health flags and last memory sample, without touching the network.
    pub fn shard_states(&self) -> Vec<(usize, ShardStateView)> {
        self.shards_now()
            .iter()
            .map(|s| {
                let view = ShardStateView {
                    read_only: s.state.read_only(),
                    out_of_memory: s.state.out_of_memory(),
                    memory: s.state.memory(),
                    path: Some(s.path.label()),
                };
                (s.index, view)
            })
            .collect()
    }

    /// Redis Cluster nodes of the last slot map with an address that cannot be used.
    pub fn unusable_cluster_nodes(&self) -> usize {
        match &self.shards {
            Shards::Cluster(topology) => topology.unusable_nodes(),
            _ => 0,
        }
    }

    /// Each shard's circuit: (shard, open).
    pub fn circuits(&self) -> Vec<(usize, bool)> {
        self.shards_now()
            .iter()
            .map(|s| (s.index, s.breaker.is_open()))
            .collect()
    }

    /// Runs one script call on the keys of `tag` (an account or a user), in its shard's next
    /// batch.
    async fn run<T: FromRedisValue>(&self, tag: &str, call: Call) -> Result<T, StoreError> {
        self.run_as(tag, call, Priority::Decision).await
    }

    /// A script call, or on a shard on the native path the module's command (`native.rs`);
    /// its arguments follow with [`Call::arg`], the same on both paths.
    fn lease_call<K: AsRef<[u8]>>(&self, tag: &str, op: Op, keys: &[K]) -> Call {
        match self.native_for(tag) {
            true => op.call(keys),
            false => self.scripts.of(op).call(keys),
        }
    }

    /// Whether the shard of `tag` is on the native path now. With no shard there, no lookup.
    fn native_for(&self, tag: &str) -> bool {
        let Some(count) = &self.native_shards else {
            return false;
        };
        if count.load(Ordering::Relaxed) == 0 {
            return false;
        }
        match &self.shards {
            Shards::Ring(shards) => shards[ring::shard_for(tag, shards.len())].path.native(),
            Shards::Cluster(topology) => topology
                .owner(cluster::tag_slot(tag))
                .is_some_and(|shard| shard.path.native()),
        }
    }

    /// Runs `call` on the keys of `tag`. A native command the shard refuses as a command (it
    /// has no module now: a promoted replica, a restart) switches the shard to Lua, and the very
    /// same call goes again as its script: the caller sees the script's answer, never the refusal.
    async fn run_as<T: FromRedisValue>(
        &self,
        tag: &str,
        call: Call,
        priority: Priority,
    ) -> Result<T, StoreError> {
        let (command, native) = call.into_parts();
        let reply = match native {
            None => self.send(Target::Tag(tag), command, priority).await?,
            Some(native) => {
                let again = command.clone();
                let (shard, reply) = self.send_raw(Target::Tag(tag), command, priority).await?;
                let refused = match &reply {
                    Value::ServerError(error) => native::refusal(error),
                    _ => None,
                };
                match refused {
                    Some(why) => {
                        self.lost_module(shard, why);
                        let script = native.as_script(&again, self.scripts.of(native.op));
                        self.send(Target::Tag(tag), script, priority).await?
                    }
                    None => server_error(shard, reply)?,
                }
            }
        };
        redis::from_redis_value(reply).map_err(|e| malformed(&e.to_string()))
    }

    /// The shard with index `index` refused a native command (`why`): Lua from now on.
    fn lost_module(&self, index: usize, why: &str) {
        let shard = match &self.shards {
            Shards::Ring(shards) => shards.get(index).cloned(),
            Shards::Cluster(topology) => topology.node_by_index(index),
        };
        if let Some(shard) = shard
            && shard.path.lost_module(why)
        {
            let verdict = native::Verdict::Lua(format!(
                "a native command was refused ({why}); the call went again as its script"
            ));
            path::say(shard.index, &shard.endpoint(), &verdict, path::Was::Native);
        }
    }

    /// Sends one command to its shard in the shard's next batch; its reply within the store
    /// deadline (a server's refusal as an error). On a cluster, `MOVED`, `ASK` and `TRYAGAIN` are
    /// followed within that deadline.
    async fn send(
        &self,
        target: Target<'_>,
        command: Cmd,
        priority: Priority,
    ) -> Result<Value, StoreError> {
        let (shard, reply) = self.send_raw(target, command, priority).await?;
        server_error(shard, reply)
    }

    /// [`RedisStore::send`], with a server's refusal as a value: the shard that answered and
    /// its reply.
    async fn send_raw(
        &self,
        target: Target<'_>,
        command: Cmd,
        priority: Priority,
    ) -> Result<(usize, Value), StoreError> {
        let until = Instant::now() + self.deadline;
        let (shard, reply) = match &self.shards {
            Shards::Ring(shards) => {
                let index = match target {
                    Target::Tag(tag) | Target::FleetAudit(tag) => {
                        ring::shard_for(tag, shards.len())
                    }
                    Target::Shard(index) => index,
                };
                let shard = &shards[index];
                let reply = self.send_to(shard, command, until, priority).await?;
                (shard.index, reply)
            }
            Shards::Cluster(topology) => {
                let slot = match target {
                    Target::Tag(tag) => cluster::tag_slot(tag),
                    Target::FleetAudit(_) | Target::Shard(_) => {
                        cluster::key_slot(FLEET_AUDIT_KEY.as_bytes())
                    }
                };
                self.send_in_cluster(topology, slot, command, until, priority)
                    .await?
            }
        };
        Ok((shard, reply))
    }

    /// One command for `slot` on a cluster: to the slot's primary, then wherever the nodes
    /// redirect it. Returns the shard that answered and its reply.
    async fn send_in_cluster(
        &self,
        topology: &Topology,
        slot: u16,
        command: Cmd,
        until: Instant,
        priority: Priority,
    ) -> Result<(usize, Value), StoreError> {
        let mut asking: Option<Arc<Shard>> = None;
        for _ in 0..MAX_REDIRECTIONS {
            let (node, reply) = match asking.take() {
                Some(node) => {
                    let reply = self.send_asking(&node, &command, until).await;
                    (node, reply)
                }
                None => {
                    let Some(node) = topology.owner_by(slot, until).await else {
                        return Err(StoreError::Backend {
                            shard: usize::MAX,
                            message: format!(
                                "no cluster node serves slot {slot} (the slot map is being read)"
                            ),
                        });
                    };
                    let reply = self.send_to(&node, command.clone(), until, priority).await;
                    (node, reply)
                }
            };
            let error = match reply {
                Ok(Value::ServerError(error)) => error,
                Ok(value) => return Ok((node.index, value)),
                Err(error) => {
                    // The node may be gone (a failover): the map is read again meanwhile.
                    if error.may_mean_a_new_topology() {
                        topology.stale();
                    }
                    return Err(error);
                }
            };
            let unusable = |e: String| StoreError::Backend {
                shard: node.index,
                message: e,
            };
            match Redirect::parse(&error) {
                Some(Redirect::Moved { slot, address }) => {
                    topology.moved(slot, &address).map_err(unusable)?;
                }
                Some(Redirect::Ask { address }) => {
                    asking = Some(topology.node_at(&address).map_err(unusable)?);
                }
                Some(Redirect::TryAgain) => {
                    tokio::time::sleep_until(until.min(Instant::now() + TRY_AGAIN_PAUSE)).await;
                    if Instant::now() >= until {
                        return Err(StoreError::Timeout { shard: node.index });
                    }
                }
                None => return Ok((node.index, Value::ServerError(error))),
            }
        }
        Err(StoreError::Backend {
            shard: usize::MAX,
            message: format!("slot {slot}: too many cluster redirections"),
        })
    }

    /// `ASKING` and the command, on their own right after each other on `node`'s connection (a
    /// slot being migrated to it), outside the batches; scripts it lacks are loaded first.
    async fn send_asking(
        &self,
        node: &Shard,
        command: &Cmd,
        until: Instant,
    ) -> Result<Value, StoreError> {
        let mut pipe = redis::pipe();
        pipe.cmd("ASKING").add_command(command.clone());
        let answer = async {
            let mut replies = self.pipeline(node, &pipe).await?;
            if matches!(&replies[1], Value::ServerError(e) if e.code() == "NOSCRIPT") {
                self.load_scripts(node).await?;
                replies = self.pipeline(node, &pipe).await?;
            }
            Ok(replies.swap_remove(1))
        };
        match tokio::time::timeout_at(until, answer).await {
            Ok(reply) => reply,
            Err(_) => Err(StoreError::Timeout { shard: node.index }),
        }
    }

    /// Sends one command to `shard` in its next batch; its reply (a server error as a value)
    /// by `until`, or at once `Shed` when the shard cannot answer it in time.
    async fn send_to(
        &self,
        shard: &Arc<Shard>,
        command: Cmd,
        until: Instant,
        priority: Priority,
    ) -> Result<Value, StoreError> {
        if shard.breaker.is_open() {
            return Err(StoreError::CircuitOpen { shard: shard.index });
        }
        let (answer, reply) = tokio::sync::oneshot::channel();
        let job = Job {
            command,
            answer,
            until,
            priority,
        };
        match shard.queue.push(job, self.admission.as_ref()) {
            Pushed::Lead => {
                // A task of its own, so that a request that goes away cannot strand the batch.
                let store = self.me.upgrade().expect("the store outlives its requests");
                tokio::spawn(store.send_batches(shard.clone()));
            }
            Pushed::Wait => {}
            Pushed::Shed => return Err(StoreError::Shed { shard: shard.index }),
        }
        match tokio::time::timeout_at(until, reply).await {
            Ok(Ok(answer)) => answer.and_then(|reply| health::classify(shard, reply)),
            Ok(Err(_)) => Err(StoreError::Backend {
                shard: shard.index,
                message: "the batch was dropped".into(),
            }),
            Err(_) => Err(StoreError::Timeout { shard: shard.index }),
        }
    }

    /// Sends the shard's waiting commands, batch after batch, until none wait.
    async fn send_batches(self: Arc<Self>, shard: Arc<Shard>) {
        let queue = &shard.queue;
        loop {
            // Every batch waits for company, not only one that finds the shard idle: fewer,
            // deeper round trips are what save the shard's CPU (a command waits at most about
            // two windows and a round trip).
            if !self.batch_window.is_zero() {
                tokio::time::sleep(self.batch_window).await;
            }
            let batch = queue.take_batch(self.admission.as_ref());
            // Answered at once: the failure policy decides for them, without the shard.
            for job in batch.dropped {
                let _ = job
                    .answer
                    .send(Err(StoreError::Shed { shard: shard.index }));
            }
            let (commands, answers): (Vec<Cmd>, Vec<_>) = batch
                .jobs
                .into_iter()
                .map(|job| (job.command, job.answer))
                .unzip();
            let (sent, started) = (commands.len(), Instant::now());
            // A batch that answered or ran out of time tells the shard's pace; a refused
            // connection does not.
            let result = match commands.is_empty() {
                true => Ok(Vec::new()),
                false => self.run_batch(&shard, commands).await,
            };
            let sample = match &result {
                Ok(_) | Err(StoreError::Timeout { .. }) => Some((sent, started.elapsed())),
                Err(_) => None,
            };
            // A command whose request went away no longer listens; that is fine.
            match result {
                Ok(replies) => {
                    for (answer, reply) in answers.into_iter().zip(replies) {
                        let _ = answer.send(Ok(reply));
                    }
                }
                Err(error) => {
                    for answer in answers {
                        let _ = answer.send(Err(error.clone()));
                    }
                }
            }
            if !queue.finish_batch(sample) {
                return;
            }
        }
    }

    /// One pipeline of `commands` on `shard`: a reply per command, in order. Scripts the server
    /// lost (a restart, a failover, `SCRIPT FLUSH`) are loaded again and the commands it
    /// refused with `NOSCRIPT` sent once more.
    async fn run_batch(&self, shard: &Shard, commands: Vec<Cmd>) -> Result<Vec<Value>, StoreError> {
        let mut pipe = redis::pipe();
        for command in commands {
            pipe.add_command(command);
        }
        let mut replies = self.pipeline(shard, &pipe).await?;
        let lost: Vec<usize> = (0..replies.len())
            .filter(|&i| matches!(&replies[i], Value::ServerError(e) if e.code() == "NOSCRIPT"))
            .collect();
        if lost.is_empty() {
            return Ok(replies);
        }
        self.load_scripts(shard).await?;
        let mut again = redis::pipe();
        for (i, command) in pipe.cmd_iter().enumerate() {
            if lost.contains(&i) {
                again.add_command(command.clone());
            }
        }
        let again = self.pipeline(shard, &again).await?;
        for (i, reply) in lost.into_iter().zip(again) {
            replies[i] = reply;
        }
        Ok(replies)
    }

    /// Loads every script on `shard`. Within the first-contact deadline rather than the store's:
    /// compiling the scripts can take a busy server longer than one call may, and a load that
    /// timed out every time would leave the shard answering `NOSCRIPT` for good (no request
    /// waits on it beyond its own deadline: it runs in the batch's task).
    async fn load_scripts(&self, shard: &Shard) -> Result<(), StoreError> {
        let mut loads = redis::pipe();
        for (_, source) in &self.scripts.loaded {
            loads.cmd("SCRIPT").arg("LOAD").arg(source);
        }
        let deadline = access::contact_deadline(self.deadline);
        self.pipeline_within(shard, &loads, deadline)
            .await
            .map(drop)
    }

    /// `pipe` as one write and one read under the shard's breaker and deadline: a reply per
    /// command, in order.
    async fn pipeline(
        &self,
        shard: &Shard,
        pipe: &redis::Pipeline,
    ) -> Result<Vec<Value>, StoreError> {
        self.pipeline_within(shard, pipe, self.deadline).await
    }

    async fn pipeline_within(
        &self,
        shard: &Shard,
        pipe: &redis::Pipeline,
        deadline: Duration,
    ) -> Result<Vec<Value>, StoreError> {
        let count = pipe.len();
        let replies = self
            .guarded(shard, deadline, |mut connection| async move {
                connection.req_packed_commands(pipe, 0, count).await
            })
            .await?;
        match replies.len() == count {
            true => Ok(replies),
            false => Err(malformed("a pipeline answered the wrong number of replies")),
        }
    }

    /// Runs one call on the shard's master under its circuit breaker and `deadline`.
    async fn guarded<T, F, Fut>(
        &self,
        shard: &Shard,
        deadline: Duration,
        call: F,
    ) -> Result<T, StoreError>
    where
        F: FnOnce(redis::aio::ConnectionManager) -> Fut,
        Fut: Future<Output = redis::RedisResult<T>>,
    {
        let index = shard.index;
        if shard.breaker.is_open() {
            return Err(StoreError::CircuitOpen { shard: index });
        }
        let error = match shard.connection() {
            None => StoreError::Backend {
                shard: index,
                message: "no master known yet; asking Sentinel".into(),
            },
            Some(connection) => match tokio::time::timeout(deadline, call(connection)).await {
                Ok(Ok(value)) => {
                    shard.breaker.record_success();
                    return Ok(value);
                }
                Ok(Err(e)) => {
                    if path::broken(&e) {
                        // Reconnected on the next call, maybe to another server: ask it first.
                        shard.path.forget();
                    }
                    StoreError::Backend {
                        shard: index,
                        message: e.to_string(),
                    }
                }
                Err(_) => StoreError::Timeout { shard: index },
            },
        };
        if shard.breaker.record_failure() {
            tracing::warn!(shard = index, endpoint = %shard.endpoint(), %error, "store circuit opened");
        }
        Err(error)
    }

    /// The newest `limit` entries (of `kind`, if given) of one audit list.
    async fn audit_list(
        &self,
        target: Target<'_>,
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
        let reply = self.send(target, command, Priority::Decision).await?;
        let raw: Vec<String> =
            redis::from_redis_value(reply).map_err(|e| malformed(&e.to_string()))?;
        Ok(raw
            .iter()
            .filter_map(|json| serde_json::from_str::<AuditEntry>(json).ok())
            .filter(|e| kind.is_none_or(|k| e.kind == k))
            .take(limit)
            .collect())
    }

    /// The fleet audit lists: one per shard of a list, the one of a cluster.
    fn fleet_audit_targets(&self) -> Vec<Target<'static>> {
        match &self.shards {
            Shards::Ring(shards) => (0..shards.len()).map(Target::Shard).collect(),
            Shards::Cluster(_) => vec![Target::FleetAudit("")],
        }
    }

    /// Adds an entry the account's or user's script logged to the fleet audit list, a second
    /// call after the script (on a cluster the list is in another slot). The action itself is
    /// done and in the account's own list by then: a failure here is logged, not returned.
    async fn push_fleet_audit(&self, tag: &str, entry: &Value) {
        let mut invocation = self.scripts.fleet_audit.call(&[FLEET_AUDIT_KEY]);
        let Ok(entry) = bytes(entry) else { return };
        invocation.arg(entry).arg(AUDIT_RECENT);
        if let Err(error) = self
            .send(
                Target::FleetAudit(tag),
                invocation.into_command(),
                Priority::Decision,
            )
            .await
        {
            tracing::warn!(%error, "an audit entry could not be added to the fleet audit list; it is in the account's own list");
        }
    }

    /// The audit arguments every support action's script ends with: cap and retention.
    fn audit_args(invocation: &mut Call) -> &mut Call {
        invocation
            .arg(AUDIT_PER_ACCOUNT)
            .arg(AUDIT_RETENTION.as_millis() as u64)
    }

    /// The common heartbeat, on both paths one plain command in the shard's next batch: `GETEX`
    /// of the lease key with a new life of one TTL (cheaper for Redis than `SL.HEARTBEAT` or a
    /// script: BENCHMARKS.md, "Native commands"). Its value says until when the account key
    /// surely lives: at least two TTLs ahead of this host's clock (a TTL to spare for clock
    /// skew), the lease is renewed and that is all; nearer, the account key's life must be
    /// renewed too (about one heartbeat in twelve with its six-TTL life).
    async fn renew(&self, account_id: &str, stream: &StreamRef) -> Result<Renewal, StoreError> {
        let timing = self.rules.load().timing;
        let mut command = redis::cmd("GETEX");
        command
            .arg(lease_key(account_id, &stream.nonce))
            .arg("PX")
            .arg(timing.ttl_ms);
        let renewal = self
            .send(Target::Tag(account_id), command, Priority::Renewal)
            .await?;
        let account_until = match renewal {
            Value::BulkString(bytes) => std::str::from_utf8(&bytes)
                .ok()
                .and_then(|text| text.parse::<u64>().ok()),
            _ => return Ok(Renewal::LeaseGone),
        };
        Ok(match account_until {
            Some(until) if until >= now_ms() + 2 * timing.ttl_ms => Renewal::Done,
            _ => Renewal::AccountNearItsEnd,
        })
    }

    /// The account key's life renewed for a lease `GETEX` just renewed, by the small `touch`
    /// script (the Lua path). False: the lease or the account key is gone after all.
    async fn touch(&self, account_id: &str, stream: &StreamRef) -> Result<bool, StoreError> {
        let timing = self.rules.load().timing;
        let mut call = self.scripts.touch.call(&[
            account_key(account_id).into_bytes(),
            lease_key(account_id, &stream.nonce),
        ]);
        call.arg(timing.revocation_ms);
        let touched: u64 = self.run_as(account_id, call, Priority::Renewal).await?;
        Ok(touched == 1)
    }

    /// The lease lengths every script starts its arguments with, from one snapshot of the rules
    /// (a reload between two reads must not mix old and new).
    fn timing_args(invocation: &mut Call, timing: Timing) -> &mut Call {
        invocation.arg(timing.ttl_ms).arg(timing.revocation_ms)
    }
}

/// What the `GETEX` renewal of a lease key found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Renewal {
    /// The lease is renewed and its account key lives long enough: the heartbeat is done.
    Done,
    /// The lease is renewed, but its account key's life ends within two TTLs.
    AccountNearItsEnd,
    /// No lease key: expired, stopped or revoked; the full heartbeat decides.
    LeaseGone,
}

/// This host's wall clock in ms since the epoch (0 if it is before the epoch).
fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

/// A server's refusal as the error it is; any other reply as it came.
fn server_error(shard: usize, reply: Value) -> Result<Value, StoreError> {
    match reply {
        Value::ServerError(error) => Err(StoreError::Backend {
            shard,
            message: match error.code() {
                "MOVED" | "ASK" => format!(
                    "{error}: this shard is a Redis Cluster node; list the cluster's nodes \
                     under store.cluster.nodes instead"
                ),
                _ => error.to_string(),
            },
        }),
        value => Ok(value),
    }
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

/// Decodes the raw live records a script returns.
fn leases(records: &[Value]) -> Result<Vec<Lease>, StoreError> {
    records
        .iter()
        .map(|r| record::decode_lease(bytes(r)?).ok_or_else(|| malformed("lease record")))
        .collect()
}

impl LeaseStore for RedisStore {
    async fn acquire(&self, cmd: &AcquireCmd) -> Result<AcquireOutcome, StoreError> {
        let rules = self.rules.load();
        let mut invocation = self.lease_call(
            &cmd.account_id,
            Op::Acquire,
            &[account_key(&cmd.account_id)],
        );
        Self::timing_args(&mut invocation, rules.timing);
        match &cmd.plan {
            Some(plan) => invocation.arg(&plan.name).arg(plan.limit),
            None => invocation.arg("").arg(0),
        };
        invocation
            .arg(&rules.book.default.name)
            .arg(rules.book.default.limit)
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
            None => invocation.arg("").arg(&rules.caps_book[..]),
        };
        drop(rules);
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
        // The common case on both paths is a renewal by Redis's own `GETEX`. The rest goes to
        // the full heartbeat: on the native path `SL.HEARTBEAT` (which renews the account key's
        // life too, so no `touch`), on Lua the `touch` script first, then the heartbeat script.
        let native = self.native_for(account_id);
        let renewal = self.renew(account_id, stream).await?;
        let priority = match (renewal, native) {
            // `expires_at` is not read for a renewal: the store's clock is not asked for it.
            (Renewal::Done, _) => return Ok(HeartbeatOutcome::Renewed { expires_at: 0 }),
            (Renewal::AccountNearItsEnd, false) if self.touch(account_id, stream).await? => {
                return Ok(HeartbeatOutcome::Renewed { expires_at: 0 });
            }
            // A live lease whose account key needs its life renewed: still a renewal.
            (Renewal::AccountNearItsEnd, true) => Priority::Renewal,
            // The lease is gone: a re-registration or a 410, a decision.
            _ => Priority::Decision,
        };
        let rules = self.rules.load();
        let mut invocation = match native {
            true => Op::Heartbeat.call(&[account_key(account_id)]),
            false => self.scripts.heartbeat.call(&[account_key(account_id)]),
        };
        let default = rules.book.default.tag();
        let plan = if stream.plan.limit > 0 {
            &stream.plan
        } else {
            &default
        };
        Self::timing_args(&mut invocation, rules.timing)
            .arg(&plan.name)
            .arg(plan.limit)
            .arg(&stream.device_id)
            .arg(&stream.nonce[..]);
        drop(rules);
        let reply: Vec<Value> = self.run_as(account_id, invocation, priority).await?;
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
        let mut invocation = self.lease_call(account_id, Op::Release, &[account_key(account_id)]);
        Self::timing_args(&mut invocation, self.rules.load().timing)
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
        let keys = [
            account_key(&cmd.account_id),
            account_audit_key(&cmd.account_id),
        ];
        let mut invocation = self.lease_call(&cmd.account_id, Op::ForceStop, &keys);
        Self::timing_args(&mut invocation, self.rules.load().timing)
            .arg(&cmd.stream.device_id)
            .arg(&cmd.stream.nonce[..])
            .arg(&cmd.account_id)
            .arg(&cmd.stream_id)
            .arg(&cmd.actor)
            .arg(&cmd.reason);
        Self::audit_args(&mut invocation);
        let reply: Vec<Value> = self.run(&cmd.account_id, invocation).await?;
        match reply.as_slice() {
            [code, entry] if int(code)? == 1 => {
                self.push_fleet_audit(&cmd.account_id, entry).await;
                Ok(ForceStopOutcome::Stopped)
            }
            [code] if int(code)? == 2 => Ok(ForceStopOutcome::AlreadyStopped),
            [code] if int(code)? == 0 => Ok(ForceStopOutcome::Unknown),
            _ => Err(malformed("force_stop")),
        }
    }

    async fn audit(
        &self,
        account_id: Option<&str>,
        kind: Option<AuditKind>,
        limit: usize,
    ) -> Result<Vec<AuditEntry>, StoreError> {
        if let Some(account_id) = account_id {
            return self
                .audit_list(
                    Target::Tag(account_id),
                    &account_audit_key(account_id),
                    kind,
                    limit,
                )
                .await;
        }
        let lists = self
            .fleet_audit_targets()
            .into_iter()
            .map(|target| self.audit_list(target, FLEET_AUDIT_KEY, kind, limit));
        let mut merged = Vec::new();
        for entries in futures::future::join_all(lists).await {
            merged.extend(entries?);
        }
        merged.sort_by_key(|e| std::cmp::Reverse(e.at));
        merged.truncate(limit);
        Ok(merged)
    }

    async fn list(&self, account_id: &str) -> Result<AccountView, StoreError> {
        let rules = self.rules.load();
        let mut invocation = self.lease_call(account_id, Op::List, &[account_key(account_id)]);
        invocation
            .arg(rules.timing.ttl_ms)
            .arg(&rules.book.default.name)
            .arg(rules.book.default.limit);
        drop(rules);
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
        let keys = [
            account_key(&cmd.account_id),
            account_audit_key(&cmd.account_id),
        ];
        let mut invocation = self.lease_call(&cmd.account_id, Op::SetOverride, &keys);
        let (limit, duration_ms) = cmd.grant.map_or((0, 0), |g| (g.limit, g.duration_ms));
        let rules = self.rules.load();
        Self::timing_args(&mut invocation, rules.timing)
            .arg(&rules.book.default.name)
            .arg(rules.book.default.limit)
            .arg(limit)
            .arg(duration_ms)
            .arg(&cmd.account_id)
            .arg(&cmd.actor)
            .arg(&cmd.reason);
        drop(rules);
        Self::audit_args(&mut invocation);
        let reply: Vec<Value> = self.run(&cmd.account_id, invocation).await?;
        let (limit, until) = match reply.as_slice() {
            [limit, until] => (int(limit)?, int(until)?),
            [limit, until, entry] => {
                self.push_fleet_audit(&cmd.account_id, entry).await;
                (int(limit)?, int(until)?)
            }
            _ => return Err(malformed("set_override")),
        };
        Ok((limit > 0).then_some(LimitOverride {
            limit: limit as u32,
            until,
        }))
    }

    async fn session_generation(&self, user: &str) -> Result<u64, StoreError> {
        let mut command = redis::cmd("GET");
        command.arg(session_key(user));
        match self
            .send(Target::Tag(user), command, Priority::Decision)
            .await?
        {
            Value::Nil => Ok(0),
            value => text(&value)?
                .parse()
                .map_err(|_| malformed("session generation")),
        }
    }

    async fn session_event(&self, cmd: &SessionEventCmd) -> Result<u64, StoreError> {
        let mut invocation = self.scripts.session_event.call(&[session_key(&cmd.user)]);
        invocation
            .arg(u8::from(cmd.kind == AuditKind::SignOut))
            .arg(cmd.kind.as_str())
            .arg(&cmd.user)
            .arg(&cmd.address)
            .arg(&cmd.reason)
            .arg(SESSION_GENERATION_LIFE.as_millis() as u64);
        let reply: Vec<Value> = self.run(&cmd.user, invocation).await?;
        let [generation, entry] = reply.as_slice() else {
            return Err(malformed("session_event"));
        };
        self.push_fleet_audit(&cmd.user, entry).await;
        int(generation)
    }

    async fn health(&self) -> Vec<ShardHealth> {
        let shards = self.shards_now();
        if let (Shards::Cluster(topology), true) = (&self.shards, shards.is_empty()) {
            // No slot map yet: the cluster is not reachable, whatever its nodes are.
            return vec![ShardHealth {
                shard: 0,
                endpoint: format!(
                    "cluster (no slot map yet; seeds {})",
                    topology.seed_addresses()
                ),
                reachable: false,
                circuit: "open",
                keys: None,
                overloaded: false,
                read_only: false,
                out_of_memory: false,
                memory: None,
                path: None,
            }];
        }
        let checks = shards.into_iter().map(|shard| async move {
            let keys =
                shard::key_count(&shard, self.deadline.max(Duration::from_millis(100))).await;
            ShardHealth {
                shard: shard.index,
                endpoint: shard.endpoint(),
                reachable: keys.is_some(),
                circuit: shard.breaker.state(),
                keys,
                overloaded: shard.queue.overloaded(),
                read_only: shard.state.read_only(),
                out_of_memory: shard.state.out_of_memory(),
                memory: shard.state.memory(),
                path: Some(shard.path.label()),
            }
        });
        futures::future::join_all(checks).await
    }
}
