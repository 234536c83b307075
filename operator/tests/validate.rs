//! The operator's own (pure) validation mirrors the schema rules.

mod common;

use common::{FIXTURES, fixture};
use screenlimit_operator::crd::{Plan, RedisMode};
use screenlimit_operator::validate::validate;

fn fields(result: Result<(), Vec<screenlimit_operator::validate::FieldError>>) -> Vec<String> {
    result
        .err()
        .unwrap_or_default()
        .into_iter()
        .map(|e| e.field)
        .collect()
}

#[test]
fn fixtures_are_valid() {
    for name in FIXTURES {
        assert_eq!(
            fields(validate(&fixture(name))),
            Vec::<String>::new(),
            "{name}"
        );
    }
}

#[test]
fn every_problem_is_reported_with_its_field() {
    let mut sl = fixture("managed.yaml");
    sl.spec.plans.push(Plan::new("basic", 0));
    sl.spec.plans.push(Plan::new("bad name", 101));
    sl.spec.default_plan = "gold".into();
    sl.spec.lease.ttl_seconds = 10;
    sl.spec.redis.shards = 0;
    sl.spec.admin_ui.enabled = true;
    assert_eq!(
        fields(validate(&sl)),
        [
            "spec.plans[3].name",
            "spec.plans[3].maxStreams",
            "spec.plans[4].name",
            "spec.plans[4].maxStreams",
            "spec.defaultPlan",
            "spec.lease.ttlSeconds",
            "spec.redis.shards",
            "spec.adminUI.authSecretName",
        ]
    );
}

#[test]
fn external_mode_needs_matching_urls() {
    let mut sl = fixture("external.yaml");
    sl.spec.redis.shards = 3;
    assert_eq!(fields(validate(&sl)), ["spec.redis.external.urls"]);
    sl.spec.redis.external = None;
    assert_eq!(fields(validate(&sl)), ["spec.redis.external"]);
    sl.spec.redis.mode = RedisMode::Managed;
    assert!(validate(&sl).is_ok());
}

#[test]
fn external_mode_takes_a_cluster_alone_never_mixed_with_shard_urls() {
    let mut sl = fixture("external.yaml");
    let external = sl.spec.redis.external.as_mut().unwrap();
    external.cluster_nodes = Some(vec!["redis://c0:6379".into()]);
    assert_eq!(fields(validate(&sl)), ["spec.redis.external"]);
    let external = sl.spec.redis.external.as_mut().unwrap();
    external.urls = None;
    assert!(
        validate(&sl).is_ok(),
        "a cluster alone: redis.shards is not compared"
    );
    sl.spec.redis.external.as_mut().unwrap().cluster_nodes = Some(vec!["c0:6379".into()]);
    assert_eq!(
        fields(validate(&sl)),
        ["spec.redis.external.clusterNodes[0]"]
    );
}

#[test]
fn messages_say_what_to_do() {
    let mut sl = fixture("managed.yaml");
    sl.spec.lease.ttl_seconds = 45;
    let errors = validate(&sl).unwrap_err();
    assert_eq!(
        errors[0].to_string(),
        "spec.lease.ttlSeconds: 45 must be at least twice heartbeatIntervalSeconds (30), so one lost heartbeat does not end a stream"
    );
}

#[test]
fn plan_source_device_caps_and_sentinel_problems_name_their_fields() {
    use screenlimit_operator::crd::PlanSourceKind;
    let mut sl = fixture("ha.yaml");
    sl.spec.plans[1].device_caps.as_mut().unwrap().mobile = Some(3);
    sl.spec.plans[2].device_caps.as_mut().unwrap().tv = Some(0);
    sl.spec.plan_source.fallback_plan = Some("gold".into());
    let pg = sl.spec.plan_source.postgres.as_mut().unwrap();
    pg.query = "SELECT plan FROM subscriptions".into();
    pg.notify_channel = "Plan-Changed".into();
    sl.spec.plan_source.cache.max_stale_seconds = 60;
    sl.spec.redis.replicas_per_shard = 5;
    sl.spec.redis.sentinel.quorum = 4;
    assert_eq!(
        fields(validate(&sl)),
        [
            "spec.plans[1].deviceCaps.mobile",
            "spec.plans[2].deviceCaps.tv",
            "spec.planSource.fallbackPlan",
            "spec.planSource.postgres.query",
            "spec.planSource.postgres.notifyChannel",
            "spec.planSource.cache.maxStaleSeconds",
            "spec.redis.replicasPerShard",
            "spec.redis.sentinel.quorum",
        ]
    );
    let mut sl = fixture("managed.yaml");
    sl.spec.plan_source.kind = PlanSourceKind::Postgres;
    assert_eq!(
        fields(validate(&sl)),
        ["spec.planSource.postgres.secretRef"]
    );
}

#[test]
fn a_batch_window_longer_than_half_the_store_deadline_is_refused() {
    let mut sl = fixture("managed.yaml");
    sl.spec.failure_policy.store_timeout_millis = 4;
    sl.spec.limiter.batch_window_micros = 2_000;
    assert_eq!(fields(validate(&sl)), Vec::<String>::new(), "exactly half");
    sl.spec.limiter.batch_window_micros = 2_001;
    assert_eq!(fields(validate(&sl)), ["spec.limiter.batchWindowMicros"]);
    sl.spec.limiter.batch_window_micros = -1;
    assert_eq!(fields(validate(&sl)), ["spec.limiter.batchWindowMicros"]);
}

#[test]
fn a_renewal_window_that_does_not_fit_the_leases_spare_time_is_refused() {
    let mut sl = fixture("managed.yaml");
    assert_eq!(sl.spec.limiter.renewal_window_millis, 20, "the default");
    // One second to spare after the heartbeat: the window at most a quarter of it, 250 ms.
    sl.spec.lease.heartbeat_interval_seconds = 1;
    sl.spec.lease.ttl_seconds = 2;
    sl.spec.limiter.renewal_window_millis = 250;
    assert_eq!(
        fields(validate(&sl)),
        Vec::<String>::new(),
        "exactly a quarter"
    );
    sl.spec.limiter.renewal_window_millis = 251;
    let errors = validate(&sl).unwrap_err();
    assert_eq!(
        errors[..]
            .iter()
            .map(ToString::to_string)
            .collect::<Vec<_>>(),
        [
            "spec.limiter.renewalWindowMillis: 251 ms must be at most a quarter of \
             lease.ttlSeconds - lease.heartbeatIntervalSeconds (1000 ms): a renewal that waits \
             longer risks its lease"
        ]
    );
    // The store deadline is not the window's: a long one with the shortest lease still admits
    // the default window.
    sl.spec.limiter.renewal_window_millis = 20;
    sl.spec.failure_policy.store_timeout_millis = 2_000;
    assert_eq!(fields(validate(&sl)), Vec::<String>::new());
    // Out of range, whatever the lease.
    let mut sl = fixture("managed.yaml");
    for window in [-1, 1_001] {
        sl.spec.limiter.renewal_window_millis = window;
        assert_eq!(fields(validate(&sl)), ["spec.limiter.renewalWindowMillis"]);
    }
    sl.spec.limiter.renewal_window_millis = 1_000;
    assert_eq!(fields(validate(&sl)), Vec::<String>::new());
    // A lease timing already refused is named once, not again through the window.
    sl.spec.lease.ttl_seconds = 10;
    assert_eq!(fields(validate(&sl)), ["spec.lease.ttlSeconds"]);
}

#[test]
fn history_bounds_outside_the_limiters_range_are_refused() {
    let mut sl = fixture("managed.yaml");
    assert_eq!(sl.spec.limiter.history.max_events, 50, "the default");
    assert_eq!(sl.spec.limiter.history.retention_hours, 168, "the default");
    for events in [0, -1, 1_001] {
        sl.spec.limiter.history.max_events = events;
        assert_eq!(fields(validate(&sl)), ["spec.limiter.history.maxEvents"]);
    }
    sl.spec.limiter.history.max_events = 1_000;
    for hours in [0, 2_161] {
        sl.spec.limiter.history.retention_hours = hours;
        let errors = validate(&sl).unwrap_err();
        assert_eq!(
            errors.iter().map(ToString::to_string).collect::<Vec<_>>(),
            ["spec.limiter.history.retentionHours: must be 1 to 2160"]
        );
    }
    sl.spec.limiter.history.retention_hours = 2_160;
    assert_eq!(fields(validate(&sl)), Vec::<String>::new());
}

#[test]
fn an_enforce_percent_outside_0_to_100_or_with_shadow_is_refused() {
    use screenlimit_operator::crd::{EnforcementMode, EnforcementSpec};
    let mut sl = fixture("managed.yaml");
    assert!(
        sl.spec.enforcement.is_default(),
        "the default: every account enforced"
    );
    for percent in [-1, 101] {
        sl.spec.enforcement.enforce_percent = Some(percent);
        assert_eq!(fields(validate(&sl)), ["spec.enforcement.enforcePercent"]);
    }
    for percent in [0, 30, 100] {
        sl.spec.enforcement.enforce_percent = Some(percent);
        assert_eq!(fields(validate(&sl)), Vec::<String>::new());
    }
    sl.spec.enforcement.mode = EnforcementMode::Shadow;
    let errors = validate(&sl).unwrap_err();
    assert_eq!(
        errors.iter().map(ToString::to_string).collect::<Vec<_>>(),
        [
            "spec.enforcement.enforcePercent: applies to mode: enforce (mode: shadow enforces no account); remove it, or set mode: enforce"
        ]
    );
    sl.spec.enforcement.enforce_percent = None;
    assert_eq!(fields(validate(&sl)), Vec::<String>::new());
    // A plan's own block, by the same rules.
    sl.spec.plans[1].enforcement = Some(EnforcementSpec {
        mode: EnforcementMode::Shadow,
        enforce_percent: Some(10),
    });
    sl.spec.plans[2].enforcement = Some(EnforcementSpec {
        mode: EnforcementMode::Enforce,
        enforce_percent: Some(101),
    });
    assert_eq!(
        fields(validate(&sl)),
        [
            "spec.plans[1].enforcement.enforcePercent",
            "spec.plans[2].enforcement.enforcePercent"
        ]
    );
    sl.spec.plans[1]
        .enforcement
        .as_mut()
        .unwrap()
        .enforce_percent = None;
    sl.spec.plans[2]
        .enforcement
        .as_mut()
        .unwrap()
        .enforce_percent = Some(100);
    assert_eq!(fields(validate(&sl)), Vec::<String>::new());
}

#[test]
fn network_peers_need_a_selector() {
    let mut sl = fixture("secure.yaml");
    sl.spec.network_policies.limiter_clients[1].namespace_labels = None;
    assert_eq!(
        fields(validate(&sl)),
        ["spec.networkPolicies.limiterClients[1]"]
    );
}

#[test]
fn limiter_http_bounds_and_autoscaling_are_checked_with_the_field_named() {
    let mut sl = fixture("managed.yaml");
    sl.spec.limiter.http.max_in_flight = 0;
    assert_eq!(fields(validate(&sl)), ["spec.limiter.http.maxInFlight"]);
    sl.spec.limiter.http.max_in_flight = 10;
    sl.spec.limiter.http.max_queue_delay_millis = 20_000;
    assert_eq!(
        fields(validate(&sl)),
        ["spec.limiter.http.maxQueueDelayMillis"]
    );
    let mut sl = fixture("managed.yaml");
    sl.spec.limiter.http.header_read_timeout_millis = 5;
    sl.spec.limiter.http.max_header_bytes = 100;
    assert_eq!(
        fields(validate(&sl)),
        [
            "spec.limiter.http.headerReadTimeoutMillis",
            "spec.limiter.http.maxHeaderBytes"
        ]
    );
    let mut sl = fixture("managed.yaml");
    sl.spec.limiter.autoscaling = Some(screenlimit_operator::crd::AutoscalingSpec {
        enabled: true,
        min_replicas: 5,
        max_replicas: 3,
        target_cpu_utilization_percent: 70,
    });
    sl.spec.limiter.resources = None;
    assert_eq!(
        fields(validate(&sl)),
        [
            "spec.limiter.autoscaling.minReplicas",
            "spec.limiter.resources.requests.cpu"
        ]
    );
}

#[test]
fn trusted_proxies_must_be_addresses_or_networks() {
    let mut sl = fixture("admin-ui.yaml");
    assert!(validate(&sl).is_ok(), "{:?}", validate(&sl));
    sl.spec.admin_ui.trusted_proxies = ["10.0.0.1", "10.0.0.0/33", "ingress-nginx", "::1/128"]
        .map(String::from)
        .to_vec();
    assert_eq!(
        fields(validate(&sl)),
        [
            "spec.adminUI.trustedProxies[1]",
            "spec.adminUI.trustedProxies[2]"
        ]
    );
}

#[test]
fn admin_ui_oidc_is_checked_with_the_field_named() {
    let mut sl = fixture("admin-ui-oidc.yaml");
    assert!(validate(&sl).is_ok(), "{:?}", validate(&sl));
    sl.spec.admin_ui.external_url = None;
    let oidc = sl.spec.admin_ui.oidc.as_mut().unwrap();
    oidc.issuer_url = "http://keycloak.example.com".into();
    oidc.client_id = " ".into();
    oidc.support_groups.clear();
    oidc.viewer_groups = vec!["a,b".into()];
    assert_eq!(
        fields(validate(&sl)),
        [
            "spec.adminUI.externalUrl",
            "spec.adminUI.oidc.issuerUrl",
            "spec.adminUI.oidc.clientId",
            "spec.adminUI.oidc.viewerGroups[0]"
        ]
    );
    sl.spec
        .admin_ui
        .oidc
        .as_mut()
        .unwrap()
        .viewer_groups
        .clear();
    assert!(
        fields(validate(&sl)).contains(&"spec.adminUI.oidc.supportGroups".to_owned()),
        "no group at all"
    );
}

#[test]
fn monitoring_labels_interval_and_thresholds_are_checked_with_the_field_named() {
    let mut sl = fixture("managed.yaml");
    let m = &mut sl.spec.monitoring;
    m.service_monitor.enabled = true;
    m.service_monitor.interval = "30s".into();
    m.service_monitor.labels = [
        ("release".to_owned(), "kube-prometheus-stack".to_owned()),
        ("example.com/team".to_owned(), String::new()),
    ]
    .into();
    m.prometheus_rule.enabled = true;
    assert_eq!(fields(validate(&sl)), Vec::<String>::new());

    let m = &mut sl.spec.monitoring;
    m.service_monitor.interval = "often".into();
    m.service_monitor
        .labels
        .insert("app.kubernetes.io/instance".into(), "other".into());
    m.prometheus_rule.labels = [
        ("bad key!".to_owned(), "x".to_owned()),
        ("ok".to_owned(), "-starts-with-a-dash".to_owned()),
    ]
    .into();
    m.prometheus_rule.thresholds.degraded_percent = 0;
    m.prometheus_rule.thresholds.denial_factor = 1;
    let result = validate(&sl);
    let errors = result.clone().unwrap_err();
    assert_eq!(
        fields(result),
        [
            "spec.monitoring.serviceMonitor.interval",
            "spec.monitoring.prometheusRule.thresholds.degradedPercent",
            "spec.monitoring.prometheusRule.thresholds.denialFactor",
            "spec.monitoring.serviceMonitor.labels[\"app.kubernetes.io/instance\"]",
            "spec.monitoring.prometheusRule.labels[\"bad key!\"]",
            "spec.monitoring.prometheusRule.labels[\"ok\"]",
        ]
    );
    assert!(errors[0].message.contains("such as 30s"), "{}", errors[0]);
    assert!(
        errors[3].message.contains("the operator's own"),
        "{}",
        errors[3]
    );
}

/// `regions` by the limiter's own rules, each problem under its field; the stream id Secret named
/// by the user (a generated one would differ between the regions); a URL the pattern lets
/// through but the limiter's URL parser refuses is caught by the limiter's own check.
#[test]
fn regions_are_checked_with_the_field_named() {
    let mut sl = fixture("regions.yaml");
    assert_eq!(fields(validate(&sl)), Vec::<String>::new());
    sl.spec.stream_id_secret_name = None;
    let errors = validate(&sl).unwrap_err();
    assert_eq!(errors.len(), 1, "{errors:?}");
    assert_eq!(errors[0].field, "spec.streamIdSecretName");
    assert!(errors[0].message.contains("same key"), "{errors:?}");

    let mut sl = fixture("regions.yaml");
    let regions = sl.spec.regions.as_mut().unwrap();
    regions.name = "bad name".into();
    regions.weight = 1001;
    regions.timeout_millis = 9;
    regions.heartbeat_window_millis = 1001;
    regions.peers[0].name = "ap".into(); // ap twice
    regions.peers[0].url = "ftp://limiter.us.example.com".into();
    regions.peers[1].weight = -1;
    assert_eq!(
        fields(validate(&sl)),
        [
            "spec.regions.name",
            "spec.regions.weight",
            "spec.regions.peers[0].url",
            "spec.regions.peers[1].name",
            "spec.regions.peers[1].weight",
            "spec.regions.timeoutMillis",
            "spec.regions.heartbeatWindowMillis",
        ]
    );

    // A peer named as this region, and every weight 0.
    let mut sl = fixture("regions.yaml");
    let regions = sl.spec.regions.as_mut().unwrap();
    regions.peers[1].name = "eu".into();
    regions.weight = 0;
    regions.peers.iter_mut().for_each(|p| p.weight = 0);
    let errors = validate(&sl).unwrap_err();
    let said: Vec<String> = errors.iter().map(ToString::to_string).collect();
    assert_eq!(
        said,
        [
            "spec.regions.peers[1].name: \"eu\" is this region's own name (regions.name)",
            "spec.regions.weight: every region weighs 0, so no account would have a home; give one region a weight above 0",
        ]
    );

    // No peer, or more than 16.
    let mut sl = fixture("regions.yaml");
    let regions = sl.spec.regions.as_mut().unwrap();
    let peer = regions.peers[1].clone();
    regions.peers.clear();
    assert_eq!(fields(validate(&sl)), ["spec.regions.peers"]);
    let regions = sl.spec.regions.as_mut().unwrap();
    regions.peers = (0..17)
        .map(|i| {
            let mut p = peer.clone();
            p.name = format!("r{i}");
            p
        })
        .collect();
    assert_eq!(fields(validate(&sl)), ["spec.regions.peers"]);
    sl.spec.regions.as_mut().unwrap().peers.pop();
    assert_eq!(fields(validate(&sl)), Vec::<String>::new());

    // URLs: each refusal says why; what the pattern lets through and the limiter's parser
    // refuses is refused by the limiter's own check.
    for (url, says) in [
        (
            "limiter.us.example.com",
            "must start with http:// or https://",
        ),
        ("https://", "names no host"),
        ("https://:8080/x", "names no host"),
        ("https://ops:pw@limiter.us", "must not carry credentials"),
        (
            "https://limiter.us/?x=1",
            "must not have a query or fragment",
        ),
        (
            "https://limiter.us/#top",
            "must not have a query or fragment",
        ),
        ("https://limiter us", "without spaces"),
        ("https://lim<iter.us", "is not a URL"),
    ] {
        let mut sl = fixture("regions.yaml");
        sl.spec.regions.as_mut().unwrap().peers[0].url = url.into();
        let errors = validate(&sl).unwrap_err();
        assert_eq!(errors.len(), 1, "{url}: {errors:?}");
        assert!(errors[0].message.contains(says), "{url}: {errors:?}");
    }
    for url in [
        "http://limiter-eu.screenlimit.svc:8080",
        "https://limiter.us.example.com/screenlimit/",
        "https://[fd00::1]:8443",
        "http://10.0.0.7:8080",
    ] {
        let mut sl = fixture("regions.yaml");
        sl.spec.regions.as_mut().unwrap().peers[0].url = url.into();
        assert_eq!(fields(validate(&sl)), Vec::<String>::new(), "{url}");
    }
}

/// Evacuations and secondaries by the CRD's rules, each under its field: a secondary names
/// another region of the spec (this region's one of the peers; a peer's this region or another
/// peer), and one region of weight above 0 stays not evacuated (every weight 0 keeps its own
/// message).
#[test]
fn evacuations_and_secondaries_are_checked_with_the_field_named() {
    let said = |sl: &screenlimit_operator::crd::StreamLimiter| -> Vec<String> {
        match validate(sl) {
            Ok(()) => Vec::new(),
            Err(errors) => errors.iter().map(ToString::to_string).collect(),
        }
    };
    // eu evacuated to us, us to ap, ap to eu: admitted.
    let mut sl = fixture("regions.yaml");
    let regions = sl.spec.regions.as_mut().unwrap();
    regions.evacuated = true;
    regions.secondary = Some("us".into());
    regions.peers[0].evacuated = true;
    regions.peers[0].secondary = Some("ap".into());
    regions.peers[1].secondary = Some("eu".into());
    assert_eq!(said(&sl), Vec::<String>::new());

    // Every region of weight above 0 evacuated: ap's weight 0 does not count.
    let ok = sl.clone();
    let regions = sl.spec.regions.as_mut().unwrap();
    regions.peers[1].weight = 0;
    assert_eq!(
        said(&sl),
        [
            "spec.regions.evacuated: every region of weight above 0 is evacuated, so no account would have a home; keep one region of weight above 0 not evacuated"
        ]
    );
    let regions = sl.spec.regions.as_mut().unwrap();
    regions.weight = 0;
    regions.peers[0].weight = 0;
    assert_eq!(
        said(&sl),
        [
            "spec.regions.weight: every region weighs 0, so no account would have a home; give one region a weight above 0"
        ]
    );

    // Secondaries that name this region itself, the peer itself, or no region of the spec.
    let mut sl = ok;
    let regions = sl.spec.regions.as_mut().unwrap();
    regions.secondary = Some("eu".into());
    regions.peers[0].secondary = Some("us".into());
    regions.peers[1].secondary = Some("sa".into());
    assert_eq!(
        said(&sl),
        [
            "spec.regions.secondary: \"eu\" must name one of the peers (another region than this one)",
            "spec.regions.peers[0].secondary: \"us\" is the peer itself; name another region",
            "spec.regions.peers[1].secondary: \"sa\" must name a region of this spec: regions.name or a peer's name",
        ]
    );
    let regions = sl.spec.regions.as_mut().unwrap();
    regions.secondary = Some("sa".into());
    regions.peers[0].secondary = Some("ap".into());
    regions.peers[1].secondary = Some("us".into());
    assert_eq!(
        said(&sl),
        [
            "spec.regions.secondary: \"sa\" must name one of the peers (another region than this one)"
        ]
    );
}

/// The home sources by the CRD's rules, under `spec.regions.homeSources`, as the limiter's own
/// check says: `planSource` needs the postgres plan source, `playerToken` the player token's
/// `homeClaim`; each source at most once. `gatewayHeader` needs nothing.
#[test]
fn home_sources_are_checked_with_the_field_named() {
    use screenlimit_operator::crd::HomeSource::{GatewayHeader, PlanSource, PlayerToken};
    use screenlimit_operator::crd::PlanSourceKind;

    let said = |sl: &screenlimit_operator::crd::StreamLimiter| -> Vec<String> {
        match validate(sl) {
            Ok(()) => Vec::new(),
            Err(errors) => errors.iter().map(ToString::to_string).collect(),
        }
    };
    let mut sl = fixture("regions.yaml");
    sl.spec.regions.as_mut().unwrap().home_sources = vec![GatewayHeader];
    assert_eq!(said(&sl), Vec::<String>::new());

    // Each source at most once.
    sl.spec.regions.as_mut().unwrap().home_sources = vec![GatewayHeader, GatewayHeader];
    assert_eq!(
        said(&sl),
        ["spec.regions.homeSources: gatewayHeader is named twice; name each source at most once"]
    );

    // planSource: only from the subscription database.
    sl.spec.regions.as_mut().unwrap().home_sources = vec![PlanSource, GatewayHeader];
    assert_eq!(
        said(&sl),
        [
            "spec.regions.homeSources: names planSource, which needs planSource.kind: postgres (the subscription query's second column names the home)"
        ]
    );
    sl.spec.plan_source = serde_yaml_ng::from_str(
        "{kind: postgres, postgres: {secretRef: {name: plan-db, key: url}, query: 'SELECT plan, home FROM s WHERE id = $1'}}",
    )
    .unwrap();
    assert_eq!(sl.spec.plan_source.kind, PlanSourceKind::Postgres);
    assert_eq!(said(&sl), Vec::<String>::new());

    // playerToken: only with a home claim, player tokens or not.
    let needs_claim = [
        "spec.regions.homeSources: names playerToken, which needs limiter.playerAuth.homeClaim (the claim of the player token that names the home)",
    ];
    sl.spec.regions.as_mut().unwrap().home_sources = vec![PlayerToken, PlanSource];
    assert_eq!(said(&sl), needs_claim);
    sl.spec.limiter.auth_token_secret = Some(serde_yaml_ng::from_str("{name: s, key: t}").unwrap());
    sl.spec.limiter.player_auth = Some(
        serde_yaml_ng::from_str(
            "{issuer: https://auth.example.com, audience: sl, jwksSecret: {name: k, key: jwks}}",
        )
        .unwrap(),
    );
    assert_eq!(said(&sl), needs_claim);
    sl.spec.limiter.player_auth.as_mut().unwrap().home_claim = Some("home_region".into());
    assert_eq!(said(&sl), Vec::<String>::new());

    // Both missing: both said.
    sl.spec.plan_source = Default::default();
    sl.spec.limiter.player_auth.as_mut().unwrap().home_claim = None;
    assert_eq!(fields(validate(&sl)).len(), 2);
}
