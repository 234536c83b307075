//! Never more than N, through the HTTP API: many devices race for each account's last slot.
//! On Redis the racers are spread over three limiter processes sharing one `redis-server` (or one
//! Redis Cluster), so the only thing that can serialise them is the store's atomic script.

mod support;

use std::time::Instant;

use futures::future::join_all;
use reqwest::StatusCode;
use serde_json::json;
use support::cluster::RedisCluster;
use support::{Api, LimiterProcess, RedisServer, SECRET, redis_config};

const ACCOUNTS: usize = 20;
const RACERS_PER_ACCOUNT: usize = 60;

/// Fills all but one slot of each `standard` (2) account, then fires every racer at once.
/// Returns (attempts, winners) after checking every account holds exactly its limit.
async fn race_for_the_last_slot(instances: &[Api], tag: &str) -> (usize, usize) {
    for a in 0..ACCOUNTS {
        let account = format!("{tag}-{a}");
        let first = instances[0]
            .play(json!({"account_id": account, "device_id": "tv", "plan": "standard"}))
            .await;
        assert_eq!(first.status, StatusCode::OK, "{first:?}");
    }
    let attempts: Vec<_> = (0..ACCOUNTS)
        .flat_map(|a| (0..RACERS_PER_ACCOUNT).map(move |r| (a, r)))
        .map(|(a, r)| {
            let api = instances[(a + r) % instances.len()].clone();
            async move {
                (
                    a,
                    api.play_on(&format!("{tag}-{a}"), &format!("device-{r}"))
                        .await,
                )
            }
        })
        .collect();
    let started = Instant::now();
    let results = join_all(attempts).await;
    let elapsed = started.elapsed();

    let mut winners_per_account = vec![0usize; ACCOUNTS];
    for (account, reply) in &results {
        match reply.status {
            StatusCode::OK => winners_per_account[*account] += 1,
            StatusCode::CONFLICT => assert_eq!(reply.error(), "concurrent_stream_limit"),
            other => panic!("a racer got {other}: {reply:?}"),
        }
    }
    assert!(
        winners_per_account.iter().all(|&w| w == 1),
        "each account's last slot goes to exactly one racer: {winners_per_account:?}"
    );
    for a in 0..ACCOUNTS {
        let listed = instances[a % instances.len()]
            .list(&format!("{tag}-{a}"))
            .await;
        assert_eq!(
            listed.body["active"].as_array().unwrap().len(),
            2,
            "account {a} holds exactly 2"
        );
    }
    let winners: usize = winners_per_account.iter().sum();
    println!(
        "race[{tag}]: {} attempts over {ACCOUNTS} accounts via {} instance(s) in {elapsed:?}: {winners} winners",
        results.len(),
        instances.len()
    );
    (results.len(), winners)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_last_slot_goes_to_exactly_one_racer_across_three_limiters_on_one_redis() {
    let redis = RedisServer::start();
    // A generous deadline and no admission: this test is about atomicity, not about the failure
    // policy. On a loaded machine admission sheds part of the 1,200-call burst (tests/spike.rs
    // covers that), and a shed play is decided without the store, so not by this race.
    let config =
        redis_config(&[redis.url()], "").replace("timeout: 25ms", "timeout: 2s\n  admission: off");
    let limiters: Vec<LimiterProcess> = (0..3).map(|_| LimiterProcess::start(&config)).collect();
    let instances: Vec<Api> = limiters.iter().map(LimiterProcess::client).collect();
    let (attempts, winners) = race_for_the_last_slot(&instances, "redis").await;
    assert_eq!(
        (attempts, winners),
        (ACCOUNTS * RACERS_PER_ACCOUNT, ACCOUNTS)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_last_slot_goes_to_exactly_one_racer_across_three_limiters_on_a_redis_cluster() {
    let cluster = RedisCluster::start(3, 1);
    let nodes: Vec<String> = cluster.urls().iter().map(|u| format!("\"{u}\"")).collect();
    let config = format!(
        "store:\n  backend: redis\n  cluster: {{ nodes: [{}] }}\n  timeout: 2s\n  admission: off\nstream_id_secret: \"{SECRET}\"\n",
        nodes.join(", ")
    );
    let limiters: Vec<LimiterProcess> = (0..3).map(|_| LimiterProcess::start(&config)).collect();
    let instances: Vec<Api> = limiters.iter().map(LimiterProcess::client).collect();
    let (attempts, winners) = race_for_the_last_slot(&instances, "cluster").await;
    assert_eq!(
        (attempts, winners),
        (ACCOUNTS * RACERS_PER_ACCOUNT, ACCOUNTS)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_last_slot_goes_to_exactly_one_racer_on_the_embedded_store() {
    let limiter = LimiterProcess::start("");
    let (attempts, winners) = race_for_the_last_slot(&[limiter.client()], "memory").await;
    assert_eq!(
        (attempts, winners),
        (ACCOUNTS * RACERS_PER_ACCOUNT, ACCOUNTS)
    );
}
