//! `examples/dev.yaml` grown to Sentinel-managed shards (a primary and a replica each, 3
//! Sentinels), as the operator's pure build renders it, installed as local pods: every Redis and
//! Sentinel pod at once (`podManagementPolicy: Parallel`), bootstrapped only by the shipped
//! scripts, then the limiter from its Deployment, reached through a port-forward.

use screenlimit_operator::build::{Desired, build};
use screenlimit_operator::names::Names;

use crate::api::wait_decided;
use crate::pods::{Cluster, Pod, PortForward};
use crate::redis_pods::{START, assert_one_primary};
use crate::{add_limiter_image, binary, example, named, operator_secrets};

/// The example's instance name.
pub const INSTANCE: &str = "screenlimit-demo";

/// What the operator renders for the dev example with `shards` Sentinel-managed shards.
pub fn desired(shards: usize) -> Desired {
    let mut sl = example("dev.yaml");
    sl.spec.redis.shards = i32::try_from(shards).unwrap();
    sl.spec.redis.replicas_per_shard = 1;
    build(&sl).expect("the operator's build")
}

/// The running install.
pub struct Install {
    pub names: Names,
    pub cluster: Cluster,
    /// Per shard, its pods by ordinal.
    pub shards: Vec<Vec<Pod>>,
    pub sentinels: Vec<Pod>,
    pub limiter: Pod,
    /// To the limiter pod's port 8080.
    pub forward: PortForward,
}

impl Install {
    /// Starts every pod of `desired` (`shards` shards), checks the bootstrap (one primary per
    /// shard, its replica linked, every Sentinel naming it) and waits until the limiter decides
    /// plays on every shard.
    pub async fn start(desired: &Desired, shards: usize) -> Install {
        let names = Names::new(INSTANCE);
        let mut cluster = Cluster::new("video", &desired.config_maps);
        add_limiter_image(&mut cluster, &example("dev.yaml"));
        for secret in operator_secrets(&example("dev.yaml")) {
            cluster.add_secret_object(&secret);
        }
        let mut shard_pods: Vec<Vec<Pod>> = (0..shards)
            .map(|i| {
                let set = named(&desired.stateful_sets, &names.redis_shard(i as i32));
                (0..2).map(|j| cluster.stateful_pod(set, j)).collect()
            })
            .collect();
        let sentinel_set = named(&desired.stateful_sets, &names.sentinel());
        let mut sentinels: Vec<Pod> = (0..3)
            .map(|k| cluster.stateful_pod(sentinel_set, k))
            .collect();
        for pod in shard_pods.iter_mut().flatten().chain(&mut sentinels) {
            pod.start();
        }
        for pod in shard_pods.iter_mut().flatten().chain(&mut sentinels) {
            pod.wait_ready(START);
        }
        for (i, pods) in shard_pods.iter().enumerate() {
            assert_one_primary(pods, &sentinels, &names.shard_master(i as i32));
        }
        let mut limiter = cluster.deployment_pod(
            named(&desired.deployments, &names.limiter()),
            &format!("{}-0", names.limiter()),
            vec![binary("screenlimit-limiter")],
        );
        limiter.start();
        limiter.wait_ready(START);
        let forward = cluster.port_forward(&limiter, 8080);
        wait_decided(&forward.url(), shards, "acct-install", START).await;
        Install {
            names,
            cluster,
            shards: shard_pods,
            sentinels,
            limiter,
            forward,
        }
    }

    /// `http://…` of the limiter's port-forward.
    pub fn api(&self) -> String {
        self.forward.url()
    }

    /// Asserts one primary per shard, its replica linked, every Sentinel naming it.
    pub fn assert_one_primary_per_shard(&self) {
        for (i, pods) in self.shards.iter().enumerate() {
            assert_one_primary(pods, &self.sentinels, &self.names.shard_master(i as i32));
        }
    }
}
