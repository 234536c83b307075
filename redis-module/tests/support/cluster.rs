//! A two-node Redis (or Valkey) Cluster with the module loaded on both nodes: node 0 serves
//! slots 0..8191, node 1 slots 8192..16383, no replicas, nothing migrating. Formed with
//! `CLUSTER ADDSLOTSRANGE` and `CLUSTER MEET`, no `redis-cli`, so it forms the same on both
//! servers.

use std::time::{Duration, Instant};

use redis::Connection;

use super::{Engine, Server, free_port};

/// The first slot node 1 serves.
pub const SPLIT: i64 = 8192;

pub struct Cluster {
    pub nodes: [Server; 2],
    /// The cluster bus port of each node (its own: the default, port + 10000, may be taken).
    buses: [u16; 2],
}

/// A cluster node with the module, its config file in its own directory.
fn node(engine: Engine, bus: u16) -> Server {
    let bus = bus.to_string();
    Server::with_module_on(
        engine,
        &[
            "--cluster-enabled",
            "yes",
            "--cluster-config-file",
            "nodes.conf",
            "--cluster-port",
            &bus,
        ],
    )
}

impl Cluster {
    pub fn start(engine: Engine) -> Cluster {
        let buses = [free_port(), free_port()];
        let cluster = Cluster {
            nodes: [node(engine, buses[0]), node(engine, buses[1])],
            buses,
        };
        let ranges = [(0, SPLIT - 1), (SPLIT, 16383)];
        for (n, (first, last)) in ranges.iter().enumerate() {
            redis::cmd("CLUSTER")
                .arg("ADDSLOTSRANGE")
                .arg(first)
                .arg(last)
                .exec(&mut cluster.connect(n))
                .unwrap();
        }
        redis::cmd("CLUSTER")
            .arg("MEET")
            .arg("127.0.0.1")
            .arg(cluster.nodes[1].port)
            .arg(cluster.buses[1])
            .exec(&mut cluster.connect(0))
            .unwrap();
        let deadline = Instant::now() + Duration::from_secs(20);
        while !(0..2).all(|n| cluster.formed(n)) {
            assert!(
                Instant::now() < deadline,
                "the two-node cluster never formed"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
        cluster
    }

    /// Whether node `n` knows both nodes and every slot, and says so.
    fn formed(&self, n: usize) -> bool {
        let mut c = self.connect(n);
        let info: String = redis::cmd("CLUSTER").arg("INFO").query(&mut c).unwrap();
        let slots: Vec<redis::Value> = redis::cmd("CLUSTER").arg("SLOTS").query(&mut c).unwrap();
        info.contains("cluster_state:ok")
            && info.contains("cluster_known_nodes:2")
            && slots.len() == 2
    }

    pub fn connect(&self, n: usize) -> Connection {
        self.nodes[n].connect()
    }

    /// The slot of a key, as the cluster computes it.
    pub fn slot(&self, c: &mut Connection, key: &[u8]) -> i64 {
        redis::cmd("CLUSTER")
            .arg("KEYSLOT")
            .arg(key)
            .query(c)
            .unwrap()
    }

    /// The node that serves a slot.
    pub fn owner(slot: i64) -> usize {
        usize::from(slot >= SPLIT)
    }

    /// The keys some node holds outside its own slots, or that the node does not file under
    /// their slot (`CLUSTER GETKEYSINSLOT` leaves them out): each as node, key, slot.
    pub fn misfiled(&self) -> Vec<(usize, String, i64)> {
        let mut wrong = Vec::new();
        for n in 0..2 {
            let mut c = self.connect(n);
            let names: Vec<Vec<u8>> = redis::cmd("KEYS").arg("*").query(&mut c).unwrap();
            for name in names {
                let slot = self.slot(&mut c, &name);
                let filed: Vec<Vec<u8>> = redis::cmd("CLUSTER")
                    .arg("GETKEYSINSLOT")
                    .arg(slot)
                    .arg(100_000)
                    .query(&mut c)
                    .unwrap();
                if Cluster::owner(slot) != n || !filed.contains(&name) {
                    wrong.push((n, String::from_utf8_lossy(&name).into_owned(), slot));
                }
            }
        }
        wrong
    }
}
