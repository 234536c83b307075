//! The limiter: its ConfigMap, Deployment, Service, PodDisruptionBudget and optional
//! HorizontalPodAutoscaler.

use std::collections::BTreeMap;

use k8s_openapi::api::apps::v1::{
    Deployment, DeploymentSpec, DeploymentStrategy, RollingUpdateDeployment,
};
use k8s_openapi::api::autoscaling::v2::{
    CrossVersionObjectReference, HorizontalPodAutoscaler, HorizontalPodAutoscalerSpec, MetricSpec,
    MetricTarget, ResourceMetricSource,
};
use k8s_openapi::api::core::v1::{
    ConfigMap, ConfigMapVolumeSource, Container, EnvVar, EnvVarSource, KeyToPath, PodSpec,
    PodTemplateSpec, SecretKeySelector, Service, ServiceSpec, Volume,
};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;

use super::access::{
    EXTERNAL_PASSWORD_FILE, LIMITER_AUTH_DIR, TLS_DIR, external_auth, limiter_auth_volume,
    limiter_tls_volume, managed, tls_secret,
};
use super::limiter_config::{
    AUTH_TOKEN_DIR, CONFIG_DIR, GATEWAY_TOKEN_DIR, PLAN_DB_DIR, PLAYER_KEYS_DIR,
    STREAM_ID_SECRET_DIR,
};
use super::meta::{max_unavailable_one, meta, selector};
use super::pod::{
    container_security, env, http_probe, mount, pod_spec, port, resources, secret_file_volume,
    service_port,
};
use crate::crd::{AutoscalingSpec, PlanSourceKind, SecretKeyRef, StreamLimiter};
use crate::names::{
    CONFIG_HASH_ANNOTATION, Component, LIMITER_CONFIG_KEY, LIMITER_PORT, Names,
    STREAM_ID_SECRET_KEY,
};

/// UID the limiter image runs as (distroless `nonroot`).
pub const NONROOT_UID: i64 = 65532;

pub fn config_map(names: &Names, ns: &str, config: String, owner: &OwnerReference) -> ConfigMap {
    ConfigMap {
        metadata: meta(names.limiter(), ns, names.labels(Component::Limiter), owner),
        data: Some(BTreeMap::from([(LIMITER_CONFIG_KEY.to_owned(), config)])),
        ..ConfigMap::default()
    }
}

pub fn service(names: &Names, ns: &str, owner: &OwnerReference) -> Service {
    Service {
        metadata: meta(names.limiter(), ns, names.labels(Component::Limiter), owner),
        spec: Some(ServiceSpec {
            selector: Some(names.selector_labels(Component::Limiter)),
            ports: Some(vec![service_port("http", LIMITER_PORT)]),
            ..ServiceSpec::default()
        }),
        ..Service::default()
    }
}

/// `maxUnavailable: 1`: a drain can always proceed, one limiter pod at a time.
pub fn pdb(names: &Names, ns: &str, owner: &OwnerReference) -> PodDisruptionBudget {
    max_unavailable_one(
        names.limiter(),
        ns,
        names.labels(Component::Limiter),
        names.selector_labels(Component::Limiter),
        owner,
    )
}

/// The Secret key holding the plan database's connection string, when plans come from it.
pub fn plan_db_secret(sl: &StreamLimiter) -> Option<&SecretKeyRef> {
    let source = &sl.spec.plan_source;
    match source.kind {
        PlanSourceKind::Postgres => source.postgres.as_ref().map(|p| &p.secret_ref),
        PlanSourceKind::Request => None,
    }
}

/// Name of the Secret holding the stream id key: the user's, or the one the operator creates.
pub fn stream_id_secret_name(sl: &StreamLimiter, names: &Names) -> String {
    sl.spec
        .stream_id_secret_name
        .clone()
        .unwrap_or_else(|| names.stream_id_secret())
}

pub fn deployment(
    sl: &StreamLimiter,
    names: &Names,
    ns: &str,
    config_hash: &str,
    owner: &OwnerReference,
) -> Deployment {
    let spec = &sl.spec;
    let mut volumes = vec![
        Volume {
            name: "config".to_owned(),
            config_map: Some(ConfigMapVolumeSource {
                name: names.limiter(),
                items: Some(vec![KeyToPath {
                    key: LIMITER_CONFIG_KEY.to_owned(),
                    path: LIMITER_CONFIG_KEY.to_owned(),
                    ..KeyToPath::default()
                }]),
                ..ConfigMapVolumeSource::default()
            }),
            ..Volume::default()
        },
        secret_file_volume(
            "stream-id-secret",
            &stream_id_secret_name(sl, names),
            STREAM_ID_SECRET_KEY,
            STREAM_ID_SECRET_KEY,
        ),
    ];
    let mut mounts = vec![
        mount("config", CONFIG_DIR),
        mount("stream-id-secret", STREAM_ID_SECRET_DIR),
    ];
    if let Some(token) = &spec.limiter.auth_token_secret {
        volumes.push(secret_file_volume(
            "auth-token",
            &token.name,
            &token.key,
            "token",
        ));
        mounts.push(mount("auth-token", AUTH_TOKEN_DIR));
    }
    if let Some(token) = &spec.limiter.gateway_token_secret {
        volumes.push(secret_file_volume(
            "gateway-token",
            &token.name,
            &token.key,
            "token",
        ));
        mounts.push(mount("gateway-token", GATEWAY_TOKEN_DIR));
    }
    if let Some(key) = spec
        .limiter
        .player_auth
        .as_ref()
        .and_then(|p| p.hs256_secret.as_ref().or(p.jwks_secret.as_ref()))
    {
        volumes.push(secret_file_volume(
            "player-keys",
            &key.name,
            &key.key,
            "keys",
        ));
        mounts.push(mount("player-keys", PLAYER_KEYS_DIR));
    }
    if let Some(db) = plan_db_secret(sl) {
        // Only the one key, as the file `url`: the limiter reads `plan_source.postgres_url_file`.
        volumes.push(secret_file_volume("plan-db", &db.name, &db.key, "url"));
        mounts.push(mount("plan-db", PLAN_DB_DIR));
    }
    if managed(sl) {
        volumes.push(limiter_auth_volume(
            names,
            super::limiter_config::sentinel_enabled(sl),
        ));
        mounts.push(mount("redis-auth", LIMITER_AUTH_DIR));
    }
    if let Some(auth) = external_auth(sl) {
        // Only the one key, as the file the config names.
        volumes.push(secret_file_volume(
            "redis-auth",
            &auth.password_secret_ref.name,
            &auth.password_secret_ref.key,
            EXTERNAL_PASSWORD_FILE,
        ));
        mounts.push(mount("redis-auth", LIMITER_AUTH_DIR));
    }
    if let Some(secret) = tls_secret(sl) {
        volumes.push(limiter_tls_volume(secret));
        mounts.push(mount("redis-tls", TLS_DIR));
    }
    let (region_volumes, region_mounts) = super::regions::volumes_and_mounts(sl);
    volumes.extend(region_volumes);
    mounts.extend(region_mounts);
    let mut vars = vec![env("SCREENLIMIT_LOG_FORMAT", "json")];
    let external = spec.redis.external.as_ref();
    let from_secrets = [
        (
            "SCREENLIMIT_REDIS_SHARDS",
            external.and_then(|ext| ext.urls_secret.as_ref()),
        ),
        (
            "SCREENLIMIT_REDIS_CLUSTER_NODES",
            external.and_then(|ext| ext.cluster_nodes_secret.as_ref()),
        ),
    ];
    for (name, secret) in from_secrets {
        let Some(secret) = secret else { continue };
        vars.push(EnvVar {
            name: name.to_owned(),
            value_from: Some(EnvVarSource {
                secret_key_ref: Some(SecretKeySelector {
                    name: secret.name.clone(),
                    key: secret.key.clone(),
                    optional: Some(false),
                }),
                ..EnvVarSource::default()
            }),
            ..EnvVar::default()
        });
    }
    let container = Container {
        name: "limiter".to_owned(),
        image: Some(spec.limiter.image.clone()),
        args: Some(vec![
            "--config".to_owned(),
            format!("{CONFIG_DIR}/{LIMITER_CONFIG_KEY}"),
        ]),
        env: Some(vars),
        ports: Some(vec![port("http", LIMITER_PORT)]),
        readiness_probe: Some(http_probe("/readyz", "http", 5, 2)),
        liveness_probe: Some(http_probe("/healthz", "http", 10, 3)),
        resources: resources(&spec.limiter.resources),
        security_context: Some(container_security(NONROOT_UID)),
        volume_mounts: Some(mounts),
        ..Container::default()
    };
    Deployment {
        metadata: meta(names.limiter(), ns, names.labels(Component::Limiter), owner),
        spec: Some(DeploymentSpec {
            // Under an autoscaler this is only the first count: the reconciler then applies
            // the live count back, so that the operator neither fights the autoscaler nor drops
            // the field (which would reset the Deployment to 1 pod).
            replicas: Some(match AutoscalingSpec::on(&spec.limiter.autoscaling) {
                Some(auto) => auto.min_replicas,
                None => spec.limiter.replicas,
            }),
            selector: selector(names.selector_labels(Component::Limiter)),
            strategy: Some(DeploymentStrategy {
                type_: Some("RollingUpdate".to_owned()),
                rolling_update: Some(RollingUpdateDeployment {
                    max_unavailable: Some(IntOrString::Int(0)),
                    max_surge: Some(IntOrString::Int(1)),
                }),
            }),
            template: PodTemplateSpec {
                metadata: Some(ObjectMeta {
                    labels: Some(names.labels(Component::Limiter)),
                    annotations: Some(BTreeMap::from([(
                        CONFIG_HASH_ANNOTATION.to_owned(),
                        config_hash.to_owned(),
                    )])),
                    ..ObjectMeta::default()
                }),
                spec: Some(PodSpec {
                    // The limiter drains on SIGTERM (no preStop needed: it keeps answering
                    // itself): the kubelet must not cut that short.
                    termination_grace_period_seconds: Some(
                        spec.limiter.http.termination_grace_period_seconds(),
                    ),
                    ..pod_spec(container, NONROOT_UID, volumes)
                }),
            },
            ..DeploymentSpec::default()
        }),
        ..Deployment::default()
    }
}

/// The limiter's HorizontalPodAutoscaler (autoscaling/v2, average CPU utilization of the pods'
/// request), when `limiter.autoscaling.enabled`.
pub fn hpa(
    sl: &StreamLimiter,
    names: &Names,
    ns: &str,
    owner: &OwnerReference,
) -> Option<HorizontalPodAutoscaler> {
    let auto = AutoscalingSpec::on(&sl.spec.limiter.autoscaling)?;
    Some(HorizontalPodAutoscaler {
        metadata: meta(names.limiter(), ns, names.labels(Component::Limiter), owner),
        spec: Some(HorizontalPodAutoscalerSpec {
            scale_target_ref: CrossVersionObjectReference {
                api_version: Some("apps/v1".to_owned()),
                kind: "Deployment".to_owned(),
                name: names.limiter(),
            },
            min_replicas: Some(auto.min_replicas),
            max_replicas: auto.max_replicas,
            metrics: Some(vec![MetricSpec {
                type_: "Resource".to_owned(),
                resource: Some(ResourceMetricSource {
                    name: "cpu".to_owned(),
                    target: MetricTarget {
                        type_: "Utilization".to_owned(),
                        average_utilization: Some(auto.target_cpu_utilization_percent),
                        ..MetricTarget::default()
                    },
                }),
                ..MetricSpec::default()
            }]),
            ..HorizontalPodAutoscalerSpec::default()
        }),
        ..HorizontalPodAutoscaler::default()
    })
}
