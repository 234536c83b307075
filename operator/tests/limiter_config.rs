//! The rendered `limiter.yaml` is accepted by the real limiter and has exactly the expected shape.

mod common;

use std::time::Duration;

use common::fixture;
use screenlimit_limiter::config::{Backend, Config, FailurePolicy};
use screenlimit_operator::build::build;

fn rendered(name: &str) -> String {
    let desired = build(&fixture(name)).unwrap();
    desired.config_maps[0].data.as_ref().unwrap()["limiter.yaml"].clone()
}

#[test]
fn managed_config_parses_and_validates_in_the_limiter() {
    let text = rendered("managed.yaml");
    let config = Config::from_yaml(&text).unwrap_or_else(|e| panic!("{e:?}\n{text}"));
    config.validate().unwrap();
    assert_eq!(config.listen.to_string(), "0.0.0.0:8080");
    assert_eq!(
        config.plans.keys().map(String::as_str).collect::<Vec<_>>(),
        ["basic", "premium", "standard"]
    );
    let value: serde_yaml_ng::Value = serde_yaml_ng::from_str(&text).unwrap();
    assert_eq!(value["plans"]["premium"], 4);
    assert_eq!(value["plans"]["standard"], 2);
    assert_eq!(config.default_plan, "basic");
    assert_eq!(config.lease.heartbeat_interval, Duration::from_secs(30));
    assert_eq!(config.lease.ttl, Duration::from_secs(90));
    assert_eq!(config.store.backend, Backend::Redis);
    assert_eq!(
        config.store.redis_shards,
        [
            "redis://demo-redis-0.video.svc:6379",
            "redis://demo-redis-1.video.svc:6379"
        ]
    );
    assert_eq!(config.store.timeout, Duration::from_millis(25));
    assert_eq!(
        config.store.circuit_probe_interval,
        Duration::from_millis(500)
    );
    assert_eq!(config.store.circuit_failure_threshold, 3);
    assert_eq!(config.failure_policy, FailurePolicy::Open);
    assert_eq!(
        config.stream_id_secret_file.as_deref(),
        Some(std::path::Path::new(
            "/etc/screenlimit/secret/stream-id-secret"
        ))
    );
    assert_eq!(config.auth_token_file, None);
    assert_eq!(config.max_body_bytes, 8192);
}

#[test]
fn the_file_has_exactly_the_expected_keys() {
    let text = rendered("external.yaml");
    let value: serde_yaml_ng::Value = serde_yaml_ng::from_str(&text).unwrap();
    let keys: Vec<_> = value
        .as_mapping()
        .unwrap()
        .keys()
        .map(|k| k.as_str().unwrap().to_owned())
        .collect();
    assert_eq!(
        keys,
        [
            "listen",
            "plans",
            "default_plan",
            "lease",
            "store",
            "failure_policy",
            "stream_id_secret_file",
            "auth_token_file",
            "max_body_bytes"
        ]
    );
    let store: Vec<_> = value["store"]
        .as_mapping()
        .unwrap()
        .keys()
        .map(|k| k.as_str().unwrap().to_owned())
        .collect();
    assert_eq!(
        store,
        [
            "backend",
            "redis_shards",
            "timeout",
            "circuit_probe_interval",
            "circuit_failure_threshold"
        ]
    );
    let config = Config::from_yaml(&text).unwrap();
    config.validate().unwrap();
    assert_eq!(config.failure_policy, FailurePolicy::LocalCap);
    assert_eq!(config.store.timeout, Duration::from_millis(40));
}

#[test]
fn urls_from_a_secret_validate_once_the_environment_supplies_them() {
    let text = rendered("external-secret.yaml");
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("limiter.yaml");
    std::fs::write(&path, &text).unwrap();
    let env = |name: &str| {
        (name == "SCREENLIMIT_REDIS_SHARDS")
            .then(|| "redis://a:6379,redis://b:6379,redis://c:6379".to_owned())
    };
    let config = Config::load(Some(&path), env).unwrap();
    assert_eq!(config.store.redis_shards.len(), 3);
    assert_eq!(config.failure_policy, FailurePolicy::Closed);
}
