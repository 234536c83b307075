//! Suite **failover**: `examples/dev.yaml` with 2 Sentinel-managed shards (a primary and a
//! replica each, 3 Sentinels, policy `open`), as the operator's pure build renders it, run as
//! local pods. A primary pod is killed (SIGKILL: a lost node, no pre-stop hook) and stays down:
//! Sentinel promotes its replica after `downAfterMillis` and the limiter follows. The new primary
//! has no replica in sync (`minReplicasToWrite: 1`, the default), so it refuses writes and the
//! shard's plays are decided by the failure policy (degraded, never a 5xx) until the killed pod
//! restarts and rejoins as its replica (never a second primary); then the shard decides again,
//! its streams keep their leases and the caps hold (the windows are printed). A Sentinel that
//! restarts is the same peer (stable `myid`): no Sentinel counts one peer more.

use std::time::Instant;

use reqwest::StatusCode;
use screenlimit_system_tests::api::{Prober, accounts_on, heartbeat, play, wait_decided_on};
use screenlimit_system_tests::install::{Install, desired};
use screenlimit_system_tests::pods::{Pod, wait_for};
use screenlimit_system_tests::redis_pods::{
    START, cli_ok, primary_seen_by, restart, role, wait_replica_known, wait_replica_of,
};
use screenlimit_system_tests::require_root;

const SHARDS: usize = 2;

/// The peers `sentinel` knows for `master` (by name).
fn peers(sentinel: &Pod, master: &str) -> usize {
    cli_ok(
        sentinel,
        &["-p", "26379", "--raw", "sentinel", "sentinels", master],
    )
    .lines()
    .filter(|l| *l == "name")
    .count()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_primary_fails_over_the_limiter_follows_and_the_pod_rejoins_as_a_replica() {
    require_root();
    let install = &mut Install::start(&desired(SHARDS), SHARDS).await;
    let api = install.api();
    let master = install.names.shard_master(0);
    let accounts: Vec<String> = accounts_on("acct-failover", 0, SHARDS).take(4).collect();
    let mut streams = Vec::new();
    for account in &accounts {
        let (status, body) = play(&api, account, "tv").await;
        assert_eq!(status, StatusCode::OK, "{body}");
        streams.push(body["stream_id"].as_str().unwrap().to_owned());
    }
    // Sentinel promotes only a replica it has found (from the primary's INFO, every 10 s).
    wait_replica_known(&install.sentinels, &master, &install.shards[0][1]);
    let prober = Prober::start(&api, "acct-probe");

    let killed = Instant::now();
    install.shards[0][0].kill();
    let replica_dns = install.shards[0][1].dns.clone();
    wait_for(START, "Sentinel promoting the replica", || {
        primary_seen_by(&install.sentinels[0], &master).as_deref() == Some(replica_dns.as_str())
    });
    let promoted = killed.elapsed();
    assert_eq!(role(&install.shards[0][1])[0], "master");
    // The limiter follows to the new primary, which has no replica in sync: writes refused
    // (NOREPLICAS), the shard's plays decided by the policy while the killed pod is down.
    let new_primary = format!("{replica_dns}:6379");
    let mut refusing = None;
    let mut last = serde_json::Value::Null;
    for _ in 0..600 {
        let ready: serde_json::Value = reqwest::get(format!("{api}/readyz"))
            .await
            .and_then(|r| r.error_for_status())
            .expect("/readyz answers")
            .json()
            .await
            .expect("/readyz is JSON");
        let shard = &ready["shards"][0];
        let on_new = shard["endpoint"]
            .as_str()
            .is_some_and(|e| e.starts_with(&new_primary));
        if on_new && shard["no_replicas"] == true {
            refusing = Some(killed.elapsed());
            break;
        }
        last = ready;
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    let refusing = refusing.unwrap_or_else(|| {
        panic!("the limiter never on {new_primary} with its writes refused: /readyz {last}")
    });
    let account = accounts_on("acct-without-replica", 0, SHARDS)
        .next()
        .unwrap();
    let (status, body) = play(&api, &account, "tv").await;
    assert_eq!(
        (status, &body["degraded"]),
        (StatusCode::OK, &serde_json::json!(true)),
        "{body}"
    );

    // The killed pod comes back: a replica of the new primary, and the shard decides again.
    let back = Instant::now();
    install.shards[0][0].start();
    install.shards[0][0].wait_ready(START);
    wait_replica_of(&install.shards[0][0], &install.shards[0][1]);
    let rejoined = back.elapsed();
    wait_decided_on(&api, 0, SHARDS, "acct-after-failover", START).await;
    let followed = killed.elapsed();
    install.assert_one_primary_per_shard();
    // The streams of before play on (their records reached the replica, or their next
    // heartbeat re-registers them), and the cap holds on the new primary.
    for (account, stream) in accounts.iter().zip(&streams) {
        let (status, error) = heartbeat(&api, account, stream).await;
        assert_eq!(status, StatusCode::OK, "{account}: {error}");
        let (status, body) = play(&api, account, "phone").await;
        assert_eq!(status, StatusCode::CONFLICT, "{account}: {body}");
    }

    // A Sentinel restarts: the same id, so its peers still count two peers each.
    let id = cli_ok(&install.sentinels[2], &["-p", "26379", "sentinel", "myid"]);
    restart(&mut install.sentinels[2]);
    let again = cli_ok(&install.sentinels[2], &["-p", "26379", "sentinel", "myid"]);
    assert_eq!(id, again, "a restarted Sentinel is a new peer");
    wait_for(START, "the restarted Sentinel hearing its peers", || {
        peers(&install.sentinels[2], &master) == 2
    });
    for sentinel in &install.sentinels {
        assert_eq!(
            peers(sentinel, &master),
            2,
            "{} counts a stale peer",
            sentinel.name
        );
    }
    install.assert_one_primary_per_shard();
    let (answered, _) = prober.stop().await;
    println!(
        "failover after a primary pod's SIGKILL: Sentinel promoted the replica {promoted:?} \
         after the kill (downAfterMillis 5000), the limiter was on it, its writes refused for \
         want of a replica, {refusing:?} after the kill; the killed pod rejoined as a replica \
         {rejoined:?} after its restart, and the shard decided again {followed:?} after the \
         kill; {answered} plays answered meanwhile, none a 5xx"
    );
}
