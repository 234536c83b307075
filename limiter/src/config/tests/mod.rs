mod api_access;
mod regions;

use std::time::Duration;

use super::*;
use crate::model::DeviceType;

fn no_env(_: &str) -> Option<String> {
    None
}

#[test]
fn allow_eviction_is_off_by_default_and_comes_from_the_file_or_the_environment() {
    let no_env = |_: &str| None;
    assert!(!Config::load(None, no_env).unwrap().store.allow_eviction);
    let config = Config::from_yaml("store: { allow_eviction: true }\n").unwrap();
    assert!(config.store.allow_eviction);
    let env = |name: &str| (name == "SCREENLIMIT_REDIS_ALLOW_EVICTION").then(|| "true".into());
    assert!(Config::load(None, env).unwrap().store.allow_eviction);
    let bad = |name: &str| (name == "SCREENLIMIT_REDIS_ALLOW_EVICTION").then(|| "yes".into());
    let err = Config::load(None, bad).unwrap_err();
    assert!(
        matches!(
            err,
            ConfigError::Invalid {
                field: "store.allow_eviction",
                ..
            }
        ),
        "{err}"
    );
}

#[test]
fn the_module_is_used_where_loaded_unless_switched_off() {
    let no_env = |_: &str| None;
    let module = |config: Config| config.store.module;
    assert_eq!(
        module(Config::load(None, no_env).unwrap()),
        StoreModule::Auto
    );
    let off = Config::from_yaml("store: { module: off }\n").unwrap();
    assert_eq!(module(off), StoreModule::Off);
    let env = |name: &str| (name == "SCREENLIMIT_STORE_MODULE").then(|| "off".into());
    assert_eq!(module(Config::load(None, env).unwrap()), StoreModule::Off);
    let (field, message) = Config::from_yaml("store: { module: on }\n").unwrap_err();
    assert_eq!(field, "store.module");
    assert!(message.contains("auto"), "{message}");
    let bad = |name: &str| (name == "SCREENLIMIT_STORE_MODULE").then(|| "native".into());
    let err = Config::load(None, bad).unwrap_err();
    assert!(
        matches!(
            err,
            ConfigError::Invalid {
                field: "store.module",
                ..
            }
        ),
        "{err}"
    );
}

#[test]
fn the_documented_shape_parses() {
    let yaml = r#"
listen: 127.0.0.1:9090
plans: { basic: 1, standard: 2, premium: 4 }
default_plan: standard
lease:
  heartbeat_interval: 1500ms
  ttl: 5s
store:
  backend: redis
  redis_shards: ["redis://127.0.0.1:6379"]
  timeout: 25ms
failure_policy: local_cap
stream_id_secret: "0123456789abcdef0123"
"#;
    let config = Config::from_yaml(yaml).unwrap();
    config.validate().unwrap();
    assert_eq!(config.lease.heartbeat_interval, Duration::from_millis(1500));
    assert_eq!(config.plans["premium"], PlanRule::Streams(4));
    assert_eq!(config.failure_policy, FailurePolicy::LocalCap);
    assert_eq!(config.store.backend, Backend::Redis);
}

#[test]
fn no_file_means_the_defaults() {
    let config = Config::load(None, no_env).unwrap();
    assert_eq!(config.listen.to_string(), "127.0.0.1:8080");
    assert_eq!(config.default_plan, "basic");
    assert_eq!(config.lease.ttl, Duration::from_secs(90));
    assert_eq!(config.store.timeout, Duration::from_millis(25));
    assert_eq!(config.store.backend, Backend::Memory);
}

#[test]
fn threads_default_to_one_per_cpu_and_can_be_set() {
    let config = Config::load(None, no_env).unwrap();
    assert_eq!(config.threads, 0);
    let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
    assert_eq!(config.threads(), cpus);
    let config = Config::from_yaml("threads: 3\n").unwrap();
    config.validate().unwrap();
    assert_eq!(config.threads(), 3);
    let env = |name: &str| (name == "SCREENLIMIT_THREADS").then(|| "1".to_owned());
    assert_eq!(Config::load(None, env).unwrap().threads(), 1);
    let bad_env = |name: &str| (name == "SCREENLIMIT_THREADS").then(|| "many".to_owned());
    let too_many = Config::from_yaml("threads: 100000\n").unwrap();
    for err in [
        Config::load(None, bad_env).unwrap_err(),
        too_many.validate().unwrap_err(),
    ] {
        let names_threads = matches!(
            &err,
            ConfigError::Invalid {
                field: "threads",
                ..
            }
        );
        assert!(names_threads, "{err}");
    }
}

#[test]
fn parse_errors_name_the_field() {
    let (field, _) = Config::from_yaml("lease:\n  ttl: soon\n").unwrap_err();
    assert_eq!(field, "lease.ttl");
    let (field, message) = Config::from_yaml("store:\n  backend: etcd\n").unwrap_err();
    assert_eq!(field, "store.backend");
    assert!(message.contains("memory"), "{message}");
    let (field, _) = Config::from_yaml("lisen: 1.2.3.4:5\n").unwrap_err();
    assert_eq!(field, "lisen", "an unknown field is named");
}

#[test]
fn the_renewal_window_defaults_to_20ms_and_fits_within_the_leases_spare_time() {
    let config = Config::from_yaml("plans: { basic: 1 }\ndefault_plan: basic\n").unwrap();
    assert_eq!(config.store.renewal_window, Duration::from_millis(20));
    let tight = "plans: { basic: 1 }\ndefault_plan: basic\n\
                 lease: { heartbeat_interval: 400ms, ttl: 800ms }\n\
                 store: { renewal_window: 100ms }\n";
    Config::from_yaml(tight).unwrap().validate().unwrap();
    let off = "plans: { basic: 1 }\ndefault_plan: basic\nstore: { renewal_window: 0s }\n";
    Config::from_yaml(off).unwrap().validate().unwrap();
    // The shortest lease there is, with a long store deadline: the default window still fits.
    let shortest = "plans: { basic: 1 }\ndefault_plan: basic\n\
                    lease: { heartbeat_interval: 100ms, ttl: 200ms }\nstore: { timeout: 2s }\n";
    Config::from_yaml(shortest).unwrap().validate().unwrap();
}

#[test]
fn validation_names_the_field() {
    let cases: &[(&str, &str)] = &[
        ("default_plan: gold\n", "default_plan"),
        ("plans: { basic: 0 }\n", "plans"),
        (
            "lease: { heartbeat_interval: 30s, ttl: 45s }\n",
            "lease.ttl",
        ),
        ("store: { backend: redis }\n", "store.redis_shards"),
        (
            "store: { backend: redis, redis_shards: [\"redis://x:1\"] }\n",
            "stream_id_secret_file",
        ),
        (
            "store: { redis_shards: [\"redis://x:1\"] }\n",
            "store.redis_shards",
        ),
        ("store: { timeout: 0s }\n", "store.timeout"),
        ("store: { renewal_window: 2s }\n", "store.renewal_window"),
        (
            // 400 ms to spare after the heartbeat: a window over 100 ms is too long.
            "lease: { heartbeat_interval: 400ms, ttl: 800ms }\nstore: { renewal_window: 101ms }\n",
            "store.renewal_window",
        ),
    ];
    for (yaml, field) in cases {
        let err = Config::from_yaml(yaml).unwrap().validate().unwrap_err();
        assert!(
            matches!(&err, ConfigError::Invalid { field: f, .. } if f == field),
            "{yaml}: {err}"
        );
    }
}

#[test]
fn http_bounds_have_defaults_env_overrides_and_named_errors() {
    let config = Config::load(None, no_env).unwrap();
    assert_eq!(config.http.header_read_timeout, Duration::from_secs(5));
    assert_eq!(config.http.max_in_flight, 4_096);
    assert_eq!(config.http.write_timeout, Duration::from_secs(10));
    assert_eq!(config.http.listen_backlog, 8_192);
    assert!(config.http.max_queue_delay.is_zero(), "off by default");
    assert_eq!(config.http.max_connection_age, Duration::from_secs(300));
    let yaml = "http: { header_read_timeout: 2s, body_read_timeout: 3s, idle_timeout: 90s, write_timeout: 4s, listen_backlog: 100, max_queue_delay: 30ms, max_header_bytes: 4096, max_connections: 50, max_in_flight: 10 }\n";
    let config = Config::from_yaml(yaml).unwrap();
    config.validate().unwrap();
    assert_eq!(config.http.idle_timeout, Duration::from_secs(90));
    assert_eq!(config.http.max_connections, 50);
    assert_eq!(config.http.write_timeout, Duration::from_secs(4));
    assert_eq!(config.http.listen_backlog, 100);
    assert_eq!(config.http.max_queue_delay, Duration::from_millis(30));
    let env = |name: &str| match name {
        "SCREENLIMIT_MAX_IN_FLIGHT" => Some("7".to_owned()),
        "SCREENLIMIT_MAX_CONNECTIONS" => Some("9".to_owned()),
        "SCREENLIMIT_HEADER_READ_TIMEOUT" => Some("250ms".to_owned()),
        "SCREENLIMIT_BODY_READ_TIMEOUT" => Some("1s".to_owned()),
        "SCREENLIMIT_IDLE_TIMEOUT" => Some("2s".to_owned()),
        "SCREENLIMIT_WRITE_TIMEOUT" => Some("3s".to_owned()),
        "SCREENLIMIT_LISTEN_BACKLOG" => Some("512".to_owned()),
        "SCREENLIMIT_MAX_QUEUE_DELAY" => Some("40ms".to_owned()),
        "SCREENLIMIT_MAX_CONNECTION_AGE" => Some("10m".to_owned()),
        _ => None,
    };
    let config = Config::load(None, env).unwrap();
    assert_eq!(config.http.max_in_flight, 7);
    assert_eq!(config.http.max_connections, 9);
    assert_eq!(config.http.header_read_timeout, Duration::from_millis(250));
    assert_eq!(config.http.body_read_timeout, Duration::from_secs(1));
    assert_eq!(config.http.idle_timeout, Duration::from_secs(2));
    assert_eq!(config.http.write_timeout, Duration::from_secs(3));
    assert_eq!(config.http.listen_backlog, 512);
    assert_eq!(config.http.max_queue_delay, Duration::from_millis(40));
    assert_eq!(config.http.max_connection_age, Duration::from_secs(600));
    let bad_env = |name: &str| (name == "SCREENLIMIT_IDLE_TIMEOUT").then(|| "soon".to_owned());
    let err = Config::load(None, bad_env).unwrap_err();
    assert!(
        matches!(
            err,
            ConfigError::Invalid {
                field: "http.idle_timeout",
                ..
            }
        ),
        "{err}"
    );
    let cases: &[(&str, &str)] = &[
        (
            "http: { header_read_timeout: 0s }\n",
            "http.header_read_timeout",
        ),
        (
            "http: { body_read_timeout: 2h }\n",
            "http.body_read_timeout",
        ),
        ("http: { max_header_bytes: 100 }\n", "http.max_header_bytes"),
        ("http: { max_connections: 0 }\n", "http.max_connections"),
        ("http: { max_in_flight: 0 }\n", "http.max_in_flight"),
        ("http: { write_timeout: 1ms }\n", "http.write_timeout"),
        ("http: { listen_backlog: 1 }\n", "http.listen_backlog"),
        ("http: { max_queue_delay: 1h }\n", "http.max_queue_delay"),
        (
            "http: { max_connection_age: 100ms }\n",
            "http.max_connection_age",
        ),
        (
            "http: { max_connection_age: 2d }\n",
            "http.max_connection_age",
        ),
    ];
    for (yaml, field) in cases {
        let err = Config::from_yaml(yaml).unwrap().validate().unwrap_err();
        assert!(
            matches!(&err, ConfigError::Invalid { field: f, .. } if f == field),
            "{yaml}: {err}"
        );
    }
}

#[test]
fn plans_take_a_short_and_a_detailed_form() {
    let yaml = "plans:\n  basic: 1\n  standard: { max_streams: 2, device_caps: { mobile: 1 } }\n";
    let config = Config::from_yaml(yaml).unwrap();
    config.validate().unwrap();
    let standard = config.plans["standard"].to_plan("standard");
    assert_eq!(standard.limit, 2);
    assert_eq!(standard.device_caps.cap(DeviceType::Mobile), Some(1));
    assert_eq!(standard.device_caps.cap(DeviceType::Tv), None);
    let too_high = "plans:\n  basic: { max_streams: 1, device_caps: { tv: 2 } }\n";
    let err = Config::from_yaml(too_high).unwrap().validate().unwrap_err();
    assert!(err.to_string().contains("caps Tv devices at 2"), "{err}");
    let (field, message) =
        Config::from_yaml("plans:\n  basic: { max_streams: 1, caps: {} }\n").unwrap_err();
    assert_eq!(field, "plans.basic.caps");
    assert!(message.contains("unknown field `caps`"), "{message}");
}

#[test]
fn a_postgres_plan_source_needs_its_connection_string() {
    let yaml = "plan_source: { kind: postgres }\n";
    let err = Config::from_yaml(yaml).unwrap().validate().unwrap_err();
    assert!(
        matches!(
            err,
            ConfigError::Invalid {
                field: "plan_source.postgres_url_file",
                ..
            }
        ),
        "{err}"
    );
    let bad_channel =
        "plan_source: { kind: postgres, postgres_url: x, notify_channel: \"drop table\" }\n";
    let err = Config::from_yaml(bad_channel)
        .unwrap()
        .validate()
        .unwrap_err();
    assert!(
        matches!(
            err,
            ConfigError::Invalid {
                field: "plan_source.notify_channel",
                ..
            }
        ),
        "{err}"
    );
}

#[test]
fn drain_settings_are_bounded_with_the_field_named() {
    let config = Config::from_yaml("http: { drain_period: 0s, shutdown_timeout: 1s }").unwrap();
    config.validate().unwrap();
    for (yaml, field) in [
        ("http: { drain_period: 6m }", "http.drain_period"),
        ("http: { shutdown_timeout: 10ms }", "http.shutdown_timeout"),
    ] {
        let err = Config::from_yaml(yaml).unwrap().validate().unwrap_err();
        assert!(
            matches!(err, ConfigError::Invalid { field: f, .. } if f == field),
            "{yaml}: {err}"
        );
    }
    let env = |name: &str| (name == "SCREENLIMIT_DRAIN_PERIOD").then(|| "750ms".to_owned());
    let config = Config::load(None, env).unwrap();
    assert_eq!(config.http.drain_period, Duration::from_millis(750));
}

#[test]
fn environment_overrides_the_file() {
    let env = |name: &str| match name {
        "SCREENLIMIT_LISTEN" => Some("0.0.0.0:8000".to_owned()),
        "SCREENLIMIT_STORE_BACKEND" => Some("redis".to_owned()),
        "SCREENLIMIT_REDIS_SHARDS" => Some("redis://a:1, redis://b:2".to_owned()),
        "SCREENLIMIT_FAILURE_POLICY" => Some("closed".to_owned()),
        "SCREENLIMIT_STREAM_ID_SECRET" => Some("s".repeat(32)),
        _ => None,
    };
    let config = Config::load(None, env).unwrap();
    assert_eq!(config.listen.port(), 8000);
    assert_eq!(
        config.store.redis_shards,
        vec!["redis://a:1", "redis://b:2"]
    );
    assert_eq!(config.failure_policy, FailurePolicy::Closed);
}

#[test]
fn a_cluster_is_configured_alone_with_node_urls_and_the_field_named() {
    let secret = "stream_id_secret: s\n";
    let yaml = format!(
        "store: {{ backend: redis, cluster: {{ nodes: [\"redis://c0:6379\", \"redis://c1:6379\"] }} }}\n{secret}"
    );
    let config = Config::from_yaml(&yaml).unwrap();
    config.validate().unwrap();
    let cluster = config.store.cluster.as_ref().unwrap();
    assert_eq!(cluster.nodes.len(), 2);
    assert_eq!(cluster.refresh_interval, Duration::from_secs(5));
    let cases: &[(&str, &str)] = &[
        (
            "store: { cluster: { nodes: [\"redis://c0:1\"] } }\n",
            "store.cluster",
        ),
        (
            "store: { backend: redis, redis_shards: [\"redis://a:1\"], cluster: { nodes: [\"redis://c0:1\"] } }\n",
            "store.cluster",
        ),
        (
            "store: { backend: redis, sentinel: { addresses: [\"redis://s:1\"], masters: [m] }, cluster: { nodes: [\"redis://c0:1\"] } }\n",
            "store.cluster",
        ),
        (
            "store: { backend: redis, cluster: { nodes: [] } }\n",
            "store.cluster.nodes",
        ),
        (
            "store: { backend: redis, cluster: { nodes: [\"c0:6379\"] } }\n",
            "store.cluster.nodes",
        ),
        (
            "store: { backend: redis, cluster: { nodes: [\"redis://:secret@c0:6379\"] } }\n",
            "store.cluster.nodes",
        ),
        (
            "store: { backend: redis, cluster: { nodes: [\"redis://c0:1\"], refresh_interval: 10ms } }\n",
            "store.cluster.refresh_interval",
        ),
    ];
    for (yaml, field) in cases {
        let yaml = format!("{yaml}{secret}");
        let err = Config::from_yaml(&yaml).unwrap().validate().unwrap_err();
        assert!(
            matches!(&err, ConfigError::Invalid { field: f, .. } if f == field),
            "{yaml}: {err}"
        );
        assert!(!err.to_string().contains("secret@"), "{err}");
    }
    let (field, _) =
        Config::from_yaml("store: { cluster: { nodes: [], seeds: [] } }\n").unwrap_err();
    assert_eq!(field, "store.cluster.seeds", "an unknown field is refused");
}

#[test]
fn the_environment_names_the_cluster_nodes() {
    let env = |name: &str| match name {
        "SCREENLIMIT_STORE_BACKEND" => Some("redis".to_owned()),
        "SCREENLIMIT_REDIS_CLUSTER_NODES" => Some("redis://c0:1, redis://c1:2".to_owned()),
        "SCREENLIMIT_STREAM_ID_SECRET" => Some("s".repeat(32)),
        _ => None,
    };
    let config = Config::load(None, env).unwrap();
    let cluster = config.store.cluster.unwrap();
    assert_eq!(cluster.nodes, ["redis://c0:1", "redis://c1:2"]);
    assert_eq!(cluster.refresh_interval, Duration::from_secs(5));
}

#[test]
fn h2c_is_on_by_default_with_a_bounded_number_of_streams() {
    let config = Config::default();
    assert!(config.http.h2c);
    assert_eq!(config.http.max_concurrent_streams, 256);
    let config = Config::from_yaml("http: { h2c: false, max_concurrent_streams: 100 }\n").unwrap();
    config.validate().unwrap();
    assert!(!config.http.h2c);
    assert_eq!(config.http.max_concurrent_streams, 100);
    for streams in [0, 65_536] {
        let yaml = format!("http: {{ max_concurrent_streams: {streams} }}\n");
        let err = Config::from_yaml(&yaml).unwrap().validate().unwrap_err();
        assert!(
            matches!(
                &err,
                ConfigError::Invalid {
                    field: "http.max_concurrent_streams",
                    ..
                }
            ),
            "{yaml}: {err}"
        );
    }
    let (field, message) = Config::from_yaml("http: { h2c: maybe }\n").unwrap_err();
    assert_eq!(field, "http.h2c", "{message}");
    let (field, _) = Config::from_yaml("http: { max_concurrent_streams: -1 }\n").unwrap_err();
    assert_eq!(field, "http.max_concurrent_streams");
}

#[test]
fn history_keeps_fifty_entries_for_seven_days_unless_told_otherwise() {
    let defaults = Config::load(None, no_env).unwrap().history;
    assert_eq!(
        (defaults.max_events, defaults.retention),
        (50, Duration::from_secs(7 * 24 * 3600))
    );
    let config = Config::from_yaml("history: { max_events: 20, retention: 36h }\n").unwrap();
    config.validate().unwrap();
    let limits = config.history.limits();
    assert_eq!(
        (limits.max_events, limits.retention_ms),
        (20, 36 * 3600 * 1000)
    );
    let env = |name: &str| match name {
        "SCREENLIMIT_HISTORY_MAX_EVENTS" => Some("7".into()),
        "SCREENLIMIT_HISTORY_RETENTION" => Some("2h".into()),
        _ => None,
    };
    let from_env = Config::load(None, env).unwrap().history;
    assert_eq!(
        (from_env.max_events, from_env.retention),
        (7, Duration::from_secs(7200))
    );
    for (yaml, field, words) in [
        (
            "history: { max_events: 0 }\n",
            "history.max_events",
            "1 to 1000",
        ),
        (
            "history: { max_events: 1001 }\n",
            "history.max_events",
            "1 to 1000",
        ),
        (
            "history: { retention: 30s }\n",
            "history.retention",
            "1m to 90d",
        ),
        (
            "history: { retention: 91d }\n",
            "history.retention",
            "1m to 90d",
        ),
    ] {
        refused_with(yaml, field, words);
    }
    let (field, _) = Config::from_yaml("history: { max_entries: 5 }\n").unwrap_err();
    assert_eq!(field, "history.max_entries");
    let bad = |name: &str| (name == "SCREENLIMIT_HISTORY_MAX_EVENTS").then(|| "many".into());
    let err = Config::load(None, bad).unwrap_err();
    assert!(
        matches!(
            err,
            ConfigError::Invalid {
                field: "history.max_events",
                ..
            }
        ),
        "{err}"
    );
}

#[test]
fn enforcement_enforces_every_account_unless_told_otherwise() {
    use crate::enforcement::Enforcement;
    use crate::rules::Rules;

    let config = Config::load(None, no_env).unwrap();
    let rules = Rules::from_config(&config, 1);
    assert_eq!(rules.enforcement.default, Enforcement::ENFORCE);
    assert!(rules.enforcement.plans.is_empty());

    let yaml = "enforcement: { mode: enforce, enforce_percent: 30 }\n\
                plans:\n  basic: 1\n  standard: { max_streams: 2, enforcement: { mode: shadow } }\n";
    let config = Config::from_yaml(yaml).unwrap();
    config.validate().unwrap();
    let rules = Rules::from_config(&config, 1);
    assert_eq!(rules.enforcement.default, Enforcement::percent(30));
    assert_eq!(
        rules.enforcement.of_plan(Some("standard")),
        Enforcement::SHADOW
    );
    assert_eq!(
        rules.enforcement.of_plan(Some("basic")),
        Enforcement::percent(30)
    );

    for (yaml, field, words) in [
        (
            "enforcement: { enforce_percent: 101 }\n",
            "enforcement",
            "use 0 to 100",
        ),
        (
            "enforcement: { mode: shadow, enforce_percent: 50 }\n",
            "enforcement",
            "applies to mode: enforce",
        ),
        (
            "plans: { basic: { max_streams: 1, enforcement: { enforce_percent: 200 } } }\n",
            "plans",
            "plan \"basic\": enforce_percent is 200",
        ),
    ] {
        refused_with(yaml, field, words);
    }
    let (field, message) = Config::from_yaml("enforcement: { mode: lenient }\n").unwrap_err();
    assert_eq!(field, "enforcement.mode", "{message}");
    let (field, _) = Config::from_yaml("enforcement: { percent: 5 }\n").unwrap_err();
    assert_eq!(field, "enforcement.percent");
}

/// `yaml` parses but is refused, naming `field`, with `words` in the message.
fn refused_with(yaml: &str, field: &str, words: &str) {
    let err = Config::from_yaml(yaml).unwrap().validate().unwrap_err();
    match &err {
        ConfigError::Invalid { field: f, message } => {
            assert_eq!(*f, field, "{yaml}");
            assert!(message.contains(words), "{yaml}: {message}");
        }
        other => panic!("{yaml}: {other}"),
    }
}
