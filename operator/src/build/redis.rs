//! Managed mode: per shard, a Redis StatefulSet, its headless Service and, when Sentinel owns
//! the shard, a PodDisruptionBudget.
//!
//! `replicasPerShard: 0`: one Redis pod per shard, the limiter connects to it by the Service
//! name. `replicasPerShard >= 1`: a primary plus replicas, every pod started by the same
//! script so that Sentinel can promote any of them (see `sentinel`).

use std::collections::BTreeMap;

use k8s_openapi::api::apps::v1::{StatefulSet, StatefulSetSpec};
use k8s_openapi::api::core::v1::{
    Container, ExecAction, Lifecycle, LifecycleHandler, PodSpec, PodTemplateSpec, Probe, Service,
    ServiceSpec,
};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};

use super::access::{TLS_DIR, cli_tls_args, redis_env, server_tls_volume, tls_env, tls_secret};
use super::limiter_config::sentinel_enabled;
use super::meta::{max_unavailable_one, meta, selector};
use super::pod::{container_security, env, pod_spec, port, resources, service_port};
use super::sentinel::{
    MAX_SENTINELS, REDIS_UID, SCRIPTS_DIR, data_volume, keys, ping_probe, redis_scripts_hash,
    scripts_volume, spread, startup_probe, volume_mount,
};
use crate::crd::{RedisPersistence, StreamLimiter};
use crate::names::{Names, REDIS_PORT, SCRIPTS_HASH_ANNOTATION};

/// Starts the Redis pod of a shard without replicas (run as `sh -c`): writes the config with
/// the passwords from the pod's env, then execs `redis-server`.
pub const STANDALONE_SCRIPT: &str = include_str!("scripts/redis-standalone.sh");

/// Grace period of a shard pod: room for the pre-stop failover (up to 20 s) and a clean exit.
const TERMINATION_GRACE_SECONDS: i64 = 40;

/// The shard's headless Service: selects every pod of the shard and gives each a stable DNS
/// name (`<shard>-<ordinal>.<shard>.<ns>.svc`), published before the pod is ready so that
/// replicas and Sentinels resolve a pod while it starts. With one pod per shard the Service
/// name itself resolves to that pod.
pub fn service(names: &Names, ns: &str, index: i32, owner: &OwnerReference) -> Service {
    let name = names.redis_shard(index);
    Service {
        metadata: meta(name, ns, names.shard_labels(index), owner),
        spec: Some(ServiceSpec {
            cluster_ip: Some("None".to_owned()),
            selector: Some(names.shard_selector_labels(index)),
            ports: Some(vec![service_port("redis", REDIS_PORT)]),
            publish_not_ready_addresses: Some(true),
            ..ServiceSpec::default()
        }),
        ..Service::default()
    }
}

/// `maxUnavailable: 1` over the shard's pods: a drain always proceeds; the pre-stop hook of a
/// primary hands its role to a replica through Sentinel first.
pub fn pdb(names: &Names, ns: &str, index: i32, owner: &OwnerReference) -> PodDisruptionBudget {
    max_unavailable_one(
        names.redis_shard(index),
        ns,
        names.shard_labels(index),
        names.shard_selector_labels(index),
        owner,
    )
}

/// The shard's StatefulSet. Leases are short-lived and re-register on heartbeat, so by default
/// nothing is persisted (emptyDir, no RDB or AOF); `spec.redis.persistence: appendOnly` keeps an
/// append-only file in the emptyDir, which outlives a container restart (not the pod).
pub fn stateful_set(
    sl: &StreamLimiter,
    names: &Names,
    ns: &str,
    index: i32,
    owner: &OwnerReference,
) -> StatefulSet {
    let name = names.redis_shard(index);
    let redis = &sl.spec.redis;
    let ha = sentinel_enabled(sl);
    let tls = cli_tls_args(sl);
    let mut mounts = vec![volume_mount("data", "/data", false)];
    let mut volumes = vec![data_volume()];
    if let Some(secret) = tls_secret(sl) {
        mounts.push(volume_mount("redis-tls", TLS_DIR, true));
        volumes.push(server_tls_volume(secret));
    }
    let module = super::redis_module::parts(sl);
    if let Some(module) = &module {
        mounts.push(module.mount.clone());
        volumes.push(module.volume.clone());
    }
    let mut container = Container {
        name: "redis".to_owned(),
        image: Some(redis.image.clone()),
        ports: Some(vec![port("redis", REDIS_PORT)]),
        readiness_probe: Some(ping_probe(REDIS_PORT, 5, &tls)),
        liveness_probe: Some(Probe {
            initial_delay_seconds: Some(10),
            ..ping_probe(REDIS_PORT, 10, &tls)
        }),
        resources: resources(&redis.resources),
        security_context: Some(container_security(REDIS_UID)),
        volume_mounts: Some(mounts),
        ..Container::default()
    };
    let mut vars = Vec::new();
    let mut annotations = BTreeMap::new();
    if ha {
        container.startup_probe = Some(startup_probe(REDIS_PORT, &tls));
        container.command = Some(vec![
            "sh".to_owned(),
            format!("{SCRIPTS_DIR}/{}", keys::REDIS),
        ]);
        vars.extend([
            env("NAMESPACE", ns),
            env("SHARD", name.clone()),
            env("MASTER_NAME", names.shard_master(index)),
            env("SENTINEL_SERVICE", names.sentinel()),
            env("MAX_SENTINELS", MAX_SENTINELS.to_string()),
            env("MAX_PODS", super::sentinel::MAX_PODS_PER_SHARD.to_string()),
        ]);
        if redis.min_replicas_to_write > 0 {
            // A primary refuses writes it could lose in a failover (`NOREPLICAS`).
            vars.extend([
                env(
                    "MIN_REPLICAS_TO_WRITE",
                    redis
                        .min_replicas_to_write
                        .min(redis.replicas_per_shard)
                        .to_string(),
                ),
                env(
                    "MIN_REPLICAS_MAX_LAG",
                    redis.min_replicas_max_lag_seconds.to_string(),
                ),
            ]);
        }
        container.lifecycle = Some(Lifecycle {
            pre_stop: Some(LifecycleHandler {
                exec: Some(ExecAction {
                    command: Some(vec![
                        "sh".to_owned(),
                        format!("{SCRIPTS_DIR}/{}", keys::PRE_STOP),
                    ]),
                }),
                ..LifecycleHandler::default()
            }),
            ..Lifecycle::default()
        });
        if let Some(mounts) = container.volume_mounts.as_mut() {
            mounts.push(volume_mount("scripts", SCRIPTS_DIR, true));
        }
        volumes.push(scripts_volume(names));
        annotations.insert(SCRIPTS_HASH_ANNOTATION.to_owned(), redis_scripts_hash());
    } else {
        container.command = Some(vec![
            "sh".to_owned(),
            "-c".to_owned(),
            STANDALONE_SCRIPT.to_owned(),
            "redis-standalone".to_owned(),
        ]);
    }
    if let Some(bytes) = super::redis_memory::maxmemory(sl) {
        // The start scripts write it as `maxmemory`; without it (no limit) Redis is unbounded
        // and the status says so (`RedisMemoryBounded`).
        vars.push(env("MAXMEMORY", bytes.to_string()));
    }
    if redis.persistence == RedisPersistence::AppendOnly {
        // The start scripts turn it into `appendonly yes` + `appendfsync everysec`.
        vars.push(env("APPENDONLY", "yes"));
    }
    vars.extend(redis_env(names, ha));
    vars.extend(tls_env(sl));
    if let Some(module) = &module {
        vars.extend(module.env.iter().cloned());
    }
    container.env = Some(vars);
    StatefulSet {
        metadata: meta(name.clone(), ns, names.shard_labels(index), owner),
        spec: Some(StatefulSetSpec {
            replicas: Some(shard_pods(sl)),
            service_name: Some(name),
            selector: selector(names.shard_selector_labels(index)),
            pod_management_policy: Some("Parallel".to_owned()),
            template: PodTemplateSpec {
                metadata: Some(ObjectMeta {
                    labels: Some(names.shard_labels(index)),
                    annotations: (!annotations.is_empty()).then_some(annotations),
                    ..ObjectMeta::default()
                }),
                spec: Some(PodSpec {
                    init_containers: module.map(|m| vec![m.init_container]),
                    affinity: ha.then(|| spread(names.shard_selector_labels(index))),
                    termination_grace_period_seconds: ha.then_some(TERMINATION_GRACE_SECONDS),
                    ..pod_spec(container, REDIS_UID, volumes)
                }),
            },
            ..StatefulSetSpec::default()
        }),
        ..StatefulSet::default()
    }
}

/// Pods per managed shard: the primary and its replicas.
pub fn shard_pods(sl: &StreamLimiter) -> i32 {
    1 + sl.spec.redis.replicas_per_shard.max(0)
}
