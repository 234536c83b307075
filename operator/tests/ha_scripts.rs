//! The start scripts of Sentinel-managed shards (`redis.sh`, `sentinel.sh`, `pre-stop.sh`), run
//! the way their pods run them: the operator's rendered StatefulSets and ConfigMap, each pod on
//! its own address with its stable DNS name, the scripts mounted read-only with mode 0555, the
//! official image's uid 999 with every capability dropped, emptyDir `/data` kept across
//! restarts. See `pods/mod.rs` for the runner.

mod common;
mod pods;

use std::time::Duration;

use k8s_openapi::api::apps::v1::StatefulSet;
use screenlimit_operator::build::build;

use pods::{Cluster, Pod, wait_for};

const START: Duration = Duration::from_secs(60);

fn set<'a>(sets: &'a [StatefulSet], name: &str) -> &'a StatefulSet {
    sets.iter()
        .find(|s| s.metadata.name.as_deref() == Some(name))
        .unwrap_or_else(|| panic!("no StatefulSet {name}"))
}

/// The primary a Sentinel reports for `master`, by host name; `None` if it knows none.
fn primary_seen_by(sentinel: &Pod, master: &str) -> Option<String> {
    let output = sentinel.exec(&[
        "redis-cli",
        "-p",
        "26379",
        "--raw",
        "sentinel",
        "get-master-addr-by-name",
        master,
    ]);
    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    stdout
        .lines()
        .next()
        .filter(|l| !l.is_empty())
        .map(str::to_owned)
}

/// `role` of a Redis pod: `master`, or `slave` with the primary's host name.
fn role(pod: &Pod) -> Vec<String> {
    pod.exec_ok(&["redis-cli", "-p", "6379", "--raw", "role"])
        .lines()
        .map(str::to_owned)
        .collect()
}

fn wait_primary_everywhere(sentinels: &[Pod], master: &str, primary: &Pod) {
    for sentinel in sentinels {
        wait_for(
            START,
            &format!(
                "{} naming {} as {master}'s primary",
                sentinel.name, primary.dns
            ),
            || primary_seen_by(sentinel, master).as_deref() == Some(primary.dns.as_str()),
        );
    }
}

fn wait_replica_of(replica: &Pod, primary: &Pod) {
    wait_for(
        START,
        &format!("{} replicating {}", replica.name, primary.name),
        || {
            let info = replica.exec_ok(&["redis-cli", "-p", "6379", "info", "replication"]);
            info.contains("role:slave")
                && info.contains(&format!("master_host:{}", primary.dns))
                && info.contains("master_link_status:up")
        },
    );
}

/// Every Sentinel has found `replica` (from the primary's INFO, every 10 s) and sees it up: only
/// then can it promote it.
fn wait_replica_known(sentinels: &[Pod], master: &str, replica: &Pod) {
    for sentinel in sentinels {
        wait_for(
            START,
            &format!(
                "{} knowing {} as a replica of {master}",
                sentinel.name, replica.name
            ),
            || {
                let replicas = sentinel.exec_ok(&[
                    "redis-cli",
                    "-p",
                    "26379",
                    "--raw",
                    "sentinel",
                    "replicas",
                    master,
                ]);
                let fields: Vec<&str> = replicas.lines().collect();
                fields
                    .windows(2)
                    .any(|w| w[0] == "name" && w[1].starts_with(&replica.dns))
                    && fields
                        .windows(2)
                        .any(|w| w[0] == "flags" && w[1] == "slave")
            },
        );
    }
}

fn restart(pod: &mut Pod) {
    pod.kill();
    pod.start();
    pod.wait_ready(START);
}

#[test]
fn sentinel_managed_shards_start_fail_over_and_restart_as_their_pods_run_them() {
    assert!(
        std::process::Command::new("id")
            .arg("-u")
            .output()
            .is_ok_and(|o| o.stdout.starts_with(b"0\n")),
        "this test runs pods in namespaces it creates: run it as root (CI does)"
    );
    let sl = common::fixture("ha.yaml");
    let desired = build(&sl).expect("build");
    let sets = &desired.stateful_sets;
    let mut cluster = Cluster::new("video", &desired.config_maps);
    let mut shard: Vec<Pod> = (0..2)
        .map(|i| cluster.stateful_pod(set(sets, "demo-redis-0"), i))
        .collect();
    // The other shard runs too: every Sentinel monitors both.
    let mut other_shard: Vec<Pod> = (0..2)
        .map(|i| cluster.stateful_pod(set(sets, "demo-redis-1"), i))
        .collect();
    let mut sentinels: Vec<Pod> = (0..3)
        .map(|i| cluster.stateful_pod(set(sets, "demo-sentinel"), i))
        .collect();

    // First start, all pods at once (podManagementPolicy: Parallel).
    for pod in shard
        .iter_mut()
        .chain(&mut other_shard)
        .chain(&mut sentinels)
    {
        pod.start();
    }
    for pod in shard
        .iter_mut()
        .chain(&mut other_shard)
        .chain(&mut sentinels)
    {
        pod.wait_ready(START);
    }
    // Bootstrap: pod 0 is the primary, pod 1 its replica, every Sentinel agrees.
    assert_eq!(role(&shard[0])[0], "master", "{}", shard[0].log());
    wait_replica_of(&shard[1], &shard[0]);
    wait_primary_everywhere(&sentinels, "demo-shard-0", &shard[0]);
    wait_replica_of(&other_shard[1], &other_shard[0]);
    wait_primary_everywhere(&sentinels, "demo-shard-1", &other_shard[0]);
    // Sentinel rewrites its own config file (failovers, peers): it must be able to.
    for sentinel in &sentinels {
        let flushed = sentinel.exec_ok(&["redis-cli", "-p", "26379", "sentinel", "flushconfig"]);
        assert_eq!(flushed, "OK", "{}", sentinel.log());
    }

    // The primary's pre-stop hook hands the role to its replica through Sentinel.
    let pre_stop = set(sets, "demo-redis-0")
        .spec
        .as_ref()
        .unwrap()
        .template
        .spec
        .as_ref()
        .unwrap()
        .containers[0]
        .lifecycle
        .as_ref()
        .and_then(|l| l.pre_stop.as_ref())
        .and_then(|h| h.exec.as_ref())
        .and_then(|e| e.command.clone())
        .expect("a pre-stop exec hook on Sentinel-managed shard pods");
    let pre_stop: Vec<&str> = pre_stop.iter().map(String::as_str).collect();
    wait_replica_known(&sentinels, "demo-shard-0", &shard[1]);
    let hook = shard[0].exec(&pre_stop);
    assert!(hook.status.success(), "pre-stop: {hook:?}");
    assert_eq!(role(&shard[1])[0], "master", "the replica was not promoted");
    wait_primary_everywhere(&sentinels, "demo-shard-0", &shard[1]);
    wait_replica_of(&shard[0], &shard[1]);

    // Every container crashes and restarts over what its first start left in /data.
    for pod in sentinels.iter_mut() {
        restart(pod);
    }
    wait_primary_everywhere(&sentinels, "demo-shard-0", &shard[1]);
    restart(&mut shard[0]);
    wait_replica_of(&shard[0], &shard[1]);
    // A second restart of each: the files the first restart wrote are rewritten too.
    for pod in sentinels.iter_mut() {
        restart(pod);
    }
    restart(&mut shard[0]);
    wait_replica_of(&shard[0], &shard[1]);
    wait_primary_everywhere(&sentinels, "demo-shard-0", &shard[1]);
    wait_primary_everywhere(&sentinels, "demo-shard-1", &other_shard[0]);
    for sentinel in &sentinels {
        let flushed = sentinel.exec_ok(&["redis-cli", "-p", "26379", "sentinel", "flushconfig"]);
        assert_eq!(flushed, "OK", "{}", sentinel.log());
    }
}
