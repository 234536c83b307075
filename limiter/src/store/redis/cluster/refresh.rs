//! Keeping the slot map current: reading it again ([`Topology::refresh`]) and putting it in force,
//! in the background ([`spawn_refresher`]) and when asked, and logging its changes.

use std::collections::BTreeMap;
use std::sync::{Arc, Weak};
use std::time::Duration;

use redis::Value;
use redis::aio::ConnectionManager;

use super::slot_map::{SlotRanges, host_of, parse_shards};
use super::slots::SLOTS;
use super::{NONE, Table, Topology};
use crate::store::redis::shard::Shard;
use crate::store::redis::unusable::Change;

/// The least time between two reads of the slot map, however often one is asked for.
pub const MIN_REFRESH_GAP: Duration = Duration::from_millis(50);

impl Topology {
    /// Reads the map from the first node that answers (the known primaries, then the seed
    /// nodes) and puts it in force. Returns false when no node answered.
    pub async fn refresh(&self) -> bool {
        let deadline = self.factory.deadline.max(Duration::from_millis(250));
        let mut asked: Vec<(String, ConnectionManager)> = self
            .primaries()
            .iter()
            .filter(|n| !n.breaker.is_open())
            .filter_map(|n| Some((n.address(), n.connection()?)))
            .collect();
        asked.extend(self.seeds.iter().cloned());
        for (address, mut connection) in asked {
            let command = redis::cmd("CLUSTER").arg("SHARDS").clone();
            let read =
                tokio::time::timeout(deadline, command.query_async::<Value>(&mut connection));
            let Ok(Ok(reply)) = read.await else { continue };
            let Some(ranges) = parse_shards(&reply, self.tls, host_of(&address)) else {
                continue;
            };
            if ranges.is_empty() {
                continue;
            }
            self.install(&ranges);
            self.maps.send_modify(|n| *n += 1);
            return true;
        }
        false
    }

    /// Puts a map in force: known primaries keep their shard (queue, breaker, counters), new ones
    /// get one, and those that serve no slot are let go.
    fn install(&self, ranges: &SlotRanges) {
        let mut nodes: BTreeMap<&str, Arc<Shard>> = BTreeMap::new();
        let mut unusable = BTreeMap::new();
        let before = self.describe();
        for (_, _, address) in ranges {
            if nodes.contains_key(address.as_str()) || unusable.contains_key(address) {
                continue;
            }
            match self.node_at(address) {
                Ok(node) => {
                    nodes.insert(address, node);
                }
                Err(e) => {
                    unusable.insert(address.clone(), e);
                }
            }
        }
        self.note_unusable(unusable);
        let list: Vec<Arc<Shard>> = nodes.values().cloned().collect();
        let mut owners = vec![NONE; SLOTS];
        for (first, last, address) in ranges {
            if let Some(at) = list.iter().position(|n| n.address() == *address) {
                owners[usize::from(*first)..=usize::from(*last)].fill(at as u16);
            }
        }
        *self.table.write().unwrap_or_else(|e| e.into_inner()) = Table {
            owners,
            nodes: list,
        };
        let after = self.describe();
        if after != before {
            tracing::warn!(from = before, to = after, "cluster slot map changed");
        }
    }

    /// Logs the unusable nodes once per change (the map is read every few seconds).
    fn note_unusable(&self, found: BTreeMap<String, String>) {
        let mut unusable = self.unusable.lock().unwrap_or_else(|e| e.into_inner());
        for change in unusable.update(found) {
            match change {
                Change::Unusable { address, error } => tracing::warn!(
                    address,
                    error,
                    "cluster node with an unusable address: its slots are not served until \
                     the slot map names a usable address (fix the node's cluster-announce-* settings)"
                ),
                Change::Cleared { address } => {
                    tracing::info!(address, "cluster node no longer unusable")
                }
            }
        }
    }

    /// How many nodes of the last slot map have an address the limiter cannot use.
    pub fn unusable_nodes(&self) -> usize {
        self.unusable
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .count()
    }

    /// The map in brief, for the log: each primary and how many slots it serves.
    fn describe(&self) -> String {
        let table = self.table();
        let mut counts = vec![0usize; table.nodes.len()];
        for &at in &table.owners {
            if at != NONE {
                counts[usize::from(at)] += 1;
            }
        }
        let unserved = table.owners.iter().filter(|&&at| at == NONE).count();
        let mut parts: Vec<String> = table
            .nodes
            .iter()
            .zip(counts)
            .filter(|(_, n)| *n > 0)
            .map(|(node, n)| format!("{} ({n} slots)", node.address()))
            .collect();
        if unserved > 0 {
            parts.push(format!("{unserved} slots unserved"));
        }
        parts.join(", ")
    }

    /// Whether some primary's circuit is open (the map is read more often then).
    fn failing(&self) -> bool {
        self.table().nodes.iter().any(|n| n.breaker.is_open())
    }
}

/// Reads the map in the background until the topology is dropped: every `interval`, every
/// `probe_interval` while a primary's circuit is open, and whenever asked, at most once per
/// [`MIN_REFRESH_GAP`].
pub fn spawn_refresher(topology: Weak<Topology>, interval: Duration, probe_interval: Duration) {
    let Some(wake) = topology.upgrade().map(|t| t.wake.clone()) else {
        return;
    };
    tokio::spawn(async move {
        loop {
            let Some(topology) = topology.upgrade() else {
                return;
            };
            let answered = topology.refresh().await;
            let pause = if !answered || topology.failing() {
                probe_interval.min(interval)
            } else {
                interval
            };
            drop(topology);
            tokio::select! {
                () = tokio::time::sleep(pause) => {}
                () = wake.notified() => {}
            }
            tokio::time::sleep(MIN_REFRESH_GAP).await;
        }
    });
}
