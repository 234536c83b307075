//! Suite **whole-cluster restart**: `examples/dev.yaml` grown to 2 shards of a primary and a
//! replica with 3 Sentinels (policy `open`), as the operator's pure build renders it, run as
//! local pods and bootstrapped only by the shipped scripts. Plays on both shards; then every
//! pod (Redis, Sentinels, the limiter) is killed and started again at once, as after a power
//! cut. Afterwards: exactly one primary per shard, its replica following it, every Sentinel
//! naming it; plays decided by Redis again (the window is printed); the streams of before
//! re-register on their next heartbeat (the data went with the restart: no persistence) and
//! the caps hold; no 5xx answered at any time.

use std::time::Instant;

use reqwest::StatusCode;
use screenlimit_operator::build::build;
use screenlimit_operator::names::Names;
use screenlimit_system_tests::api::{Prober, accounts_on, heartbeat, play, wait_decided};
use screenlimit_system_tests::pods::{Cluster, Pod};
use screenlimit_system_tests::redis_pods::{START, assert_one_primary};
use screenlimit_system_tests::{binary, example, named, operator_secrets, require_root};

const SHARDS: usize = 2;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_whole_cluster_restart_leaves_one_primary_per_shard_and_the_caps_hold() {
    require_root();
    let mut sl = example("dev.yaml");
    sl.spec.redis.shards = i32::try_from(SHARDS).unwrap();
    sl.spec.redis.replicas_per_shard = 1;
    let desired = build(&sl).expect("the operator's build");
    let names = Names::new("screenlimit-demo");
    let mut cluster = Cluster::new("video", &desired.config_maps);
    for secret in operator_secrets(&sl) {
        cluster.add_secret_object(&secret);
    }
    let mut shards: Vec<Vec<Pod>> = (0..SHARDS)
        .map(|i| {
            let set = named(&desired.stateful_sets, &names.redis_shard(i as i32));
            (0..2).map(|j| cluster.stateful_pod(set, j)).collect()
        })
        .collect();
    let sentinel_set = named(&desired.stateful_sets, &names.sentinel());
    let mut sentinels: Vec<Pod> = (0..3)
        .map(|k| cluster.stateful_pod(sentinel_set, k))
        .collect();
    let mut limiter = cluster.deployment_pod(
        named(&desired.deployments, &names.limiter()),
        &format!("{}-0", names.limiter()),
        vec![binary("screenlimit-limiter")],
    );

    // First install: every pod at once (podManagementPolicy: Parallel); the scripts bootstrap.
    for pod in shards.iter_mut().flatten().chain(&mut sentinels) {
        pod.start();
    }
    for pod in shards.iter_mut().flatten().chain(&mut sentinels) {
        pod.wait_ready(START);
    }
    for (i, pods) in shards.iter().enumerate() {
        assert_one_primary(pods, &sentinels, &names.shard_master(i as i32));
    }
    limiter.start();
    limiter.wait_ready(START);
    let forward = cluster.port_forward(&limiter, 8080);
    let api = forward.url();
    wait_decided(&api, SHARDS, "acct-install", START).await;

    // One stream per account, on both shards.
    let accounts: Vec<String> = (0..SHARDS)
        .flat_map(|shard| accounts_on("acct-restart", shard, SHARDS).take(3))
        .collect();
    let mut streams = Vec::new();
    for account in &accounts {
        let (status, body) = play(&api, account, "tv").await;
        assert_eq!(status, StatusCode::OK, "{body}");
        assert_ne!(body["degraded"], true, "{body}");
        streams.push(body["stream_id"].as_str().unwrap().to_owned());
    }

    // Whatever the limiter answers from now on, it is never a 5xx (policy `open`).
    let prober = Prober::start(&api, "acct-probe");

    // The power cut: every pod at once, then every pod starts again at once.
    let cut = Instant::now();
    for pod in shards.iter_mut().flatten().chain(&mut sentinels) {
        pod.kill();
    }
    limiter.kill();
    for pod in shards.iter_mut().flatten().chain(&mut sentinels) {
        pod.start();
    }
    limiter.start();
    for pod in shards
        .iter_mut()
        .flatten()
        .chain(&mut sentinels)
        .chain(std::iter::once(&mut limiter))
    {
        pod.wait_ready(START);
    }
    let ready = cut.elapsed();
    wait_decided(&api, SHARDS, "acct-after", START).await;
    let decided = cut.elapsed();
    for (i, pods) in shards.iter().enumerate() {
        assert_one_primary(pods, &sentinels, &names.shard_master(i as i32));
    }
    let agreed = cut.elapsed();
    let (answered, unanswered) = prober.stop().await;
    println!(
        "whole-cluster restart: every pod ready {ready:?} after the cut, plays decided by Redis \
         on every shard {decided:?}, one primary per shard with its replica linked and the \
         Sentinels agreeing {agreed:?}; meanwhile {answered} plays answered (no 5xx), \
         {unanswered} unanswered while the limiter pod restarted"
    );

    // The next heartbeat round brings every lease back, and with them the caps.
    for (account, stream) in accounts.iter().zip(&streams) {
        let (status, error) = heartbeat(&api, account, stream).await;
        assert_eq!(status, StatusCode::OK, "{account}: {error}");
    }
    for account in &accounts {
        let (status, body) = play(&api, account, "phone").await;
        assert_eq!(status, StatusCode::CONFLICT, "{account}: {body}");
        assert_eq!(body["active"][0]["device_id"], "tv", "{body}");
    }
    // Still one primary per shard once everything has settled.
    for (i, pods) in shards.iter().enumerate() {
        assert_one_primary(pods, &sentinels, &names.shard_master(i as i32));
    }
}
