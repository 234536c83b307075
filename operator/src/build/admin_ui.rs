//! The admin UI Deployment and Service (only when `adminUI.enabled`).

use k8s_openapi::api::apps::v1::{Deployment, DeploymentSpec};
use k8s_openapi::api::core::v1::{
    Container, PodSpec, PodTemplateSpec, SecretVolumeSource, Service, ServiceSpec, Volume,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};

use super::limiter::NONROOT_UID;
use super::meta::{meta, selector};
use super::pod::{
    container_security, env, http_probe, mount, pod_spec, port, resources, secret_file_volume,
    service_port,
};
use crate::crd::StreamLimiter;
use crate::names::{ADMIN_UI_PORT, Component, LIMITER_PORT, Names};

/// Where the admin UI's credentials Secret is mounted.
pub const ADMIN_AUTH_DIR: &str = "/etc/screenlimit/admin-auth";
/// Where the limiter's bearer token is mounted in admin UI pods.
pub const LIMITER_TOKEN_DIR: &str = "/etc/screenlimit/limiter-auth";
/// Where the OpenID Connect client secret is mounted in admin UI pods.
pub const OIDC_CLIENT_DIR: &str = "/etc/screenlimit/oidc-client";
/// The dashboard pods' grace period: its drain (5 s) + its shutdown timeout (10 s) + 5 s.
pub const ADMIN_UI_GRACE_SECONDS: i64 = 20;

pub fn service(names: &Names, ns: &str, owner: &OwnerReference) -> Service {
    Service {
        metadata: meta(
            names.admin_ui(),
            ns,
            names.labels(Component::AdminUi),
            owner,
        ),
        spec: Some(ServiceSpec {
            selector: Some(names.selector_labels(Component::AdminUi)),
            ports: Some(vec![service_port("http", ADMIN_UI_PORT)]),
            ..ServiceSpec::default()
        }),
        ..Service::default()
    }
}

pub fn deployment(
    sl: &StreamLimiter,
    names: &Names,
    ns: &str,
    owner: &OwnerReference,
) -> Deployment {
    let ui = &sl.spec.admin_ui;
    let mut vars = vec![
        env(
            "SCREENLIMIT_LIMITER_URL",
            format!("http://{}:{LIMITER_PORT}", names.limiter()),
        ),
        // The dashboard listens on loopback by default; in a pod it must take the pod's traffic.
        env(
            "SCREENLIMIT_ADMIN_LISTEN",
            format!("0.0.0.0:{ADMIN_UI_PORT}"),
        ),
    ];
    let mut volumes = Vec::new();
    let mut mounts = Vec::new();
    if let Some(secret) = &ui.auth_secret_name {
        volumes.push(Volume {
            name: "admin-auth".to_owned(),
            secret: Some(SecretVolumeSource {
                secret_name: Some(secret.clone()),
                ..SecretVolumeSource::default()
            }),
            ..Volume::default()
        });
        mounts.push(mount("admin-auth", ADMIN_AUTH_DIR));
        vars.push(env("SCREENLIMIT_ADMIN_AUTH_DIR", ADMIN_AUTH_DIR));
    }
    if !ui.trusted_proxies.is_empty() {
        vars.push(env(
            "SCREENLIMIT_ADMIN_TRUSTED_PROXIES",
            ui.trusted_proxies.join(","),
        ));
    }
    if let Some(url) = &ui.external_url {
        vars.push(env(
            "SCREENLIMIT_ADMIN_EXTERNAL_URL",
            url.trim_end_matches('/'),
        ));
    }
    if let Some(url) = &ui.prometheus_url {
        vars.push(env("SCREENLIMIT_ADMIN_PROMETHEUS_URL", url));
    }
    if let Some(oidc) = &ui.oidc {
        vars.push(env("SCREENLIMIT_ADMIN_OIDC_ISSUER", &oidc.issuer_url));
        vars.push(env("SCREENLIMIT_ADMIN_OIDC_CLIENT_ID", &oidc.client_id));
        vars.push(env("SCREENLIMIT_ADMIN_OIDC_ROLES_CLAIM", &oidc.roles_claim));
        vars.push(env(
            "SCREENLIMIT_ADMIN_OIDC_SUPPORT_GROUPS",
            oidc.support_groups.join(","),
        ));
        vars.push(env(
            "SCREENLIMIT_ADMIN_OIDC_VIEWER_GROUPS",
            oidc.viewer_groups.join(","),
        ));
        let mut scopes = vec!["profile".to_owned(), "groups".to_owned()];
        scopes.extend(oidc.extra_scopes.iter().cloned());
        vars.push(env("SCREENLIMIT_ADMIN_OIDC_SCOPES", scopes.join(",")));
        if let Some(name) = &oidc.display_name {
            vars.push(env("SCREENLIMIT_ADMIN_OIDC_DISPLAY_NAME", name));
        }
        if let Some(secret) = &oidc.client_secret {
            volumes.push(secret_file_volume(
                "oidc-client",
                &secret.name,
                &secret.key,
                "client-secret",
            ));
            mounts.push(mount("oidc-client", OIDC_CLIENT_DIR));
            vars.push(env(
                "SCREENLIMIT_ADMIN_OIDC_CLIENT_SECRET_FILE",
                format!("{OIDC_CLIENT_DIR}/client-secret"),
            ));
        }
    }
    if let Some(token) = &sl.spec.limiter.auth_token_secret {
        volumes.push(secret_file_volume(
            "limiter-auth",
            &token.name,
            &token.key,
            "token",
        ));
        mounts.push(mount("limiter-auth", LIMITER_TOKEN_DIR));
        vars.push(env(
            "SCREENLIMIT_LIMITER_TOKEN_FILE",
            format!("{LIMITER_TOKEN_DIR}/token"),
        ));
    }
    let container = Container {
        name: "admin-ui".to_owned(),
        image: Some(ui.image.clone()),
        env: Some(vars),
        ports: Some(vec![port("http", ADMIN_UI_PORT)]),
        // `/readyz` turns 503 when the dashboard drains on SIGTERM (its defaults: 5 s of drain,
        // 10 s for requests in flight).
        readiness_probe: Some(http_probe("/readyz", "http", 10, 3)),
        liveness_probe: Some(http_probe("/healthz", "http", 20, 3)),
        resources: resources(&ui.resources),
        security_context: Some(container_security(NONROOT_UID)),
        volume_mounts: Some(mounts),
        ..Container::default()
    };
    Deployment {
        metadata: meta(
            names.admin_ui(),
            ns,
            names.labels(Component::AdminUi),
            owner,
        ),
        spec: Some(DeploymentSpec {
            replicas: Some(ui.replicas),
            selector: selector(names.selector_labels(Component::AdminUi)),
            template: PodTemplateSpec {
                metadata: Some(ObjectMeta {
                    labels: Some(names.labels(Component::AdminUi)),
                    ..ObjectMeta::default()
                }),
                spec: Some(PodSpec {
                    termination_grace_period_seconds: Some(ADMIN_UI_GRACE_SECONDS),
                    ..pod_spec(container, NONROOT_UID, volumes)
                }),
            },
            ..DeploymentSpec::default()
        }),
        ..Deployment::default()
    }
}
