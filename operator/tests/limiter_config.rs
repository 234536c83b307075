//! The rendered `limiter.yaml` is accepted by the real limiter and has exactly the expected shape.

mod common;

use std::time::Duration;

use common::fixture;
use screenlimit_limiter::config::{Backend, Config, FailurePolicy};
use screenlimit_operator::build::build;

/// The limiter's config `sl` renders, as the limiter's own loader reads it, and its text.
fn config_of(sl: &screenlimit_operator::crd::StreamLimiter) -> (Config, String) {
    let text = build(sl).unwrap().limiter_config;
    let config = Config::from_yaml(&text).unwrap_or_else(|e| panic!("{e:?}\n{text}"));
    (config, text)
}

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

/// The keys of a YAML mapping, in order.
fn keys_of(value: &serde_yaml_ng::Value) -> Vec<String> {
    value
        .as_mapping()
        .unwrap()
        .keys()
        .map(|k| k.as_str().unwrap().to_owned())
        .collect()
}

#[test]
fn the_file_has_exactly_the_expected_keys() {
    let text = rendered("external.yaml");
    let value: serde_yaml_ng::Value = serde_yaml_ng::from_str(&text).unwrap();
    let keys = keys_of(&value);
    assert_eq!(
        keys,
        [
            "listen",
            "plans",
            "default_plan",
            "plan_source",
            "lease",
            "store",
            "failure_policy",
            "stream_id_secret_file",
            "auth_token_file",
            "max_body_bytes",
            "http",
            "history",
            "revision"
        ]
    );
    assert_eq!(
        keys_of(&value["http"]),
        [
            "header_read_timeout",
            "body_read_timeout",
            "idle_timeout",
            "max_header_bytes",
            "max_connections",
            "max_in_flight",
            "write_timeout",
            "max_connection_age",
            "listen_backlog",
            "max_queue_delay",
            "drain_period",
            "shutdown_timeout"
        ]
    );
    let store = keys_of(&value["store"]);
    assert_eq!(
        store,
        [
            "backend",
            "redis_shards",
            "timeout",
            "batch_window",
            "renewal_window",
            "circuit_probe_interval",
            "circuit_failure_threshold"
        ]
    );
    let config = Config::from_yaml(&text).unwrap();
    config.validate().unwrap();
    assert_eq!(config.failure_policy, FailurePolicy::LocalCap);
    assert_eq!(config.store.timeout, Duration::from_millis(40));
    assert_eq!(config.store.batch_window, Duration::ZERO);
    assert_eq!(config.store.renewal_window, Duration::from_millis(20));
    assert_eq!(keys_of(&value["history"]), ["max_events", "retention"]);
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

/// `ha.yaml` without its Sentinel (managed shards by URL), so the plan source and device caps
/// are judged on their own.
fn rendered_without_sentinel(name: &str) -> String {
    let mut sl = fixture(name);
    sl.spec.redis.replicas_per_shard = 0;
    build(&sl).unwrap().limiter_config
}

#[test]
fn device_caps_and_the_postgres_plan_source_are_accepted_by_the_limiter() {
    use screenlimit_limiter::config::{PlanSourceKind, UnknownAccountPolicy};
    use screenlimit_limiter::model::DeviceType;
    let text = rendered_without_sentinel("ha.yaml");
    let config = Config::from_yaml(&text).unwrap_or_else(|e| panic!("{e:?}\n{text}"));
    config.validate().unwrap_or_else(|e| panic!("{e}\n{text}"));

    // Short form stays short; a plan with caps uses the long form.
    let value: serde_yaml_ng::Value = serde_yaml_ng::from_str(&text).unwrap();
    assert_eq!(value["plans"]["basic"], 1);
    assert_eq!(config.plans["basic"].max_streams(), 1);
    assert!(config.plans["basic"].device_caps().is_empty());
    assert_eq!(config.plans["standard"].max_streams(), 2);
    assert_eq!(
        config.plans["standard"]
            .device_caps()
            .iter()
            .map(|(k, v)| (*k, *v))
            .collect::<Vec<_>>(),
        [(DeviceType::Mobile, 1)]
    );
    assert_eq!(
        config.plans["premium"].device_caps().get(&DeviceType::Web),
        Some(&3)
    );

    let source = &config.plan_source;
    assert_eq!(source.kind, PlanSourceKind::Postgres);
    assert_eq!(
        source.postgres_url_file.as_deref(),
        Some(std::path::Path::new("/etc/screenlimit/plan-db/url"))
    );
    assert_eq!(
        source.postgres_url, None,
        "never inline: the Secret is a file"
    );
    assert_eq!(
        source.query,
        "SELECT plan FROM subscriptions WHERE account_id = $1"
    );
    assert_eq!(source.notify_channel, "billing_plan_changed");
    assert_eq!(source.timeout, Duration::from_millis(40));
    assert_eq!(source.pool_size, 4);
    assert_eq!(source.cache_capacity, 500_000);
    assert_eq!(source.cache_ttl, Duration::from_secs(120));
    assert_eq!(source.cache_max_stale, Duration::from_secs(1800));
    assert_eq!(source.unknown_account, UnknownAccountPolicy::Deny);
    assert_eq!(source.fallback_plan.as_deref(), Some("standard"));

    // The limiter reads the connection string from the mounted file.
    let dir = tempfile::tempdir().unwrap();
    let url = dir.path().join("url");
    std::fs::write(&url, "postgres://u:p@db:5432/billing\n").unwrap();
    let mut local = config.clone();
    local.plan_source.postgres_url_file = Some(url);
    assert_eq!(
        local.resolve_plan_db_url().unwrap().as_deref(),
        Some("postgres://u:p@db:5432/billing")
    );
}

#[test]
fn the_request_plan_source_renders_the_limiter_defaults() {
    let text = rendered("managed.yaml");
    let config = Config::from_yaml(&text).unwrap();
    config.validate().unwrap();
    let ours = &config.plan_source;
    let defaults = screenlimit_limiter::config::PlanSourceConfig::default();
    assert_eq!(ours.kind, defaults.kind);
    assert_eq!(ours.postgres_url_file, None);
    assert_eq!(ours.query, defaults.query);
    assert_eq!(ours.notify_channel, defaults.notify_channel);
    assert_eq!(ours.cache_capacity, defaults.cache_capacity);
    assert_eq!(ours.cache_ttl, defaults.cache_ttl);
    assert_eq!(ours.cache_max_stale, defaults.cache_max_stale);
    assert_eq!(ours.unknown_account, defaults.unknown_account);
    assert_eq!(ours.fallback_plan, None);
}

#[test]
fn the_sentinel_store_has_the_limiter_shape() {
    let text = rendered("ha.yaml");
    let value: serde_yaml_ng::Value = serde_yaml_ng::from_str(&text).unwrap();
    let store = &value["store"];
    assert_eq!(store["backend"], "redis");
    assert_eq!(
        store["redis_shards"],
        serde_yaml_ng::Value::Sequence(vec![])
    );
    let sentinel: Vec<_> = store["sentinel"]
        .as_mapping()
        .unwrap()
        .keys()
        .map(|k| k.as_str().unwrap().to_owned())
        .collect();
    assert_eq!(sentinel, ["addresses", "masters", "auth"]);
    let strings = |v: &serde_yaml_ng::Value| -> Vec<String> {
        v.as_sequence()
            .unwrap()
            .iter()
            .map(|s| s.as_str().unwrap().to_owned())
            .collect()
    };
    assert_eq!(
        strings(&store["sentinel"]["addresses"]),
        [
            "redis://demo-sentinel-0.demo-sentinel.video.svc:26379",
            "redis://demo-sentinel-1.demo-sentinel.video.svc:26379",
            "redis://demo-sentinel-2.demo-sentinel.video.svc:26379",
        ]
    );
    assert_eq!(
        strings(&store["sentinel"]["masters"]),
        ["demo-shard-0", "demo-shard-1"]
    );
}

/// The whole Sentinel config (with the plan source and device caps), judged by the limiter.
#[test]
fn the_sentinel_config_is_accepted_by_the_limiter() {
    let text = rendered("ha.yaml");
    let config = Config::from_yaml(&text).unwrap_or_else(|e| panic!("{e:?}\n{text}"));
    config.validate().unwrap_or_else(|e| panic!("{e}\n{text}"));
    assert_eq!(config.store.backend, Backend::Redis);
    assert!(config.store.redis_shards.is_empty());
    let sentinel = config.store.sentinel.as_ref().unwrap();
    assert_eq!(sentinel.masters, ["demo-shard-0", "demo-shard-1"]);
    assert_eq!(
        sentinel.addresses,
        [
            "redis://demo-sentinel-0.demo-sentinel.video.svc:26379",
            "redis://demo-sentinel-1.demo-sentinel.video.svc:26379",
            "redis://demo-sentinel-2.demo-sentinel.video.svc:26379",
        ]
    );
    // The production example too.
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../examples/production.yaml");
    let mut production: screenlimit_operator::crd::StreamLimiter =
        serde_yaml_ng::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    production.metadata.uid = Some("u".into());
    let text = build(&production).unwrap().limiter_config;
    let config = Config::from_yaml(&text).unwrap_or_else(|e| panic!("{e:?}\n{text}"));
    config.validate().unwrap_or_else(|e| panic!("{e}\n{text}"));
    assert_eq!(config.store.sentinel.unwrap().masters.len(), 8);
}

#[test]
fn the_batch_window_reaches_the_limiter_in_microseconds() {
    let mut sl = fixture("managed.yaml");
    sl.spec.limiter.batch_window_micros = 750;
    let text = build(&sl).unwrap().limiter_config;
    let config = Config::from_yaml(&text).unwrap_or_else(|e| panic!("{e:?}\n{text}"));
    config.validate().unwrap();
    assert_eq!(config.store.batch_window, Duration::from_micros(750));
}

#[test]
fn the_renewal_window_reaches_the_limiter_in_milliseconds() {
    use screenlimit_limiter::config::DEFAULT_RENEWAL_WINDOW;
    let mut sl = fixture("managed.yaml");
    let (config, _) = config_of(&sl);
    config.validate().unwrap();
    assert_eq!(
        config.store.renewal_window, DEFAULT_RENEWAL_WINDOW,
        "the spec's default is the limiter's"
    );
    sl.spec.limiter.renewal_window_millis = 150;
    let (config, text) = config_of(&sl);
    config.validate().unwrap();
    assert!(text.contains("renewal_window: 150ms"), "{text}");
    assert_eq!(config.store.renewal_window, Duration::from_millis(150));
    sl.spec.limiter.renewal_window_millis = 0;
    let (config, _) = config_of(&sl);
    config.validate().unwrap();
    assert_eq!(config.store.renewal_window, Duration::ZERO);
    // At the edge the operator's rule and the limiter's agree: one second to spare after the
    // heartbeat holds a window of 250 ms, a quarter of it, and not 251 ms.
    sl.spec.lease.heartbeat_interval_seconds = 1;
    sl.spec.lease.ttl_seconds = 2;
    for (window, fits) in [(250, true), (251, false), (1_000, false)] {
        sl.spec.limiter.renewal_window_millis = window;
        let (config, text) = config_of(&sl);
        assert_eq!(
            config.validate().is_ok(),
            fits,
            "the limiter, {window} ms:\n{text}"
        );
        let operator = screenlimit_operator::validate::validate(&sl);
        assert_eq!(
            operator.is_ok(),
            fits,
            "the operator, {window} ms: {operator:?}"
        );
    }
    // And at the range's end.
    let mut sl = fixture("managed.yaml");
    sl.spec.limiter.renewal_window_millis = 1_000;
    let (config, _) = config_of(&sl);
    config.validate().unwrap();
    assert_eq!(config.store.renewal_window, Duration::from_secs(1));
}

#[test]
fn the_history_bounds_reach_the_limiter_in_hours() {
    use screenlimit_limiter::config::HistoryConfig;
    let mut sl = fixture("managed.yaml");
    let (config, text) = config_of(&sl);
    config.validate().unwrap();
    assert_eq!(
        config.history,
        HistoryConfig::default(),
        "the spec's defaults are the limiter's"
    );
    assert!(
        text.contains("history:\n  max_events: 50\n  retention: 168h"),
        "{text}"
    );
    sl.spec.limiter.history.max_events = 200;
    sl.spec.limiter.history.retention_hours = 24;
    let (config, text) = config_of(&sl);
    config.validate().unwrap();
    assert!(text.contains("retention: 24h"), "{text}");
    assert_eq!(config.history.max_events, 200);
    assert_eq!(config.history.retention, Duration::from_secs(24 * 3600));
    // At the ends of the range the operator and the limiter agree: both take them, and both
    // refuse a step beyond.
    for (events, hours, fits) in [
        (1, 1, true),
        (1_000, 2_160, true),
        (0, 168, false),
        (1_001, 168, false),
        (50, 0, false),
        (50, 2_161, false),
    ] {
        sl.spec.limiter.history.max_events = events;
        sl.spec.limiter.history.retention_hours = hours;
        let operator = screenlimit_operator::validate::validate(&sl);
        assert_eq!(
            operator.is_ok(),
            fits,
            "the operator, {events} events, {hours} h: {operator:?}"
        );
        if events < 0 || hours < 0 {
            continue;
        }
        let (config, text) = config_of(&sl);
        assert_eq!(
            config.validate().is_ok(),
            fits,
            "the limiter, {events} events, {hours} h:\n{text}"
        );
    }
}

/// `spec.enforcement` and a plan's own block reach the limiter's `enforcement` and
/// `plans.<name>.enforcement` (the plan then in the long form), which the limiter's own loader
/// takes and applies as written; the default renders nothing (the limiter's default is the same).
#[test]
fn enforcement_reaches_the_limiter_top_level_and_per_plan() {
    use screenlimit_limiter::config::{EnforcementConfig, EnforcementMode};
    use screenlimit_limiter::enforcement::Enforcement;
    use screenlimit_limiter::rules::Rules;
    use screenlimit_operator::crd::{self, EnforcementSpec};
    let mut sl = fixture("managed.yaml");
    let (config, text) = config_of(&sl);
    config.validate().unwrap();
    assert!(!text.contains("enforcement"), "{text}");
    assert_eq!(config.enforcement, EnforcementConfig::default());

    // Step 1: shadow everywhere.
    sl.spec.enforcement.mode = crd::EnforcementMode::Shadow;
    let (config, text) = config_of(&sl);
    config.validate().unwrap_or_else(|e| panic!("{e}\n{text}"));
    assert!(text.contains("enforcement:\n  mode: shadow\n"), "{text}");
    assert_eq!(config.enforcement.mode, EnforcementMode::Shadow);
    assert_eq!(config.enforcement.enforce_percent, None);
    assert_eq!(
        Rules::from_config(&config, 1).enforcement.default,
        Enforcement::SHADOW
    );

    // Step 2: a share enforced, one plan kept in shadow, one enforced whole.
    sl.spec.enforcement = EnforcementSpec {
        mode: crd::EnforcementMode::Enforce,
        enforce_percent: Some(30),
    };
    sl.spec.plans[1].enforcement = Some(EnforcementSpec {
        mode: crd::EnforcementMode::Shadow,
        enforce_percent: None,
    });
    sl.spec.plans[2].device_caps = Some(crd::DeviceCaps {
        tv: Some(2),
        ..Default::default()
    });
    sl.spec.plans[2].enforcement = Some(EnforcementSpec::default());
    let (config, text) = config_of(&sl);
    config.validate().unwrap_or_else(|e| panic!("{e}\n{text}"));
    let value: serde_yaml_ng::Value = serde_yaml_ng::from_str(&text).unwrap();
    assert_eq!(keys_of(&value["enforcement"]), ["mode", "enforce_percent"]);
    assert_eq!(value["enforcement"]["enforce_percent"], 30);
    assert_eq!(
        value["plans"]["basic"], 1,
        "a plan without a block stays short"
    );
    assert_eq!(
        keys_of(&value["plans"]["standard"]),
        ["max_streams", "enforcement"]
    );
    assert_eq!(value["plans"]["standard"]["enforcement"]["mode"], "shadow");
    assert_eq!(
        keys_of(&value["plans"]["premium"]),
        ["max_streams", "device_caps", "enforcement"]
    );
    assert_eq!(keys_of(&value["plans"]["premium"]["enforcement"]), ["mode"]);
    let rules = Rules::from_config(&config, 1).enforcement;
    assert_eq!(rules.default, Enforcement::percent(30));
    assert_eq!(rules.of_plan(Some("basic")), Enforcement::percent(30));
    assert_eq!(rules.of_plan(Some("standard")), Enforcement::SHADOW);
    assert_eq!(rules.of_plan(Some("premium")), Enforcement::ENFORCE);
    assert_eq!(config.plans["premium"].max_streams(), 4);
    assert_eq!(config.plans["premium"].device_caps().len(), 1);

    // At the ends of the share and across modes, the operator and the limiter agree.
    for (mode, percent, fits) in [
        (crd::EnforcementMode::Enforce, Some(0), true),
        (crd::EnforcementMode::Enforce, Some(100), true),
        (crd::EnforcementMode::Enforce, Some(101), false),
        (crd::EnforcementMode::Shadow, Some(0), false),
        (crd::EnforcementMode::Shadow, Some(100), false),
    ] {
        for plan in [false, true] {
            let mut sl = fixture("managed.yaml");
            let block = EnforcementSpec {
                mode,
                enforce_percent: percent,
            };
            if plan {
                sl.spec.plans[0].enforcement = Some(block);
            } else {
                sl.spec.enforcement = block;
            }
            let operator = screenlimit_operator::validate::validate(&sl);
            assert_eq!(
                operator.is_ok(),
                fits,
                "the operator, {mode:?} {percent:?}, plan {plan}: {operator:?}"
            );
            let (config, text) = config_of(&sl);
            assert_eq!(
                config.validate().is_ok(),
                fits,
                "the limiter, {mode:?} {percent:?}, plan {plan}:\n{text}"
            );
        }
    }
}

/// The limiter takes a new `enforcement` from its mounted file without a restart: a change of
/// it (or of a plan's own) moves the config revision and leaves the hash that rolls the pods.
#[test]
fn an_enforcement_change_is_live_and_rolls_no_pod() {
    use screenlimit_operator::crd::{EnforcementMode, EnforcementSpec};
    use screenlimit_operator::names::Names;
    let mut sl = fixture("managed.yaml");
    let before = build(&sl).unwrap();
    let mut revisions = vec![before.config_revision.clone()];
    for step in 0..4 {
        match step {
            0 => sl.spec.enforcement.mode = EnforcementMode::Shadow,
            1 => {
                sl.spec.enforcement = EnforcementSpec {
                    mode: EnforcementMode::Enforce,
                    enforce_percent: Some(10),
                }
            }
            2 => {
                sl.spec.plans[2].enforcement = Some(EnforcementSpec {
                    mode: EnforcementMode::Shadow,
                    enforce_percent: None,
                })
            }
            _ => sl.spec.enforcement.enforce_percent = Some(50),
        }
        let live = build(&sl).unwrap();
        assert_eq!(
            live.config_hash, before.config_hash,
            "step {step} rolled the pods"
        );
        assert!(
            !screenlimit_operator::build::limiter_config::restart_part(
                &sl,
                &Names::new("demo"),
                "video"
            )
            .contains("enforcement"),
            "step {step}: enforcement is in the part that rolls the pods"
        );
        assert!(
            !revisions.contains(&live.config_revision),
            "step {step} left the revision as it was"
        );
        assert!(
            live.limiter_config
                .contains(&format!("revision: {}", live.config_revision)),
            "the file carries its revision"
        );
        revisions.push(live.config_revision);
    }
    // Back to the default: the file and its revision are those of before.
    sl.spec.enforcement = EnforcementSpec::default();
    sl.spec.plans[2].enforcement = None;
    let back = build(&sl).unwrap();
    assert_eq!(back.config_revision, before.config_revision);
    assert_eq!(back.limiter_config, before.limiter_config);
}

/// Managed Redis: the limiter logs in as its ACL user with the password file from the
/// generated Secret, asks Sentinel with the Sentinels' password file, and with `redis.tls`
/// dials `rediss://` trusting the Secret's CA. The limiter itself accepts the result.
#[test]
fn managed_redis_credentials_and_tls_reach_the_limiter_as_files() {
    use std::path::Path;

    let text = rendered("ha.yaml");
    let config = Config::from_yaml(&text).unwrap_or_else(|e| panic!("{e:?}\n{text}"));
    config.validate().unwrap_or_else(|e| panic!("{e}\n{text}"));
    let auth = &config.store.auth;
    assert_eq!(auth.username.as_deref(), Some("screenlimit"));
    assert_eq!(
        auth.password_file.as_deref(),
        Some(Path::new("/etc/screenlimit/redis-auth/limiter-password"))
    );
    let sentinel = config.store.sentinel.as_ref().unwrap();
    assert_eq!(sentinel.auth.username, None);
    assert_eq!(
        sentinel.auth.password_file.as_deref(),
        Some(Path::new("/etc/screenlimit/redis-auth/sentinel-password"))
    );
    assert!(config.store.tls.ca_file.is_none());
    assert!(
        !text.contains("password:"),
        "no password in the config:\n{text}"
    );

    let mut tls = fixture("ha.yaml");
    tls.spec.redis.tls = Some(screenlimit_operator::crd::RedisTlsSpec {
        secret_name: "redis-tls".into(),
    });
    let text = build(&tls).unwrap().limiter_config;
    let config = Config::from_yaml(&text).unwrap_or_else(|e| panic!("{e:?}\n{text}"));
    config.validate().unwrap_or_else(|e| panic!("{e}\n{text}"));
    assert_eq!(
        config.store.tls.ca_file.as_deref(),
        Some(Path::new("/etc/screenlimit/redis-tls/ca.crt"))
    );
    assert!(config.store.tls.client_cert_file.is_none());
    assert_eq!(
        config.store.sentinel.unwrap().addresses[0],
        "rediss://demo-sentinel-0.demo-sentinel.video.svc:26379"
    );

    let mut standalone = fixture("managed.yaml");
    standalone.spec.redis.tls = tls.spec.redis.tls.clone();
    let config = Config::from_yaml(&build(&standalone).unwrap().limiter_config).unwrap();
    assert_eq!(
        config.store.redis_shards,
        [
            "rediss://demo-redis-0.video.svc:6379",
            "rediss://demo-redis-1.video.svc:6379"
        ]
    );
    assert_eq!(config.store.auth.username.as_deref(), Some("screenlimit"));

    // External Redis: no generated credentials (yours are in your URLs' Secret or env).
    let config = Config::from_yaml(&rendered("external.yaml")).unwrap();
    assert!(config.store.auth.username.is_none() && config.store.auth.password_file.is_none());
}

#[test]
fn the_http_knobs_reach_the_limiter_config() {
    let sl = fixture("managed.yaml");
    let text = build(&sl).unwrap().limiter_config;
    let config = Config::from_yaml(&text).unwrap_or_else(|e| panic!("{e:?}\n{text}"));
    config.validate().unwrap();
    let defaults = screenlimit_limiter::config::HttpConfig::default();
    assert_eq!(config.http.max_in_flight, defaults.max_in_flight);
    assert_eq!(config.http.idle_timeout, defaults.idle_timeout);
    assert_eq!(
        config.http.header_read_timeout,
        defaults.header_read_timeout
    );
    assert_eq!(config.http.body_read_timeout, defaults.body_read_timeout);
    assert_eq!(config.http.max_header_bytes, defaults.max_header_bytes);
    assert_eq!(config.http.max_connections, defaults.max_connections);
    assert_eq!(config.http.write_timeout, defaults.write_timeout);
    assert_eq!(config.http.max_connection_age, defaults.max_connection_age);
    assert_eq!(config.http.listen_backlog, defaults.listen_backlog);
    assert_eq!(config.http.max_queue_delay, defaults.max_queue_delay);
    assert_eq!(config.http.drain_period, defaults.drain_period);
    assert_eq!(config.http.shutdown_timeout, defaults.shutdown_timeout);
    let mut sl = fixture("managed.yaml");
    let http = &mut sl.spec.limiter.http;
    http.header_read_timeout_millis = 1500;
    http.body_read_timeout_millis = 2500;
    http.idle_timeout_seconds = 620;
    http.max_header_bytes = 4096;
    http.max_connections = 2000;
    http.max_in_flight = 300;
    http.write_timeout_millis = 700;
    http.max_connection_age_seconds = 0;
    http.listen_backlog = 1000;
    http.max_queue_delay_millis = 20;
    http.drain_period_seconds = 12;
    http.shutdown_timeout_seconds = 30;
    let desired = build(&sl).unwrap();
    let limiter = desired
        .deployments
        .iter()
        .find(|d| {
            d.metadata
                .name
                .as_deref()
                .is_some_and(|n| n.ends_with("-limiter"))
        })
        .unwrap();
    let pod = limiter
        .spec
        .as_ref()
        .unwrap()
        .template
        .spec
        .as_ref()
        .unwrap();
    // The drain and the in-flight requests' time fit in the pods' grace period.
    assert_eq!(pod.termination_grace_period_seconds, Some(12 + 30 + 5));
    let text = desired.limiter_config;
    let config = Config::from_yaml(&text).unwrap_or_else(|e| panic!("{e:?}\n{text}"));
    config.validate().unwrap();
    assert_eq!(config.http.header_read_timeout, Duration::from_millis(1500));
    assert_eq!(config.http.body_read_timeout, Duration::from_millis(2500));
    assert_eq!(config.http.idle_timeout, Duration::from_secs(620));
    assert_eq!(config.http.max_header_bytes, 4096);
    assert_eq!(config.http.max_connections, 2000);
    assert_eq!(config.http.max_in_flight, 300);
    assert_eq!(config.http.write_timeout, Duration::from_millis(700));
    assert_eq!(config.http.max_connection_age, Duration::ZERO);
    assert_eq!(config.http.listen_backlog, 1000);
    assert_eq!(config.http.max_queue_delay, Duration::from_millis(20));
    assert_eq!(config.http.drain_period, Duration::from_secs(12));
    assert_eq!(config.http.shutdown_timeout, Duration::from_secs(30));
}

/// `external.yaml` on a Redis Cluster: its nodes inline, or from a Secret.
fn on_a_cluster(inline: bool) -> screenlimit_operator::crd::StreamLimiter {
    use screenlimit_operator::crd::SecretKeyRef;
    let mut sl = fixture("external.yaml");
    let external = sl.spec.redis.external.as_mut().unwrap();
    external.urls = None;
    if inline {
        external.cluster_nodes = Some(vec![
            "redis://redis-cluster-0.data.svc:6379".into(),
            "redis://redis-cluster-1.data.svc:6379".into(),
        ]);
    } else {
        external.cluster_nodes_secret = Some(SecretKeyRef {
            name: "cluster-nodes".into(),
            key: "nodes".into(),
        });
    }
    sl
}

fn limiter_yaml_of(sl: &screenlimit_operator::crd::StreamLimiter) -> String {
    build(sl).unwrap().config_maps[0].data.as_ref().unwrap()["limiter.yaml"].clone()
}

#[test]
fn a_cluster_s_nodes_render_store_cluster_and_the_limiter_accepts_it() {
    let text = limiter_yaml_of(&on_a_cluster(true));
    let config = Config::from_yaml(&text).unwrap_or_else(|e| panic!("{e:?}\n{text}"));
    config.validate().unwrap_or_else(|e| panic!("{e}\n{text}"));
    assert!(config.store.redis_shards.is_empty(), "{text}");
    let cluster = config.store.cluster.expect("store.cluster");
    assert_eq!(
        cluster.nodes,
        [
            "redis://redis-cluster-0.data.svc:6379",
            "redis://redis-cluster-1.data.svc:6379"
        ]
    );
}

#[test]
fn cluster_nodes_from_a_secret_validate_once_the_environment_supplies_them() {
    let text = limiter_yaml_of(&on_a_cluster(false));
    assert!(!text.contains("cluster:"), "{text}");
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("limiter.yaml");
    std::fs::write(&path, &text).unwrap();
    let env = |name: &str| {
        (name == "SCREENLIMIT_REDIS_CLUSTER_NODES")
            .then(|| "redis://c0:6379,redis://c1:6379".to_owned())
    };
    let config = Config::load(Some(&path), env).unwrap();
    assert_eq!(config.store.cluster.unwrap().nodes.len(), 2);
    assert!(config.store.redis_shards.is_empty());
    let desired = build(&on_a_cluster(false)).unwrap();
    let pod = desired.deployments[0]
        .spec
        .as_ref()
        .unwrap()
        .template
        .spec
        .as_ref()
        .unwrap();
    let env = pod.containers[0].env.as_ref().unwrap();
    let from_secret = env
        .iter()
        .find(|e| e.name == "SCREENLIMIT_REDIS_CLUSTER_NODES")
        .and_then(|e| e.value_from.as_ref()?.secret_key_ref.as_ref())
        .expect("the nodes come from the Secret");
    assert_eq!(
        (from_secret.name.as_str(), from_secret.key.as_str()),
        ("cluster-nodes", "nodes")
    );
    assert!(!env.iter().any(|e| e.name == "SCREENLIMIT_REDIS_SHARDS"));
}

/// `playerAuth`, `gatewayTokenSecret` and `cors` reach the limiter as `auth` (the
/// `authTokenSecret` becoming the support token) and `http.cors`, each Secret mounted as a file
/// (a whole-directory mount, so a rotated key reaches the pod), and the limiter accepts it.
#[test]
fn player_auth_gateway_token_and_cors_reach_the_limiter_as_mounted_files() {
    use screenlimit_operator::crd::{CorsSpec, PlayerAuthSpec, SecretKeyRef};
    let key = |name: &str, key: &str| SecretKeyRef {
        name: name.into(),
        key: key.into(),
    };
    let mut sl = fixture("managed.yaml");
    sl.spec.limiter.auth_token_secret = Some(key("support", "token"));
    sl.spec.limiter.gateway_token_secret = Some(key("gateway", "token"));
    sl.spec.limiter.player_auth = Some(PlayerAuthSpec {
        hs256_secret: None,
        jwks_secret: Some(key("player-keys", "jwks.json")),
        issuer: "https://auth.video.example".into(),
        audience: "screenlimit".into(),
        account_claim: "sub".into(),
        device_claim: Some("device_id".into()),
        home_claim: None,
    });
    sl.spec.limiter.cors = Some(CorsSpec {
        allowed_origins: vec!["https://watch.video.example".into()],
    });
    let desired = build(&sl).unwrap();
    let text = limiter_yaml_of(&sl);
    let config = Config::from_yaml(&text).unwrap_or_else(|e| panic!("{e:?}\n{text}"));
    config.validate().unwrap();
    assert_eq!(config.auth_token_file, None, "one credential per audience");
    let path = |p: &Option<std::path::PathBuf>| p.as_ref().map(|p| p.display().to_string());
    assert_eq!(
        path(&config.auth.support_token_file).as_deref(),
        Some("/etc/screenlimit/auth/token")
    );
    assert_eq!(
        path(&config.auth.gateway_token_file).as_deref(),
        Some("/etc/screenlimit/gateway/token")
    );
    let players = config.auth.players.as_ref().unwrap();
    assert_eq!(
        path(&players.jwks_file).as_deref(),
        Some("/etc/screenlimit/player-keys/keys")
    );
    assert_eq!(players.hs256_secret_file, None);
    assert_eq!(players.issuer, "https://auth.video.example");
    assert_eq!(players.device_claim.as_deref(), Some("device_id"));
    assert_eq!(
        config.http.cors.allowed_origins,
        ["https://watch.video.example"]
    );
    assert!(
        !text.contains("BEGIN") && !text.contains("jwks.json\":"),
        "never inlined"
    );

    let pod = desired.deployments[0]
        .spec
        .as_ref()
        .unwrap()
        .template
        .spec
        .as_ref()
        .unwrap();
    let volumes = pod.volumes.as_ref().unwrap();
    for (volume, secret, item) in [
        ("gateway-token", "gateway", "token"),
        ("player-keys", "player-keys", "jwks.json"),
    ] {
        let found = volumes
            .iter()
            .find(|v| v.name == volume)
            .unwrap_or_else(|| panic!("no volume {volume}"));
        let source = found.secret.as_ref().unwrap();
        assert_eq!(source.secret_name.as_deref(), Some(secret));
        assert_eq!(source.items.as_ref().unwrap()[0].key, item);
    }
    let mounts = pod.containers[0].volume_mounts.as_ref().unwrap();
    let keys = mounts.iter().find(|m| m.name == "player-keys").unwrap();
    assert_eq!(keys.mount_path, "/etc/screenlimit/player-keys");
    assert!(
        keys.sub_path.is_none(),
        "a subPath mount would never see a rotation"
    );

    // Without them, the single token stays as it was.
    let mut single = fixture("managed.yaml");
    single.spec.limiter.auth_token_secret = Some(key("support", "token"));
    let text = limiter_yaml_of(&single);
    let config = Config::from_yaml(&text).unwrap();
    assert_eq!(
        path(&config.auth_token_file).as_deref(),
        Some("/etc/screenlimit/auth/token")
    );
    assert_eq!(config.auth, Default::default());
}

/// `spec.regions` becomes the limiter's `regions`, as the limiter's own loader reads it: the
/// durations in milliseconds, the weights, the peers in their order, each token and CA as the
/// file its Secret key is mounted as (`ca_file` only for a peer with `caSecret`). Without it,
/// no `regions` at all.
#[test]
fn regions_reach_the_limiter_with_the_mounted_files() {
    use std::path::PathBuf;

    use screenlimit_limiter::config::{PeerConfig, RegionsConfig};

    let (config, text) = config_of(&fixture("regions.yaml"));
    config.validate().unwrap_or_else(|e| panic!("{e}\n{text}"));
    assert_eq!(
        config.regions,
        Some(RegionsConfig {
            name: "eu".into(),
            weight: 2,
            evacuated: false,
            secondary: None,
            token_file: PathBuf::from("/etc/screenlimit/regions/inbound/token"),
            timeout: Duration::from_millis(800),
            heartbeat_window: Duration::from_millis(100),
            peers: vec![
                PeerConfig {
                    name: "us".into(),
                    url: "https://limiter.us.example.com".into(),
                    weight: 1,
                    evacuated: false,
                    secondary: None,
                    token_file: PathBuf::from("/etc/screenlimit/regions/peer-0-token/token"),
                    ca_file: Some(PathBuf::from("/etc/screenlimit/regions/peer-0-ca/ca.crt")),
                },
                PeerConfig {
                    name: "ap".into(),
                    url: "http://limiter.ap.internal:8080/screenlimit".into(),
                    weight: 1,
                    evacuated: false,
                    secondary: None,
                    token_file: PathBuf::from("/etc/screenlimit/regions/peer-1-token/token"),
                    ca_file: None,
                },
            ],
            home_sources: Vec::new(),
        })
    );
    let value: serde_yaml_ng::Value = serde_yaml_ng::from_str(&text).unwrap();
    assert_eq!(
        keys_of(&value["regions"]),
        [
            "name",
            "weight",
            "token_file",
            "timeout",
            "heartbeat_window",
            "peers"
        ]
    );
    assert_eq!(value["regions"]["timeout"], "800ms");
    assert_eq!(value["regions"]["heartbeat_window"], "100ms");
    assert_eq!(
        keys_of(&value["regions"]["peers"][1]),
        ["name", "url", "weight", "token_file"]
    );
    assert!(
        config.stream_id_secret_file.is_some(),
        "the limiter refuses regions without a stream id secret"
    );

    // The defaults are the limiter's.
    let mut sl = fixture("regions.yaml");
    let yaml = r#"{name: eu, tokenSecret: {name: t, key: k}, peers: [{name: us, url: "https://u", tokenSecret: {name: t, key: k}}]}"#;
    sl.spec.regions = Some(serde_yaml_ng::from_str(yaml).unwrap());
    let (config, text) = config_of(&sl);
    config.validate().unwrap_or_else(|e| panic!("{e}\n{text}"));
    let defaults: RegionsConfig = serde_yaml_ng::from_str(
        "{name: eu, token_file: t, peers: [{name: us, url: \"https://u\", token_file: t}]}",
    )
    .unwrap();
    let regions = config.regions.unwrap();
    assert_eq!(regions.weight, defaults.weight);
    assert_eq!(regions.timeout, defaults.timeout);
    assert_eq!(regions.heartbeat_window, defaults.heartbeat_window);
    assert_eq!(regions.peers[0].weight, defaults.peers[0].weight);

    let (config, text) = config_of(&fixture("managed.yaml"));
    assert_eq!(config.regions, None);
    assert!(!text.contains("regions"), "{text}");
}

/// Each region's evacuation and secondary reach the limiter's `regions`, beside its weight
/// (this region's and each peer's); `evacuated` only when true (the limiter's default is false)
/// and `secondary` only when set, so that a spec which sets neither renders what it did before.
#[test]
fn evacuations_and_secondaries_reach_the_regions_block() {
    let mut sl = fixture("regions.yaml");
    let regions = sl.spec.regions.as_mut().unwrap();
    regions.evacuated = true;
    regions.secondary = Some("us".into());
    regions.peers[0].evacuated = true;
    regions.peers[1].secondary = Some("eu".into());
    let text = build(&sl).unwrap().limiter_config;
    // The limiter's own loader takes them, and its home rule reads them.
    let config = Config::from_yaml(&text).unwrap();
    config.validate().unwrap_or_else(|e| panic!("{e}\n{text}"));
    let homes = config.regions.unwrap().homes();
    let evacuated: Vec<_> = homes
        .iter()
        .map(|r| (r.evacuated, r.secondary.as_deref()))
        .collect();
    assert_eq!(
        evacuated,
        [(true, Some("us")), (true, None), (false, Some("eu"))]
    );
    let value: serde_yaml_ng::Value = serde_yaml_ng::from_str(&text).unwrap();
    let block = &value["regions"];
    assert_eq!(
        keys_of(block),
        [
            "name",
            "weight",
            "evacuated",
            "secondary",
            "token_file",
            "timeout",
            "heartbeat_window",
            "peers"
        ]
    );
    assert_eq!(block["evacuated"], true);
    assert_eq!(block["secondary"], "us");
    assert_eq!(
        keys_of(&block["peers"][0]),
        [
            "name",
            "url",
            "weight",
            "evacuated",
            "token_file",
            "ca_file"
        ]
    );
    assert_eq!(block["peers"][0]["evacuated"], true);
    assert_eq!(
        keys_of(&block["peers"][1]),
        ["name", "url", "weight", "secondary", "token_file"]
    );
    assert_eq!(block["peers"][1]["secondary"], "eu");
}

/// `regions.homeSources` becomes the limiter's `regions.home_sources` in its order, and
/// `playerAuth.homeClaim` its `auth.players.home_claim`: the rendered file loads and validates
/// in the limiter (whose own check wants the postgres plan source and the claim for these
/// sources). Neither is written when not given, so that a spec without them renders the file
/// it did before.
#[test]
fn home_sources_and_the_home_claim_reach_the_limiter() {
    use screenlimit_limiter::config::HomeSource as Limiter;
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
             jwksSecret: {name: player-keys, key: jwks}, homeClaim: home_region}",
        )
        .unwrap(),
    );
    sl.spec.regions.as_mut().unwrap().home_sources = vec![PlayerToken, GatewayHeader, PlanSource];
    let (config, text) = config_of(&sl);
    config.validate().unwrap_or_else(|e| panic!("{e}\n{text}"));
    assert_eq!(
        config.regions.as_ref().unwrap().home_sources,
        [
            Limiter::PlayerToken,
            Limiter::GatewayHeader,
            Limiter::PlanSource
        ]
    );
    let players = config.auth.players.as_ref().unwrap();
    assert_eq!(players.home_claim.as_deref(), Some("home_region"));
    let value: serde_yaml_ng::Value = serde_yaml_ng::from_str(&text).unwrap();
    assert_eq!(
        value["regions"]["home_sources"],
        serde_yaml_ng::from_str::<serde_yaml_ng::Value>(
            "[player_token, gateway_header, plan_source]"
        )
        .unwrap()
    );
    assert_eq!(
        keys_of(&value["auth"]["players"]),
        [
            "jwks_file",
            "issuer",
            "audience",
            "account_claim",
            "home_claim"
        ]
    );

    // Taken out: neither key, and the limiter's defaults (the hash alone, no claim).
    sl.spec.regions.as_mut().unwrap().home_sources.clear();
    sl.spec.limiter.player_auth.as_mut().unwrap().home_claim = None;
    let (config, text) = config_of(&sl);
    config.validate().unwrap_or_else(|e| panic!("{e}\n{text}"));
    assert_eq!(config.regions.unwrap().home_sources, []);
    assert_eq!(config.auth.players.unwrap().home_claim, None);
    assert!(
        !text.contains("home_sources") && !text.contains("home_claim"),
        "{text}"
    );
}
