//! Pieces of the owned pods: hardened security contexts and pod spec, environment variables,
//! container and Service ports, HTTP probes, resources, Secret file volumes and their mounts.

use k8s_openapi::api::core::v1::{
    Capabilities, Container, ContainerPort, EnvVar, HTTPGetAction, KeyToPath, PodSecurityContext,
    PodSpec, Probe, ResourceRequirements, SeccompProfile, SecretVolumeSource, SecurityContext,
    ServicePort, Volume, VolumeMount,
};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;

/// Non-root, read-only root filesystem, no capabilities.
pub fn container_security(run_as_user: i64) -> SecurityContext {
    SecurityContext {
        allow_privilege_escalation: Some(false),
        read_only_root_filesystem: Some(true),
        run_as_non_root: Some(true),
        run_as_user: Some(run_as_user),
        capabilities: Some(Capabilities {
            drop: Some(vec!["ALL".to_owned()]),
            ..Capabilities::default()
        }),
        ..SecurityContext::default()
    }
}

pub fn pod_security(fs_group: i64) -> PodSecurityContext {
    PodSecurityContext {
        run_as_non_root: Some(true),
        fs_group: Some(fs_group),
        seccomp_profile: Some(SeccompProfile {
            type_: "RuntimeDefault".to_owned(),
            ..SeccompProfile::default()
        }),
        ..PodSecurityContext::default()
    }
}

/// The pod of an owned workload: one container, hardened, no service account token.
pub fn pod_spec(container: Container, uid: i64, volumes: Vec<Volume>) -> PodSpec {
    PodSpec {
        containers: vec![container],
        security_context: Some(pod_security(uid)),
        automount_service_account_token: Some(false),
        volumes: Some(volumes),
        ..PodSpec::default()
    }
}

/// An environment variable with a plain value.
pub fn env(name: &str, value: impl Into<String>) -> EnvVar {
    EnvVar {
        name: name.to_owned(),
        value: Some(value.into()),
        ..EnvVar::default()
    }
}

pub fn http_probe(path: &str, port: &str, period: i32, failures: i32) -> Probe {
    Probe {
        http_get: Some(HTTPGetAction {
            path: Some(path.to_owned()),
            port: IntOrString::String(port.to_owned()),
            ..HTTPGetAction::default()
        }),
        period_seconds: Some(period),
        timeout_seconds: Some(2),
        failure_threshold: Some(failures),
        ..Probe::default()
    }
}

pub fn port(name: &str, port: i32) -> ContainerPort {
    ContainerPort {
        name: Some(name.to_owned()),
        container_port: port,
        protocol: Some("TCP".to_owned()),
        ..ContainerPort::default()
    }
}

/// A TCP Service port `name` that targets the container port of the same name.
pub fn service_port(name: &str, port: i32) -> ServicePort {
    ServicePort {
        name: Some(name.to_owned()),
        port,
        target_port: Some(IntOrString::String(name.to_owned())),
        protocol: Some("TCP".to_owned()),
        ..ServicePort::default()
    }
}

pub fn resources(resources: &Option<ResourceRequirements>) -> Option<ResourceRequirements> {
    resources.clone()
}

/// A volume holding one key of a Secret as the file `path`.
pub fn secret_file_volume(volume: &str, secret: &str, key: &str, path: &str) -> Volume {
    Volume {
        name: volume.to_owned(),
        secret: Some(SecretVolumeSource {
            secret_name: Some(secret.to_owned()),
            items: Some(vec![KeyToPath {
                key: key.to_owned(),
                path: path.to_owned(),
                ..KeyToPath::default()
            }]),
            ..SecretVolumeSource::default()
        }),
        ..Volume::default()
    }
}

/// A read-only mount of volume `name` at `path`.
pub fn mount(name: &str, path: &str) -> VolumeMount {
    VolumeMount {
        name: name.to_owned(),
        mount_path: path.to_owned(),
        read_only: Some(true),
        ..VolumeMount::default()
    }
}
