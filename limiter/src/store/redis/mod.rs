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
pub mod cluster;
pub mod health;
mod history;
mod hold;
mod keys;
mod lease_store;
mod native;
mod pace;
mod path;
mod record;
mod renewals;
mod reply;
pub mod ring;
mod scripts;
mod send;
mod shard;
mod unusable;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Weak};
use std::time::Duration;

use redis::{FromRedisValue, Value};

use self::batch::Targets;
pub use self::batch::{Admission, Priority, ShedReason};
use self::call::{Call, Op};
use self::cluster::Topology;
use self::reply::{malformed, server_error};
use self::shard::Shard;
use crate::model::Timing;
use crate::plans::PlanBook;
use crate::rules::{LiveRules, Rules};
use crate::store::error::StoreError;
use crate::store::shard_health::ShardStateView;

pub use self::keys::{
    FLEET_AUDIT_KEY, account_audit_key, account_key, history_key, lease_key, session_key,
};
pub use self::native::LEARNING_FEATURE;
pub use self::scripts::Scripts;

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
                cluster::refresh::spawn_refresher(
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
            shard::maintenance::spawn_maintenance(
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
                    no_replicas: s.state.no_replicas(),
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
}
