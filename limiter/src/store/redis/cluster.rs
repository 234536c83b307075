//! A Redis Cluster as the store: which primary serves a key. Every key of an account shares the
//! account's hash tag, so an operation touches one slot; the slot map (`CLUSTER SHARDS`, asked of
//! the nodes the limiter knows and of the configured seed nodes) names the primary, and each
//! primary is a [`Shard`] with its own batch queue, breaker and probe, as with client-side shards.
//!
//! The map is read again in the background: every `refresh_interval`, at once when a node fails
//! or answers `MOVED` (one reader, at most one read per [`refresh::MIN_REFRESH_GAP`]), and every
//! probe interval while a primary's circuit is open, so that a promoted replica is found quickly.
//! A `MOVED` also patches its slot at once. Primaries that no longer serve a slot are let go.
//!
//! This file holds the topology: the map in force, the primary a slot goes to, the nodes and the
//! first contact. It uses a key's slot (`cluster/slots.rs`), redirections (`redirect.rs`) and the
//! reading of the map a node gives (`slot_map.rs`); `refresh.rs` keeps the map current (it
//! imports this file, not the other way round).

mod redirect;
pub mod refresh;
mod slot_map;
mod slots;

use std::sync::atomic::AtomicUsize;
use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;

use redis::Value;
use redis::aio::ConnectionManager;
use tokio::sync::{Notify, watch};

use self::slot_map::split_address;
use super::access::{self, Access, Contact};
use super::health;
use super::shard::{self, Shard};
use super::unusable::UnusableNodes;
use crate::config::ConfigError;

// What the rest of the store names by `cluster::` (the files below hold them).
pub use self::redirect::Redirect;
pub use self::slot_map::parse_shards;
pub use self::slots::{SLOTS, key_slot, tag_slot};

/// Which primary serves each slot.
struct Table {
    /// Per slot, a position in `nodes`, or [`NONE`].
    owners: Vec<u16>,
    nodes: Vec<Arc<Shard>>,
}

const NONE: u16 = u16::MAX;

impl Table {
    fn position(&self, address: &str) -> Option<usize> {
        self.nodes.iter().position(|n| n.address() == address)
    }
}

/// How a node found in the map becomes a [`Shard`].
struct NodeFactory {
    access: Arc<Access>,
    deadline: Duration,
    failure_threshold: u32,
    probe_interval: Duration,
    tls: bool,
    /// The store's count of native shards; `None` with `store.module: off`.
    native_shards: Option<Arc<AtomicUsize>>,
}

pub struct Topology {
    /// Whether the nodes are reached over TLS (the seed nodes are `rediss://`).
    tls: bool,
    /// The configured nodes: asked for the map when no known primary answers.
    seeds: Vec<(String, ConnectionManager)>,
    table: RwLock<Table>,
    factory: NodeFactory,
    next_index: std::sync::atomic::AtomicUsize,
    /// Wakes the background reader for a new map now.
    wake: Arc<Notify>,
    /// Counts the maps read, so that a command for an unmapped slot can wait for the next one.
    maps: watch::Sender<u64>,
    /// Nodes of the last map whose address could not be used: logged when the set changes.
    unusable: Mutex<UnusableNodes>,
}

impl Topology {
    pub fn new(
        urls: &[String],
        access: &Arc<Access>,
        deadline: Duration,
        failure_threshold: u32,
        probe_interval: Duration,
        native_shards: Option<Arc<AtomicUsize>>,
    ) -> Result<Topology, String> {
        let config = shard::manager_config(deadline);
        let seeds = urls
            .iter()
            .enumerate()
            .map(|(i, url)| {
                let client = access
                    .data_client(url)
                    .map_err(|e| format!("store.cluster.nodes[{i}]: {e}"))?;
                let address = client.get_connection_info().addr().to_string();
                let connection = ConnectionManager::new_lazy_with_config(client, config.clone())
                    .map_err(|e| format!("store.cluster.nodes[{i}]: {e}"))?;
                Ok((address, connection))
            })
            .collect::<Result<Vec<_>, String>>()?;
        let tls = urls.iter().any(|url| url.starts_with("rediss://"));
        Ok(Topology {
            tls,
            seeds,
            table: RwLock::new(Table {
                owners: vec![NONE; SLOTS],
                nodes: Vec::new(),
            }),
            factory: NodeFactory {
                access: access.clone(),
                deadline,
                failure_threshold,
                probe_interval,
                tls,
                native_shards,
            },
            next_index: Default::default(),
            wake: Arc::new(Notify::new()),
            maps: watch::Sender::new(0),
            unusable: Mutex::default(),
        })
    }

    fn table(&self) -> std::sync::RwLockReadGuard<'_, Table> {
        self.table.read().unwrap_or_else(|e| e.into_inner())
    }

    /// The primary serving `slot`, if the map names one.
    pub fn owner(&self, slot: u16) -> Option<Arc<Shard>> {
        let table = self.table();
        let at = table.owners[usize::from(slot)];
        (at != NONE).then(|| table.nodes[usize::from(at)].clone())
    }

    /// The primary serving `slot`; when the map names none yet (at start, or a slot left
    /// unserved), waits for the next read of the map, until `until`.
    pub async fn owner_by(&self, slot: u16, until: tokio::time::Instant) -> Option<Arc<Shard>> {
        if let Some(node) = self.owner(slot) {
            return Some(node);
        }
        let mut maps = self.maps.subscribe();
        maps.mark_unchanged();
        self.wake.notify_one();
        let _ = tokio::time::timeout_at(until, maps.changed()).await;
        self.owner(slot)
    }

    /// The primaries that serve at least one slot, by index.
    pub fn primaries(&self) -> Vec<Arc<Shard>> {
        let table = self.table();
        let mut serving = vec![false; table.nodes.len()];
        for &at in &table.owners {
            if at != NONE {
                serving[usize::from(at)] = true;
            }
        }
        let mut primaries: Vec<Arc<Shard>> = table
            .nodes
            .iter()
            .zip(serving)
            .filter(|(_, serving)| *serving)
            .map(|(node, _)| node.clone())
            .collect();
        primaries.sort_by_key(|n| n.index);
        primaries
    }

    /// The node given index `index`, if the map still knows it.
    pub fn node_by_index(&self, index: usize) -> Option<Arc<Shard>> {
        let table = self.table();
        table.nodes.iter().find(|n| n.index == index).cloned()
    }

    /// The seed nodes, for messages.
    pub fn seed_addresses(&self) -> String {
        let addresses: Vec<&str> = self.seeds.iter().map(|(a, _)| a.as_str()).collect();
        addresses.join(", ")
    }

    /// Asks the background reader for a new map (a node failed, or the map is stale).
    pub fn stale(&self) {
        self.wake.notify_one();
    }

    /// A node's `MOVED`: the slot is `address`'s from now on; the rest of the map is read again.
    pub fn moved(&self, slot: u16, address: &str) -> Result<Arc<Shard>, String> {
        let node = self.node_at(address)?;
        let mut table = self.table.write().unwrap_or_else(|e| e.into_inner());
        if let Some(at) = table.position(address) {
            table.owners[usize::from(slot)] = at as u16;
        }
        drop(table);
        self.wake.notify_one();
        Ok(node)
    }

    /// The node at `address` (`host:port`), known or new.
    pub fn node_at(&self, address: &str) -> Result<Arc<Shard>, String> {
        if let Some(at) = self.table().position(address) {
            return Ok(self.table().nodes[at].clone());
        }
        let mut table = self.table.write().unwrap_or_else(|e| e.into_inner());
        if let Some(at) = table.position(address) {
            return Ok(table.nodes[at].clone());
        }
        let node = self.make_node(address)?;
        table.nodes.push(node.clone());
        Ok(node)
    }

    fn make_node(&self, address: &str) -> Result<Arc<Shard>, String> {
        let (host, port) = split_address(address)?;
        let f = &self.factory;
        let index = self
            .next_index
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let node = Arc::new(
            Shard::cluster_node(
                index,
                host,
                port,
                f.tls,
                &f.access,
                f.deadline,
                f.failure_threshold,
            )?
            .with_module(f.native_shards.clone()),
        );
        shard::maintenance::spawn_maintenance(
            Arc::downgrade(&node),
            f.probe_interval,
            Duration::MAX,
            f.deadline,
        );
        Ok(node)
    }

    /// At start: each seed node is signed in to and loaded with the scripts (a config mistake is
    /// an error, see `access::judge`) and asked for the map, which is put in force before the
    /// first request. A node that is not in cluster mode is a config error; seed nodes out of
    /// reach are logged and left to the failure policy.
    pub async fn first_contact(
        &self,
        sources: &[(&'static str, String)],
        deadline: Duration,
    ) -> Result<(), ConfigError> {
        for (i, (address, connection)) in self.seeds.iter().enumerate() {
            let at = format!("store.cluster.nodes[{i}] ({address})");
            match shard::load_scripts(connection.clone(), sources, &at, deadline).await? {
                Contact::Down(reason) => {
                    tracing::warn!(
                        node = address,
                        reason,
                        "cluster seed node out of reach at start"
                    );
                    continue;
                }
                Contact::Fine => {}
            }
            // A seed may be a replica (any node will do), but its policy must not evict.
            let rules = health::StartRules {
                primary_required: false,
                allow_eviction: self.factory.access.allow_eviction,
            };
            health::first_look(connection.clone(), &at, rules, deadline).await?;
            let mut connection = connection.clone();
            let command = redis::cmd("CLUSTER").arg("SHARDS").clone();
            let read =
                tokio::time::timeout(deadline, command.query_async::<Value>(&mut connection));
            match read.await {
                Ok(Ok(_)) => {}
                Ok(Err(e)) if e.to_string().contains("cluster support disabled") => {
                    return Err(ConfigError::Invalid {
                        field: "store.cluster.nodes",
                        message: format!(
                            "{at} is not in cluster mode (cluster-enabled no): list it under \
                             store.redis_shards, or point store.cluster at a Redis Cluster"
                        ),
                    });
                }
                Ok(Err(e)) => {
                    access::judge(&e, &at, "store.auth")?;
                }
                Err(_) => {}
            }
        }
        if !self.refresh().await {
            tracing::warn!(
                "no cluster node answered for the slot map at start; serving under the failure policy"
            );
        }
        // Each primary's path before the first request (a primary found later learns its own).
        let primaries = self.primaries();
        futures::future::join_all(primaries.iter().map(|node| node.learn_path(deadline))).await;
        Ok(())
    }
}

#[cfg(test)]
mod tests;
