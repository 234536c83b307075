//! The alerts the operator ships, checked by Prometheus's own `promtool`: the rules load, and
//! each alert fires on the synthetic series of its trouble (and stays quiet on a healthy
//! instance), with the labels and text an on-call engineer sees.

mod common;

use std::collections::BTreeMap;
use std::path::Path;
use std::process::Command;

use kube::{Resource, ResourceExt};
use screenlimit_operator::build::build;
use screenlimit_operator::build::monitoring::{
    RUNBOOKS, Thresholds, prometheus_rule, rule_groups, service_monitor,
};
use screenlimit_operator::names::Names;

fn promtool(dir: &Path, args: &[&str]) -> String {
    let out = Command::new("promtool")
        .args(args)
        .current_dir(dir)
        .output()
        .expect("promtool (Debian's prometheus package; scripts/install-test-deps.sh installs it)");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success(), "promtool {args:?}:\n{text}");
    text
}

const SCOPE: &str = r#"namespace="video",job="demo-limiter""#;

fn runbook(alert: &str) -> String {
    format!("{RUNBOOKS}#{}", alert.to_ascii_lowercase())
}

#[test]
fn the_alerts_load_and_fire_on_their_trouble_only() {
    let dir = tempfile::tempdir().unwrap();
    let rules = rule_groups("video", "demo-limiter", &Thresholds::default());
    std::fs::write(
        dir.path().join("rules.yaml"),
        serde_yaml_ng::to_string(&rules).unwrap(),
    )
    .unwrap();
    let checked = promtool(dir.path(), &["check", "rules", "rules.yaml"]);
    assert!(checked.contains("SUCCESS: 7 rules found"), "{checked}");
    // The operator's own alert ships once with the chart, not once per StreamLimiter.
    assert!(
        !serde_json::to_string(&rules)
            .unwrap()
            .contains("ScreenlimitOperatorReconcileFailing"),
        "the operator alert is in each instance's rule"
    );

    let tests = format!(
        r#"rule_files: [rules.yaml]
evaluation_interval: 1m
tests:
  - interval: 1m
    input_series:
      - series: 'screenlimit_decisions_total{{{SCOPE},decision="allowed"}}'
        values: '0+100x20'
      - series: 'screenlimit_decisions_total{{{SCOPE},decision="degraded"}}'
        values: '0+10x20'
    alert_rule_test:
      - eval_time: 12m
        alertname: ScreenlimitPlaysDegraded
        exp_alerts:
          - exp_labels: {{ severity: warning }}
            exp_annotations:
              summary: More than 1% of play-starts in video were allowed without the store
              runbook_url: {degraded}
  - interval: 1m
    input_series:
      - series: 'screenlimit_decisions_total{{{SCOPE},decision="allowed"}}'
        values: '0+100x20'
      - series: 'screenlimit_decisions_total{{{SCOPE},decision="degraded"}}'
        values: '0+0x20'
      - series: 'screenlimit_store_circuit_open{{{SCOPE},shard="0"}}'
        values: '0x20'
    alert_rule_test:
      - eval_time: 12m
        alertname: ScreenlimitPlaysDegraded
        exp_alerts: []
      - eval_time: 12m
        alertname: ScreenlimitShardCircuitOpen
        exp_alerts: []
  - interval: 1m
    input_series:
      - series: 'screenlimit_store_circuit_open{{{SCOPE},shard="2",pod="a"}}'
        values: '0 0 1x10'
      - series: 'screenlimit_store_circuit_open{{{SCOPE},shard="2",pod="b"}}'
        values: '0x12'
    alert_rule_test:
      - eval_time: 2m
        alertname: ScreenlimitShardCircuitOpen
        exp_alerts: []
      - eval_time: 5m
        alertname: ScreenlimitShardCircuitOpen
        exp_alerts:
          - exp_labels: {{ severity: critical, shard: "2" }}
            exp_annotations:
              summary: Store shard 2 of video is failing fast (circuit open)
              runbook_url: {circuit}
  - interval: 1m
    input_series:
      - series: 'screenlimit_operation_duration_seconds_bucket{{{SCOPE},operation="acquire",le="0.05"}}'
        values: '0+50x30'
      - series: 'screenlimit_operation_duration_seconds_bucket{{{SCOPE},operation="acquire",le="0.1"}}'
        values: '0+100x30'
      - series: 'screenlimit_operation_duration_seconds_bucket{{{SCOPE},operation="acquire",le="+Inf"}}'
        values: '0+100x30'
      - series: 'screenlimit_operation_duration_seconds_bucket{{{SCOPE},operation="heartbeat",le="0.1"}}'
        values: '0+100x30'
    alert_rule_test:
      - eval_time: 20m
        alertname: ScreenlimitPlayStartSlow
        exp_alerts:
          - exp_labels: {{ severity: warning }}
            exp_annotations:
              summary: Play-start p99 in video is above its 50 ms budget
              runbook_url: {slow}
  - interval: 1m
    input_series:
      - series: 'screenlimit_store_errors_total{{{SCOPE},shard="1",kind="timeout",pod="a"}}'
        values: '0+120x20'
    alert_rule_test:
      - eval_time: 12m
        alertname: ScreenlimitStoreErrors
        exp_alerts:
          - exp_labels: {{ severity: warning, shard: "1", kind: timeout }}
            exp_annotations:
              summary: 'Store shard 1 of video: 2 timeout errors per second'
              runbook_url: {errors}
  - interval: 1m
    input_series:
      - series: 'screenlimit_store_used_memory_bytes{{{SCOPE},shard="0",pod="a"}}'
        values: '700x5 850x20'
      - series: 'screenlimit_store_maxmemory_bytes{{{SCOPE},shard="0",pod="a"}}'
        values: '1000x25'
      - series: 'screenlimit_store_used_memory_bytes{{{SCOPE},shard="1",pod="a"}}'
        values: '900x25'
      - series: 'screenlimit_store_maxmemory_bytes{{{SCOPE},shard="1",pod="a"}}'
        values: '0x25'
    alert_rule_test:
      - eval_time: 10m
        alertname: ScreenlimitShardMemoryHigh
        exp_alerts: []
      - eval_time: 20m
        alertname: ScreenlimitShardMemoryHigh
        exp_alerts:
          - exp_labels: {{ severity: warning, shard: "0" }}
            exp_annotations:
              summary: Store shard 0 of video uses 85% of its maxmemory; when full, its new plays go to the failure policy
              runbook_url: {memory}
  - interval: 1m
    input_series:
      - series: 'screenlimit_decisions_total{{{SCOPE},decision="allowed"}}'
        values: '0+100x1470'
      - series: 'screenlimit_decisions_total{{{SCOPE},decision="denied"}}'
        values: '0+1x1440 1440+50x30'
    alert_rule_test:
      - eval_time: 1400m
        alertname: ScreenlimitDenialsUnusual
        exp_alerts: []
      - eval_time: 1470m
        alertname: ScreenlimitDenialsUnusual
        exp_alerts:
          - exp_labels: {{ severity: warning }}
            exp_annotations:
              summary: The share of play-starts denied in video is over 3x its one-day level
              runbook_url: {denials}
  - interval: 1m
    input_series:
      - series: 'screenlimit_store_overloaded{{{SCOPE},shard="3",pod="a"}}'
        values: '0 0 1x20'
      - series: 'screenlimit_store_shed_total{{{SCOPE},shard="3",pod="a",priority="decision",reason="bound"}}'
        values: '0 0 0+60x20'
      - series: 'screenlimit_store_overloaded{{{SCOPE},shard="4",pod="a"}}'
        values: '0 0 1 1 0x18'
      - series: 'screenlimit_store_shed_total{{{SCOPE},shard="4",pod="a",priority="decision",reason="bound"}}'
        values: '0 0 0 600 1200x18'
      - series: 'screenlimit_store_overloaded{{{SCOPE},shard="5",pod="a"}}'
        values: '0x22'
      - series: 'screenlimit_store_shed_total{{{SCOPE},shard="5",pod="a",priority="decision",reason="bound"}}'
        values: '0x22'
    alert_rule_test:
      - eval_time: 8m
        alertname: ScreenlimitShardOverloaded
        exp_alerts: []
      - eval_time: 16m
        alertname: ScreenlimitShardOverloaded
        exp_alerts:
          - exp_labels: {{ severity: warning, shard: "3" }}
            exp_annotations:
              summary: 'Store shard 3 of video is overloaded: 1 calls per second are decided by the failure policy'
              runbook_url: {overloaded}
"#,
        degraded = runbook("ScreenlimitPlaysDegraded"),
        circuit = runbook("ScreenlimitShardCircuitOpen"),
        slow = runbook("ScreenlimitPlayStartSlow"),
        errors = runbook("ScreenlimitStoreErrors"),
        memory = runbook("ScreenlimitShardMemoryHigh"),
        denials = runbook("ScreenlimitDenialsUnusual"),
        overloaded = runbook("ScreenlimitShardOverloaded"),
    );
    std::fs::write(dir.path().join("tests.yaml"), tests).unwrap();
    promtool(dir.path(), &["test", "rules", "tests.yaml"]);
}

/// The chart's rules file: the operator's own alert, once per install.
fn chart_operator_rules() -> serde_json::Value {
    let text = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../charts/screenlimit/alerts/operator.yaml"
    ))
    .unwrap();
    serde_yaml_ng::from_str(&text).unwrap()
}

#[test]
fn the_operator_alert_ships_once_with_the_chart_and_fires_once_per_operator() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::copy(
        concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../charts/screenlimit/alerts/operator.yaml"
        ),
        dir.path().join("operator.yaml"),
    )
    .unwrap();
    let checked = promtool(dir.path(), &["check", "rules", "operator.yaml"]);
    assert!(checked.contains("SUCCESS: 1 rules found"), "{checked}");
    // Two operator pods (only the leader reconciles, both are scraped) and their errors by kind:
    // one alert for the operator's namespace, however many StreamLimiters it serves.
    let tests = format!(
        r#"rule_files: [operator.yaml]
evaluation_interval: 1m
tests:
  - interval: 1m
    input_series:
      - series: 'screenlimit_operator_reconcile_errors_total{{namespace="screenlimit-system",pod="a",error="kube"}}'
        values: '0+3x30'
      - series: 'screenlimit_operator_reconcile_errors_total{{namespace="screenlimit-system",pod="a",error="apply"}}'
        values: '0+2x30'
      - series: 'screenlimit_operator_reconciles_total{{namespace="screenlimit-system",pod="a"}}'
        values: '0+10x30'
      - series: 'screenlimit_operator_reconciles_total{{namespace="screenlimit-system",pod="b"}}'
        values: '0x30'
    alert_rule_test:
      - eval_time: 10m
        alertname: ScreenlimitOperatorReconcileFailing
        exp_alerts: []
      - eval_time: 25m
        alertname: ScreenlimitOperatorReconcileFailing
        exp_alerts:
          - exp_labels: {{ severity: warning, namespace: screenlimit-system }}
            exp_annotations:
              summary: The screenlimit operator in screenlimit-system keeps failing to reconcile (83.33m/s)
              runbook_url: {operator}
  - interval: 1m
    input_series:
      - series: 'screenlimit_operator_reconcile_errors_total{{namespace="screenlimit-system",pod="a",error="kube"}}'
        values: '0x30'
      - series: 'screenlimit_operator_reconciles_total{{namespace="screenlimit-system",pod="a"}}'
        values: '0+10x30'
    alert_rule_test:
      - eval_time: 25m
        alertname: ScreenlimitOperatorReconcileFailing
        exp_alerts: []
"#,
        operator = runbook("ScreenlimitOperatorReconcileFailing"),
    );
    std::fs::write(dir.path().join("tests.yaml"), tests).unwrap();
    promtool(dir.path(), &["test", "rules", "tests.yaml"]);
}

#[test]
fn every_alert_has_its_runbook_section() {
    let runbooks =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../docs/runbooks.md"))
            .unwrap();
    let rules = rule_groups("ns", "job", &Thresholds::default());
    let chart = chart_operator_rules();
    for group in rules["groups"]
        .as_array()
        .unwrap()
        .iter()
        .chain(chart["groups"].as_array().unwrap())
    {
        for rule in group["rules"].as_array().unwrap() {
            let alert = rule["alert"].as_str().unwrap();
            assert!(
                runbooks.contains(&format!("## {alert}")),
                "docs/runbooks.md has no section for {alert}"
            );
        }
    }
}

#[test]
fn the_service_monitor_scrapes_the_limiter_service_and_the_rule_watches_its_job() {
    let sl = common::fixture("managed.yaml");
    let desired = build(&sl).unwrap();
    let service = desired
        .services
        .iter()
        .find(|s| s.name_any() == "demo-limiter")
        .expect("the limiter Service");
    let names = Names::new(&sl.name_any());
    let owner = sl.controller_owner_ref(&()).unwrap();
    let selects = BTreeMap::from([("release".to_owned(), "kps".to_owned())]);

    let monitor = service_monitor(&names, "video", &owner, "30s", &selects);
    assert_eq!(monitor["kind"], "ServiceMonitor");
    assert_eq!(monitor["metadata"]["labels"]["release"], "kps");
    assert_eq!(
        monitor["metadata"]["ownerReferences"][0]["uid"],
        owner.uid.as_str()
    );
    // It selects the Service's own labels and scrapes its port by name.
    let service_labels = serde_json::to_value(&service.metadata.labels).unwrap();
    for (key, value) in monitor["spec"]["selector"]["matchLabels"]
        .as_object()
        .unwrap()
    {
        assert_eq!(&service_labels[key], value, "label {key}");
    }
    let port = &service.spec.as_ref().unwrap().ports.as_ref().unwrap()[0];
    assert_eq!(
        monitor["spec"]["endpoints"][0]["port"],
        port.name.as_deref().unwrap()
    );

    let rule = prometheus_rule(&names, "video", &owner, &Thresholds::default(), &selects);
    assert_eq!(rule["kind"], "PrometheusRule");
    assert_eq!(rule["metadata"]["labels"]["release"], "kps");
    // The Service's name is the job Prometheus gives the scraped pods.
    assert!(
        rule["spec"]["groups"][0]["rules"][0]["expr"]
            .as_str()
            .unwrap()
            .contains(r#"job="demo-limiter""#)
    );
}
