//! The CRD: fresh in `crds/`, structural, documented, its CEL rules compile and read only what
//! the schema declares (`crd_rules.rs` holds their bounds and the table of what each refuses).

mod common;

use common::{FIXTURES, fixture, walk};
use kube::CustomResourceExt;
use kube::core::cel::{ScopeContext, analyze_rule, compile_schema, validate_cel};
use screenlimit_operator::crd::StreamLimiter;
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
            "Regions",
            "Age"
        ]
    );
    // Only with `kubectl get -o wide`: most installs run one region.
    let regions = version
        .additional_printer_columns
        .as_ref()
        .unwrap()
        .iter()
        .find(|c| c.name == "Regions")
        .unwrap();
    assert_eq!(regions.priority, Some(1));
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
fn every_cel_rule_compiles_and_reads_only_declared_fields() {
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
fn limiter_http_bounds_are_in_the_schema() {
    let s = schema();
    let http =
        &s["properties"]["spec"]["properties"]["limiter"]["properties"]["http"]["properties"];
    assert_eq!(http["maxInFlight"]["minimum"], 1.0);
    assert_eq!(http["maxInFlight"]["default"], 4096);
    assert_eq!(http["maxHeaderBytes"]["minimum"], 1024.0);
    assert_eq!(http["idleTimeoutSeconds"]["default"], 75);
    let limiter = &s["properties"]["spec"]["properties"]["limiter"]["properties"];
    let renewal = &limiter["renewalWindowMillis"];
    assert_eq!(renewal["minimum"], 0.0);
    assert_eq!(renewal["maximum"], 1000.0);
    assert_eq!(renewal["default"], 20);
    let history = &limiter["history"];
    assert_eq!(history["default"]["maxEvents"], 50);
    assert_eq!(history["default"]["retentionHours"], 168);
    let history = &history["properties"];
    assert_eq!(history["maxEvents"]["minimum"], 1.0);
    assert_eq!(history["maxEvents"]["maximum"], 1000.0);
    assert_eq!(history["maxEvents"]["default"], 50);
    assert_eq!(history["retentionHours"]["minimum"], 1.0);
    assert_eq!(history["retentionHours"]["maximum"], 2160.0);
    assert_eq!(history["retentionHours"]["default"], 168);
}

/// `spec.enforcement` and each plan's own block: the mode an enum defaulting to `enforce`, the
/// share 0 to 100 with no default (absent: every account), the same shape in both places, each
/// with the rule that keeps the share to `mode: enforce`.
#[test]
fn enforcement_is_in_the_schema_at_the_top_and_per_plan() {
    let s = schema();
    let spec = &s["properties"]["spec"]["properties"];
    let top = &spec["enforcement"];
    assert_eq!(top["default"], serde_json::json!({"mode": "enforce"}));
    let plan = &spec["plans"]["items"]["properties"]["enforcement"];
    assert!(
        plan.get("default").is_none(),
        "a plan has no block unless given"
    );
    for block in [top, plan] {
        let fields = &block["properties"];
        assert_eq!(
            fields["mode"]["enum"],
            serde_json::json!(["enforce", "shadow"])
        );
        assert_eq!(fields["mode"]["default"], "enforce");
        let percent = &fields["enforcePercent"];
        assert_eq!(percent["type"], "integer");
        assert_eq!(percent["minimum"], 0.0);
        assert_eq!(percent["maximum"], 100.0);
        assert!(percent.get("default").is_none(), "{percent}");
        let rules = block["x-kubernetes-validations"].as_array().unwrap();
        assert_eq!(rules.len(), 1, "{rules:?}");
        assert_eq!(rules[0]["fieldPath"], ".enforcePercent");
        assert!(
            rules[0]["message"]
                .as_str()
                .unwrap()
                .starts_with("enforcePercent applies to mode: enforce"),
            "{rules:?}"
        );
    }
}

/// A postgres plan source without `secretRef` does not even parse: the schema requires it (the
/// rule table covers the rule that asks for the block itself).
#[test]
fn a_postgres_plan_source_needs_its_secret_ref() {
    let text = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/fixtures/ha.yaml"
    ))
    .unwrap()
    .replace("      secretRef: { name: plan-db, key: url }\n", "");
    assert!(serde_yaml_ng::from_str::<StreamLimiter>(&text).is_err());
}

/// `spec.regions`: the limiter's bounds and defaults, the home sources an enum list of at most
/// three, the peers a list keyed by name, the Secret references required; the URL pattern (run
/// as a regular expression, as the API server runs it) admits and refuses the URLs the
/// operator's own validation does.
#[test]
fn regions_are_in_the_schema() {
    let s = schema();
    let regions = &s["properties"]["spec"]["properties"]["regions"];
    assert!(regions.get("default").is_none(), "no regions unless given");
    assert_eq!(
        regions["required"],
        serde_json::json!(["name", "peers", "tokenSecret"])
    );
    let fields = &regions["properties"];
    for (field, min, max, default) in [
        ("weight", 0.0, 1000.0, 1),
        ("timeoutMillis", 10.0, 10000.0, 1000),
        ("heartbeatWindowMillis", 0.0, 1000.0, 200),
    ] {
        assert_eq!(fields[field]["minimum"], min, "{field}");
        assert_eq!(fields[field]["maximum"], max, "{field}");
        assert_eq!(fields[field]["default"], default, "{field}");
    }
    let sources = &fields["homeSources"];
    assert!(
        sources.get("default").is_none(),
        "the hash alone unless given"
    );
    assert_eq!(sources["maxItems"], 3);
    assert_eq!(
        sources["items"]["enum"],
        serde_json::json!(["planSource", "playerToken", "gatewayHeader"])
    );
    let peers = &fields["peers"];
    assert_eq!(peers["minItems"], 1);
    assert_eq!(peers["maxItems"], 16);
    assert_eq!(peers["x-kubernetes-list-type"], "map");
    assert_eq!(
        peers["x-kubernetes-list-map-keys"],
        serde_json::json!(["name"])
    );
    let peer = &peers["items"];
    assert_eq!(
        peer["required"],
        serde_json::json!(["name", "tokenSecret", "url"])
    );
    assert_eq!(peer["properties"]["weight"]["default"], 1);
    assert!(peer["properties"]["caSecret"].get("default").is_none());
    for name in [&fields["name"], &peer["properties"]["name"]] {
        assert_eq!(name["pattern"], "^[A-Za-z0-9._:-]+$");
        assert_eq!(name["maxLength"], 64);
    }

    let pattern = peer["properties"]["url"]["pattern"].as_str().unwrap();
    let matches = |url: &str| {
        let mut context = cel::Context::default();
        context.add_variable("url", url).unwrap();
        context.add_variable("pattern", pattern).unwrap();
        cel::Program::compile("url.matches(pattern)")
            .unwrap()
            .execute(&context)
            .unwrap()
            == cel::Value::Bool(true)
    };
    let operator_admits = |url: &str| {
        let mut sl = fixture("regions.yaml");
        sl.spec.regions.as_mut().unwrap().peers[0].url = url.into();
        screenlimit_operator::validate::validate(&sl).is_ok()
    };
    for (url, admitted) in [
        ("https://limiter.us.example.com", true),
        ("http://limiter-eu.screenlimit.svc:8080", true),
        ("https://limiter.us.example.com/screenlimit/", true),
        ("https://[fd00::1]:8443", true),
        ("limiter.us.example.com", false),
        ("ftp://limiter.us.example.com", false),
        ("HTTPS://limiter.us.example.com", false),
        ("https://", false),
        ("https://:8080", false),
        ("https://ops:pw@limiter.us", false),
        ("https://limiter.us/?region=us", false),
        ("https://limiter.us/#top", false),
        ("https://limiter us", false),
    ] {
        assert_eq!(matches(url), admitted, "the schema's pattern on {url}");
        assert_eq!(operator_admits(url), admitted, "the operator on {url}");
    }
}

/// The player token's issuer, audience and claims may not be blank: the limiter refuses one of
/// only spaces at start, so the API server refuses it first (the pattern run as CEL runs it).
#[test]
fn player_token_names_may_not_be_blank() {
    let s = schema();
    let auth =
        &s["properties"]["spec"]["properties"]["limiter"]["properties"]["playerAuth"]["properties"];
    for field in [
        "issuer",
        "audience",
        "accountClaim",
        "deviceClaim",
        "homeClaim",
    ] {
        let pattern = auth[field]["pattern"].as_str();
        assert_eq!(pattern, Some(r"\S"), "{field}");
        let matches = |text: &str| {
            let mut context = cel::Context::default();
            context.add_variable("text", text).unwrap();
            context.add_variable("pattern", pattern.unwrap()).unwrap();
            cel::Program::compile("text.matches(pattern)")
                .unwrap()
                .execute(&context)
                .unwrap()
                == cel::Value::Bool(true)
        };
        for (text, admitted) in [
            ("sub", true),
            ("home region", true),
            ("   ", false),
            ("\t", false),
        ] {
            assert_eq!(matches(text), admitted, "{field}: {text:?}");
        }
    }
}
