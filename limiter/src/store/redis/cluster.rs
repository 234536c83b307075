//! A Redis Cluster as the store: which primary serves a key. Every key of an account shares the
//! account's hash tag, so an operation touches one slot; the slot map (`CLUSTER SHARDS`, asked of
//! the nodes the limiter knows and of the configured seed nodes) names the primary, and each
//! primary is a [`Shard`] with its own batch queue, breaker and probe, as with client-side shards.
//!
//! The map is read again in the background: every `refresh_interval`, at once when a node fails
//! or answers `MOVED` (one reader, at most one read per [`MIN_REFRESH_GAP`]), and every probe
//! interval while a primary's circuit is open, so that a promoted replica is found quickly. A
//! `MOVED` also patches its slot at once. Primaries that no longer serve a slot are let go.

use std::collections::BTreeMap;
use std::sync::atomic::AtomicUsize;
use std::sync::{Arc, Mutex, RwLock, Weak};
use std::time::Duration;

use redis::Value;
use redis::aio::ConnectionManager;
use tokio::sync::{Notify, watch};

use super::access::{self, Access, Contact};
use super::health;
use super::shard::{self, Shard};
use super::unusable::{Change, UnusableNodes};
use crate::config::ConfigError;

/// Slots in a Redis Cluster.
pub const SLOTS: usize = 16384;

/// The least time between two reads of the slot map, however often one is asked for.
pub const MIN_REFRESH_GAP: Duration = Duration::from_millis(50);

/// CRC16-CCITT (XMODEM), the checksum Redis Cluster hashes keys with.
fn crc16(bytes: &[u8]) -> u16 {
    let mut crc: u16 = 0;
    for &byte in bytes {
        crc ^= u16::from(byte) << 8;
        for _ in 0..8 {
            crc = if crc & 0x8000 != 0 {
                (crc << 1) ^ 0x1021
            } else {
                crc << 1
            };
        }
    }
    crc
}

/// The slot of a key, as Redis computes it: the hash tag (between the first `{` and the next
/// `}`) when it is not empty, else the whole key.
pub fn key_slot(key: &[u8]) -> u16 {
    let tagged = key.iter().position(|&b| b == b'{').and_then(|open| {
        let rest = &key[open + 1..];
        let close = rest.iter().position(|&b| b == b'}')?;
        (close > 0).then(|| &rest[..close])
    });
    crc16(tagged.unwrap_or(key)) % SLOTS as u16
}

/// The slot of every key tagged `{tag}` (an account id or a user name: the id rules allow no
/// braces, so the whole tag is the hash tag).
pub fn tag_slot(tag: &str) -> u16 {
    crc16(tag.as_bytes()) % SLOTS as u16
}

/// What a node's error reply asks of the client.
#[derive(Debug, PartialEq, Eq)]
pub enum Redirect {
    /// The slot has a new owner: for good.
    Moved { slot: u16, address: String },
    /// This one command goes to `address`, after `ASKING` (a slot being migrated).
    Ask { address: String },
    /// Try again shortly (a slot in mid-migration).
    TryAgain,
}

impl Redirect {
    /// Reads `MOVED 3999 127.0.0.1:6381`, `ASK 3999 127.0.0.1:6381` and `TRYAGAIN ...`.
    pub fn parse(error: &redis::ServerError) -> Option<Redirect> {
        let detail = error.details().unwrap_or_default();
        let mut words = detail.split_whitespace();
        match error.code() {
            "TRYAGAIN" => Some(Redirect::TryAgain),
            code @ ("MOVED" | "ASK") => {
                let slot = words.next()?.parse().ok()?;
                let address = words.next()?.to_owned();
                Some(match code {
                    "MOVED" => Redirect::Moved { slot, address },
                    _ => Redirect::Ask { address },
                })
            }
            _ => None,
        }
    }
}

/// The primaries of the cluster as one read of the map named them: slot ranges and an address.
type SlotRanges = Vec<(u16, u16, String)>;

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

    /// Whether some primary's circuit is open (the map is read more often then).
    fn failing(&self) -> bool {
        self.table().nodes.iter().any(|n| n.breaker.is_open())
    }
}

fn split_address(address: &str) -> Result<(&str, u16), String> {
    let (host, port) = address
        .rsplit_once(':')
        .ok_or_else(|| format!("{address:?} is not host:port"))?;
    let port = port
        .parse()
        .map_err(|_| format!("{address:?} is not host:port"))?;
    Ok((host.trim_start_matches('[').trim_end_matches(']'), port))
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

/// The text or number a map entry holds.
fn text(value: &Value) -> Option<String> {
    match value {
        Value::BulkString(b) => String::from_utf8(b.clone()).ok(),
        Value::SimpleString(s) => Some(s.clone()),
        Value::VerbatimString { text, .. } => Some(text.clone()),
        Value::Int(n) => Some(n.to_string()),
        _ => None,
    }
}

/// The fields of a map reply: a RESP3 map or a RESP2 array of alternating names and values.
fn fields(value: &Value) -> Option<Vec<(String, &Value)>> {
    match value {
        Value::Map(pairs) => pairs.iter().map(|(k, v)| Some((text(k)?, v))).collect(),
        Value::Array(items) if items.len() % 2 == 0 => items
            .chunks(2)
            .map(|pair| Some((text(&pair[0])?, &pair[1])))
            .collect(),
        _ => None,
    }
}

fn field<'a>(fields: &[(String, &'a Value)], name: &str) -> Option<&'a Value> {
    fields.iter().find(|(k, _)| k == name).map(|(_, v)| *v)
}

/// The host of a `host:port` address (`[v6]:port` too).
fn host_of(address: &str) -> &str {
    let host = address.rsplit_once(':').map_or(address, |(host, _)| host);
    host.trim_start_matches('[').trim_end_matches(']')
}

/// Reads `CLUSTER SHARDS`: per shard its slot ranges and its primary's address (`tls-port` when
/// the nodes are reached over TLS). A shard without a primary is left out. A node that has not
/// yet learnt its own address (a lone node, before it has met another) reports an empty
/// `endpoint` and `ip`: it is then at `asked_host`, the host the question went to.
pub fn parse_shards(reply: &Value, tls: bool, asked_host: &str) -> Option<SlotRanges> {
    let Value::Array(shards) = reply else {
        return None;
    };
    let mut ranges = Vec::new();
    for shard in shards {
        let shard = fields(shard)?;
        let Value::Array(bounds) = field(&shard, "slots")? else {
            return None;
        };
        let Value::Array(nodes) = field(&shard, "nodes")? else {
            return None;
        };
        let primary = nodes
            .iter()
            .filter_map(fields)
            .find(|node| field(node, "role").and_then(text).as_deref() == Some("master"));
        let Some(primary) = primary else { continue };
        let host = field(&primary, "endpoint")
            .and_then(text)
            .filter(|e| !e.is_empty() && e != "?")
            .or_else(|| {
                field(&primary, "ip")
                    .and_then(text)
                    .filter(|ip| !ip.is_empty())
            })
            .unwrap_or_else(|| asked_host.to_owned());
        let port = match tls {
            true => field(&primary, "tls-port").or_else(|| field(&primary, "port")),
            false => field(&primary, "port"),
        }
        .and_then(text)?;
        let address = match host.contains(':') {
            true => format!("[{host}]:{port}"),
            false => format!("{host}:{port}"),
        };
        for pair in bounds.chunks(2) {
            let [first, last] = pair else { return None };
            let first: u16 = text(first)?.parse().ok()?;
            let last: u16 = text(last)?.parse().ok()?;
            if first > last || usize::from(last) >= SLOTS {
                return None;
            }
            ranges.push((first, last, address.clone()));
        }
    }
    Some(ranges)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slots_are_the_ones_redis_computes() {
        // Values from `CLUSTER KEYSLOT` on Redis 7.
        assert_eq!(crc16(b"123456789"), 0x31C3);
        assert_eq!(key_slot(b"foo"), 12182);
        assert_eq!(key_slot(b"sl:{a}"), 15495);
        assert_eq!(key_slot(b"sl:audit"), key_slot(b"sl:audit"));
        assert_eq!(key_slot(b"{user1000}.following"), key_slot(b"user1000"));
        assert_eq!(key_slot(b"foo{}{bar}"), crc16(b"foo{}{bar}") % 16384);
        assert_eq!(key_slot(b"foo{{bar}}zap"), crc16(b"{bar") % 16384);
        for tag in ["acct-1", "a", "user.name:x"] {
            let keys = [
                format!("sl:{{{tag}}}"),
                format!("sl:audit:{{{tag}}}"),
                format!("sl:session:{{{tag}}}"),
                format!("sl:{{{tag}}}12345678"),
            ];
            for key in keys {
                assert_eq!(key_slot(key.as_bytes()), tag_slot(tag), "{key}");
            }
        }
    }

    #[test]
    fn redirections_are_read() {
        let read = |reply: &str| match redis::parse_redis_value(reply.as_bytes()).unwrap() {
            Value::ServerError(error) => Redirect::parse(&error),
            other => panic!("{other:?}"),
        };
        assert_eq!(
            read("-MOVED 3999 127.0.0.1:6381\r\n"),
            Some(Redirect::Moved {
                slot: 3999,
                address: "127.0.0.1:6381".into()
            })
        );
        assert_eq!(
            read("-ASK 3999 10.0.0.2:7000\r\n"),
            Some(Redirect::Ask {
                address: "10.0.0.2:7000".into()
            })
        );
        assert_eq!(
            read("-TRYAGAIN the slot is migrating\r\n"),
            Some(Redirect::TryAgain)
        );
        assert_eq!(read("-NOSCRIPT No matching script\r\n"), None);
        assert_eq!(read("-MOVED nonsense\r\n"), None);
    }

    fn bulk(s: &str) -> Value {
        Value::BulkString(s.as_bytes().to_vec())
    }

    fn node(id: &str, port: i64, role: &str) -> Value {
        Value::Array(vec![
            bulk("id"),
            bulk(id),
            bulk("port"),
            Value::Int(port),
            bulk("ip"),
            bulk("127.0.0.1"),
            bulk("endpoint"),
            bulk("127.0.0.1"),
            bulk("role"),
            bulk(role),
            bulk("health"),
            bulk("online"),
        ])
    }

    #[test]
    fn a_cluster_shards_reply_names_each_range_s_primary() {
        let reply = Value::Array(vec![
            Value::Array(vec![
                bulk("slots"),
                Value::Array(vec![
                    Value::Int(0),
                    Value::Int(5460),
                    Value::Int(10923),
                    Value::Int(10923),
                ]),
                bulk("nodes"),
                Value::Array(vec![node("r", 7004, "replica"), node("p", 7001, "master")]),
            ]),
            Value::Array(vec![
                bulk("slots"),
                Value::Array(vec![]),
                bulk("nodes"),
                Value::Array(vec![node("q", 7009, "master")]),
            ]),
        ]);
        assert_eq!(
            parse_shards(&reply, false, "10.0.0.9").unwrap(),
            [
                (0, 5460, "127.0.0.1:7001".to_owned()),
                (10923, 10923, "127.0.0.1:7001".to_owned())
            ]
        );
        assert!(parse_shards(&Value::Int(1), false, "10.0.0.9").is_none());
    }

    #[test]
    fn a_lone_node_that_does_not_know_its_address_is_where_it_was_asked() {
        // What Redis 7.0 answers on a node that owns every slot and has met no other node.
        let lone = Value::Array(vec![Value::Array(vec![
            bulk("slots"),
            Value::Array(vec![bulk("0"), bulk("16383")]),
            bulk("nodes"),
            Value::Array(vec![Value::Array(vec![
                bulk("port"),
                Value::Int(7501),
                bulk("ip"),
                bulk(""),
                bulk("endpoint"),
                bulk(""),
                bulk("role"),
                bulk("master"),
            ])]),
        ])]);
        assert_eq!(
            parse_shards(&lone, false, host_of("127.0.0.5:7501")).unwrap(),
            [(0, 16383, "127.0.0.5:7501".to_owned())]
        );
        assert_eq!(host_of("[::1]:7000"), "::1");
    }

    #[test]
    fn addresses_split_into_host_and_port() {
        assert_eq!(split_address("10.0.0.1:6379").unwrap(), ("10.0.0.1", 6379));
        assert_eq!(split_address("[::1]:7000").unwrap(), ("::1", 7000));
        assert!(split_address("nowhere").is_err());
    }
}
