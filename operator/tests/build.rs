//! The pure build step, from small YAML fixtures.

mod common;

use std::collections::BTreeMap;

use common::fixture;
use kube::ResourceExt;
use screenlimit_operator::build::{Desired, build};
use screenlimit_operator::crd::Plan;
use screenlimit_operator::names::CONFIG_HASH_ANNOTATION;

fn names<T: ResourceExt>(objects: &[T]) -> Vec<String> {
    objects.iter().map(|o| o.name_any()).collect()
}

fn limiter_yaml(desired: &Desired) -> String {
    desired.config_maps[0].data.as_ref().unwrap()["limiter.yaml"].clone()
}

fn pod_annotation(desired: &Desired) -> String {
    let d = &desired.deployments[0];
    d.spec
        .as_ref()
        .unwrap()
        .template
        .metadata
        .as_ref()
        .unwrap()
        .annotations
        .as_ref()
        .unwrap()[CONFIG_HASH_ANNOTATION]
        .clone()
}

#[test]
fn managed_mode_renders_a_statefulset_and_service_per_shard() {
    let desired = build(&fixture("managed.yaml")).unwrap();
    assert_eq!(
        names(&desired.stateful_sets),
        ["demo-redis-0", "demo-redis-1"]
    );
    assert_eq!(
        names(&desired.services),
        ["demo-redis-0", "demo-redis-1", "demo-limiter"]
    );
    assert_eq!(names(&desired.deployments), ["demo-limiter"]);
    assert_eq!(names(&desired.config_maps), ["demo-limiter"]);
    assert_eq!(names(&desired.pdbs), ["demo-limiter"]);
    assert_eq!(desired.stream_id_secret.as_deref(), Some("demo-stream-id"));

    // Every object: owner reference to the resource, app.kubernetes.io labels, its namespace.
    let metas = desired
        .stateful_sets
        .iter()
        .map(|o| &o.metadata)
        .chain(desired.services.iter().map(|o| &o.metadata))
        .chain(desired.deployments.iter().map(|o| &o.metadata))
        .chain(desired.config_maps.iter().map(|o| &o.metadata))
        .chain(desired.pdbs.iter().map(|o| &o.metadata));
    for meta in metas {
        let owner = &meta.owner_references.as_ref().unwrap()[0];
        assert_eq!(owner.kind, "StreamLimiter");
        assert_eq!(owner.uid, "7c0e5a52-0000-4000-8000-000000000001");
        assert_eq!(owner.controller, Some(true));
        let labels = meta.labels.as_ref().unwrap();
        assert_eq!(labels["app.kubernetes.io/name"], "screenlimit");
        assert_eq!(labels["app.kubernetes.io/instance"], "demo");
        assert_eq!(
            labels["app.kubernetes.io/managed-by"],
            "screenlimit-operator"
        );
        assert!(labels.contains_key("app.kubernetes.io/component"));
        assert_eq!(meta.namespace.as_deref(), Some("video"));
    }

    // The shard Service targets the primary only.
    let svc = desired.services[1].spec.as_ref().unwrap();
    assert_eq!(
        svc.selector.as_ref().unwrap()["statefulset.kubernetes.io/pod-name"],
        "demo-redis-1-0"
    );
    let sts = desired.stateful_sets[0].spec.as_ref().unwrap();
    assert_eq!(sts.service_name.as_deref(), Some("demo-redis-0"));
    assert_eq!(sts.replicas, Some(1));

    // The limiter: probes, config mount, secret mount, PDB that never blocks a drain.
    let pod = desired.deployments[0]
        .spec
        .as_ref()
        .unwrap()
        .template
        .spec
        .as_ref()
        .unwrap();
    let c = &pod.containers[0];
    assert_eq!(
        c.args.as_ref().unwrap(),
        &["--config", "/etc/screenlimit/limiter.yaml"]
    );
    let path = |p: &Option<k8s_openapi::api::core::v1::Probe>| {
        p.as_ref()
            .unwrap()
            .http_get
            .as_ref()
            .unwrap()
            .path
            .clone()
            .unwrap()
    };
    assert_eq!(path(&c.readiness_probe), "/readyz");
    assert_eq!(path(&c.liveness_probe), "/healthz");
    let secret_volume = pod
        .volumes
        .as_ref()
        .unwrap()
        .iter()
        .find(|v| v.name == "stream-id-secret")
        .unwrap();
    assert_eq!(
        secret_volume
            .secret
            .as_ref()
            .unwrap()
            .secret_name
            .as_deref(),
        Some("demo-stream-id")
    );
    assert_eq!(
        desired.deployments[0].spec.as_ref().unwrap().replicas,
        Some(3)
    );
    let pdb = desired.pdbs[0].spec.as_ref().unwrap();
    assert_eq!(
        pdb.max_unavailable,
        Some(k8s_openapi::apimachinery::pkg::util::intstr::IntOrString::Int(1))
    );
    assert!(pdb.min_available.is_none());
    assert_eq!(pod_annotation(&desired), desired.config_hash);

    let yaml = limiter_yaml(&desired);
    assert!(
        yaml.contains("redis://demo-redis-0.video.svc:6379"),
        "{yaml}"
    );
    assert!(
        yaml.contains("redis://demo-redis-1.video.svc:6379"),
        "{yaml}"
    );
}

#[test]
fn build_is_deterministic() {
    let sl = fixture("managed.yaml");
    assert_eq!(build(&sl).unwrap(), build(&sl).unwrap());
}

#[test]
fn external_mode_renders_no_redis_and_uses_the_given_urls_and_secrets() {
    let desired = build(&fixture("external.yaml")).unwrap();
    assert!(desired.stateful_sets.is_empty());
    assert_eq!(names(&desired.services), ["ext-limiter"]);
    assert_eq!(
        desired.stream_id_secret, None,
        "the spec names its own secret"
    );
    let yaml = limiter_yaml(&desired);
    assert!(yaml.contains("redis://redis-a.data.svc:6379"));
    assert!(yaml.contains("rediss://redis-b.data.svc:6380"));
    assert!(yaml.contains("auth_token_file: /etc/screenlimit/auth/token"));
    assert!(yaml.contains("failure_policy: local_cap"));
    assert!(yaml.contains("timeout: 40ms"));
    let pod = desired.deployments[0]
        .spec
        .as_ref()
        .unwrap()
        .template
        .spec
        .as_ref()
        .unwrap();
    let secret_names: Vec<_> = pod
        .volumes
        .as_ref()
        .unwrap()
        .iter()
        .filter_map(|v| v.secret.as_ref()?.secret_name.clone())
        .collect();
    assert_eq!(secret_names, ["my-stream-id", "limiter-token"]);
}

#[test]
fn external_urls_from_a_secret_reach_the_limiter_through_the_environment() {
    let desired = build(&fixture("external-secret.yaml")).unwrap();
    let c = &desired.deployments[0]
        .spec
        .as_ref()
        .unwrap()
        .template
        .spec
        .as_ref()
        .unwrap()
        .containers[0];
    let env = c
        .env
        .as_ref()
        .unwrap()
        .iter()
        .find(|e| e.name == "SCREENLIMIT_REDIS_SHARDS")
        .unwrap();
    let key = env
        .value_from
        .as_ref()
        .unwrap()
        .secret_key_ref
        .as_ref()
        .unwrap();
    assert_eq!(
        (key.name.as_str(), key.key.as_str()),
        ("redis-urls", "urls")
    );
    assert!(limiter_yaml(&desired).contains("redis_shards: []"));
}

#[test]
fn shard_count_change_adds_and_removes_shards_and_rolls_the_limiter() {
    let mut sl = fixture("managed.yaml");
    let two = build(&sl).unwrap();
    sl.spec.redis.shards = 3;
    let three = build(&sl).unwrap();
    assert_eq!(
        names(&three.stateful_sets),
        ["demo-redis-0", "demo-redis-1", "demo-redis-2"]
    );
    assert!(limiter_yaml(&three).contains("redis://demo-redis-2.video.svc:6379"));
    assert_ne!(two.config_hash, three.config_hash);
    sl.spec.redis.shards = 1;
    let one = build(&sl).unwrap();
    assert_eq!(names(&one.stateful_sets), ["demo-redis-0"]);
    assert_eq!(
        one.names_of::<k8s_openapi::api::core::v1::Service>(),
        ["demo-redis-0", "demo-limiter"]
    );
    // Shard 0 is identical whatever the count: growing never touches existing shards.
    assert_eq!(one.stateful_sets[0], three.stateful_sets[0]);
}

#[test]
fn admin_ui_is_rendered_only_when_enabled() {
    let on = build(&fixture("admin-ui.yaml")).unwrap();
    assert_eq!(names(&on.deployments), ["demo-limiter", "demo-admin-ui"]);
    assert!(names(&on.services).contains(&"demo-admin-ui".to_owned()));
    let pod = on.deployments[1]
        .spec
        .as_ref()
        .unwrap()
        .template
        .spec
        .as_ref()
        .unwrap();
    let c = &pod.containers[0];
    assert_eq!(c.image.as_deref(), Some("example.com/admin-ui:1"));
    let env: BTreeMap<_, _> = c
        .env
        .as_ref()
        .unwrap()
        .iter()
        .map(|e| (e.name.clone(), e.value.clone().unwrap_or_default()))
        .collect();
    assert_eq!(env["SCREENLIMIT_LIMITER_URL"], "http://demo-limiter:8080");
    assert_eq!(c.ports.as_ref().unwrap()[0].container_port, 8081);
    assert_eq!(
        pod.volumes.as_ref().unwrap()[0]
            .secret
            .as_ref()
            .unwrap()
            .secret_name
            .as_deref(),
        Some("admin-users")
    );

    let mut sl = fixture("admin-ui.yaml");
    sl.spec.admin_ui.enabled = false;
    let off = build(&sl).unwrap();
    assert_eq!(names(&off.deployments), ["demo-limiter"]);
    assert!(!names(&off.services).contains(&"demo-admin-ui".to_owned()));
}

#[test]
fn config_hash_changes_when_plans_change_and_only_then() {
    let mut sl = fixture("managed.yaml");
    let before = build(&sl).unwrap();
    sl.spec.limiter.replicas = 7; // not part of the config
    assert_eq!(build(&sl).unwrap().config_hash, before.config_hash);
    sl.spec.plans.push(Plan {
        name: "family".into(),
        max_streams: 6,
    });
    let after = build(&sl).unwrap();
    assert_ne!(after.config_hash, before.config_hash);
    assert_eq!(pod_annotation(&after), after.config_hash);
    assert_ne!(pod_annotation(&after), pod_annotation(&before));
}

#[test]
fn a_resource_without_uid_cannot_be_built() {
    let mut sl = fixture("managed.yaml");
    sl.metadata.uid = None;
    assert!(build(&sl).is_err());
}
