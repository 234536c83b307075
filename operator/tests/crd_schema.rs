//! The CRD: fresh in `crds/`, structural, documented, its CEL rules compile, stay within the
//! cost budget, and accept/reject what they should (evaluated client-side with kube's CEL).

mod common;

use common::{FIXTURES, fixture};
use kube::CustomResourceExt;
use kube::core::cel::{ScopeContext, analyze_rule, compile_schema, validate_cel};
use screenlimit_operator::crd::{Plan, StreamLimiter};
use serde_json::Value;

fn schema() -> Value {
    let crd = StreamLimiter::crd();
    let schema = crd.spec.versions[0]
        .schema
        .as_ref()
        .unwrap()
        .open_api_v3_schema
        .as_ref()
        .unwrap();
    serde_json::to_value(schema).unwrap()
}

/// Calls `f(path, node)` for every schema node.
fn walk(path: &str, node: &Value, f: &mut dyn FnMut(&str, &Value)) {
    f(path, node);
    if let Some(props) = node.get("properties").and_then(Value::as_object) {
        for (k, v) in props {
            walk(&format!("{path}.{k}"), v, f);
        }
    }
    if let Some(items) = node.get("items") {
        walk(&format!("{path}[]"), items, f);
    }
    if let Some(extra) = node.get("additionalProperties").filter(|v| v.is_object()) {
        walk(&format!("{path}{{}}"), extra, f);
    }
}

/// Variables bound by CEL macros in `rule`, e.g. `p` in `self.all(p, p.x > 0)`.
fn macro_binders(rule: &str) -> Vec<String> {
    let mut binders = Vec::new();
    for m in ["all(", "exists(", "exists_one(", "filter(", "map("] {
        for (i, _) in rule.match_indices(m) {
            let rest = &rule[i + m.len()..];
            if let Some(end) = rest.find(',') {
                binders.push(rest[..end].trim().to_owned());
            }
        }
    }
    binders
}

fn rule_messages(sl: &StreamLimiter) -> Vec<String> {
    match validate_cel(sl) {
        Ok(()) => Vec::new(),
        Err(errors) => errors.iter().map(|e| e.message.clone()).collect(),
    }
}

#[test]
fn committed_crd_is_fresh() {
    let generated = serde_yaml_ng::to_string(&StreamLimiter::crd()).unwrap();
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../crds/streamlimiter.yaml");
    let committed = std::fs::read_to_string(path).unwrap();
    assert!(
        generated == committed,
        "crds/streamlimiter.yaml is stale: run `cargo run -p screenlimit-operator --bin crdgen > crds/streamlimiter.yaml`"
    );
}

#[test]
fn names_columns_and_scope() {
    let crd = StreamLimiter::crd();
    assert_eq!(
        crd.metadata.name.as_deref(),
        Some("streamlimiters.screenlimit.io")
    );
    assert_eq!(crd.spec.scope, "Namespaced");
    assert_eq!(
        crd.spec.names.short_names.as_deref(),
        Some(&["sl".to_owned()][..])
    );
    let version = &crd.spec.versions[0];
    assert_eq!(version.name, "v1alpha1");
    assert!(version.subresources.as_ref().unwrap().status.is_some());
    let columns: Vec<_> = version
        .additional_printer_columns
        .as_ref()
        .unwrap()
        .iter()
        .map(|c| c.name.as_str())
        .collect();
    assert_eq!(
        columns,
        [
            "Ready",
            "Reason",
            "Mode",
            "Shards",
            "Ready-Shards",
            "Limiters",
            "Ready-Limiters",
            "Age"
        ]
    );
}

#[test]
fn schema_is_structural_and_documented() {
    let allowed_formats = ["int32", "int64", "date-time", "byte", "double", "float"];
    let mut problems = Vec::new();
    walk("", &schema(), &mut |path, node| {
        let int_or_string = node.get("x-kubernetes-int-or-string") == Some(&Value::Bool(true));
        if node.get("type").is_none() && !int_or_string && !path.is_empty() {
            problems.push(format!("{path}: no type"));
        }
        if let Some(format) = node.get("format").and_then(Value::as_str)
            && !allowed_formats.contains(&format)
        {
            problems.push(format!("{path}: unknown format {format}"));
        }
        for key in ["anyOf", "oneOf", "allOf", "$ref", "not"] {
            if node.get(key).is_some() {
                problems.push(format!("{path}: uses {key}"));
            }
        }
        let documented = node
            .get("description")
            .and_then(Value::as_str)
            .is_some_and(|d| !d.is_empty());
        let exempt = path.is_empty()
            || [".apiVersion", ".kind", ".metadata"].contains(&path)
            || path.ends_with("{}")
            || path.ends_with("[]");
        if !documented && !exempt {
            problems.push(format!("{path}: no description"));
        }
    });
    assert!(problems.is_empty(), "{problems:#?}");
}

#[test]
fn bounds_are_in_the_schema() {
    let s = schema();
    let spec = &s["properties"]["spec"]["properties"];
    assert_eq!(
        spec["plans"]["items"]["properties"]["maxStreams"]["minimum"],
        1.0
    );
    assert_eq!(
        spec["plans"]["items"]["properties"]["maxStreams"]["maximum"],
        100.0
    );
    assert_eq!(spec["redis"]["properties"]["shards"]["minimum"], 1.0);
    assert_eq!(spec["plans"]["x-kubernetes-list-type"], "map");
    assert_eq!(
        spec["plans"]["x-kubernetes-list-map-keys"],
        serde_json::json!(["name"])
    );
    assert_eq!(spec["plans"]["maxItems"], 64);
    let redis = &spec["redis"]["properties"];
    assert_eq!(redis["replicasPerShard"]["minimum"], 0.0);
    assert_eq!(redis["replicasPerShard"]["maximum"], 4.0);
    assert_eq!(redis["replicasPerShard"]["default"], 0);
    let sentinel = &redis["sentinel"]["properties"];
    assert_eq!(sentinel["replicas"]["default"], 3);
    assert_eq!(sentinel["quorum"]["default"], 2);
    let caps = &spec["plans"]["items"]["properties"]["deviceCaps"]["properties"];
    let mut kinds: Vec<_> = caps.as_object().unwrap().keys().cloned().collect();
    kinds.sort();
    assert_eq!(kinds, ["console", "mobile", "other", "tablet", "tv", "web"]);
    assert_eq!(caps["mobile"]["minimum"], 1.0);
    let source = &spec["planSource"]["properties"];
    assert_eq!(
        source["kind"]["enum"],
        serde_json::json!(["request", "postgres"])
    );
    assert_eq!(
        source["unknownAccount"]["enum"],
        serde_json::json!(["defaultPlan", "deny"])
    );
    let postgres = &source["postgres"];
    assert_eq!(postgres["required"], serde_json::json!(["secretRef"]));
    assert_eq!(
        postgres["properties"]["query"]["default"],
        "SELECT plan FROM subscriptions WHERE account_id = $1"
    );
    assert_eq!(
        source["cache"]["properties"]["capacity"]["default"],
        2_000_000
    );
}

#[test]
fn every_cel_rule_compiles_and_fits_the_cost_budget() {
    let mut rules = 0;
    let mut problems = Vec::new();
    walk("", &schema(), &mut |path, node| {
        let Some(validations) = node
            .get("x-kubernetes-validations")
            .and_then(Value::as_array)
        else {
            return;
        };
        let compiled = compile_schema(node);
        for e in compiled.compilation_errors() {
            problems.push(format!("{path}: {e}"));
        }
        for v in validations {
            rules += 1;
            let rule = v["rule"].as_str().unwrap();
            let binders = macro_binders(rule);
            for w in analyze_rule(rule, &compiled, ScopeContext::CrdValidation) {
                // The scope check does not know macro-bound variables (`all(p, …)`).
                let bound = binders
                    .iter()
                    .any(|b| w.message.contains(&format!("variable '{b}'")));
                if !bound {
                    problems.push(format!("{path}: {rule}: {}", w.message));
                }
            }
            assert!(
                v["message"].as_str().is_some_and(|m| !m.is_empty()),
                "{path}: {rule} has no message"
            );
        }
    });
    assert!(problems.is_empty(), "{problems:#?}");
    assert!(
        rules >= 8,
        "expected the CEL rules to be present, found {rules}"
    );
}

#[test]
fn valid_fixtures_and_defaults_pass_the_cel_rules() {
    for name in FIXTURES {
        assert_eq!(
            rule_messages(&fixture(name)),
            Vec::<String>::new(),
            "{name}"
        );
    }
    // An empty spec takes every default, and the defaults pass validation.
    let empty: StreamLimiter = serde_yaml_ng::from_str(
        "apiVersion: screenlimit.io/v1alpha1\nkind: StreamLimiter\nmetadata: {name: d, namespace: n}\nspec: {}\n",
    )
    .unwrap();
    assert_eq!(rule_messages(&empty), Vec::<String>::new());
    screenlimit_operator::validate::validate(&StreamLimiter {
        metadata: kube::core::ObjectMeta {
            uid: Some("u".into()),
            ..empty.metadata.clone()
        },
        ..empty
    })
    .unwrap();
}

fn rejected(sl: &StreamLimiter, needle: &str) {
    let messages = rule_messages(sl);
    assert!(
        messages.iter().any(|m| m.contains(needle)),
        "expected {needle:?} in {messages:?}"
    );
}

#[test]
fn cel_rejects_duplicate_plans() {
    let mut sl = fixture("managed.yaml");
    sl.spec.plans.push(Plan::new("basic", 3));
    rejected(&sl, "plan names must be unique");
}

#[test]
fn cel_rejects_a_default_plan_outside_the_plans() {
    let mut sl = fixture("managed.yaml");
    sl.spec.default_plan = "gold".into();
    rejected(&sl, "defaultPlan must name one of the plans");
}

#[test]
fn cel_rejects_a_ttl_under_twice_the_heartbeat() {
    let mut sl = fixture("managed.yaml");
    sl.spec.lease.ttl_seconds = 59;
    rejected(&sl, "at least twice heartbeatIntervalSeconds");
    sl.spec.lease.ttl_seconds = 60;
    assert!(rule_messages(&sl).is_empty());
}

#[test]
fn cel_rejects_incomplete_external_redis_and_admin_ui() {
    let mut sl = fixture("external.yaml");
    sl.spec.redis.external = None;
    rejected(&sl, "redis.external is required");
    let mut sl = fixture("external.yaml");
    sl.spec.redis.shards = 3;
    rejected(&sl, "exactly redis.shards URLs");
    let mut sl = fixture("external.yaml");
    sl.spec
        .redis
        .external
        .as_mut()
        .unwrap()
        .urls
        .as_mut()
        .unwrap()[0] = "http://x".into();
    rejected(&sl, "redis:// or rediss://");
    let mut sl = fixture("admin-ui.yaml");
    sl.spec.admin_ui.auth_secret_name = None;
    rejected(&sl, "authSecretName is required");
}

#[test]
fn cel_refuses_a_cluster_mixed_with_shard_urls_and_takes_one_alone() {
    let with_cluster = |urls: bool, nodes: Vec<&str>| {
        let mut sl = fixture("external.yaml");
        let external = sl.spec.redis.external.as_mut().unwrap();
        if !urls {
            external.urls = None;
        }
        external.cluster_nodes = Some(nodes.into_iter().map(String::from).collect());
        sl
    };
    rejected(
        &with_cluster(true, vec!["redis://c0:6379"]),
        "mixes shard URLs (urls, urlsSecret) and a Redis Cluster",
    );
    let mut mixed_secret = with_cluster(false, vec!["redis://c0:6379"]);
    mixed_secret
        .spec
        .redis
        .external
        .as_mut()
        .unwrap()
        .urls_secret = Some(screenlimit_operator::crd::SecretKeyRef {
        name: "urls".into(),
        key: "urls".into(),
    });
    rejected(&mixed_secret, "mixes shard URLs");
    rejected(
        &with_cluster(false, vec!["http://c0:6379"]),
        "every cluster node URL must start with redis:// or rediss://",
    );
    let alone = with_cluster(false, vec!["redis://c0:6379", "rediss://c1:6380"]);
    assert!(
        rule_messages(&alone).is_empty(),
        "{:?}",
        rule_messages(&alone)
    );
    let mut nothing = fixture("external.yaml");
    nothing.spec.redis.external.as_mut().unwrap().urls = None;
    rejected(
        &nothing,
        "set exactly one of redis.external.urls, urlsSecret, clusterNodes",
    );
}

#[test]
fn cel_rejects_long_names() {
    let mut sl = fixture("managed.yaml");
    sl.metadata.name = Some("x".repeat(41));
    rejected(&sl, "at most 40 characters");
}

#[test]
fn cel_rejects_a_device_cap_above_max_streams() {
    let mut sl = fixture("ha.yaml");
    sl.spec.plans[1].device_caps.as_mut().unwrap().mobile = Some(2);
    assert!(
        rule_messages(&sl).is_empty(),
        "a cap equal to maxStreams is fine"
    );
    sl.spec.plans[1].device_caps.as_mut().unwrap().mobile = Some(3);
    rejected(
        &sl,
        "every deviceCaps entry must be at most the plan's maxStreams",
    );
    let mut sl = fixture("ha.yaml");
    sl.spec.plans[2].device_caps.as_mut().unwrap().other = Some(5);
    rejected(
        &sl,
        "every deviceCaps entry must be at most the plan's maxStreams",
    );
}

#[test]
fn cel_rejects_a_fallback_plan_outside_the_plans() {
    let mut sl = fixture("ha.yaml");
    sl.spec.plan_source.fallback_plan = Some("gold".into());
    rejected(&sl, "planSource.fallbackPlan must name one of the plans");
    sl.spec.plan_source.fallback_plan = None;
    assert!(rule_messages(&sl).is_empty());
}

#[test]
fn cel_rejects_a_postgres_plan_source_without_its_secret() {
    let mut sl = fixture("ha.yaml");
    sl.spec.plan_source.postgres = None;
    rejected(&sl, "planSource.postgres.secretRef is required");
    // Without the database, the request source needs nothing more.
    sl.spec.plan_source.kind = screenlimit_operator::crd::PlanSourceKind::Request;
    assert!(rule_messages(&sl).is_empty());
    // A postgres block without secretRef does not even parse (the schema requires it).
    let text = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/fixtures/ha.yaml"
    ))
    .unwrap()
    .replace("      secretRef: { name: plan-db, key: url }\n", "");
    assert!(serde_yaml_ng::from_str::<StreamLimiter>(&text).is_err());
}

#[test]
fn cel_rejects_a_query_without_the_account_and_a_cache_staler_than_its_ttl() {
    let mut sl = fixture("ha.yaml");
    sl.spec.plan_source.postgres.as_mut().unwrap().query = "SELECT plan FROM subscriptions".into();
    rejected(&sl, "must take the account id as $1");
    let mut sl = fixture("ha.yaml");
    sl.spec.plan_source.cache.max_stale_seconds = 119;
    rejected(&sl, "maxStaleSeconds must be at least ttlSeconds");
}

#[test]
fn cel_rejects_a_quorum_above_the_sentinels() {
    let mut sl = fixture("ha.yaml");
    sl.spec.redis.sentinel.quorum = 4;
    rejected(&sl, "quorum must be at most redis.sentinel.replicas");
    sl.spec.redis.sentinel.replicas = 5;
    assert!(rule_messages(&sl).is_empty());
}

#[test]
fn cel_rejects_a_network_peer_without_selectors() {
    let mut sl = fixture("secure.yaml");
    sl.spec
        .network_policies
        .admin_ui_clients
        .push(screenlimit_operator::crd::NetworkPeer {
            namespace_labels: None,
            pod_labels: None,
        });
    rejected(&sl, "give namespaceLabels, podLabels or both");
    sl.spec.network_policies.admin_ui_clients.pop();
    assert!(rule_messages(&sl).is_empty());
}

/// `examples/*.yaml` parse, pass the CEL rules and the operator's validation, and render a
/// limiter config.
#[test]
fn the_examples_are_valid() {
    for name in ["dev.yaml", "production.yaml"] {
        let path = format!("{}/../examples/{name}", env!("CARGO_MANIFEST_DIR"));
        let text = std::fs::read_to_string(&path).unwrap();
        let mut sl: StreamLimiter =
            serde_yaml_ng::from_str(&text).unwrap_or_else(|e| panic!("{name}: {e}"));
        assert_eq!(rule_messages(&sl), Vec::<String>::new(), "{name}");
        sl.metadata.uid = Some("u".into());
        screenlimit_operator::validate::validate(&sl).unwrap_or_else(|e| panic!("{name}: {e:?}"));
        screenlimit_operator::build::build(&sl).unwrap();
    }
    let production: StreamLimiter = serde_yaml_ng::from_str(
        &std::fs::read_to_string(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../examples/production.yaml"
        ))
        .unwrap(),
    )
    .unwrap();
    assert_eq!(production.spec.redis.replicas_per_shard, 1);
    assert_eq!(
        production.spec.plan_source.kind,
        screenlimit_operator::crd::PlanSourceKind::Postgres
    );
}

#[test]
fn cel_rejects_an_autoscaler_minimum_above_its_maximum() {
    let mut sl = fixture("managed.yaml");
    sl.spec.limiter.autoscaling = Some(screenlimit_operator::crd::AutoscalingSpec {
        enabled: true,
        min_replicas: 6,
        max_replicas: 5,
        target_cpu_utilization_percent: 70,
    });
    rejected(&sl, "minReplicas must be at most maxReplicas");
    sl.spec.limiter.autoscaling.as_mut().unwrap().max_replicas = 6;
    assert!(rule_messages(&sl).is_empty());
}

#[test]
fn limiter_http_bounds_are_in_the_schema() {
    let s = schema();
    let http =
        &s["properties"]["spec"]["properties"]["limiter"]["properties"]["http"]["properties"];
    assert_eq!(http["maxInFlight"]["minimum"], 1.0);
    assert_eq!(http["maxInFlight"]["default"], 4096);
    assert_eq!(http["maxHeaderBytes"]["minimum"], 1024.0);
    assert_eq!(http["idleTimeoutSeconds"]["default"], 75);
}

#[test]
fn cel_rejects_monitoring_labels_the_operator_selects_by() {
    let mut sl = fixture("managed.yaml");
    sl.spec
        .monitoring
        .prometheus_rule
        .labels
        .insert("release".into(), "kps".into());
    assert!(rule_messages(&sl).is_empty());
    sl.spec
        .monitoring
        .service_monitor
        .labels
        .insert("app.kubernetes.io/instance".into(), "other".into());
    rejected(&sl, "may not set app.kubernetes.io/ keys");
}

#[test]
fn cel_rejects_player_credentials_without_a_support_token_and_unclear_keys_or_origins() {
    use screenlimit_operator::crd::{CorsSpec, PlayerAuthSpec, SecretKeyRef};
    let key = |name: &str| SecretKeyRef {
        name: name.into(),
        key: "k".into(),
    };
    let players = |hs256: Option<SecretKeyRef>, jwks: Option<SecretKeyRef>| PlayerAuthSpec {
        hs256_secret: hs256,
        jwks_secret: jwks,
        issuer: "https://auth.example".into(),
        audience: "screenlimit".into(),
        account_claim: "sub".into(),
        device_claim: None,
    };
    let mut sl = fixture("managed.yaml");
    sl.spec.limiter.gateway_token_secret = Some(key("gateway"));
    rejected(&sl, "need authTokenSecret");
    sl.spec.limiter.auth_token_secret = Some(key("support"));
    assert!(rule_messages(&sl).is_empty(), "{:?}", rule_messages(&sl));
    sl.spec.limiter.player_auth = Some(players(Some(key("a")), Some(key("b"))));
    rejected(&sl, "hs256Secret or as jwksSecret");
    sl.spec.limiter.player_auth = Some(players(None, None));
    rejected(&sl, "hs256Secret or as jwksSecret");
    sl.spec.limiter.player_auth = Some(players(None, Some(key("jwks"))));
    assert!(rule_messages(&sl).is_empty(), "{:?}", rule_messages(&sl));
    sl.spec.limiter.cors = Some(CorsSpec {
        allowed_origins: vec!["*".into()],
    });
    rejected(&sl, "a wildcard is refused");
    sl.spec.limiter.cors = Some(CorsSpec {
        allowed_origins: vec!["https://watch.example.com".into()],
    });
    assert!(rule_messages(&sl).is_empty(), "{:?}", rule_messages(&sl));
}
