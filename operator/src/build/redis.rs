//! Managed mode: per shard, a Redis StatefulSet and the Service that points at its primary.

use k8s_openapi::api::apps::v1::{StatefulSet, StatefulSetSpec};
use k8s_openapi::api::core::v1::{
    Container, EmptyDirVolumeSource, ExecAction, PodSpec, PodTemplateSpec, Probe, Service,
    ServicePort, ServiceSpec, Volume, VolumeMount,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;

use super::common::{container_security, meta, pod_security, port, resources, selector};
use crate::crd::StreamLimiter;
use crate::names::{Names, REDIS_PORT};

/// UID of the `redis` user in the official image.
const REDIS_UID: i64 = 999;

/// The shard's Service: selects only pod 0 (the primary), so the limiter always writes there.
pub fn service(names: &Names, ns: &str, index: i32, owner: &OwnerReference) -> Service {
    let name = names.redis_shard(index);
    let mut pod_selector = names.shard_selector_labels(index);
    pod_selector.insert(
        "statefulset.kubernetes.io/pod-name".to_owned(),
        format!("{name}-0"),
    );
    Service {
        metadata: meta(name, ns, names.shard_labels(index), owner),
        spec: Some(ServiceSpec {
            selector: Some(pod_selector),
            ports: Some(vec![ServicePort {
                name: Some("redis".to_owned()),
                port: REDIS_PORT,
                target_port: Some(IntOrString::String("redis".to_owned())),
                protocol: Some("TCP".to_owned()),
                ..ServicePort::default()
            }]),
            // Replicas resolve the primary through this Service before it is ready.
            publish_not_ready_addresses: Some(true),
            ..ServiceSpec::default()
        }),
        ..Service::default()
    }
}

/// The shard's StatefulSet. Pod 0 is the primary; pods 1.. replicate from it. Leases are
/// short-lived and re-register on heartbeat, so nothing is persisted.
pub fn stateful_set(
    sl: &StreamLimiter,
    names: &Names,
    ns: &str,
    index: i32,
    owner: &OwnerReference,
) -> StatefulSet {
    let name = names.redis_shard(index);
    let redis = &sl.spec.redis;
    let primary = format!("{name}.{ns}.svc");
    // Pod 0 is the primary; every other ordinal follows it.
    let script = format!(
        "set -e\n\
         ordinal=\"${{HOSTNAME##*-}}\"\n\
         set -- --port {REDIS_PORT} --save '' --appendonly no --protected-mode no --maxmemory-policy noeviction --dir /data\n\
         if [ \"$ordinal\" != \"0\" ]; then set -- \"$@\" --replicaof {primary} {REDIS_PORT}; fi\n\
         exec redis-server \"$@\"\n"
    );
    let container = Container {
        name: "redis".to_owned(),
        image: Some(redis.image.clone()),
        command: Some(vec!["sh".to_owned(), "-c".to_owned(), script]),
        ports: Some(vec![port("redis", REDIS_PORT)]),
        readiness_probe: Some(exec_probe(5)),
        liveness_probe: Some(Probe {
            initial_delay_seconds: Some(10),
            ..exec_probe(10)
        }),
        resources: resources(&redis.resources),
        security_context: Some(container_security(REDIS_UID)),
        volume_mounts: Some(vec![VolumeMount {
            name: "data".to_owned(),
            mount_path: "/data".to_owned(),
            ..VolumeMount::default()
        }]),
        ..Container::default()
    };
    StatefulSet {
        metadata: meta(name.clone(), ns, names.shard_labels(index), owner),
        spec: Some(StatefulSetSpec {
            replicas: Some(redis.replicas_per_shard),
            service_name: Some(name),
            selector: selector(names.shard_selector_labels(index)),
            pod_management_policy: Some("Parallel".to_owned()),
            template: PodTemplateSpec {
                metadata: Some(ObjectMeta {
                    labels: Some(names.shard_labels(index)),
                    ..ObjectMeta::default()
                }),
                spec: Some(PodSpec {
                    containers: vec![container],
                    security_context: Some(pod_security(REDIS_UID)),
                    automount_service_account_token: Some(false),
                    volumes: Some(vec![Volume {
                        name: "data".to_owned(),
                        empty_dir: Some(EmptyDirVolumeSource::default()),
                        ..Volume::default()
                    }]),
                    ..PodSpec::default()
                }),
            },
            ..StatefulSetSpec::default()
        }),
        ..StatefulSet::default()
    }
}

fn exec_probe(period: i32) -> Probe {
    Probe {
        exec: Some(ExecAction {
            command: Some(vec![
                "redis-cli".to_owned(),
                "-p".to_owned(),
                REDIS_PORT.to_string(),
                "ping".to_owned(),
            ]),
        }),
        period_seconds: Some(period),
        timeout_seconds: Some(2),
        failure_threshold: Some(3),
        ..Probe::default()
    }
}
