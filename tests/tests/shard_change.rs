//! Suite **shard count change**: `examples/dev.yaml` with 2 Sentinel-managed shards (a primary
//! and a replica each, 3 Sentinels, policy `open`) grown to 3 through the operator's pure build,
//! applied the way the cluster applies it: the new StatefulSet's pods start (the shipped scripts
//! bootstrap them), every StatefulSet whose pod template changed rolls one pod at a time from
//! the highest ordinal (the Sentinels: their masters list changed; the data pods must not
//! change), then the limiter's Deployment rolls to its new config. Checked from outside: no
//! failover and no cap broken during the Sentinel roll, every Sentinel monitors the new shard
//! afterwards, plays are decided on all 3 shards, the next heartbeat round moves exactly the
//! accounts the ring moves (about 1/3) to the new shard and the caps hold; never a 5xx.

use std::time::Instant;

use k8s_openapi::api::apps::v1::StatefulSet;
use reqwest::StatusCode;
use screenlimit_limiter::store::redis::ring::shard_for;
use screenlimit_system_tests::api::{Prober, heartbeat, play, wait_decided};
use screenlimit_system_tests::install::{Install, desired};
use screenlimit_system_tests::pods::{Pod, wait_for};
use screenlimit_system_tests::redis_pods::{START, assert_one_primary, primary_seen_by, role};
use screenlimit_system_tests::{binary, named, require_root};

const ACCOUNTS: usize = 90;

fn template_of(set: &StatefulSet) -> String {
    serde_json::to_string(&set.spec.as_ref().unwrap().template).unwrap()
}

/// Which of `accounts` have their account key on `pod` (one `redis-cli` in the pod, its
/// own credentials).
fn keys_on(pod: &Pod, accounts: &[String]) -> Vec<String> {
    let commands: Vec<String> = accounts
        .iter()
        .map(|a| format!("EXISTS sl:{{{a}}}"))
        .collect();
    let script = format!("printf '%s\\n' {} | redis-cli --raw", {
        let quoted: Vec<String> = commands.iter().map(|c| format!("'{c}'")).collect();
        quoted.join(" ")
    });
    let out = pod.exec_ok(&["sh", "-c", &script]);
    let answers: Vec<&str> = out.lines().collect();
    assert_eq!(answers.len(), accounts.len(), "{out}");
    accounts
        .iter()
        .zip(answers)
        .filter(|(_, exists)| *exists == "1")
        .map(|(a, _)| a.clone())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_third_shard_through_the_operators_build_moves_a_third_of_the_accounts() {
    require_root();
    let before = desired(2);
    let after = desired(3);
    let Install {
        names,
        mut cluster,
        shards,
        mut sentinels,
        mut limiter,
        forward,
    } = Install::start(&before, 2).await;
    let sentinel_name = names.sentinel();
    let limiter_name = format!("{}-0", names.limiter());

    let accounts: Vec<String> = (0..ACCOUNTS).map(|i| format!("acct-grow-{i}")).collect();
    let mut streams = Vec::new();
    for account in &accounts {
        let (status, body) = play(&forward.url(), account, "tv").await;
        assert_eq!(status, StatusCode::OK, "{body}");
        assert_ne!(body["degraded"], true, "{body}");
        streams.push(body["stream_id"].as_str().unwrap().to_owned());
    }
    // Caps hold throughout the Sentinels' roll: a second device on a full account is refused.
    let prober = Prober::start_with_capped(&forward.url(), "acct-probe", accounts.clone());

    // The operator applies the 3-shard objects.
    cluster.set_config_maps(&after.config_maps);
    let changed: Vec<&str> = after
        .stateful_sets
        .iter()
        .filter(|set| {
            let name = set.metadata.name.as_deref().unwrap();
            before
                .stateful_sets
                .iter()
                .find(|old| old.metadata.name.as_deref() == Some(name))
                .is_some_and(|old| template_of(old) != template_of(set))
        })
        .map(|set| set.metadata.name.as_deref().unwrap())
        .collect();
    assert_eq!(
        changed,
        [sentinel_name.as_str()],
        "a new shard rolls the Sentinels and nothing else"
    );
    let change = Instant::now();
    let new_set = named(&after.stateful_sets, &names.redis_shard(2));
    let mut new_shard: Vec<Pod> = (0..2).map(|j| cluster.stateful_pod(new_set, j)).collect();
    for pod in &mut new_shard {
        pod.start();
    }
    for pod in &mut new_shard {
        pod.wait_ready(START);
    }
    let old_primaries: Vec<String> = shards
        .iter()
        .map(|pods| {
            let primary = pods.iter().find(|p| role(p)[0] == "master").unwrap();
            primary.dns.clone()
        })
        .collect();
    // The Sentinels' roll: one pod at a time, highest ordinal first, each ready (and knowing
    // every shard, the new one too) before the next goes.
    let sentinel_set = named(&after.stateful_sets, &sentinel_name);
    for k in (0..3).rev() {
        sentinels[k].kill();
        sentinels[k] = cluster.stateful_pod(sentinel_set, k as u32);
        sentinels[k].start();
        sentinels[k].wait_ready(START);
        for shard in 0..3 {
            let master = names.shard_master(shard);
            wait_for(
                START,
                &format!("{} monitoring {master}", sentinels[k].name),
                || primary_seen_by(&sentinels[k], &master).is_some(),
            );
        }
    }
    let rolled = change.elapsed();
    // No failover: the primaries are those of before, for every Sentinel.
    for (i, pods) in shards.iter().enumerate() {
        assert_one_primary(pods, &sentinels, &names.shard_master(i as i32));
        let primary = pods.iter().find(|p| role(p)[0] == "master").unwrap();
        assert_eq!(primary.dns, old_primaries[i], "a failover during the roll");
    }
    assert_one_primary(&new_shard, &sentinels, &names.shard_master(2));

    let (answered, unanswered) = prober.stop().await;
    assert_eq!(
        unanswered, 0,
        "the limiter stopped answering during the Sentinels' roll"
    );

    // The limiter's Deployment rolls to the 3-shard config.
    let limiter_roll = Instant::now();
    limiter.kill();
    let mut limiter = cluster.deployment_pod(
        named(&after.deployments, &names.limiter()),
        &limiter_name,
        vec![binary("screenlimit-limiter")],
    );
    limiter.start();
    limiter.wait_ready(START);
    drop(forward);
    let forward = cluster.port_forward(&limiter, 8080);
    let api = forward.url();
    let prober = Prober::start(&api, "acct-probe-grown");
    wait_decided(&api, 3, "acct-grown", START).await;
    let decided = limiter_roll.elapsed();

    // The next heartbeat round: every lease renewed where it is, or re-registered on the new
    // shard for the accounts the ring moved there.
    for (account, stream) in accounts.iter().zip(&streams) {
        let (status, error) = heartbeat(&api, account, stream).await;
        assert_eq!(status, StatusCode::OK, "{account}: {error}");
    }
    let new_primary = new_shard.iter().find(|p| role(p)[0] == "master").unwrap();
    let moved = keys_on(new_primary, &accounts);
    let predicted: Vec<String> = accounts
        .iter()
        .filter(|a| shard_for(a, 3) == 2)
        .cloned()
        .collect();
    assert_eq!(moved, predicted, "the accounts on the new shard");
    assert!(
        accounts
            .iter()
            .all(|a| shard_for(a, 3) == 2 || shard_for(a, 3) == shard_for(a, 2)),
        "an account moved between old shards"
    );
    let share = moved.len() as f64 / ACCOUNTS as f64;
    assert!(
        (0.2..0.45).contains(&share),
        "{share} of the accounts moved"
    );
    for account in &accounts {
        let (status, body) = play(&api, account, "phone").await;
        assert_eq!(status, StatusCode::CONFLICT, "{account}: {body}");
    }
    let (answered_after, _) = prober.stop().await;
    println!(
        "shard count 2 → 3: Sentinels rolled and monitoring the new shard {rolled:?} after the \
         change, the new limiter pod deciding plays on all 3 shards {decided:?} after the old one \
         stopped; {} of \
         {ACCOUNTS} accounts ({:.0} %) moved to the new shard on their next heartbeat; \
         {answered} plays answered during the Sentinels' roll and {answered_after} after the \
         limiter's, none a 5xx",
        moved.len(),
        share * 100.0
    );
}
