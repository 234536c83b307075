//! Who can reach managed Redis, from the rendered objects: the generated credentials Secret
//! and where each password goes (env from the Secret, files for the limiter, never a ConfigMap),
//! the limiter's ACL user, TLS from the user's Secret, and the NetworkPolicies. The scripts are
//! run for real in the workspace's `tests/tests/ha_scripts.rs`.

mod common;

use std::collections::BTreeMap;

use common::fixture;
use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::core::v1::{Container, PodSpec, Volume};
use k8s_openapi::api::networking::v1::NetworkPolicy;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use kube::{Resource, ResourceExt};
use screenlimit_limiter::store::redis::access::LIMITER_ACL_RULES;
use screenlimit_operator::build::{Desired, build, secret};
use screenlimit_operator::crd::{RedisTlsSpec, StreamLimiter};
use screenlimit_operator::names::Names;

fn sts<'a>(desired: &'a Desired, name: &str) -> &'a StatefulSet {
    desired
        .stateful_sets
        .iter()
        .find(|s| s.name_any() == name)
        .unwrap_or_else(|| panic!("no StatefulSet {name}"))
}

fn pod(s: &StatefulSet) -> &PodSpec {
    s.spec.as_ref().unwrap().template.spec.as_ref().unwrap()
}

fn limiter_pod(desired: &Desired) -> &PodSpec {
    desired.deployments[0]
        .spec
        .as_ref()
        .unwrap()
        .template
        .spec
        .as_ref()
        .unwrap()
}

/// env name → `value` or `secret:<name>/<key>`.
fn env(c: &Container) -> BTreeMap<String, String> {
    c.env
        .iter()
        .flatten()
        .map(|e| {
            let v = match (&e.value, &e.value_from) {
                (Some(v), _) => v.clone(),
                (None, Some(from)) => {
                    let r = from.secret_key_ref.as_ref().unwrap();
                    assert_eq!(r.optional, Some(false));
                    format!("secret:{}/{}", r.name, r.key)
                }
                _ => String::new(),
            };
            (e.name.clone(), v)
        })
        .collect()
}

fn volume<'a>(pod: &'a PodSpec, name: &str) -> Option<&'a Volume> {
    pod.volumes.iter().flatten().find(|v| v.name == name)
}

/// `(secret, [(key, path)], defaultMode)` of a Secret volume.
fn secret_items(v: &Volume) -> (String, Vec<(String, String)>, Option<i32>) {
    let s = v.secret.as_ref().unwrap();
    (
        s.secret_name.clone().unwrap(),
        s.items
            .iter()
            .flatten()
            .map(|i| (i.key.clone(), i.path.clone()))
            .collect(),
        s.default_mode,
    )
}

fn mount_path(c: &Container, volume: &str) -> Option<(String, Option<bool>)> {
    c.volume_mounts
        .iter()
        .flatten()
        .find(|m| m.name == volume)
        .map(|m| (m.mount_path.clone(), m.read_only))
}

fn probe(c: &Container) -> Vec<String> {
    c.readiness_probe
        .as_ref()
        .unwrap()
        .exec
        .as_ref()
        .unwrap()
        .command
        .clone()
        .unwrap()
}

fn items(pairs: &[&str]) -> Vec<(String, String)> {
    pairs
        .iter()
        .map(|k| ((*k).to_owned(), (*k).to_owned()))
        .collect()
}

#[test]
fn the_generated_secret_has_three_random_passwords_and_is_owned() {
    let sl = fixture("ha.yaml");
    let owner = sl.controller_owner_ref(&()).unwrap();
    let names = Names::new("demo");
    let a = secret::redis_auth_secret(&names, "video", &owner);
    let b = secret::redis_auth_secret(&names, "video", &owner);
    assert_eq!(a.metadata.name.as_deref(), Some("demo-redis-auth"));
    assert_eq!(
        a.metadata.owner_references.as_ref().unwrap()[0].uid,
        owner.uid
    );
    assert_eq!(
        a.metadata.labels.as_ref().unwrap()["app.kubernetes.io/component"],
        "redis-auth"
    );
    let data = a.string_data.as_ref().unwrap();
    assert_eq!(
        data.keys().map(String::as_str).collect::<Vec<_>>(),
        ["limiter-password", "redis-password", "sentinel-password"]
    );
    let values: Vec<&String> = data.values().collect();
    for v in &values {
        assert_eq!(v.len(), 64);
        assert!(
            v.bytes()
                .all(|b| b.is_ascii_hexdigit() && !b.is_ascii_uppercase())
        );
    }
    assert!(values[0] != values[1] && values[1] != values[2] && values[0] != values[2]);
    assert_ne!(a.string_data, b.string_data, "fresh randomness every time");

    assert_eq!(
        build(&sl).unwrap().redis_auth_secret.as_deref(),
        Some("demo-redis-auth")
    );
    assert_eq!(
        build(&fixture("managed.yaml"))
            .unwrap()
            .redis_auth_secret
            .as_deref(),
        Some("demo-redis-auth")
    );
    assert_eq!(
        build(&fixture("external.yaml")).unwrap().redis_auth_secret,
        None
    );
}

#[test]
fn redis_and_sentinel_pods_take_their_passwords_from_the_secret_never_from_a_config_map() {
    let desired = build(&fixture("ha.yaml")).unwrap();
    let redis = &pod(sts(&desired, "demo-redis-0")).containers[0];
    let e = env(redis);
    assert_eq!(e["REDIS_PASSWORD"], "secret:demo-redis-auth/redis-password");
    assert_eq!(e["REDISCLI_AUTH"], "secret:demo-redis-auth/redis-password");
    assert_eq!(
        e["LIMITER_PASSWORD"],
        "secret:demo-redis-auth/limiter-password"
    );
    assert_eq!(
        e["SENTINEL_PASSWORD"],
        "secret:demo-redis-auth/sentinel-password"
    );
    assert_eq!(e["LIMITER_USER"], "screenlimit");
    assert_eq!(
        e["LIMITER_ACL"], LIMITER_ACL_RULES,
        "the limiter crate's ACL, not a copy"
    );
    assert!(!e.contains_key("TLS_DIR"));

    let sentinel = &pod(sts(&desired, "demo-sentinel")).containers[0];
    let e = env(sentinel);
    assert_eq!(
        e["SENTINEL_PASSWORD"],
        "secret:demo-redis-auth/sentinel-password"
    );
    assert_eq!(
        e["REDISCLI_AUTH"],
        "secret:demo-redis-auth/sentinel-password"
    );
    assert_eq!(e["REDIS_PASSWORD"], "secret:demo-redis-auth/redis-password");
    assert!(
        !e.contains_key("LIMITER_PASSWORD"),
        "Sentinels never need the limiter's password"
    );

    // The scripts write the passwords from the env into the pods' own config files.
    let data = desired.config_maps[1].data.as_ref().unwrap();
    let redis_sh = &data["redis.sh"];
    for line in [
        "requirepass $REDIS_PASSWORD",
        "masterauth $REDIS_PASSWORD",
        // The limiter's rules, with the module's commands only where the module loads.
        "user $LIMITER_USER $limiter_acl >$LIMITER_PASSWORD",
        "limiter_acl=$LIMITER_ACL\n",
        "umask 077",
    ] {
        assert!(redis_sh.contains(line), "redis.sh lacks {line:?}");
    }
    let sentinel_sh = &data["sentinel.sh"];
    for line in [
        "echo \"requirepass $SENTINEL_PASSWORD\"",
        "echo \"sentinel sentinel-pass $SENTINEL_PASSWORD\"",
        "sentinel auth-pass $name $REDIS_PASSWORD",
        "umask 077",
    ] {
        assert!(sentinel_sh.contains(line), "sentinel.sh lacks {line:?}");
    }
    assert!(data["pre-stop.sh"].contains("REDISCLI_AUTH=\"$SENTINEL_PASSWORD\""));
    // Every redis-cli call of the scripts authenticates (REDISCLI_AUTH from the env, or set
    // for the call toward the other kind of server).
    for (script, text) in data.iter().filter(|(k, _)| k.ends_with(".sh")) {
        for line in text
            .lines()
            .filter(|l| l.contains("redis-cli") && l.contains(" -h "))
        {
            assert!(line.contains("REDISCLI_AUTH="), "{script}: {line}");
        }
    }
    // No ConfigMap carries a password directive with a value of its own, nor the ACL password.
    for cm in &desired.config_maps {
        for (key, text) in cm.data.iter().flatten() {
            for line in text.lines() {
                let words: Vec<&str> = line.split_whitespace().collect();
                if let Some(i) = words.iter().position(|w| {
                    ["requirepass", "masterauth", "auth-pass", "sentinel-pass"].contains(w)
                }) {
                    let value = words.last().unwrap().trim_matches('"');
                    assert!(
                        value.starts_with('$') && i + 1 < words.len(),
                        "{key}: {line}"
                    );
                }
            }
        }
    }
}

#[test]
fn a_shard_without_replicas_starts_from_an_inline_script_with_the_same_users() {
    let desired = build(&fixture("managed.yaml")).unwrap();
    let redis = &pod(sts(&desired, "demo-redis-1")).containers[0];
    let command = redis.command.as_ref().unwrap();
    assert_eq!(command[..2], ["sh", "-c"]);
    let script = &command[2];
    assert!(script.contains("requirepass $REDIS_PASSWORD"));
    assert!(script.contains("user $LIMITER_USER $limiter_acl >$LIMITER_PASSWORD"));
    assert!(script.contains("limiter_acl=\"$LIMITER_ACL $module_acl\""));
    assert!(script.contains("module_acl=$(cat \"${module%.so}.acl\")"));
    assert!(
        !script.contains("masterauth"),
        "no replication without replicas"
    );
    let e = env(redis);
    assert_eq!(e["REDIS_PASSWORD"], "secret:demo-redis-auth/redis-password");
    assert_eq!(
        e["LIMITER_PASSWORD"],
        "secret:demo-redis-auth/limiter-password"
    );
    assert_eq!(e["LIMITER_ACL"], LIMITER_ACL_RULES);
    assert!(!e.contains_key("SENTINEL_PASSWORD"));
    // The probes ask with REDISCLI_AUTH from the env.
    assert_eq!(probe(redis), ["redis-cli", "-p", "6379", "ping"]);
}

#[test]
fn the_limiter_gets_only_its_own_and_the_sentinels_password_as_files() {
    let desired = build(&fixture("ha.yaml")).unwrap();
    let limiter = limiter_pod(&desired);
    let auth = volume(limiter, "redis-auth").unwrap();
    assert_eq!(
        secret_items(auth),
        (
            "demo-redis-auth".to_owned(),
            items(&["limiter-password", "sentinel-password"]),
            Some(0o440)
        ),
        "never the default user's password"
    );
    assert_eq!(
        mount_path(&limiter.containers[0], "redis-auth"),
        Some(("/etc/screenlimit/redis-auth".to_owned(), Some(true)))
    );
    assert!(
        env(&limiter.containers[0])
            .keys()
            .all(|k| !k.contains("PASSWORD"))
    );

    let standalone = build(&fixture("managed.yaml")).unwrap();
    let auth = volume(limiter_pod(&standalone), "redis-auth").unwrap();
    assert_eq!(secret_items(auth).1, items(&["limiter-password"]));
    // External Redis: nothing generated, nothing mounted.
    let external = build(&fixture("external.yaml")).unwrap();
    assert!(volume(limiter_pod(&external), "redis-auth").is_none());
    // The Secret's name is part of the limiter's rollout hash.
    assert_ne!(
        desired.config_hash,
        build(&{
            let mut sl = fixture("ha.yaml");
            sl.metadata.name = Some("demo2".into());
            sl
        })
        .unwrap()
        .config_hash
    );
}

#[test]
fn tls_from_the_users_secret_reaches_redis_sentinel_and_the_limiter() {
    let plain = build(&fixture("ha.yaml")).unwrap();
    let desired = build(&fixture("secure.yaml")).unwrap();
    for name in ["demo-redis-0", "demo-sentinel"] {
        let p = pod(sts(&desired, name));
        let c = &p.containers[0];
        assert_eq!(
            secret_items(volume(p, "redis-tls").unwrap()),
            (
                "demo-redis-tls".to_owned(),
                items(&["tls.crt", "tls.key", "ca.crt"]),
                Some(0o440)
            ),
            "{name}"
        );
        assert_eq!(
            mount_path(c, "redis-tls"),
            Some(("/etc/screenlimit/redis-tls".to_owned(), Some(true))),
            "{name}"
        );
        assert_eq!(env(c)["TLS_DIR"], "/etc/screenlimit/redis-tls", "{name}");
        let port = if name == "demo-sentinel" {
            "26379"
        } else {
            "6379"
        };
        assert_eq!(
            probe(c),
            [
                "redis-cli",
                "--tls",
                "--cacert",
                "/etc/screenlimit/redis-tls/ca.crt",
                "-p",
                port,
                "ping"
            ],
            "{name}"
        );
        assert!(
            c.startup_probe
                .as_ref()
                .unwrap()
                .exec
                .as_ref()
                .unwrap()
                .command
                .as_ref()
                .unwrap()
                .contains(&"--tls".to_owned())
        );
    }
    let data = desired.config_maps[1].data.as_ref().unwrap();
    for (script, lines) in [
        (
            "redis.sh",
            &[
                "port 0",
                "tls-port 6379",
                "tls-replication yes",
                "tls-auth-clients no",
                "tls-cert-file $TLS_DIR/tls.crt",
                "tls-key-file $TLS_DIR/tls.key",
                "tls-ca-cert-file $TLS_DIR/ca.crt",
            ][..],
        ),
        (
            "sentinel.sh",
            &["port 0", "tls-port 26379", "tls-replication yes"][..],
        ),
    ] {
        for line in lines {
            assert!(
                data[script].lines().any(|l| l == *line),
                "{script} lacks {line:?}"
            );
        }
    }
    // The limiter: only the CA, and rediss:// everywhere.
    let limiter = limiter_pod(&desired);
    assert_eq!(
        secret_items(volume(limiter, "redis-tls").unwrap()),
        ("demo-redis-tls".to_owned(), items(&["ca.crt"]), Some(0o440))
    );
    assert!(
        desired
            .limiter_config
            .contains("ca_file: /etc/screenlimit/redis-tls/ca.crt")
    );
    assert!(
        desired
            .limiter_config
            .contains("rediss://demo-sentinel-0.demo-sentinel.video.svc:26379")
    );
    assert!(!desired.limiter_config.contains("redis://"));
    // Without TLS nothing of it.
    assert!(volume(pod(sts(&plain, "demo-redis-0")), "redis-tls").is_none());
    assert!(!plain.limiter_config.contains("tls:"));

    // External Redis with a CA Secret: the limiter trusts it; no pods to configure.
    let mut external = fixture("external.yaml");
    external.spec.redis.tls = Some(RedisTlsSpec {
        secret_name: "their-ca".into(),
    });
    let ext = build(&external).unwrap();
    assert_eq!(
        secret_items(volume(limiter_pod(&ext), "redis-tls").unwrap()).1,
        items(&["ca.crt"])
    );
    assert!(
        ext.limiter_config
            .contains("ca_file: /etc/screenlimit/redis-tls/ca.crt")
    );
    assert_ne!(
        ext.config_hash,
        build(&fixture("external.yaml")).unwrap().config_hash
    );
}

fn policy<'a>(desired: &'a Desired, name: &str) -> &'a NetworkPolicy {
    desired
        .network_policies
        .iter()
        .find(|p| p.name_any() == name)
        .unwrap_or_else(|| panic!("no NetworkPolicy {name}"))
}

/// `(podSelector component, [(namespace labels, pod labels)], [ports])` of a policy, with the
/// selectors' matchLabels as sorted `k=v` strings.
type Peers = Vec<(Option<String>, Option<String>)>;
type Rules = Vec<(Peers, Vec<String>)>;
fn shape(p: &NetworkPolicy) -> (BTreeMap<String, String>, Rules) {
    let spec = p.spec.as_ref().unwrap();
    assert_eq!(
        spec.policy_types.as_deref(),
        Some(&["Ingress".to_owned()][..])
    );
    let labels = |s: &Option<k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector>| {
        s.as_ref().map(|s| {
            s.match_labels
                .iter()
                .flatten()
                .map(|(k, v)| format!("{k}={v}"))
                .collect::<Vec<_>>()
                .join(",")
        })
    };
    let rules = spec
        .ingress
        .iter()
        .flatten()
        .map(|rule| {
            let peers = rule
                .from
                .iter()
                .flatten()
                .map(|f| (labels(&f.namespace_selector), labels(&f.pod_selector)))
                .collect();
            let ports = rule
                .ports
                .iter()
                .flatten()
                .map(|port| {
                    assert_eq!(port.protocol.as_deref(), Some("TCP"));
                    match port.port.as_ref().unwrap() {
                        IntOrString::String(s) => s.clone(),
                        IntOrString::Int(i) => panic!("port {i} by number, not by name"),
                    }
                })
                .collect();
            (peers, ports)
        })
        .collect();
    (
        spec.pod_selector
            .as_ref()
            .unwrap()
            .match_labels
            .clone()
            .unwrap(),
        rules,
    )
}

fn component(c: &str) -> Option<String> {
    Some(format!(
        "app.kubernetes.io/component={c},app.kubernetes.io/instance=demo,app.kubernetes.io/name=screenlimit"
    ))
}

#[test]
fn network_policies_let_only_the_limiter_and_the_store_reach_redis_and_sentinel() {
    let desired = build(&fixture("secure.yaml")).unwrap();
    assert_eq!(
        desired
            .network_policies
            .iter()
            .map(|p| p.name_any())
            .collect::<Vec<_>>(),
        [
            "demo-redis",
            "demo-sentinel",
            "demo-limiter",
            "demo-admin-ui"
        ]
    );
    for p in &desired.network_policies {
        assert_eq!(
            p.metadata.owner_references.as_ref().unwrap()[0].kind,
            "StreamLimiter"
        );
        assert_eq!(
            p.metadata.labels.as_ref().unwrap()["app.kubernetes.io/managed-by"],
            "screenlimit-operator"
        );
    }
    let store_peers: Peers = vec![
        (None, component("limiter")),
        (None, component("redis")),
        (None, component("sentinel")),
    ];
    let (selected, rules) = shape(policy(&desired, "demo-redis"));
    assert_eq!(selected["app.kubernetes.io/component"], "redis");
    assert_eq!(selected["app.kubernetes.io/instance"], "demo");
    assert!(
        !selected.contains_key("screenlimit.io/shard"),
        "every shard's pods"
    );
    assert_eq!(rules, [(store_peers.clone(), vec!["redis".to_owned()])]);
    let (selected, rules) = shape(policy(&desired, "demo-sentinel"));
    assert_eq!(selected["app.kubernetes.io/component"], "sentinel");
    assert_eq!(rules, [(store_peers, vec!["sentinel".to_owned()])]);
    // The named ports exist on the containers they guard.
    let port_names = |s: &StatefulSet| -> Vec<String> {
        pod(s).containers[0]
            .ports
            .iter()
            .flatten()
            .filter_map(|p| p.name.clone())
            .collect()
    };
    assert_eq!(port_names(sts(&desired, "demo-redis-1")), ["redis"]);
    assert_eq!(port_names(sts(&desired, "demo-sentinel")), ["sentinel"]);

    // The limiter: its namespace, and the clients named in the spec.
    let (selected, rules) = shape(policy(&desired, "demo-limiter"));
    assert_eq!(selected["app.kubernetes.io/component"], "limiter");
    assert_eq!(
        rules,
        [(
            vec![
                (None, Some(String::new())),
                (
                    Some("kubernetes.io/metadata.name=playback".to_owned()),
                    Some("app=playback-api".to_owned())
                ),
                (
                    Some("kubernetes.io/metadata.name=monitoring".to_owned()),
                    None
                ),
            ],
            vec!["http".to_owned()]
        )]
    );
    // The admin UI: only its ingress controller.
    let (selected, rules) = shape(policy(&desired, "demo-admin-ui"));
    assert_eq!(selected["app.kubernetes.io/component"], "admin-ui");
    assert_eq!(
        rules,
        [(
            vec![(
                Some("kubernetes.io/metadata.name=ingress-nginx".to_owned()),
                None
            )],
            vec!["http".to_owned()]
        )]
    );
}

#[test]
fn network_policies_follow_the_topology_and_can_be_turned_off() {
    let names = |sl: &StreamLimiter| -> Vec<String> {
        build(sl)
            .unwrap()
            .network_policies
            .iter()
            .map(|p| p.name_any())
            .collect()
    };
    // Without replicas: no Sentinel, so no Sentinel among the peers either.
    let managed = build(&fixture("managed.yaml")).unwrap();
    assert_eq!(
        names(&fixture("managed.yaml")),
        ["demo-redis", "demo-limiter"]
    );
    let (_, rules) = shape(policy(&managed, "demo-redis"));
    assert_eq!(
        rules[0].0,
        [(None, component("limiter")), (None, component("redis"))]
    );
    // External Redis: only the limiter's.
    assert_eq!(names(&fixture("external.yaml")), ["ext-limiter"]);
    // The admin UI with no clients named: an empty ingress list admits nobody (a rule
    // without `from` would admit everyone).
    let admin = build(&fixture("admin-ui.yaml")).unwrap();
    let p = policy(&admin, "demo-admin-ui");
    assert_eq!(p.spec.as_ref().unwrap().ingress.as_deref(), Some(&[][..]));
    // Off.
    let mut off = fixture("secure.yaml");
    off.spec.network_policies.enabled = false;
    assert!(names(&off).is_empty());
    // Pruned like every other child: the names the spec wants.
    let d = build(&fixture("secure.yaml")).unwrap();
    assert_eq!(
        d.names_of::<NetworkPolicy>(),
        [
            "demo-redis",
            "demo-sentinel",
            "demo-limiter",
            "demo-admin-ui"
        ]
    );
}

#[test]
fn external_redis_credentials_reach_the_limiter_as_a_file() {
    let mut sl = fixture("external.yaml");
    let before = build(&sl).unwrap();
    sl.spec.redis.external.as_mut().unwrap().auth =
        Some(screenlimit_operator::crd::ExternalRedisAuth {
            username: Some("screenlimit".into()),
            password_secret_ref: screenlimit_operator::crd::SecretKeyRef {
                name: "redis-creds".into(),
                key: "pw".into(),
            },
        });
    let desired = build(&sl).unwrap();
    let pod = limiter_pod(&desired);
    assert_eq!(
        secret_items(volume(pod, "redis-auth").unwrap()),
        (
            "redis-creds".to_owned(),
            vec![("pw".to_owned(), "password".to_owned())],
            None
        )
    );
    assert_eq!(
        mount_path(&pod.containers[0], "redis-auth"),
        Some(("/etc/screenlimit/redis-auth".to_owned(), Some(true)))
    );
    let config = screenlimit_limiter::config::Config::from_yaml(&desired.limiter_config).unwrap();
    config.validate().unwrap();
    assert_eq!(config.store.auth.username.as_deref(), Some("screenlimit"));
    assert_eq!(
        config.store.auth.password_file.as_deref(),
        Some(std::path::Path::new("/etc/screenlimit/redis-auth/password"))
    );
    assert_ne!(desired.config_hash, before.config_hash);
    assert_eq!(
        desired.redis_auth_secret, None,
        "nothing generated for external Redis"
    );
}
