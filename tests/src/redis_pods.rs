//! Redis and Sentinel pods as the shipped scripts run them: who is primary, who replicates whom,
//! what each Sentinel reports; `redis-cli` inside a pod as its own scripts call it.

use std::time::Duration;

use k8s_openapi::api::apps::v1::StatefulSet;

use crate::pods::{Pod, wait_for};

/// How long a pod, a bootstrap or a failover may take on a loaded machine.
pub const START: Duration = Duration::from_secs(60);

/// The primary a Sentinel reports for `master`, by host name; `None` if it knows none.
pub fn primary_seen_by(sentinel: &Pod, master: &str) -> Option<String> {
    let output = cli_out(
        sentinel,
        &[
            "-p",
            "26379",
            "--raw",
            "sentinel",
            "get-master-addr-by-name",
            master,
        ],
    );
    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    stdout
        .lines()
        .next()
        .filter(|l| !l.is_empty())
        .map(str::to_owned)
}

/// `role` of a Redis pod: `master`, or `slave` with the primary's host name.
pub fn role(pod: &Pod) -> Vec<String> {
    cli_ok(pod, &["-p", "6379", "--raw", "role"])
        .lines()
        .map(str::to_owned)
        .collect()
}

pub fn wait_primary_everywhere(sentinels: &[Pod], master: &str, primary: &Pod) {
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

pub fn wait_replica_of(replica: &Pod, primary: &Pod) {
    wait_for(
        START,
        &format!("{} replicating {}", replica.name, primary.name),
        || {
            let info = cli_ok(replica, &["-p", "6379", "info", "replication"]);
            info.contains("role:slave")
                && info.contains(&format!("master_host:{}", primary.dns))
                && info.contains("master_link_status:up")
        },
    );
}

/// Every Sentinel has found `replica` (from the primary's INFO, every 10 s) and sees it up: only
/// then can it promote it.
pub fn wait_replica_known(sentinels: &[Pod], master: &str, replica: &Pod) {
    for sentinel in sentinels {
        wait_for(
            START,
            &format!(
                "{} knowing {} as a replica of {master}",
                sentinel.name, replica.name
            ),
            || {
                let replicas = cli_ok(
                    sentinel,
                    &["-p", "26379", "--raw", "sentinel", "replicas", master],
                );
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

/// Where the TLS Secret is mounted (as the pods mount it).
pub const TLS_CA: &str = "/etc/screenlimit/redis-tls/ca.crt";

/// `redis-cli` as the pod's own scripts call it: over TLS when the pod serves TLS.
pub fn redis_cli<'a>(pod: &Pod, args: &[&'a str]) -> Vec<&'a str> {
    let mut argv = vec!["redis-cli"];
    if pod.env_value("TLS_DIR").is_some() {
        argv.extend(["--tls", "--cacert", TLS_CA]);
    }
    argv.extend_from_slice(args);
    argv
}

pub fn cli_ok(pod: &Pod, args: &[&str]) -> String {
    pod.exec_ok(&redis_cli(pod, args))
}

pub fn cli_out(pod: &Pod, args: &[&str]) -> std::process::Output {
    pod.exec(&redis_cli(pod, args))
}

/// `redis-cli` in `pod` with nothing but `args` (no `REDISCLI_AUTH`): its output, errors included.
pub fn cli_as(pod: &Pod, args: &[&str]) -> String {
    let mut argv = vec!["env", "-u", "REDISCLI_AUTH"];
    argv.extend(redis_cli(pod, &["--no-auth-warning"]));
    argv.extend_from_slice(args);
    let out = pod.exec(&argv);
    format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
    .trim()
    .to_owned()
}

/// The pre-stop hook's command of a shard StatefulSet's pods.
pub fn pre_stop_of(set: &StatefulSet) -> Vec<String> {
    set.spec
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
        .expect("a pre-stop exec hook on Sentinel-managed shard pods")
}

/// A crash and the kubelet's restart: killed, started again, ready.
pub fn restart(pod: &mut Pod) {
    pod.kill();
    pod.start();
    pod.wait_ready(START);
}

/// Exactly one primary among a shard's `pods`, the others replicating it, every Sentinel naming
/// it as `master`'s primary.
pub fn assert_one_primary(pods: &[Pod], sentinels: &[Pod], master: &str) {
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
