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
use screenlimit_system_tests::api::{Prober, accounts_on, heartbeat, play, wait_decided};
use screenlimit_system_tests::install::{Install, desired};
use screenlimit_system_tests::redis_pods::START;
use screenlimit_system_tests::require_root;

const SHARDS: usize = 2;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_whole_cluster_restart_leaves_one_primary_per_shard_and_the_caps_hold() {
    require_root();
    let install = &mut Install::start(&desired(SHARDS), SHARDS).await;
    let api = install.api();

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
    for pod in install
        .shards
        .iter_mut()
        .flatten()
        .chain(&mut install.sentinels)
    {
        pod.kill();
    }
    install.limiter.kill();
    for pod in install
        .shards
        .iter_mut()
        .flatten()
        .chain(&mut install.sentinels)
    {
        pod.start();
    }
    install.limiter.start();
    for pod in install
        .shards
        .iter_mut()
        .flatten()
        .chain(&mut install.sentinels)
        .chain(std::iter::once(&mut install.limiter))
    {
        pod.wait_ready(START);
    }
    let ready = cut.elapsed();
    wait_decided(&api, SHARDS, "acct-after", START).await;
    let decided = cut.elapsed();
    install.assert_one_primary_per_shard();
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
    install.assert_one_primary_per_shard();
}
