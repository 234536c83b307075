//! Suite **whole-cluster restart**: `examples/dev.yaml` grown to 2 shards of a primary and a
//! replica with 3 Sentinels (policy `open`), as the operator's pure build renders it, run as
//! local pods and bootstrapped only by the shipped scripts. Plays on both shards; then every
//! pod (Redis, Sentinels, the limiter) is killed and started again at once, as after a power
//! cut. Afterwards: exactly one primary per shard, its replica following it, every Sentinel
//! naming it; plays decided by Redis again (the window is printed); the streams of before
//! re-register on their next heartbeat (the data went with the restart: no persistence) and
//! the caps hold; no 5xx answered at any time.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use reqwest::StatusCode;
use screenlimit_limiter::store::redis::ring::shard_for;
use screenlimit_operator::build::build;
use screenlimit_operator::names::Names;
use screenlimit_system_tests::pods::{Cluster, Pod};
use screenlimit_system_tests::redis_pods::{START, role, wait_primary_everywhere, wait_replica_of};
use screenlimit_system_tests::{binary, example, named, operator_secrets, require_root};
use serde_json::{Value, json};

const SHARDS: usize = 2;

fn http() -> reqwest::Client {
    reqwest::Client::builder()
        .timeout(Duration::from_secs(5))
        .build()
        .unwrap()
}

/// A play-start: status and body; `None` when the limiter did not answer (its pod restarting).
async fn play(limiter: &str, account: &str, device: &str) -> Option<(StatusCode, Value)> {
    let response = http()
        .post(format!("{limiter}/v1/streams"))
        .json(&json!({"account_id": account, "device_id": device, "plan": "basic"}))
        .send()
        .await
        .ok()?;
    let status = response.status();
    Some((status, response.json().await.unwrap_or_default()))
}

async fn heartbeat(limiter: &str, account: &str, stream_id: &str) -> (StatusCode, Value) {
    let response = http()
        .put(format!("{limiter}/v1/streams/{stream_id}/heartbeat"))
        .json(&json!({"account_id": account}))
        .send()
        .await
        .expect("the limiter answers a heartbeat");
    let status = response.status();
    (status, response.json().await.unwrap_or_default())
}

/// `count` account ids per shard, by the limiter's own ring.
fn accounts_per_shard(count: usize) -> Vec<Vec<String>> {
    let mut shards = vec![Vec::new(); SHARDS];
    for i in 0.. {
        let account = format!("acct-restart-{i}");
        let shard = &mut shards[shard_for(&account, SHARDS)];
        if shard.len() < count {
            shard.push(account);
        }
        if shards.iter().all(|s| s.len() == count) {
            break;
        }
    }
    shards
}

/// Until every shard decides a play through Redis (not degraded): the time it took. Fresh
/// accounts each time, so that nothing is denied.
async fn wait_decided(api: &str, round: &str) -> Duration {
    let start = Instant::now();
    let mut attempt = 0;
    for shard in 0..SHARDS {
        loop {
            attempt += 1;
            let account = format!("acct-{round}-{attempt}");
            if shard_for(&account, SHARDS) != shard {
                continue;
            }
            if let Some((StatusCode::OK, body)) = play(api, &account, "tv").await
                && body["degraded"] != true
            {
                break;
            }
            assert!(
                start.elapsed() < START,
                "no play decided by shard {shard} after {START:?}"
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
    start.elapsed()
}

/// Exactly one primary among `pods`, the others replicating it, every Sentinel naming it.
fn assert_one_primary(pods: &[Pod], sentinels: &[Pod], master: &str) {
    let roles: Vec<String> = pods.iter().map(|p| role(p)[0].clone()).collect();
    let primaries: Vec<&Pod> = pods
        .iter()
        .zip(&roles)
        .filter(|(_, r)| *r == "master")
        .map(|(p, _)| p)
        .collect();
    assert_eq!(
        primaries.len(),
        1,
        "{master}: roles {roles:?}\n{}",
        pods.iter().map(Pod::log).collect::<Vec<_>>().join("\n")
    );
    for pod in pods {
        if pod.name != primaries[0].name {
            wait_replica_of(pod, primaries[0]);
        }
    }
    wait_primary_everywhere(sentinels, master, primaries[0]);
}

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
    wait_decided(&api, "install").await;

    // One stream per account, on both shards.
    let accounts: Vec<String> = accounts_per_shard(3).into_iter().flatten().collect();
    let mut streams = Vec::new();
    for account in &accounts {
        let (status, body) = play(&api, account, "tv").await.expect("an answer");
        assert_eq!(status, StatusCode::OK, "{body}");
        assert_ne!(body["degraded"], true, "{body}");
        streams.push(body["stream_id"].as_str().unwrap().to_owned());
    }

    // Whatever the limiter answers from now on, it is never a 5xx (policy `open`).
    let stop = Arc::new(AtomicBool::new(false));
    let prober = tokio::spawn({
        let (api, stop) = (api.clone(), Arc::clone(&stop));
        async move {
            let (mut answered, mut unanswered) = (0, 0);
            for i in 0.. {
                if stop.load(Ordering::SeqCst) {
                    break;
                }
                match play(&api, &format!("acct-probe-{i}"), "tv").await {
                    Some((status, body)) => {
                        assert!(!status.is_server_error(), "{status}: {body}");
                        answered += 1;
                    }
                    None => unanswered += 1,
                }
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            (answered, unanswered)
        }
    });

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
    wait_decided(&api, "after").await;
    let decided = cut.elapsed();
    for (i, pods) in shards.iter().enumerate() {
        assert_one_primary(pods, &sentinels, &names.shard_master(i as i32));
    }
    let agreed = cut.elapsed();
    stop.store(true, Ordering::SeqCst);
    let (answered, unanswered) = prober.await.expect("no 5xx while the cluster restarted");
    println!(
        "whole-cluster restart: every pod ready {ready:?} after the cut, plays decided by Redis \
         on every shard {decided:?}, one primary per shard with its replica linked and the \
         Sentinels agreeing {agreed:?}; meanwhile {answered} plays answered (no 5xx), \
         {unanswered} unanswered while the limiter pod restarted"
    );

    // The next heartbeat round brings every lease back, and with them the caps.
    for (account, stream) in accounts.iter().zip(&streams) {
        let (status, body) = heartbeat(&api, account, stream).await;
        assert_eq!(status, StatusCode::OK, "{account}: {body}");
    }
    for account in &accounts {
        let (status, body) = play(&api, account, "phone").await.expect("an answer");
        assert_eq!(status, StatusCode::CONFLICT, "{account}: {body}");
        assert_eq!(body["active"][0]["device_id"], "tv", "{body}");
    }
    // Still one primary per shard once everything has settled.
    for (i, pods) in shards.iter().enumerate() {
        assert_one_primary(pods, &sentinels, &names.shard_master(i as i32));
    }
}
