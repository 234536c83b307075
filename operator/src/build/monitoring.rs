//! Monitoring for one `StreamLimiter` on clusters that run the Prometheus Operator: a
//! `ServiceMonitor` for the limiter pods and a `PrometheusRule` whose alerts each mean something
//! to an on-call engineer, with a runbook section in `docs/runbooks.md`. The objects are plain
//! JSON (the operator does not depend on the Prometheus Operator's types); the same rule groups
//! are what `promtool` checks in the tests.

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use kube::core::{ApiResource, GroupVersionKind};
use serde_json::{Value, json};

use super::meta::meta;
use crate::crd::{AlertThresholdsSpec, StreamLimiter};
use crate::names::{Component, Names};

/// The API group and version of both kinds.
pub const API_VERSION: &str = "monitoring.coreos.com/v1";

/// The two Prometheus Operator kinds the operator may create.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum MonitoringKind {
    ServiceMonitor,
    PrometheusRule,
}

impl MonitoringKind {
    pub const ALL: [MonitoringKind; 2] = [
        MonitoringKind::ServiceMonitor,
        MonitoringKind::PrometheusRule,
    ];

    pub fn kind(self) -> &'static str {
        match self {
            MonitoringKind::ServiceMonitor => "ServiceMonitor",
            MonitoringKind::PrometheusRule => "PrometheusRule",
        }
    }

    /// The resource name discovery lists it under.
    pub fn plural(self) -> &'static str {
        match self {
            MonitoringKind::ServiceMonitor => "servicemonitors",
            MonitoringKind::PrometheusRule => "prometheusrules",
        }
    }

    /// For a dynamic `Api` (the operator does not depend on the Prometheus Operator's types).
    pub fn api_resource(self) -> ApiResource {
        ApiResource::from_gvk_with_plural(
            &GroupVersionKind::gvk("monitoring.coreos.com", "v1", self.kind()),
            self.plural(),
        )
    }
}

/// One monitoring object the spec wants, as JSON for server-side apply.
#[derive(Clone, Debug, PartialEq)]
pub struct MonitoringObject {
    pub kind: MonitoringKind,
    pub object: Value,
}

impl MonitoringObject {
    pub fn name(&self) -> &str {
        self.object["metadata"]["name"].as_str().unwrap_or_default()
    }
}

/// Kinds `spec.monitoring` asks for, in a fixed order.
pub fn requested(sl: &StreamLimiter) -> Vec<MonitoringKind> {
    let m = &sl.spec.monitoring;
    MonitoringKind::ALL
        .into_iter()
        .filter(|k| match k {
            MonitoringKind::ServiceMonitor => m.service_monitor.enabled,
            MonitoringKind::PrometheusRule => m.prometheus_rule.enabled,
        })
        .collect()
}

/// The objects `spec.monitoring` asks for (whether the cluster serves them is the reconcile's
/// business).
pub fn objects(
    sl: &StreamLimiter,
    names: &Names,
    ns: &str,
    owner: &OwnerReference,
) -> Vec<MonitoringObject> {
    let m = &sl.spec.monitoring;
    requested(sl)
        .into_iter()
        .map(|kind| {
            let object = match kind {
                MonitoringKind::ServiceMonitor => service_monitor(
                    names,
                    ns,
                    owner,
                    &m.service_monitor.interval,
                    &m.service_monitor.labels,
                ),
                MonitoringKind::PrometheusRule => prometheus_rule(
                    names,
                    ns,
                    owner,
                    &Thresholds::from(&m.prometheus_rule.thresholds),
                    &m.prometheus_rule.labels,
                ),
            };
            MonitoringObject { kind, object }
        })
        .collect()
}

/// Where the runbooks live; each alert links its own section.
pub const RUNBOOKS: &str = "https://github.com/screenlimit/screenlimit/blob/main/docs/runbooks.md";

/// When the alerts fire. The defaults fit the seed's budgets.
#[derive(Clone, Debug, PartialEq)]
pub struct Thresholds {
    /// Share of play-starts answered degraded (allowed without the store) over 5 minutes.
    pub degraded_ratio: f64,
    /// Play-start p99 budget, seconds.
    pub play_start_p99_seconds: f64,
    /// Store errors per second, summed over the limiter pods, per shard.
    pub store_errors_per_second: f64,
    /// How many times its usual (one-day) share the denial share may reach.
    pub denial_factor: f64,
}

impl Default for Thresholds {
    fn default() -> Self {
        Thresholds {
            degraded_ratio: 0.01,
            play_start_p99_seconds: 0.05,
            store_errors_per_second: 1.0,
            denial_factor: 3.0,
        }
    }
}

impl From<&AlertThresholdsSpec> for Thresholds {
    fn from(t: &AlertThresholdsSpec) -> Self {
        Thresholds {
            degraded_ratio: f64::from(t.degraded_percent) / 100.0,
            play_start_p99_seconds: f64::from(t.play_start_p99_millis) / 1000.0,
            store_errors_per_second: f64::from(t.store_errors_per_second),
            denial_factor: f64::from(t.denial_factor),
        }
    }
}

/// One alert: name, severity, how long the condition must hold, the expression, what it means.
struct Alert {
    name: &'static str,
    severity: &'static str,
    after: &'static str,
    expr: String,
    summary: String,
}

impl Alert {
    fn rule(&self) -> Value {
        json!({
            "alert": self.name,
            "expr": self.expr,
            "for": self.after,
            "labels": { "severity": self.severity },
            "annotations": {
                "summary": self.summary,
                "runbook_url": format!("{RUNBOOKS}#{}", self.name.to_ascii_lowercase()),
            },
        })
    }
}

/// The rule groups (a Prometheus rules file's top level) for the limiter Service `job` in
/// `namespace`. The operator's own alert is not here: it ships once with the chart
/// (`charts/screenlimit/alerts/operator.yaml`), else it would fire once per StreamLimiter.
pub fn rule_groups(namespace: &str, job: &str, t: &Thresholds) -> Value {
    let scope = format!("namespace=\"{namespace}\",job=\"{job}\"");
    let plays = format!(
        "sum(rate(screenlimit_decisions_total{{{scope},decision=~\"allowed|denied|degraded\"}}[5m]))"
    );
    let share = |decision: &str, window: &str| {
        format!(
            "sum(rate(screenlimit_decisions_total{{{scope},decision=\"{decision}\"}}[{window}])) / \
             sum(rate(screenlimit_decisions_total{{{scope},decision=~\"allowed|denied|degraded\"}}[{window}]))"
        )
    };
    let limiter = [
        Alert {
            name: "ScreenlimitPlaysDegraded",
            severity: "warning",
            after: "5m",
            expr: format!(
                "{} > {} and {plays} > 0",
                share("degraded", "5m"),
                t.degraded_ratio
            ),
            summary: format!(
                "More than {}% of play-starts in {namespace} were allowed without the store",
                t.degraded_ratio * 100.0
            ),
        },
        Alert {
            name: "ScreenlimitShardCircuitOpen",
            severity: "critical",
            after: "1m",
            expr: format!("max by (shard) (screenlimit_store_circuit_open{{{scope}}}) > 0"),
            summary: format!(
                "Store shard {{{{ $labels.shard }}}} of {namespace} is failing fast (circuit open)"
            ),
        },
        Alert {
            name: "ScreenlimitStoreErrors",
            severity: "warning",
            after: "5m",
            expr: format!(
                "sum by (shard, kind) (rate(screenlimit_store_errors_total{{{scope}}}[5m])) > {}",
                t.store_errors_per_second
            ),
            summary: format!(
                "Store shard {{{{ $labels.shard }}}} of {namespace}: {{{{ $value | humanize }}}} \
                 {{{{ $labels.kind }}}} errors per second"
            ),
        },
        Alert {
            // Before it is full: a full shard sends its accounts' new plays to the failure
            // policy (README, "Sizing Redis"). Shards without maxmemory are left out (0).
            name: "ScreenlimitShardMemoryHigh",
            severity: "warning",
            after: "10m",
            expr: format!(
                "max by (shard) (screenlimit_store_used_memory_bytes{{{scope}}}) / \
                 max by (shard) (screenlimit_store_maxmemory_bytes{{{scope}}} > 0) > 0.8"
            ),
            summary: format!(
                "Store shard {{{{ $labels.shard }}}} of {namespace} uses {{{{ $value | humanizePercentage }}}} \
                 of its maxmemory; when full, its new plays go to the failure policy"
            ),
        },
        Alert {
            // A shard shedding what it cannot answer in time (README, "Under a spike"): the
            // value is how many calls a second the failure policy decides instead. The gauge's
            // 5-minute max keeps a shard that sheds in bursts from resetting the `for`.
            name: "ScreenlimitShardOverloaded",
            severity: "warning",
            after: "10m",
            expr: format!(
                "sum by (shard) (rate(screenlimit_store_shed_total{{{scope}}}[5m])) > 0 and on (shard) \
                 max by (shard) (max_over_time(screenlimit_store_overloaded{{{scope}}}[5m])) > 0"
            ),
            summary: format!(
                "Store shard {{{{ $labels.shard }}}} of {namespace} is overloaded: {{{{ $value | humanize }}}} \
                 calls per second are decided by the failure policy"
            ),
        },
        Alert {
            name: "ScreenlimitPlayStartSlow",
            severity: "warning",
            after: "10m",
            expr: format!(
                "histogram_quantile(0.99, sum by (le) (rate(screenlimit_operation_duration_seconds_bucket{{{scope},operation=\"acquire\"}}[5m]))) > {}",
                t.play_start_p99_seconds
            ),
            summary: format!(
                "Play-start p99 in {namespace} is above its {} ms budget",
                t.play_start_p99_seconds * 1000.0
            ),
        },
        Alert {
            name: "ScreenlimitDenialsUnusual",
            severity: "warning",
            after: "15m",
            expr: format!(
                "({}) > {} * ({}) and ({}) > 0.02",
                share("denied", "15m"),
                t.denial_factor,
                share("denied", "1d"),
                share("denied", "15m")
            ),
            summary: format!(
                "The share of play-starts denied in {namespace} is over {}x its one-day level",
                t.denial_factor
            ),
        },
    ];
    json!({
        "groups": [
            { "name": format!("screenlimit-{namespace}-{job}"), "rules": limiter.iter().map(Alert::rule).collect::<Vec<_>>() },
        ]
    })
}

/// The `PrometheusRule` for the instance, with `extra_labels` (what the Prometheus selects).
pub fn prometheus_rule(
    names: &Names,
    ns: &str,
    owner: &OwnerReference,
    thresholds: &Thresholds,
    extra_labels: &BTreeMap<String, String>,
) -> Value {
    let spec = rule_groups(ns, &names.limiter(), thresholds);
    monitoring_object("PrometheusRule", names, ns, owner, extra_labels, spec)
}

/// The `ServiceMonitor` that scrapes every limiter pod through the limiter Service.
pub fn service_monitor(
    names: &Names,
    ns: &str,
    owner: &OwnerReference,
    interval: &str,
    extra_labels: &BTreeMap<String, String>,
) -> Value {
    let spec = json!({
        "selector": { "matchLabels": names.selector_labels(Component::Limiter) },
        "namespaceSelector": { "matchNames": [ns] },
        "endpoints": [{ "port": "http", "path": "/metrics", "interval": interval }],
    });
    monitoring_object("ServiceMonitor", names, ns, owner, extra_labels, spec)
}

/// A Prometheus Operator object named after the limiter, owned by the instance.
fn monitoring_object(
    kind: &str,
    names: &Names,
    ns: &str,
    owner: &OwnerReference,
    extra_labels: &BTreeMap<String, String>,
    spec: Value,
) -> Value {
    let mut labels = names.labels(Component::Limiter);
    labels.extend(extra_labels.clone());
    json!({
        "apiVersion": "monitoring.coreos.com/v1",
        "kind": kind,
        "metadata": meta(names.limiter(), ns, labels, owner),
        "spec": spec,
    })
}
