//! The pure build step, from small YAML fixtures.

mod common;

use std::collections::BTreeMap;

use common::fixture;
use k8s_openapi::api::core::v1::{PodSpec, Volume};
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

fn pod_spec(sts: &k8s_openapi::api::apps::v1::StatefulSet) -> &PodSpec {
    sts.spec.as_ref().unwrap().template.spec.as_ref().unwrap()
}

fn deployment_pod(d: &k8s_openapi::api::apps::v1::Deployment) -> &PodSpec {
    d.spec.as_ref().unwrap().template.spec.as_ref().unwrap()
}

fn volume<'a>(pod: &'a PodSpec, name: &str) -> &'a Volume {
    pod.volumes
        .as_ref()
        .unwrap()
        .iter()
        .find(|v| v.name == name)
        .unwrap()
}

fn secret_name(volume: &Volume) -> Option<&str> {
    volume.secret.as_ref().unwrap().secret_name.as_deref()
}

fn env_of(c: &k8s_openapi::api::core::v1::Container) -> BTreeMap<String, String> {
    c.env
        .as_ref()
        .unwrap()
        .iter()
        .map(|e| (e.name.clone(), e.value.clone().unwrap_or_default()))
        .collect()
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

    // The shard Service is headless over the shard's pods (one pod without replicas).
    let svc = desired.services[1].spec.as_ref().unwrap();
    assert_eq!(svc.cluster_ip.as_deref(), Some("None"));
    assert_eq!(svc.selector.as_ref().unwrap()["screenlimit.io/shard"], "1");
    assert_eq!(svc.publish_not_ready_addresses, Some(true));
    let sts = desired.stateful_sets[0].spec.as_ref().unwrap();
    assert_eq!(sts.service_name.as_deref(), Some("demo-redis-0"));
    assert_eq!(sts.replicas, Some(1));
    // Without replicas: no Sentinel, no shard PDB, no scripts ConfigMap (an inline start
    // script writes the config with the passwords, see tests/access.rs).
    let redis = &sts.template.spec.as_ref().unwrap().containers[0];
    assert_eq!(redis.command.as_ref().unwrap()[..2], ["sh", "-c"]);
    assert!(redis.lifecycle.is_none());

    // The limiter: probes, config mount, secret mount, PDB that never blocks a drain.
    let pod = deployment_pod(&desired.deployments[0]);
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
    assert_eq!(
        secret_name(volume(pod, "stream-id-secret")),
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
    let pod = deployment_pod(&desired.deployments[0]);
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
    let c = &deployment_pod(&desired.deployments[0]).containers[0];
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
    let pod = deployment_pod(&on.deployments[1]);
    let c = &pod.containers[0];
    assert_eq!(c.image.as_deref(), Some("example.com/admin-ui:1"));
    let env = env_of(c);
    assert_eq!(env["SCREENLIMIT_LIMITER_URL"], "http://demo-limiter:8080");
    assert_eq!(
        env["SCREENLIMIT_ADMIN_LISTEN"], "0.0.0.0:8081",
        "reachable from outside the pod"
    );
    assert_eq!(c.ports.as_ref().unwrap()[0].container_port, 8081);
    assert_eq!(
        secret_name(&pod.volumes.as_ref().unwrap()[0]),
        Some("admin-users")
    );
    assert_eq!(
        env["SCREENLIMIT_ADMIN_TRUSTED_PROXIES"], "10.0.0.0/8,fd00::/8",
        "the ingress's X-Forwarded-For is believed, so throttling sees each client"
    );
    // The dashboard drains on SIGTERM: unready through /readyz, and time to do it.
    let probe = c
        .readiness_probe
        .as_ref()
        .unwrap()
        .http_get
        .as_ref()
        .unwrap();
    assert_eq!(probe.path.as_deref(), Some("/readyz"));
    assert_eq!(pod.termination_grace_period_seconds, Some(20));

    let mut sl = fixture("admin-ui.yaml");
    sl.spec.admin_ui.enabled = false;
    let off = build(&sl).unwrap();
    assert_eq!(names(&off.deployments), ["demo-limiter"]);
    assert!(!names(&off.services).contains(&"demo-admin-ui".to_owned()));
}

#[test]
fn admin_ui_oidc_reaches_the_pod() {
    let built = build(&fixture("admin-ui-oidc.yaml")).unwrap();
    let pod = deployment_pod(&built.deployments[1]);
    let c = &pod.containers[0];
    let env = env_of(c);
    assert_eq!(
        env["SCREENLIMIT_ADMIN_EXTERNAL_URL"], "https://support.example.com",
        "the redirect URL is {{externalUrl}}/oidc/callback"
    );
    assert_eq!(
        env["SCREENLIMIT_ADMIN_OIDC_ISSUER"],
        "https://keycloak.example.com/realms/staff"
    );
    assert_eq!(
        env["SCREENLIMIT_ADMIN_OIDC_CLIENT_ID"],
        "screenlimit-dashboard"
    );
    assert_eq!(env["SCREENLIMIT_ADMIN_OIDC_ROLES_CLAIM"], "groups");
    assert_eq!(
        env["SCREENLIMIT_ADMIN_OIDC_SUPPORT_GROUPS"],
        "support-agents"
    );
    assert_eq!(
        env["SCREENLIMIT_ADMIN_OIDC_VIEWER_GROUPS"],
        "support-leads,engineering"
    );
    assert_eq!(env["SCREENLIMIT_ADMIN_OIDC_SCOPES"], "profile,groups,email");
    assert_eq!(env["SCREENLIMIT_ADMIN_OIDC_DISPLAY_NAME"], "Example SSO");
    assert_eq!(
        env["SCREENLIMIT_ADMIN_OIDC_CLIENT_SECRET_FILE"],
        "/etc/screenlimit/oidc-client/client-secret"
    );
    let volumes = pod.volumes.as_ref().unwrap();
    let secret = volumes
        .iter()
        .find(|v| v.name == "oidc-client")
        .expect("the client secret is mounted");
    assert_eq!(secret_name(secret), Some("admin-oidc"));
    // Without oidc, none of it.
    let plain = build(&fixture("admin-ui.yaml")).unwrap();
    let env = env_of(&deployment_pod(&plain.deployments[1]).containers[0]);
    assert!(!env.keys().any(|k| k.contains("OIDC")), "{env:?}");
}

#[test]
fn a_plan_change_reaches_the_pods_live_and_a_store_change_rolls_them() {
    let mut sl = fixture("managed.yaml");
    let before = build(&sl).unwrap();
    sl.spec.limiter.replicas = 7; // not part of the config
    assert_eq!(build(&sl).unwrap().config_hash, before.config_hash);
    // Plans, the lease timing and the failure policy change in the running pods: the file (and
    // its revision) changes, the pod template does not.
    sl.spec.plans.push(Plan::new("family", 6));
    sl.spec.lease.heartbeat_interval_seconds += 1;
    sl.spec.failure_policy.mode = screenlimit_operator::crd::FailureMode::Closed;
    let live = build(&sl).unwrap();
    assert_eq!(live.config_hash, before.config_hash);
    assert_eq!(pod_annotation(&live), pod_annotation(&before));
    assert_ne!(live.limiter_config, before.limiter_config);
    assert_ne!(live.config_revision, before.config_revision);
    assert!(
        limiter_yaml(&live).contains(&format!("revision: {}", live.config_revision)),
        "the file carries its revision"
    );
    // What the limiter reads only at start rolls the pods.
    sl.spec.failure_policy.store_timeout_millis += 5;
    let rolled = build(&sl).unwrap();
    assert_ne!(rolled.config_hash, before.config_hash);
    assert_eq!(pod_annotation(&rolled), rolled.config_hash);
    assert_eq!(rolled.config_revision, live.config_revision);
}

/// The limiter takes new history bounds from its mounted file without a restart; their coming
/// left the pod template as it was (they are not in the part that rolls the pods).
#[test]
fn a_history_change_reaches_the_pods_live() {
    let mut sl = fixture("managed.yaml");
    let before = build(&sl).unwrap();
    assert!(
        !screenlimit_operator::build::limiter_config::restart_part(
            &sl,
            &screenlimit_operator::names::Names::new(&sl.name_any()),
            "video"
        )
        .contains("history"),
        "the history's bounds are in the part that rolls the pods"
    );
    sl.spec.limiter.history.max_events = 100;
    let live = build(&sl).unwrap();
    assert_eq!(live.config_hash, before.config_hash);
    assert_eq!(pod_annotation(&live), pod_annotation(&before));
    assert_ne!(live.config_revision, before.config_revision);
    sl.spec.limiter.history.retention_hours = 24;
    let again = build(&sl).unwrap();
    assert_eq!(again.config_hash, before.config_hash);
    assert_ne!(again.config_revision, live.config_revision);
    assert!(
        limiter_yaml(&again).contains("history:\n  max_events: 100\n  retention: 24h"),
        "{}",
        limiter_yaml(&again)
    );
}

/// The limiter takes a new `store.renewal_window` from its mounted file without a restart.
#[test]
fn a_renewal_window_change_reaches_the_pods_live() {
    let mut sl = fixture("managed.yaml");
    let before = build(&sl).unwrap();
    sl.spec.limiter.renewal_window_millis = 50;
    let live = build(&sl).unwrap();
    assert_eq!(live.config_hash, before.config_hash);
    assert_eq!(pod_annotation(&live), pod_annotation(&before));
    assert_ne!(live.config_revision, before.config_revision);
    assert!(
        limiter_yaml(&live).contains("renewal_window: 50ms"),
        "{}",
        limiter_yaml(&live)
    );
}

#[test]
fn a_resource_without_uid_cannot_be_built() {
    let mut sl = fixture("managed.yaml");
    sl.metadata.uid = None;
    assert!(build(&sl).is_err());
}

fn template_annotation(sts: &k8s_openapi::api::apps::v1::StatefulSet, key: &str) -> String {
    sts.spec
        .as_ref()
        .unwrap()
        .template
        .metadata
        .as_ref()
        .unwrap()
        .annotations
        .as_ref()
        .unwrap()[key]
        .clone()
}

#[test]
fn sentinel_mode_renders_replicas_sentinels_pdbs_and_scripts() {
    let desired = build(&fixture("ha.yaml")).unwrap();
    assert_eq!(
        names(&desired.stateful_sets),
        ["demo-redis-0", "demo-redis-1", "demo-sentinel"],
        "the Sentinel StatefulSet is applied after the shards"
    );
    assert_eq!(
        names(&desired.services),
        [
            "demo-redis-0",
            "demo-redis-1",
            "demo-sentinel",
            "demo-limiter"
        ]
    );
    assert_eq!(
        names(&desired.config_maps),
        ["demo-limiter", "demo-redis-ha"]
    );
    assert_eq!(
        names(&desired.pdbs),
        [
            "demo-limiter",
            "demo-redis-0",
            "demo-redis-1",
            "demo-sentinel"
        ]
    );
    for pdb in &desired.pdbs {
        let spec = pdb.spec.as_ref().unwrap();
        assert_eq!(
            spec.max_unavailable,
            Some(k8s_openapi::apimachinery::pkg::util::intstr::IntOrString::Int(1)),
            "{}: a drain is never blocked",
            pdb.name_any()
        );
        assert!(spec.min_available.is_none());
    }
    // Shard PDB selects exactly the shard's pods.
    assert_eq!(
        desired.pdbs[2]
            .spec
            .as_ref()
            .unwrap()
            .selector
            .as_ref()
            .unwrap()
            .match_labels
            .as_ref()
            .unwrap()["screenlimit.io/shard"],
        "1"
    );

    // Every shard: a primary plus one replica, all started by the same script (any can be
    // promoted), spread over nodes, a pre-stop hook that asks Sentinel to fail over.
    let shard = &desired.stateful_sets[1];
    assert_eq!(shard.spec.as_ref().unwrap().replicas, Some(2));
    let pod = pod_spec(shard);
    let redis = &pod.containers[0];
    assert_eq!(
        redis.command.as_ref().unwrap(),
        &["sh", "/etc/screenlimit/redis-ha/redis.sh"]
    );
    let env = env_of(redis);
    assert_eq!(env["SHARD"], "demo-redis-1");
    assert_eq!(env["MASTER_NAME"], "demo-shard-1");
    assert_eq!(env["SENTINEL_SERVICE"], "demo-sentinel");
    assert_eq!(env["NAMESPACE"], "video");
    assert!(
        !env.contains_key("SENTINELS"),
        "the Sentinel count must not roll the shards"
    );
    let pre_stop = redis.lifecycle.as_ref().unwrap().pre_stop.as_ref().unwrap();
    assert_eq!(
        pre_stop.exec.as_ref().unwrap().command.as_ref().unwrap(),
        &["sh", "/etc/screenlimit/redis-ha/pre-stop.sh"]
    );
    assert!(redis.startup_probe.is_some());
    let anti = pod
        .affinity
        .as_ref()
        .unwrap()
        .pod_anti_affinity
        .as_ref()
        .unwrap();
    let term = &anti
        .preferred_during_scheduling_ignored_during_execution
        .as_ref()
        .unwrap()[0];
    assert_eq!(
        term.pod_affinity_term.topology_key,
        "kubernetes.io/hostname"
    );
    assert_eq!(
        term.pod_affinity_term
            .label_selector
            .as_ref()
            .unwrap()
            .match_labels
            .as_ref()
            .unwrap()["screenlimit.io/shard"],
        "1"
    );
    let volumes: Vec<_> = pod
        .volumes
        .as_ref()
        .unwrap()
        .iter()
        .map(|v| v.name.as_str())
        .collect();
    assert_eq!(volumes, ["data", "redis-module", "scripts"]);
    // Headless shard Service over all the shard's pods: stable per-pod DNS names.
    let svc = desired.services[1].spec.as_ref().unwrap();
    assert_eq!(svc.cluster_ip.as_deref(), Some("None"));
    assert!(
        !svc.selector
            .as_ref()
            .unwrap()
            .contains_key("statefulset.kubernetes.io/pod-name")
    );

    // The Sentinels: 3 by default, quorum 2, from the Redis image, headless Service.
    let sentinel = &desired.stateful_sets[2];
    let spec = sentinel.spec.as_ref().unwrap();
    assert_eq!(spec.replicas, Some(3));
    assert_eq!(spec.service_name.as_deref(), Some("demo-sentinel"));
    let c = &pod_spec(sentinel).containers[0];
    assert_eq!(c.image.as_deref(), Some("redis:7.4"));
    assert_eq!(
        c.command.as_ref().unwrap(),
        &["sh", "/etc/screenlimit/redis-ha/sentinel.sh"]
    );
    let env = env_of(c);
    assert_eq!(env["QUORUM"], "2");
    assert_eq!(env["SENTINELS"], "3");
    assert_eq!(env["DOWN_AFTER_MS"], "5000");
    assert_eq!(env["FAILOVER_TIMEOUT_MS"], "60000");
    assert_eq!(c.ports.as_ref().unwrap()[0].container_port, 26379);
    let mounts: Vec<_> = c
        .volume_mounts
        .as_ref()
        .unwrap()
        .iter()
        .map(|m| (m.mount_path.as_str(), m.read_only))
        .collect();
    assert_eq!(
        mounts,
        [("/etc/screenlimit/redis-ha", Some(true)), ("/data", None)],
        "the template is read-only; Sentinel rewrites its copy in the emptyDir"
    );
    assert!(
        pod_spec(sentinel)
            .affinity
            .as_ref()
            .unwrap()
            .pod_anti_affinity
            .is_some()
    );
    let sentinel_svc = desired.services[2].spec.as_ref().unwrap();
    assert_eq!(sentinel_svc.cluster_ip.as_deref(), Some("None"));
    assert_eq!(sentinel_svc.publish_not_ready_addresses, Some(true));
    assert_eq!(sentinel_svc.ports.as_ref().unwrap()[0].port, 26379);

    // The scripts ConfigMap: one master name per shard, hostnames resolved and announced.
    let data = desired.config_maps[1].data.as_ref().unwrap();
    assert_eq!(
        data["masters"],
        "demo-shard-0 demo-redis-0\ndemo-shard-1 demo-redis-1\n"
    );
    assert!(data["sentinel.conf"].contains("sentinel resolve-hostnames yes"));
    assert!(data["sentinel.conf"].contains("sentinel announce-hostnames yes"));
    // What the scripts do when run is the business of the workspace's `tests/tests/ha_scripts.rs`;
    // here, that the Sentinel config is built from the template, not copied with the
    // ConfigMap's read-only mode.
    assert!(data["sentinel.sh"].contains("cat \"$dir/sentinel.conf\" > \"$next\""));
    assert!(data["redis.sh"].contains("replica-announce-ip $self"));

    // The limiter finds each shard's primary through Sentinel, never by a fixed URL.
    let yaml: serde_yaml_ng::Value = serde_yaml_ng::from_str(&limiter_yaml(&desired)).unwrap();
    assert_eq!(
        yaml["store"]["redis_shards"],
        serde_yaml_ng::Value::Sequence(vec![])
    );
    assert_eq!(
        yaml["store"]["sentinel"]["masters"],
        serde_yaml_ng::from_str::<serde_yaml_ng::Value>("[demo-shard-0, demo-shard-1]").unwrap()
    );
    assert_eq!(
        yaml["store"]["sentinel"]["addresses"][2],
        "redis://demo-sentinel-2.demo-sentinel.video.svc:26379"
    );
}

#[test]
fn replicas_per_shard_sets_the_pods_per_shard_and_switches_sentinel_on() {
    let mut sl = fixture("ha.yaml");
    sl.spec.redis.replicas_per_shard = 3;
    let desired = build(&sl).unwrap();
    assert_eq!(
        desired.stateful_sets[0].spec.as_ref().unwrap().replicas,
        Some(4)
    );
    sl.spec.redis.sentinel.replicas = 5;
    sl.spec.redis.sentinel.quorum = 3;
    let five = build(&sl).unwrap();
    let sentinel = five.stateful_sets.last().unwrap();
    assert_eq!(sentinel.spec.as_ref().unwrap().replicas, Some(5));
    assert_eq!(env_of(&pod_spec(sentinel).containers[0])["QUORUM"], "3");
    assert!(limiter_yaml(&five).contains("demo-sentinel-4.demo-sentinel.video.svc:26379"));
    assert_ne!(
        five.config_hash, desired.config_hash,
        "new Sentinel addresses roll the limiter"
    );
    assert_eq!(
        five.stateful_sets[0], desired.stateful_sets[0],
        "the Sentinel count does not touch the shards"
    );

    sl.spec.redis.replicas_per_shard = 0;
    let plain = build(&sl).unwrap();
    assert_eq!(
        names(&plain.stateful_sets),
        ["demo-redis-0", "demo-redis-1"]
    );
    assert_eq!(names(&plain.config_maps), ["demo-limiter"]);
    assert_eq!(names(&plain.pdbs), ["demo-limiter"]);
    assert!(!limiter_yaml(&plain).contains("sentinel"));
    assert!(limiter_yaml(&plain).contains("redis://demo-redis-1.video.svc:6379"));
}

#[test]
fn adding_a_shard_rolls_the_sentinels_but_not_the_existing_shards() {
    let mut sl = fixture("ha.yaml");
    let two = build(&sl).unwrap();
    sl.spec.redis.shards = 3;
    let three = build(&sl).unwrap();
    assert_eq!(two.stateful_sets[0], three.stateful_sets[0]);
    assert_eq!(two.stateful_sets[1], three.stateful_sets[1]);
    let hash = |d: &Desired| {
        template_annotation(
            d.stateful_sets.last().unwrap(),
            "screenlimit.io/scripts-hash",
        )
    };
    assert_ne!(
        hash(&two),
        hash(&three),
        "Sentinels restart to monitor the new shard"
    );
    assert!(
        three.config_maps[1].data.as_ref().unwrap()["masters"]
            .ends_with("demo-shard-2 demo-redis-2\n")
    );
    assert_ne!(two.config_hash, three.config_hash);
}

#[test]
fn plan_source_mounts_the_secret_key_and_renders_the_file_path() {
    let desired = build(&fixture("ha.yaml")).unwrap();
    let pod = deployment_pod(&desired.deployments[0]);
    let secret = volume(pod, "plan-db").secret.as_ref().unwrap();
    assert_eq!(secret.secret_name.as_deref(), Some("plan-db"));
    let items = secret.items.as_ref().unwrap();
    assert_eq!(
        (items[0].key.as_str(), items[0].path.as_str()),
        ("url", "url")
    );
    let mount = pod.containers[0]
        .volume_mounts
        .as_ref()
        .unwrap()
        .iter()
        .find(|m| m.name == "plan-db")
        .unwrap();
    assert_eq!(mount.mount_path, "/etc/screenlimit/plan-db");
    assert_eq!(mount.read_only, Some(true));
    assert!(limiter_yaml(&desired).contains("postgres_url_file: /etc/screenlimit/plan-db/url"));

    // Without a database: no mount, no file path.
    let plain = build(&fixture("managed.yaml")).unwrap();
    let pod = deployment_pod(&plain.deployments[0]);
    assert!(
        !pod.volumes
            .as_ref()
            .unwrap()
            .iter()
            .any(|v| v.name == "plan-db")
    );
    assert!(!limiter_yaml(&plain).contains("postgres_url_file"));
    assert!(limiter_yaml(&plain).contains("kind: request"));
}

#[test]
fn config_hash_follows_the_plan_source_and_the_secret_reference_not_device_caps() {
    let base = fixture("ha.yaml");
    let hash = |sl: &screenlimit_operator::crd::StreamLimiter| build(sl).unwrap().config_hash;
    let before = hash(&base);

    // A device cap changes live: the file, not the pods.
    let mut caps = base.clone();
    caps.spec.plans[1].device_caps.as_mut().unwrap().tv = Some(1);
    assert_eq!(hash(&caps), before, "a device cap");
    assert_ne!(
        build(&caps).unwrap().config_revision,
        build(&base).unwrap().config_revision
    );

    let mut cache = base.clone();
    cache.spec.plan_source.cache.ttl_seconds = 60;
    assert_ne!(hash(&cache), before, "the plan cache");

    let mut unknown = base.clone();
    unknown.spec.plan_source.unknown_account =
        screenlimit_operator::crd::UnknownAccountPolicy::DefaultPlan;
    assert_ne!(hash(&unknown), before, "the unknown account policy");

    // Another Secret key (the rendered file path stays the same): still a new hash.
    let mut key = base.clone();
    key.spec
        .plan_source
        .postgres
        .as_mut()
        .unwrap()
        .secret_ref
        .key = "dsn".into();
    assert_eq!(
        build(&key).unwrap().limiter_config,
        build(&base).unwrap().limiter_config
    );
    assert_ne!(hash(&key), before, "the Secret reference");
    let mut name = base.clone();
    name.spec
        .plan_source
        .postgres
        .as_mut()
        .unwrap()
        .secret_ref
        .name = "plan-db-2".into();
    assert_ne!(hash(&name), before);

    // Not part of the limiter config.
    let mut sentinels = base.clone();
    sentinels.spec.redis.sentinel.down_after_millis = 3000;
    assert_eq!(hash(&sentinels), before);
}

#[test]
fn the_redis_and_sentinel_scripts_are_valid_posix_shell() {
    use screenlimit_operator::build::redis::STANDALONE_SCRIPT;
    use screenlimit_operator::build::sentinel::{PRE_STOP_SCRIPT, REDIS_SCRIPT, SENTINEL_SCRIPT};
    let dir = tempfile::tempdir().unwrap();
    for (name, script) in [
        ("redis.sh", REDIS_SCRIPT),
        ("pre-stop.sh", PRE_STOP_SCRIPT),
        ("sentinel.sh", SENTINEL_SCRIPT),
        ("redis-standalone.sh", STANDALONE_SCRIPT),
    ] {
        let path = dir.path().join(name);
        std::fs::write(&path, script).unwrap();
        let out = std::process::Command::new("sh")
            .arg("-n")
            .arg(&path)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{name}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(script.starts_with("#!/bin/sh\n"), "{name}");
        assert!(!script.contains("[["), "{name}: bash-only syntax");
    }
}

#[test]
fn autoscaling_renders_a_cpu_hpa_for_the_limiter_deployment_only_when_enabled() {
    let mut sl = fixture("managed.yaml");
    assert!(build(&sl).unwrap().hpas.is_empty(), "off by default");
    sl.spec.limiter.autoscaling = Some(screenlimit_operator::crd::AutoscalingSpec {
        enabled: true,
        min_replicas: 4,
        max_replicas: 20,
        target_cpu_utilization_percent: 65,
    });
    let desired = build(&sl).unwrap();
    assert_eq!(names(&desired.hpas), ["demo-limiter"]);
    let hpa = &desired.hpas[0];
    assert_eq!(
        hpa.owner_references()[0].kind,
        "StreamLimiter",
        "owned by the resource"
    );
    let spec = hpa.spec.as_ref().unwrap();
    assert_eq!(spec.scale_target_ref.kind, "Deployment");
    assert_eq!(
        spec.scale_target_ref.name,
        desired.deployments[0].name_any()
    );
    assert_eq!((spec.min_replicas, spec.max_replicas), (Some(4), 20));
    let metric = &spec.metrics.as_ref().unwrap()[0];
    assert_eq!(metric.type_, "Resource");
    let resource = metric.resource.as_ref().unwrap();
    assert_eq!(resource.name, "cpu");
    assert_eq!(resource.target.type_, "Utilization");
    assert_eq!(resource.target.average_utilization, Some(65));
    // The first count of the Deployment is the autoscaler's minimum.
    assert_eq!(
        desired.deployments[0].spec.as_ref().unwrap().replicas,
        Some(4)
    );
    // Present but disabled: no autoscaler, the spec's replicas.
    sl.spec.limiter.autoscaling.as_mut().unwrap().enabled = false;
    let desired = build(&sl).unwrap();
    assert!(desired.hpas.is_empty());
    assert_eq!(
        desired.deployments[0].spec.as_ref().unwrap().replicas,
        Some(sl.spec.limiter.replicas)
    );
}

#[test]
fn managed_shards_get_maxmemory_from_their_memory_limit_and_none_without_one() {
    use k8s_openapi::api::core::v1::ResourceRequirements;
    use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
    let redis_env = |sl| {
        let desired = build(&sl).unwrap();
        env_of(&pod_spec(&desired.stateful_sets[0]).containers[0])
    };
    for file in ["managed.yaml", "ha.yaml"] {
        let mut sl = fixture(file);
        assert_eq!(redis_env(sl.clone()).get("MAXMEMORY"), None, "{file}");
        sl.spec.redis.resources = Some(ResourceRequirements {
            limits: Some([("memory".to_owned(), Quantity("4Gi".to_owned()))].into()),
            ..ResourceRequirements::default()
        });
        // 70 % of the limit: room for fragmentation, replica buffers and a resync's fork.
        assert_eq!(
            redis_env(sl).get("MAXMEMORY").map(String::as_str),
            Some("3006477040"),
            "{file}"
        );
    }
}

#[test]
fn shard_primaries_with_replicas_need_a_replica_in_sync_to_write() {
    let redis_env = |sl| {
        let desired = build(&sl).unwrap();
        env_of(&pod_spec(&desired.stateful_sets[0]).containers[0])
    };
    // Without replicas there is nobody to wait for: no rule.
    let env = redis_env(fixture("managed.yaml"));
    assert!(!env.contains_key("MIN_REPLICAS_TO_WRITE"), "{env:?}");
    // With them, by default one replica in sync, lagging at most 3 s.
    let mut sl = fixture("ha.yaml");
    let env = redis_env(sl.clone());
    assert_eq!(
        (
            env["MIN_REPLICAS_TO_WRITE"].as_str(),
            env["MIN_REPLICAS_MAX_LAG"].as_str()
        ),
        ("1", "3")
    );
    sl.spec.redis.min_replicas_to_write = 0;
    assert!(
        !redis_env(sl).contains_key("MIN_REPLICAS_TO_WRITE"),
        "0 turns it off"
    );
    let script = screenlimit_operator::build::sentinel::REDIS_SCRIPT;
    assert!(
        script.contains("min-replicas-to-write %s\\nmin-replicas-max-lag %s"),
        "the start script writes both lines"
    );
}

#[test]
fn managed_shards_load_the_module_from_the_limiter_image_unless_turned_off() {
    for fixture_name in ["managed.yaml", "ha.yaml"] {
        let sl = fixture(fixture_name);
        let desired = build(&sl).unwrap();
        for sts in &desired.stateful_sets {
            if sts
                .metadata
                .name
                .as_deref()
                .unwrap_or("")
                .ends_with("-sentinel")
            {
                let pod = pod_spec(sts);
                assert!(pod.init_containers.is_none(), "Sentinels load no module");
                continue;
            }
            let pod = pod_spec(sts);
            let init = &pod.init_containers.as_ref().expect("an init container")[0];
            assert_eq!(init.image.as_deref(), Some(sl.spec.limiter.image.as_str()));
            assert_eq!(
                init.args.as_deref(),
                Some(["copy-module".to_owned(), "/opt/screenlimit".to_owned()].as_slice())
            );
            assert!(
                init.command.is_none(),
                "the image's entrypoint (no shell in it)"
            );
            let security = init.security_context.as_ref().unwrap();
            assert_eq!(security.read_only_root_filesystem, Some(true));
            assert!(volume(pod, "redis-module").empty_dir.is_some());
            let redis = &pod.containers[0];
            assert_eq!(
                env_of(redis)["REDIS_MODULE"],
                "/opt/screenlimit/screenlimit_redis_module.so"
            );
            assert!(env_of(redis)["LIMITER_MODULE_ACL"].contains("+sl.acquire"));
            let mount = redis
                .volume_mounts
                .as_ref()
                .unwrap()
                .iter()
                .find(|m| m.name == "redis-module")
                .expect("the module mounted in the Redis container");
            assert_eq!(mount.read_only, Some(true));
        }
    }

    let mut off = fixture("managed.yaml");
    off.spec.redis.module = false;
    let desired = build(&off).unwrap();
    for sts in &desired.stateful_sets {
        let pod = pod_spec(sts);
        assert!(pod.init_containers.is_none());
        assert!(!env_of(&pod.containers[0]).contains_key("REDIS_MODULE"));
    }
}

/// The shard pod's environment and its `sh -c` script.
fn shard_container(desired: &Desired) -> &k8s_openapi::api::core::v1::Container {
    &pod_spec(&desired.stateful_sets[0]).containers[0]
}

/// Runs the standalone shard's start script as its pod would, with `/data` in a temporary
/// directory and `redis-server` replaced by printing the config it would start with.
fn standalone_config(env: &BTreeMap<String, String>) -> String {
    use screenlimit_operator::build::redis::STANDALONE_SCRIPT;
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().display().to_string();
    let script = STANDALONE_SCRIPT
        .replace("/data", &data)
        .replace("exec redis-server \"$conf\"", "cat \"$conf\"");
    let out = std::process::Command::new("sh")
        .args(["-c", &script, "redis-standalone"])
        .env_clear()
        .envs(env)
        .env("PATH", std::env::var("PATH").unwrap_or_default())
        .env("REDIS_PASSWORD", "redis-password-1")
        .env("LIMITER_PASSWORD", "limiter-password-1")
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

#[test]
fn managed_shards_keep_an_append_only_file_only_with_persistence_append_only() {
    let mut sl = fixture("managed.yaml");
    let plain = build(&sl).unwrap();
    let env = env_of(shard_container(&plain));
    assert!(!env.contains_key("APPENDONLY"), "{env:?}");
    let config = standalone_config(&env);
    assert!(config.contains("\nappendonly no\n"), "{config}");
    assert!(!config.contains("appendfsync"), "{config}");

    sl.spec.redis.persistence = screenlimit_operator::crd::RedisPersistence::AppendOnly;
    let kept = build(&sl).unwrap();
    for set in &kept.stateful_sets {
        assert_eq!(env_of(&pod_spec(set).containers[0])["APPENDONLY"], "yes");
    }
    let config = standalone_config(&env_of(shard_container(&kept)));
    assert!(
        config.contains("\nappendonly yes\nappendfsync everysec\n") && config.contains("dir "),
        "{config}"
    );
    assert!(!config.contains("appendonly no"), "{config}");
    // The file goes to the data volume, an emptyDir: it outlives a container restart.
    assert!(
        volume(pod_spec(&kept.stateful_sets[0]), "data")
            .empty_dir
            .is_some()
    );

    // Sentinel-managed shards: every pod of the shard gets it, replicas included.
    let mut ha = fixture("ha.yaml");
    ha.spec.redis.persistence = screenlimit_operator::crd::RedisPersistence::AppendOnly;
    let ha = build(&ha).unwrap();
    for set in &ha.stateful_sets {
        if set
            .metadata
            .name
            .as_deref()
            .is_some_and(|n| n.contains("-redis-"))
        {
            assert_eq!(env_of(&pod_spec(set).containers[0])["APPENDONLY"], "yes");
        }
    }
    let script = screenlimit_operator::build::sentinel::REDIS_SCRIPT;
    assert!(
        script.contains("if [ \"${APPENDONLY:-no}\" = yes ]; then\n  printf 'appendonly yes\\nappendfsync everysec\\n'"),
        "the Sentinel-managed start script writes the same lines"
    );
}

#[test]
fn admin_ui_prometheus_url_reaches_the_pod_only_when_set() {
    let plain = build(&fixture("admin-ui.yaml")).unwrap();
    let env = env_of(&deployment_pod(&plain.deployments[1]).containers[0]);
    assert!(
        !env.contains_key("SCREENLIMIT_ADMIN_PROMETHEUS_URL"),
        "{env:?}"
    );
    let mut sl = fixture("admin-ui.yaml");
    sl.spec.admin_ui.prometheus_url = Some("http://prometheus-operated.monitoring.svc:9090".into());
    let built = build(&sl).unwrap();
    let env = env_of(&deployment_pod(&built.deployments[1]).containers[0]);
    assert_eq!(
        env["SCREENLIMIT_ADMIN_PROMETHEUS_URL"],
        "http://prometheus-operated.monitoring.svc:9090"
    );
}

/// Each region Secret key the limiter config names is mounted read-only from a volume of its
/// own that holds only that key, as exactly the file the config names (no subPath). Paths and
/// volume names come from the peer's place in the list, never its name (a region name may hold
/// `:`, which a mount path may not, or be `..`).
#[test]
fn region_secrets_are_mounted_one_key_each_where_the_config_names_them() {
    use std::path::Path;

    let mut sl = fixture("regions.yaml");
    let desired = build(&sl).unwrap();
    let config = screenlimit_limiter::config::Config::from_yaml(&desired.limiter_config).unwrap();
    let regions = config.regions.unwrap();
    let pod = deployment_pod(&desired.deployments[0]);
    let mounts = pod.containers[0].volume_mounts.as_ref().unwrap();
    let mounted = |file: &Path| -> (String, String, String) {
        let dir = file.parent().unwrap().to_str().unwrap();
        let m = mounts
            .iter()
            .find(|m| m.mount_path == dir)
            .unwrap_or_else(|| panic!("nothing mounted at {dir}"));
        assert_eq!(m.read_only, Some(true), "{m:?}");
        assert!(m.sub_path.is_none(), "{m:?}");
        let source = volume(pod, &m.name).secret.as_ref().unwrap();
        let items = source.items.as_ref().unwrap();
        assert_eq!(items.len(), 1, "only the named key: {source:?}");
        assert_eq!(
            Path::new(&items[0].path),
            file.strip_prefix(dir).unwrap(),
            "{m:?}"
        );
        (
            m.name.clone(),
            source.secret_name.clone().unwrap(),
            items[0].key.clone(),
        )
    };
    let owned = |v: &str, s: &str, k: &str| (v.to_owned(), s.to_owned(), k.to_owned());
    assert_eq!(
        mounted(&regions.token_file),
        owned("region-token", "region-eu", "token")
    );
    assert_eq!(
        mounted(&regions.peers[0].token_file),
        owned("region-peer-0-token", "region-peers", "us")
    );
    assert_eq!(
        mounted(regions.peers[0].ca_file.as_ref().unwrap()),
        owned("region-peer-0-ca", "region-us-ca", "ca.crt")
    );
    assert_eq!(
        mounted(&regions.peers[1].token_file),
        owned("region-peer-1-token", "region-peers", "ap")
    );
    let region_volumes: Vec<&str> = pod
        .volumes
        .as_ref()
        .unwrap()
        .iter()
        .map(|v| v.name.as_str())
        .filter(|n| n.starts_with("region-"))
        .collect();
    assert_eq!(
        region_volumes,
        [
            "region-token",
            "region-peer-0-token",
            "region-peer-0-ca",
            "region-peer-1-token"
        ]
    );

    // Names a mount path or a volume name could not take.
    let regions = sl.spec.regions.as_mut().unwrap();
    regions.name = "eu:west".into();
    regions.peers[0].name = "..".into();
    regions.peers[1].name = "AP.South_1".into();
    let desired = build(&sl).unwrap();
    let pod = deployment_pod(&desired.deployments[0]);
    for m in pod.containers[0].volume_mounts.as_ref().unwrap() {
        assert!(
            !m.mount_path.contains(':') && !m.mount_path.contains(".."),
            "{m:?}"
        );
    }
    for v in pod.volumes.as_ref().unwrap() {
        let label = v.name.len() <= 63
            && v.name
                .bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-');
        assert!(label, "{} is not a DNS label", v.name);
    }

    // Without regions: no region volume.
    let plain = build(&fixture("managed.yaml")).unwrap();
    let pod = deployment_pod(&plain.deployments[0]);
    assert!(
        !pod.volumes
            .as_ref()
            .unwrap()
            .iter()
            .any(|v| v.name.starts_with("region"))
    );
}

/// The limiter reads `regions` at start only, but for the homes: setting it, changing any of
/// the rest (a peer's URL, a token's Secret key even where the file stays the same, a CA, the
/// heartbeat window) or taking it out rolls the pods; the rest leaves the live config revision
/// as it was.
#[test]
fn a_regions_change_rolls_the_limiter_pods() {
    use screenlimit_operator::crd::SecretKeyRef;

    let mut sl = fixture("regions.yaml");
    let regions = sl.spec.regions.take().unwrap();
    let before = build(&sl).unwrap();
    assert!(
        !screenlimit_operator::build::limiter_config::restart_part(
            &sl,
            &screenlimit_operator::names::Names::new(&sl.name_any()),
            "video"
        )
        .contains("regions"),
    );
    let mut hashes = vec![before.config_hash.clone()];
    let mut step = |sl: &screenlimit_operator::crd::StreamLimiter, what: &str| {
        let desired = build(sl).unwrap();
        assert!(
            !hashes.contains(&desired.config_hash),
            "{what} did not roll the pods"
        );
        assert_eq!(pod_annotation(&desired), desired.config_hash);
        hashes.push(desired.config_hash.clone());
        desired
    };
    sl.spec.regions = Some(regions.clone());
    let with = step(&sl, "setting regions");
    assert_ne!(
        with.config_revision, before.config_revision,
        "the homes are live: setting regions moves the revision too"
    );
    assert!(
        screenlimit_operator::build::limiter_config::restart_part(
            &sl,
            &screenlimit_operator::names::Names::new(&sl.name_any()),
            "video"
        )
        .contains("regions:"),
    );
    let mut rest = Vec::new();
    let regions = sl.spec.regions.as_mut().unwrap();
    regions.peers[1].url = "https://limiter.ap.example.com".into();
    rest.push(("a peer's url", step(&sl, "a peer's url")));
    let regions = sl.spec.regions.as_mut().unwrap();
    regions.peers[1].token_secret.key = "ap-2".into();
    let key = step(&sl, "a peer token's Secret key");
    let regions = sl.spec.regions.as_mut().unwrap();
    regions.token_secret = SecretKeyRef {
        name: "region-eu-2".into(),
        key: "token".into(),
    };
    let inbound = step(&sl, "the inbound token's Secret");
    assert_eq!(
        inbound.limiter_config, key.limiter_config,
        "the same files: only the hash tells"
    );
    rest.push(("a peer token's Secret key", key));
    rest.push(("the inbound token's Secret", inbound));
    let regions = sl.spec.regions.as_mut().unwrap();
    regions.peers[0].ca_secret = None;
    rest.push(("a peer's CA", step(&sl, "a peer's CA")));
    let regions = sl.spec.regions.as_mut().unwrap();
    regions.heartbeat_window_millis = 0;
    rest.push(("the heartbeat window", step(&sl, "the heartbeat window")));
    for (what, desired) in rest {
        assert_eq!(
            desired.config_revision, with.config_revision,
            "{what} moved the live revision"
        );
    }
    assert_ne!(with.limiter_config, before.limiter_config);

    // Taken out again: the pods and the revision of before.
    sl.spec.regions = None;
    let after = build(&sl).unwrap();
    assert_eq!(after.config_hash, before.config_hash);
    assert_eq!(after.config_revision, before.config_revision);
    assert_eq!(after.limiter_config, before.limiter_config);
}

/// The limiter applies the homes (each region's weight, evacuation and secondary) from its
/// mounted file without a restart, and a restart would lose the new home's learning: changing
/// them changes the file and its revision, never the limiter's pod template.
#[test]
fn a_regions_homes_change_reaches_the_pods_live() {
    let mut sl = fixture("regions.yaml");
    let before = build(&sl).unwrap();
    let mut revisions = vec![before.config_revision.clone()];
    let mut live = |sl: &screenlimit_operator::crd::StreamLimiter, what: &str| {
        let desired = build(sl).unwrap();
        assert_eq!(
            desired.config_hash, before.config_hash,
            "{what} rolled the pods"
        );
        assert_eq!(
            pod_annotation(&desired),
            pod_annotation(&before),
            "{what} changed the pod template"
        );
        assert!(
            !revisions.contains(&desired.config_revision),
            "{what} did not move the revision"
        );
        assert!(
            limiter_yaml(&desired).contains(&format!("revision: {}", desired.config_revision)),
            "{what}: the file carries its revision"
        );
        revisions.push(desired.config_revision.clone());
        desired
    };
    let regions = sl.spec.regions.as_mut().unwrap();
    regions.peers[0].weight = 3;
    live(&sl, "a peer's weight");
    let regions = sl.spec.regions.as_mut().unwrap();
    regions.peers[0].evacuated = true;
    live(&sl, "evacuating a peer");
    let regions = sl.spec.regions.as_mut().unwrap();
    regions.peers[0].secondary = Some("ap".into());
    live(&sl, "a peer's secondary");
    let regions = sl.spec.regions.as_mut().unwrap();
    regions.weight = 5;
    live(&sl, "this region's weight");
    let regions = sl.spec.regions.as_mut().unwrap();
    regions.evacuated = true;
    regions.secondary = Some("ap".into());
    let evacuated = live(&sl, "evacuating this region");
    let text = limiter_yaml(&evacuated);
    assert!(
        text.contains(
            "  evacuated: true
  secondary: ap
"
        ),
        "{text}"
    );

    // A peer's URL beside it still rolls them, and leaves the revision.
    let regions = sl.spec.regions.as_mut().unwrap();
    regions.peers[1].url = "https://limiter.ap.example.com".into();
    let rolled = build(&sl).unwrap();
    assert_ne!(rolled.config_hash, before.config_hash);
    assert_eq!(pod_annotation(&rolled), rolled.config_hash);
    assert_eq!(rolled.config_revision, evacuated.config_revision);
}

/// The limiter reads its home sources and the player token's home claim at start only (they
/// are not among its live fields): setting or changing either rolls the limiter pods and leaves
/// the live config revision as it was.
#[test]
fn a_home_sources_or_home_claim_change_rolls_the_limiter_pods() {
    use screenlimit_operator::crd::HomeSource::{GatewayHeader, PlanSource, PlayerToken};

    let mut sl = fixture("regions.yaml");
    sl.spec.plan_source = serde_yaml_ng::from_str(
        "{kind: postgres, postgres: {secretRef: {name: plan-db, key: url}, \
         query: 'SELECT plan, home_region FROM subscriptions WHERE account_id = $1'}}",
    )
    .unwrap();
    sl.spec.limiter.auth_token_secret = Some(serde_yaml_ng::from_str("{name: s, key: t}").unwrap());
    sl.spec.limiter.player_auth = Some(
        serde_yaml_ng::from_str(
            "{issuer: https://auth.example.com, audience: screenlimit, \
             jwksSecret: {name: player-keys, key: jwks}}",
        )
        .unwrap(),
    );
    let before = build(&sl).unwrap();
    let mut hashes = vec![before.config_hash.clone()];
    let mut rolls = |sl: &screenlimit_operator::crd::StreamLimiter, what: &str| {
        let desired = build(sl).unwrap();
        assert!(
            !hashes.contains(&desired.config_hash),
            "{what} did not roll the pods"
        );
        assert_eq!(pod_annotation(&desired), desired.config_hash);
        assert_eq!(
            desired.config_revision, before.config_revision,
            "{what} moved the live revision"
        );
        hashes.push(desired.config_hash.clone());
        desired
    };
    sl.spec.regions.as_mut().unwrap().home_sources = vec![GatewayHeader];
    rolls(&sl, "a home source");
    sl.spec.regions.as_mut().unwrap().home_sources = vec![PlanSource, GatewayHeader];
    rolls(&sl, "another home source");
    sl.spec.regions.as_mut().unwrap().home_sources = vec![GatewayHeader, PlanSource];
    rolls(&sl, "the sources' order");
    sl.spec.limiter.player_auth.as_mut().unwrap().home_claim = Some("home_region".into());
    rolls(&sl, "a home claim");
    sl.spec.regions.as_mut().unwrap().home_sources = vec![PlayerToken, GatewayHeader, PlanSource];
    let all = rolls(&sl, "the player token source");
    assert!(
        limiter_yaml(&all)
            .contains("  home_sources:\n  - player_token\n  - gateway_header\n  - plan_source\n"),
        "{}",
        limiter_yaml(&all)
    );

    // Taken out again: the pods of before.
    sl.spec.regions.as_mut().unwrap().home_sources.clear();
    sl.spec.limiter.player_auth.as_mut().unwrap().home_claim = None;
    let after = build(&sl).unwrap();
    assert_eq!(after.config_hash, before.config_hash);
    assert_eq!(after.limiter_config, before.limiter_config);
}
