//! The start scripts of Sentinel-managed shards (`redis.sh`, `sentinel.sh`, `pre-stop.sh`), run
//! the way their pods run them: the operator's rendered StatefulSets and ConfigMap, each pod on
//! its own address with its stable DNS name, the scripts mounted read-only with mode 0555, the
//! official image's uid 999 with every capability dropped, emptyDir `/data` kept across
//! restarts, with the credentials Secret the operator generates (every server wants a
//! password; the limiter's ACL user may do only what the limiter does). See
//! `screenlimit_system_tests::pods` for the runner.

use std::collections::BTreeMap;

use kube::Resource;
use screenlimit_operator::build::{Desired, build, secret};
use screenlimit_operator::crd::StreamLimiter;
use screenlimit_operator::names::{LIMITER_PASSWORD_KEY, LIMITER_REDIS_USER, Names};

use screenlimit_system_tests::pods::{Cluster, Pod, wait_for};
use screenlimit_system_tests::redis_pods::{
    START, cli_as, cli_ok, pre_stop_of, restart, role, wait_primary_everywhere, wait_replica_known,
    wait_replica_of,
};
use screenlimit_system_tests::{add_limiter_image, binary, certs, fixture, named, require_root};

/// The operator's generated credentials Secret for `sl`, as the cluster would hold it.
fn redis_auth(sl: &StreamLimiter) -> BTreeMap<String, String> {
    let owner = sl.controller_owner_ref(&()).unwrap();
    let names = Names::new(sl.metadata.name.as_deref().unwrap());
    secret::redis_auth_secret(&names, "video", &owner)
        .string_data
        .unwrap()
}

fn cluster_with_secrets(
    sl: &StreamLimiter,
    desired: &Desired,
) -> (Cluster, BTreeMap<String, String>) {
    let mut cluster = Cluster::new("video", &desired.config_maps);
    add_limiter_image(&mut cluster, sl);
    let auth = redis_auth(sl);
    cluster.add_secret("demo-redis-auth", auth.clone());
    (cluster, auth)
}

/// `sl` with a memory limit on its Redis pods (the operator derives `maxmemory` from it).
fn with_memory_limit(mut sl: StreamLimiter, limit: &str) -> StreamLimiter {
    use k8s_openapi::api::core::v1::ResourceRequirements;
    use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
    sl.spec.redis.resources = Some(ResourceRequirements {
        limits: Some([("memory".to_owned(), Quantity(limit.to_owned()))].into()),
        ..ResourceRequirements::default()
    });
    sl
}

/// The pod's Redis runs with `maxmemory` (70 % of its 64Mi limit) and `noeviction`: a full
/// shard refuses new plays instead of growing until the kubelet kills it.
fn assert_memory_bounded(pod: &Pod) {
    let maxmemory = cli_ok(pod, &["-p", "6379", "config", "get", "maxmemory"]);
    assert_eq!(
        maxmemory,
        format!("maxmemory\n{}", (64u64 << 20) / 100 * 70),
        "{}",
        pod.name
    );
    let policy = cli_ok(pod, &["-p", "6379", "config", "get", "maxmemory-policy"]);
    assert_eq!(policy, "maxmemory-policy\nnoeviction", "{}", pod.name);
}

/// A data node wants a password; the limiter's ACL user can run what the limiter runs on its
/// own keys (the screenlimit module's commands too), and nothing else.
fn assert_locked_down(pod: &Pod, limiter_password: &str, tag: &str) {
    let anonymous = cli_as(pod, &["-p", "6379", "set", "sl:x", "1"]);
    assert!(anonymous.contains("NOAUTH"), "{}: {anonymous}", pod.name);
    let wrong = cli_as(
        pod,
        &[
            "-p",
            "6379",
            "--user",
            LIMITER_REDIS_USER,
            "--pass",
            "wrong",
            "ping",
        ],
    );
    assert!(wrong.contains("WRONGPASS"), "{}: {wrong}", pod.name);
    let limiter = |args: &[&str]| {
        let mut argv = vec![
            "-p",
            "6379",
            "--user",
            LIMITER_REDIS_USER,
            "--pass",
            limiter_password,
        ];
        argv.extend_from_slice(args);
        cli_as(pod, &argv)
    };
    let key = format!("sl:{{{tag}}}");
    assert_eq!(limiter(&["ping"]), "PONG");
    // The module the init container copied is loaded, and the limiter may call it.
    assert_eq!(
        limiter(&["sl.version"]),
        "2",
        "{}:\n{}",
        pod.name,
        pod.log()
    );
    assert_eq!(limiter(&["set", &key, "1", "px", "60000"]), "OK");
    assert_eq!(limiter(&["get", &key]), "1");
    let sha = limiter(&["script", "load", "return redis.call('time')[1]"]);
    assert_eq!(sha.len(), 40, "{}: script load: {sha}", pod.name);
    assert!(limiter(&["evalsha", &sha, "0"]).parse::<u64>().is_ok());
    for refused in [
        vec!["flushall"],
        vec!["keys", "*"],
        vec!["config", "get", "requirepass"],
        vec!["set", "other:key", "1"],
        vec!["get", "other:key"],
        vec!["acl", "list"],
    ] {
        let answer = limiter(&refused);
        assert!(
            answer.contains("NOPERM"),
            "{}: {refused:?} answered {answer}",
            pod.name
        );
    }
}

/// A CA and a server certificate for every name the pods go by, cert-manager style.
fn certificates() -> BTreeMap<String, String> {
    certs::tls_secret(&[
        "*.demo-redis-0.video.svc",
        "*.demo-redis-1.video.svc",
        "*.demo-sentinel.video.svc",
        "demo-redis-0.video.svc",
        "demo-redis-1.video.svc",
    ])
}

#[test]
fn sentinel_managed_shards_start_fail_over_and_restart_as_their_pods_run_them() {
    require_root();
    let sl = with_memory_limit(fixture("ha.yaml"), "64Mi");
    let desired = build(&sl).expect("build");
    let sets = &desired.stateful_sets;
    let (mut cluster, auth) = cluster_with_secrets(&sl, &desired);
    let limiter_password = auth[LIMITER_PASSWORD_KEY].clone();
    let mut shard: Vec<Pod> = (0..2)
        .map(|i| cluster.stateful_pod(named(sets, "demo-redis-0"), i))
        .collect();
    // The other shard runs too: every Sentinel monitors both.
    let mut other_shard: Vec<Pod> = (0..2)
        .map(|i| cluster.stateful_pod(named(sets, "demo-redis-1"), i))
        .collect();
    let mut sentinels: Vec<Pod> = (0..3)
        .map(|i| cluster.stateful_pod(named(sets, "demo-sentinel"), i))
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
    for pod in &shard {
        assert_memory_bounded(pod);
    }
    wait_primary_everywhere(&sentinels, "demo-shard-0", &shard[0]);
    wait_replica_of(&other_shard[1], &other_shard[0]);
    wait_primary_everywhere(&sentinels, "demo-shard-1", &other_shard[0]);
    // Sentinel rewrites its own config file (failovers, peers): it must be able to.
    for sentinel in &sentinels {
        let flushed = cli_ok(sentinel, &["-p", "26379", "sentinel", "flushconfig"]);
        assert_eq!(flushed, "OK", "{}", sentinel.log());
        // Sentinels want their password too, and found each other with it.
        let anonymous = cli_as(sentinel, &["-p", "26379", "ping"]);
        assert!(
            anonymous.contains("NOAUTH"),
            "{}: {anonymous}",
            sentinel.name
        );
        wait_for(
            START,
            &format!("{} knowing its 2 peers", sentinel.name),
            || {
                let peers = cli_ok(
                    sentinel,
                    &[
                        "-p",
                        "26379",
                        "--raw",
                        "sentinel",
                        "sentinels",
                        "demo-shard-0",
                    ],
                );
                peers.lines().filter(|l| *l == "name").count() == 2
            },
        );
    }
    // Shard pods want a password; the limiter's user may do what the limiter does, on its keys.
    assert_locked_down(&shard[0], &limiter_password, "a");
    // What the limiter writes on the primary reaches the replica (masterauth).
    wait_for(START, "the limiter's key on the replica", || {
        cli_ok(&shard[1], &["-p", "6379", "get", "sl:{a}"]) == "1"
    });
    // No password in any ConfigMap.
    for cm in &desired.config_maps {
        for (key, value) in cm.data.iter().flatten() {
            for password in auth.values() {
                assert!(
                    !value.contains(password.as_str()),
                    "ConfigMap key {key} holds a password"
                );
            }
        }
    }

    // The primary's pre-stop hook hands the role to its replica through Sentinel.
    let pre_stop = pre_stop_of(named(sets, "demo-redis-0"));
    let pre_stop: Vec<&str> = pre_stop.iter().map(String::as_str).collect();
    wait_replica_known(&sentinels, "demo-shard-0", &shard[1]);
    let hook = shard[0].exec(&pre_stop);
    assert!(hook.status.success(), "pre-stop: {hook:?}");
    assert_eq!(role(&shard[1])[0], "master", "the replica was not promoted");
    wait_primary_everywhere(&sentinels, "demo-shard-0", &shard[1]);
    wait_replica_of(&shard[0], &shard[1]);
    // The promoted replica has the limiter's user too (every pod's config carries it).
    assert_locked_down(&shard[1], &limiter_password, "b");

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
        let flushed = cli_ok(sentinel, &["-p", "26379", "sentinel", "flushconfig"]);
        assert_eq!(flushed, "OK", "{}", sentinel.log());
    }
    // The restarted pod (a replica now) rebuilt its config with the users: it answers the
    // limiter's user (reads are fine on a replica) and refuses anyone without a password.
    let replica = cli_as(
        &shard[0],
        &[
            "-p",
            "6379",
            "--user",
            LIMITER_REDIS_USER,
            "--pass",
            &limiter_password,
            "get",
            "sl:{b}",
        ],
    );
    assert_eq!(replica, "1", "{}", shard[0].log());
    assert!(cli_as(&shard[0], &["-p", "6379", "ping"]).contains("NOAUTH"));
    // The config files with passwords are the pod's own: mode 0600.
    let mode = shard[0].exec_ok(&["stat", "-c", "%a", "/data/redis.conf"]);
    assert_eq!(mode, "600");
}

#[test]
fn a_shard_without_replicas_starts_with_passwords_and_the_limiter_acl() {
    require_root();
    let sl = with_memory_limit(fixture("managed.yaml"), "64Mi");
    let desired = build(&sl).expect("build");
    let (mut cluster, auth) = cluster_with_secrets(&sl, &desired);
    let mut pod = cluster.stateful_pod(named(&desired.stateful_sets, "demo-redis-0"), 0);
    pod.start();
    pod.wait_ready(START);
    assert_memory_bounded(&pod);
    assert_locked_down(&pod, &auth[LIMITER_PASSWORD_KEY], "c");
    restart(&mut pod);
    assert_locked_down(&pod, &auth[LIMITER_PASSWORD_KEY], "d");

    // The rotation of operator/README.md: the new password is added, then the old one removed,
    // by `kubectl exec <pod> -- redis-cli acl setuser …` (REDISCLI_AUTH: the default user).
    let old = auth[LIMITER_PASSWORD_KEY].clone();
    let new = screenlimit_operator::build::secret::random_password();
    let ping = |password: &str| {
        cli_as(
            &pod,
            &[
                "-p",
                "6379",
                "--user",
                LIMITER_REDIS_USER,
                "--pass",
                password,
                "ping",
            ],
        )
    };
    cli_ok(
        &pod,
        &["acl", "setuser", LIMITER_REDIS_USER, &format!(">{new}")],
    );
    assert_eq!((ping(&old).as_str(), ping(&new).as_str()), ("PONG", "PONG"));
    cli_ok(
        &pod,
        &["acl", "setuser", LIMITER_REDIS_USER, &format!("<{old}")],
    );
    assert!(ping(&old).contains("WRONGPASS"));
    assert_locked_down(&pod, &new, "e");
}

/// The same pods with `redis.tls`: every server listens with TLS only, replication and Sentinel
/// go over TLS, and the bootstrap, the passwords and a pre-stop failover still work.
#[test]
fn sentinel_managed_shards_over_tls_start_and_fail_over() {
    require_root();
    let sl = fixture("secure.yaml");
    let desired = build(&sl).expect("build");
    let sets = &desired.stateful_sets;
    let (mut cluster, auth) = cluster_with_secrets(&sl, &desired);
    cluster.add_secret("demo-redis-tls", certificates());
    let mut shard: Vec<Pod> = (0..2)
        .map(|i| cluster.stateful_pod(named(sets, "demo-redis-0"), i))
        .collect();
    // Shard 1's pods exist (their DNS names resolve) but do not run: the Sentinels monitor it
    // at its pod 0 and wait.
    let mut other_shard: Vec<Pod> = (0..2)
        .map(|i| cluster.stateful_pod(named(sets, "demo-redis-1"), i))
        .collect();
    let mut sentinels: Vec<Pod> = (0..3)
        .map(|i| cluster.stateful_pod(named(sets, "demo-sentinel"), i))
        .collect();
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
    assert_eq!(role(&shard[0])[0], "master", "{}", shard[0].log());
    wait_replica_of(&shard[1], &shard[0]);
    wait_primary_everywhere(&sentinels, "demo-shard-0", &shard[0]);
    // Nothing in clear: a plain client gets no answer from the TLS-only port.
    let plain = shard[0].exec(&["redis-cli", "-p", "6379", "ping"]);
    assert!(
        !String::from_utf8_lossy(&plain.stdout).contains("PONG"),
        "{plain:?}"
    );
    let plain = sentinels[0].exec(&["redis-cli", "-p", "26379", "ping"]);
    assert!(
        !String::from_utf8_lossy(&plain.stdout).contains("PONG"),
        "{plain:?}"
    );
    assert_locked_down(&shard[0], &auth[LIMITER_PASSWORD_KEY], "t");
    for sentinel in &sentinels {
        assert!(cli_as(sentinel, &["-p", "26379", "ping"]).contains("NOAUTH"));
    }
    // A failover over TLS, asked for by the pre-stop hook.
    wait_replica_known(&sentinels, "demo-shard-0", &shard[1]);
    let pre_stop = pre_stop_of(named(sets, "demo-redis-0"));
    let pre_stop: Vec<&str> = pre_stop.iter().map(String::as_str).collect();
    // The real limiter, from the rendered Deployment: its ACL user and the Sentinels' password
    // from the mounted Secret keys, rediss:// to Sentinels and primaries whose names the
    // certificate must carry (server names are checked).
    let limiter = {
        let binary = binary("screenlimit-limiter");
        cluster.add_secret(
            "demo-stream-id",
            BTreeMap::from([(
                "stream-id-secret".to_owned(),
                "a-test-stream-id-key-of-some-length".to_owned(),
            )]),
        );
        let mut pod =
            cluster.deployment_pod(&desired.deployments[0], "demo-limiter-0", vec![binary]);
        pod.start();
        wait_for(START, "the limiter ready", || {
            pod.exec(&["curl", "-sf", "http://127.0.0.1:8080/readyz"])
                .status
                .success()
        });
        assert_plays(&pod, "before");
        pod
    };
    let hook = shard[0].exec(&pre_stop);
    assert!(hook.status.success(), "pre-stop: {hook:?}");
    assert_eq!(role(&shard[1])[0], "master", "the replica was not promoted");
    wait_primary_everywhere(&sentinels, "demo-shard-0", &shard[1]);
    wait_replica_of(&shard[0], &shard[1]);
    {
        // It follows the new primary through the (authenticated, TLS) Sentinels.
        let pod = &limiter;
        assert_plays(pod, "after");
        assert!(
            !pod.log().contains("WRONGPASS") && !pod.log().contains("NOPERM"),
            "{}",
            pod.log()
        );
    }
}

/// A play-start for a fresh account, from inside the limiter pod: the response body.
fn play(pod: &Pod, tag: &str) -> String {
    let body =
        format!("{{\"account_id\":\"acct-{tag}\",\"device_id\":\"tv-1\",\"plan\":\"basic\"}}");
    let out = pod.exec(&[
        "curl",
        "-s",
        "-X",
        "POST",
        "-H",
        "content-type: application/json",
        "--data",
        &body,
        "http://127.0.0.1:8080/v1/streams",
    ]);
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Plays for accounts on both shards are decided by Redis (counted, not degraded), once the
/// limiter's connections are up.
fn assert_plays(pod: &Pod, tag: &str) {
    for i in 0..6 {
        let account = format!("{tag}-{i}");
        let mut answer = String::new();
        wait_for(
            START,
            &format!("a play for {account} decided by Redis"),
            || {
                answer = play(pod, &account);
                answer.contains("\"active_count\":1") && !answer.contains("\"degraded\":true")
            },
        );
    }
}
