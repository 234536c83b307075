//! Sentinel-managed shards (managed mode with `replicasPerShard >= 1`): the scripts ConfigMap,
//! the Sentinel StatefulSet, its headless Service and PodDisruptionBudget.
//!
//! Sentinel owns failover. The operator only bootstraps: pod 0 of each shard starts as its
//! primary when nobody knows one yet, and every Sentinel starts monitoring each shard at the
//! primary another Sentinel (or the shard's own pods) reports. After that the operator never
//! changes which pod is primary.

use std::collections::BTreeMap;

use k8s_openapi::api::apps::v1::{StatefulSet, StatefulSetSpec};
use k8s_openapi::api::core::v1::{
    Affinity, ConfigMap, ConfigMapVolumeSource, Container, EmptyDirVolumeSource, ExecAction,
    PodAffinityTerm, PodAntiAffinity, PodSpec, PodTemplateSpec, Probe, Service, ServiceSpec,
    Volume, VolumeMount, WeightedPodAffinityTerm,
};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};

use super::access::{TLS_DIR, cli_tls_args, sentinel_env, server_tls_volume, tls_env, tls_secret};
use super::limiter_config::config_hash;
use super::meta::{max_unavailable_one, meta, selector};
use super::pod::{container_security, env, pod_spec, port, resources, service_port};
use crate::crd::StreamLimiter;
use crate::names::{Component, Names, SCRIPTS_HASH_ANNOTATION, SENTINEL_PORT};

/// Starts a Redis pod of a Sentinel-managed shard: asks Sentinel who the primary is.
pub const REDIS_SCRIPT: &str = include_str!("scripts/redis.sh");
/// Asks Sentinel to fail over before a primary pod stops.
pub const PRE_STOP_SCRIPT: &str = include_str!("scripts/pre-stop.sh");
/// Starts a Sentinel from the template, monitoring every shard's current primary.
pub const SENTINEL_SCRIPT: &str = include_str!("scripts/sentinel.sh");
/// The Sentinel config template (copied to a writable emptyDir: Sentinel rewrites it).
pub const SENTINEL_CONF: &str = include_str!("scripts/sentinel.conf");
/// Where the scripts ConfigMap is mounted in Redis and Sentinel pods.
pub const SCRIPTS_DIR: &str = "/etc/screenlimit/redis-ha";
/// The shard's pods probed when no Sentinel answers (`replicasPerShard` is at most 4).
pub const MAX_PODS_PER_SHARD: i32 = 5;
/// Sentinel pods a Redis pod asks (`redis.sentinel.replicas` is at most 9).
pub const MAX_SENTINELS: i32 = 9;
/// UID of the `redis` user in the official image.
pub const REDIS_UID: i64 = 999;

/// Keys of the scripts ConfigMap `<name>-redis-ha`.
pub mod keys {
    pub const REDIS: &str = "redis.sh";
    pub const PRE_STOP: &str = "pre-stop.sh";
    pub const SENTINEL: &str = "sentinel.sh";
    pub const SENTINEL_CONF: &str = "sentinel.conf";
    /// One line per shard: `<master name> <shard StatefulSet>`, in shard order.
    pub const MASTERS: &str = "masters";
}

/// The `masters` file: which master name each shard's pods go by.
pub fn masters_file(sl: &StreamLimiter, names: &Names) -> String {
    (0..sl.spec.redis.shards)
        .map(|i| format!("{} {}\n", names.shard_master(i), names.redis_shard(i)))
        .collect()
}

/// Hash of what a shard pod runs (rolls shard pods when the scripts change, not on a shard
/// count change).
pub fn redis_scripts_hash() -> String {
    config_hash(REDIS_SCRIPT, &[PRE_STOP_SCRIPT])
}

/// Hash of what a Sentinel pod reads at start (rolls the Sentinels, one at a time, when a
/// shard is added or removed).
pub fn sentinel_scripts_hash(masters: &str) -> String {
    config_hash(SENTINEL_SCRIPT, &[SENTINEL_CONF, masters])
}

pub fn config_map(
    sl: &StreamLimiter,
    names: &Names,
    ns: &str,
    owner: &OwnerReference,
) -> ConfigMap {
    ConfigMap {
        metadata: meta(
            names.redis_ha(),
            ns,
            names.labels(Component::Sentinel),
            owner,
        ),
        data: Some(BTreeMap::from([
            (keys::REDIS.to_owned(), REDIS_SCRIPT.to_owned()),
            (keys::PRE_STOP.to_owned(), PRE_STOP_SCRIPT.to_owned()),
            (keys::SENTINEL.to_owned(), SENTINEL_SCRIPT.to_owned()),
            (keys::SENTINEL_CONF.to_owned(), SENTINEL_CONF.to_owned()),
            (keys::MASTERS.to_owned(), masters_file(sl, names)),
        ])),
        ..ConfigMap::default()
    }
}

/// Headless: each Sentinel pod gets a stable DNS name `<name>-sentinel-<k>.<name>-sentinel.<ns>.svc`,
/// published before it is ready so that peers and the limiter can find it while it starts.
pub fn service(names: &Names, ns: &str, owner: &OwnerReference) -> Service {
    Service {
        metadata: meta(
            names.sentinel(),
            ns,
            names.labels(Component::Sentinel),
            owner,
        ),
        spec: Some(ServiceSpec {
            cluster_ip: Some("None".to_owned()),
            selector: Some(names.selector_labels(Component::Sentinel)),
            ports: Some(vec![service_port("sentinel", SENTINEL_PORT)]),
            publish_not_ready_addresses: Some(true),
            ..ServiceSpec::default()
        }),
        ..Service::default()
    }
}

/// `maxUnavailable: 1`: a drain always proceeds, one Sentinel at a time (a quorum of 2 out of
/// 3 still stands).
pub fn pdb(names: &Names, ns: &str, owner: &OwnerReference) -> PodDisruptionBudget {
    max_unavailable_one(
        names.sentinel(),
        ns,
        names.labels(Component::Sentinel),
        names.selector_labels(Component::Sentinel),
        owner,
    )
}

/// Prefer spreading the pods `labels` selects over nodes (preferred, not required: a small
/// cluster still schedules them all).
pub fn spread(labels: BTreeMap<String, String>) -> Affinity {
    Affinity {
        pod_anti_affinity: Some(PodAntiAffinity {
            preferred_during_scheduling_ignored_during_execution: Some(vec![
                WeightedPodAffinityTerm {
                    weight: 100,
                    pod_affinity_term: PodAffinityTerm {
                        label_selector: Some(selector(labels)),
                        topology_key: "kubernetes.io/hostname".to_owned(),
                        ..PodAffinityTerm::default()
                    },
                },
            ]),
            ..PodAntiAffinity::default()
        }),
        ..Affinity::default()
    }
}

pub fn scripts_volume(names: &Names) -> Volume {
    Volume {
        name: "scripts".to_owned(),
        config_map: Some(ConfigMapVolumeSource {
            name: names.redis_ha(),
            default_mode: Some(0o555),
            ..ConfigMapVolumeSource::default()
        }),
        ..Volume::default()
    }
}

pub fn data_volume() -> Volume {
    Volume {
        name: "data".to_owned(),
        empty_dir: Some(EmptyDirVolumeSource::default()),
        ..Volume::default()
    }
}

pub fn volume_mount(name: &str, path: &str, read_only: bool) -> VolumeMount {
    VolumeMount {
        name: name.to_owned(),
        mount_path: path.to_owned(),
        read_only: read_only.then_some(true),
        ..VolumeMount::default()
    }
}

/// `redis-cli [TLS args] -p <port> ping`, authenticated by the container's `REDISCLI_AUTH`.
pub fn ping_probe(port: i32, period: i32, tls: &[String]) -> Probe {
    let mut command = vec!["redis-cli".to_owned()];
    command.extend_from_slice(tls);
    command.extend(["-p".to_owned(), port.to_string(), "ping".to_owned()]);
    Probe {
        exec: Some(ExecAction {
            command: Some(command),
        }),
        period_seconds: Some(period),
        timeout_seconds: Some(2),
        failure_threshold: Some(3),
        ..Probe::default()
    }
}

/// Generous start-up window (up to 150 s): the start scripts ask peers and wait for DNS.
pub fn startup_probe(port: i32, tls: &[String]) -> Probe {
    Probe {
        failure_threshold: Some(30),
        ..ping_probe(port, 5, tls)
    }
}

/// The Sentinel StatefulSet: `redis.sentinel.replicas` pods monitoring every shard.
pub fn stateful_set(
    sl: &StreamLimiter,
    names: &Names,
    ns: &str,
    owner: &OwnerReference,
) -> StatefulSet {
    let redis = &sl.spec.redis;
    let sentinel = &redis.sentinel;
    let name = names.sentinel();
    let tls = cli_tls_args(sl);
    let mut mounts = vec![
        volume_mount("scripts", SCRIPTS_DIR, true),
        volume_mount("data", "/data", false),
    ];
    let mut volumes = vec![scripts_volume(names), data_volume()];
    if let Some(secret) = tls_secret(sl) {
        mounts.push(volume_mount("redis-tls", TLS_DIR, true));
        volumes.push(server_tls_volume(secret));
    }
    let mut vars = vec![
        env("NAMESPACE", ns),
        env("SENTINEL_SERVICE", name.clone()),
        env("SENTINELS", sentinel.replicas.to_string()),
        env("QUORUM", sentinel.quorum.to_string()),
        env("DOWN_AFTER_MS", sentinel.down_after_millis.to_string()),
        env(
            "FAILOVER_TIMEOUT_MS",
            sentinel.failover_timeout_millis.to_string(),
        ),
        env("MAX_PODS", MAX_PODS_PER_SHARD.to_string()),
    ];
    vars.extend(sentinel_env(names));
    vars.extend(tls_env(sl));
    let container = Container {
        name: "sentinel".to_owned(),
        image: Some(redis.image.clone()),
        command: Some(vec![
            "sh".to_owned(),
            format!("{SCRIPTS_DIR}/{}", keys::SENTINEL),
        ]),
        env: Some(vars),
        ports: Some(vec![port("sentinel", SENTINEL_PORT)]),
        startup_probe: Some(startup_probe(SENTINEL_PORT, &tls)),
        readiness_probe: Some(ping_probe(SENTINEL_PORT, 5, &tls)),
        liveness_probe: Some(ping_probe(SENTINEL_PORT, 10, &tls)),
        resources: resources(&sentinel.resources),
        security_context: Some(container_security(REDIS_UID)),
        volume_mounts: Some(mounts),
        ..Container::default()
    };
    let masters = masters_file(sl, names);
    StatefulSet {
        metadata: meta(name.clone(), ns, names.labels(Component::Sentinel), owner),
        spec: Some(StatefulSetSpec {
            replicas: Some(sentinel.replicas),
            service_name: Some(name),
            selector: selector(names.selector_labels(Component::Sentinel)),
            pod_management_policy: Some("Parallel".to_owned()),
            template: PodTemplateSpec {
                metadata: Some(ObjectMeta {
                    labels: Some(names.labels(Component::Sentinel)),
                    annotations: Some(BTreeMap::from([(
                        SCRIPTS_HASH_ANNOTATION.to_owned(),
                        sentinel_scripts_hash(&masters),
                    )])),
                    ..ObjectMeta::default()
                }),
                spec: Some(PodSpec {
                    affinity: Some(spread(names.selector_labels(Component::Sentinel))),
                    ..pod_spec(container, REDIS_UID, volumes)
                }),
            },
            ..StatefulSetSpec::default()
        }),
        ..StatefulSet::default()
    }
}
