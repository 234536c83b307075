//! A Redis Cluster of the test's own: `redis-server --cluster-enabled yes` nodes on free loopback
//! ports (each with its own free cluster-bus port, `--cluster-port`), joined by `redis-cli
//! --cluster create`, with a node timeout of one second so that a replica takes over quickly.
//! Every node is killed when the cluster drops.

use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use redis::FromRedisValue;

use super::{free_port, redis_server_bin, wait_for_own_redis};

/// How long a node may be unreachable before the cluster fails it over.
pub const NODE_TIMEOUT_MS: u64 = 1000;

pub struct ClusterNode {
    pub port: u16,
    pub bus_port: u16,
    child: Option<Child>,
    _dir: tempfile::TempDir,
}

impl ClusterNode {
    /// A node with `extra` arguments (`--loadmodule ...`).
    fn start(extra: &[String]) -> Self {
        let mut last_error = String::new();
        for _ in 0..5 {
            match Self::try_start(extra) {
                Ok(node) => return node,
                Err(e) => last_error = e,
            }
        }
        panic!("{last_error}")
    }

    fn try_start(extra: &[String]) -> Result<Self, String> {
        let dir = tempfile::tempdir().unwrap();
        let (port, bus_port) = (free_port(), free_port());
        if port == bus_port {
            return Err("the same port twice".into());
        }
        let child = Command::new(redis_server_bin())
            .args([
                "--port",
                &port.to_string(),
                "--cluster-port",
                &bus_port.to_string(),
            ])
            .args(["--bind", "127.0.0.1", "--save", "", "--appendonly", "no"])
            // A replica syncs at once rather than after waiting 5 s for company.
            .args(["--repl-diskless-sync-delay", "0"])
            .args(["--cluster-enabled", "yes", "--cluster-node-timeout"])
            .arg(NODE_TIMEOUT_MS.to_string())
            .arg("--cluster-config-file")
            .arg(dir.path().join("nodes.conf"))
            .arg("--dir")
            .arg(dir.path())
            .args(extra)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap_or_else(|e| {
                panic!("cannot start redis-server ({e}); run scripts/install-test-deps.sh")
            });
        let mut node = ClusterNode {
            port,
            bus_port,
            child: Some(child),
            _dir: dir,
        };
        wait_for_own_redis(node.child.as_mut().expect("spawned"), port, None)?;
        Ok(node)
    }

    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    pub fn is_running(&self) -> bool {
        self.child.is_some()
    }
}

impl Drop for ClusterNode {
    fn drop(&mut self) {
        self.kill();
    }
}

/// One command to the node on `port`, on a fresh connection.
pub fn query<T: FromRedisValue>(port: u16, command: &redis::Cmd) -> redis::RedisResult<T> {
    let client = redis::Client::open(format!("redis://127.0.0.1:{port}"))?;
    let mut connection = client.get_connection_with_timeout(Duration::from_secs(2))?;
    connection.set_read_timeout(Some(Duration::from_secs(5)))?;
    command.query(&mut connection)
}

fn cmd(words: &[&str]) -> redis::Cmd {
    let mut command = redis::cmd(words[0]);
    for word in &words[1..] {
        command.arg(*word);
    }
    command
}

/// A node as `CLUSTER NODES` lists it.
#[derive(Debug, Clone)]
pub struct NodeLine {
    pub id: String,
    pub port: u16,
    pub primary: bool,
    pub failed: bool,
    /// A replica's primary.
    pub primary_id: Option<String>,
    /// Slot ranges it serves (primaries).
    pub slots: Vec<(u16, u16)>,
}

pub struct RedisCluster {
    pub nodes: Vec<ClusterNode>,
    /// What every node is started with beyond the defaults (the module, for one).
    extra: Vec<String>,
}

impl RedisCluster {
    /// `primaries` primaries with `replicas` replicas each, every node reporting
    /// `cluster_state:ok` and every replica in sync.
    pub fn start(primaries: usize, replicas: usize) -> Self {
        Self::start_with(primaries, replicas, &[])
    }

    /// [`RedisCluster::start`], every node with the screenlimit module loaded.
    pub fn start_with_module(primaries: usize, replicas: usize) -> Self {
        Self::start_with(primaries, replicas, &super::module_args())
    }

    fn start_with(primaries: usize, replicas: usize, extra: &[String]) -> Self {
        let nodes: Vec<ClusterNode> = (0..primaries * (1 + replicas))
            .map(|_| ClusterNode::start(extra))
            .collect();
        let addresses: Vec<String> = nodes
            .iter()
            .map(|n| format!("127.0.0.1:{}", n.port))
            .collect();
        let created = Command::new("redis-cli")
            .args(["--cluster", "create"])
            .args(&addresses)
            .args(["--cluster-replicas", &replicas.to_string(), "--cluster-yes"])
            .stdin(Stdio::null())
            .output()
            .expect("run redis-cli --cluster create");
        assert!(
            created.status.success(),
            "redis-cli --cluster create failed: {}",
            String::from_utf8_lossy(&created.stdout)
        );
        let cluster = RedisCluster {
            nodes,
            extra: extra.to_vec(),
        };
        cluster.wait_until(
            Duration::from_secs(20),
            "every node ok and replicas in sync",
            |c| c.steady(primaries * replicas),
        );
        cluster
    }

    /// Every running node says `cluster_state:ok` and knows the same primaries, and `replicas`
    /// replicas have their link to their primary up.
    fn steady(&self, replicas: usize) -> bool {
        let mut in_sync = 0;
        for node in self.nodes.iter().filter(|n| n.is_running()) {
            let Ok(info) = query::<String>(node.port, &cmd(&["CLUSTER", "INFO"])) else {
                return false;
            };
            if !info.contains("cluster_state:ok") {
                return false;
            }
            let Ok(replication) = query::<String>(node.port, &cmd(&["INFO", "replication"])) else {
                return false;
            };
            in_sync += usize::from(
                replication.contains("role:slave") && replication.contains("master_link_status:up"),
            );
        }
        in_sync >= replicas
    }

    pub fn wait_until(&self, within: Duration, what: &str, done: impl Fn(&Self) -> bool) {
        let deadline = Instant::now() + within;
        while Instant::now() < deadline {
            if done(self) {
                return;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        panic!(
            "cluster: not {what} within {within:?}:\n{}",
            self.describe()
        );
    }

    /// Every node's URL: seeds for the limiter.
    pub fn urls(&self) -> Vec<String> {
        self.nodes.iter().map(ClusterNode::url).collect()
    }

    fn any_running(&self) -> u16 {
        self.nodes
            .iter()
            .find(|n| n.is_running())
            .expect("a running node")
            .port
    }

    /// The nodes as a running node sees them.
    pub fn node_lines(&self) -> Vec<NodeLine> {
        self.node_lines_from(self.any_running())
    }

    fn node_lines_from(&self, port: u16) -> Vec<NodeLine> {
        let text: String = query(port, &cmd(&["CLUSTER", "NODES"])).unwrap_or_default();
        text.lines()
            .filter_map(|line| {
                let words: Vec<&str> = line.split_whitespace().collect();
                let port = words
                    .get(1)?
                    .split('@')
                    .next()?
                    .rsplit(':')
                    .next()?
                    .parse()
                    .ok()?;
                let flags = words.get(2)?;
                let slots = words
                    .iter()
                    .skip(8)
                    .filter(|w| !w.starts_with('['))
                    .filter_map(|range| match range.split_once('-') {
                        Some((a, b)) => Some((a.parse().ok()?, b.parse().ok()?)),
                        None => range.parse().ok().map(|s| (s, s)),
                    })
                    .collect();
                Some(NodeLine {
                    id: words[0].to_owned(),
                    port,
                    primary: flags.contains("master"),
                    failed: flags.contains("fail"),
                    primary_id: words.get(3).filter(|w| **w != "-").map(|w| w.to_string()),
                    slots,
                })
            })
            .collect()
    }

    fn describe(&self) -> String {
        self.nodes
            .iter()
            .filter(|n| n.is_running())
            .map(|n| {
                let nodes: String =
                    query(n.port, &cmd(&["CLUSTER", "NODES"])).unwrap_or_else(|e| e.to_string());
                format!("node {}:\n{nodes}", n.port)
            })
            .collect::<Vec<_>>()
            .join("\n")
    }

    /// The slot of `key`.
    pub fn slot_of(&self, key: &str) -> u16 {
        query(self.any_running(), &cmd(&["CLUSTER", "KEYSLOT", key])).unwrap()
    }

    /// The port of the primary that serves `slot`, as a running node sees it.
    pub fn owner_of(&self, slot: u16) -> u16 {
        self.node_lines()
            .into_iter()
            .find(|n| n.primary && n.slots.iter().any(|(a, b)| (*a..=*b).contains(&slot)))
            .map(|n| n.port)
            .expect("a primary serves every slot")
    }

    pub fn id_of(&self, port: u16) -> String {
        query(port, &cmd(&["CLUSTER", "MYID"])).unwrap()
    }

    /// The primaries' ports.
    pub fn primaries(&self) -> Vec<u16> {
        let mut ports: Vec<u16> = self
            .node_lines()
            .into_iter()
            .filter(|n| n.primary && !n.failed && !n.slots.is_empty())
            .map(|n| n.port)
            .collect();
        ports.sort_unstable();
        ports
    }

    /// The port of a replica of the primary on `port`.
    pub fn replica_of(&self, port: u16) -> u16 {
        let id = self.id_of(port);
        self.node_lines()
            .into_iter()
            .find(|n| n.primary_id.as_deref() == Some(id.as_str()))
            .map(|n| n.port)
            .expect("the primary has a replica")
    }

    /// How far the node on `port` is in its replication stream.
    pub fn replication_offset(&self, port: u16) -> u64 {
        let info: String = query(port, &cmd(&["INFO", "replication"])).unwrap_or_default();
        info.lines()
            .find_map(|l| l.strip_prefix("master_repl_offset:"))
            .and_then(|n| n.trim().parse().ok())
            .unwrap_or(0)
    }

    /// SIGKILL of the node on `port`.
    pub fn kill(&mut self, port: u16) {
        self.nodes
            .iter_mut()
            .find(|n| n.port == port)
            .expect("a node of this cluster")
            .kill();
    }

    /// Moves `slot` with its keys to the primary on `to`, the way `redis-cli --cluster
    /// reshard` does: importing and migrating states, the keys moved with `MIGRATE`, then the
    /// slot given to its new owner on both nodes. `between` runs while the slot is open (keys
    /// still on the source) and again once they have moved, before the slot changes hands.
    pub fn migrate_slot(&self, slot: u16, to: u16, between: impl Fn(&str)) {
        let from = self.owner_of(slot);
        assert_ne!(from, to, "slot {slot} is already there");
        let (from_id, to_id) = (self.id_of(from), self.id_of(to));
        let slot_text = slot.to_string();
        let setslot = |port: u16, words: &[&str]| {
            let mut words_all = vec!["CLUSTER", "SETSLOT", &slot_text];
            words_all.extend_from_slice(words);
            let _: () = query(port, &cmd(&words_all)).unwrap();
        };
        setslot(to, &["IMPORTING", &from_id]);
        setslot(from, &["MIGRATING", &to_id]);
        between("open");
        loop {
            let keys: Vec<Vec<u8>> = query(
                from,
                &cmd(&["CLUSTER", "GETKEYSINSLOT", &slot_text, "1000"]),
            )
            .unwrap();
            if keys.is_empty() {
                break;
            }
            let mut migrate = redis::cmd("MIGRATE");
            migrate
                .arg("127.0.0.1")
                .arg(to)
                .arg("")
                .arg(0)
                .arg(5000)
                .arg("REPLACE")
                .arg("KEYS");
            for key in &keys {
                migrate.arg(key.as_slice());
            }
            let _: String = query(from, &migrate).unwrap();
        }
        between("moved");
        setslot(to, &["NODE", &to_id]);
        setslot(from, &["NODE", &to_id]);
        for node in self.node_lines() {
            if node.primary && node.port != from && node.port != to && !node.failed {
                let _ = query::<()>(
                    node.port,
                    &cmd(&["CLUSTER", "SETSLOT", &slot_text, "NODE", &to_id]),
                );
            }
        }
    }

    /// A new empty primary, joined to the cluster (`redis-cli --cluster add-node`) and known to
    /// every node; it serves no slot until some are moved to it.
    pub fn add_primary(&mut self) -> u16 {
        let node = ClusterNode::start(&self.extra);
        let port = node.port;
        let added = Command::new("redis-cli")
            .args(["--cluster", "add-node"])
            .arg(format!("127.0.0.1:{port}"))
            .arg(format!("127.0.0.1:{}", self.any_running()))
            .stdin(Stdio::null())
            .output()
            .expect("run redis-cli --cluster add-node");
        assert!(
            added.status.success(),
            "redis-cli --cluster add-node failed: {}",
            String::from_utf8_lossy(&added.stdout)
        );
        self.nodes.push(node);
        // Killed nodes stay listed (as failed): every node ever started.
        let count = self.nodes.len();
        self.wait_until(Duration::from_secs(20), "ok with the new node", |c| {
            c.nodes.iter().filter(|n| n.is_running()).all(|n| {
                c.node_lines_from(n.port).len() >= count
                    && query::<String>(n.port, &cmd(&["CLUSTER", "INFO"]))
                        .is_ok_and(|info| info.contains("cluster_state:ok"))
            })
        });
        port
    }
}
