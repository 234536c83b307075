//! `spec.monitoring`: the Prometheus Operator objects for the limiter (`ServiceMonitor`,
//! `PrometheusRule` and its alert thresholds).

use std::collections::BTreeMap;

use kube::KubeSchema;
use serde::{Deserialize, Serialize};

use super::shared::{default_one, labels_schema};

/// Monitoring through the Prometheus Operator (`monitoring.coreos.com/v1`).
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq, Eq, Default)]
#[serde(rename_all = "camelCase")]
pub struct MonitoringSpec {
    /// A `ServiceMonitor` `<name>-limiter` scraping every limiter pod's `/metrics`.
    #[serde(default)]
    pub service_monitor: ServiceMonitorSpec,
    /// A `PrometheusRule` `<name>-limiter` with the limiter's and the operator's alerts (each
    /// links its runbook in docs/runbooks.md).
    #[serde(default)]
    pub prometheus_rule: PrometheusRuleSpec,
}

/// The limiter's `ServiceMonitor`.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct ServiceMonitorSpec {
    /// Create the `ServiceMonitor`.
    #[serde(default)]
    pub enabled: bool,
    /// How often Prometheus scrapes each pod, e.g. `30s` or `1m`.
    #[serde(default = "default_scrape_interval")]
    #[schemars(
        length(min = 2, max = 8),
        regex(pattern = r"^[1-9][0-9]{0,4}(ms|s|m|h)$")
    )]
    pub interval: String,
    /// Extra labels on the object: what your Prometheus selects (`serviceMonitorSelector`),
    /// e.g. `{release: kube-prometheus-stack}`. Keys under `app.kubernetes.io/` are the
    /// operator's own.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    #[schemars(schema_with = "labels_schema")]
    #[x_kube(validation = Rule::new("self.all(k, !k.startsWith('app.kubernetes.io/'))").message("monitoring labels may not set app.kubernetes.io/ keys: the operator finds its objects by them").reason(Reason::FieldValueForbidden))]
    pub labels: BTreeMap<String, String>,
}

impl Default for ServiceMonitorSpec {
    fn default() -> Self {
        ServiceMonitorSpec {
            enabled: false,
            interval: default_scrape_interval(),
            labels: BTreeMap::new(),
        }
    }
}

/// The limiter's `PrometheusRule`.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq, Eq, Default)]
#[serde(rename_all = "camelCase")]
pub struct PrometheusRuleSpec {
    /// Create the `PrometheusRule`.
    #[serde(default)]
    pub enabled: bool,
    /// Extra labels on the object: what your Prometheus selects (`ruleSelector`). Keys under
    /// `app.kubernetes.io/` are the operator's own.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    #[schemars(schema_with = "labels_schema")]
    #[x_kube(validation = Rule::new("self.all(k, !k.startsWith('app.kubernetes.io/'))").message("monitoring labels may not set app.kubernetes.io/ keys: the operator finds its objects by them").reason(Reason::FieldValueForbidden))]
    pub labels: BTreeMap<String, String>,
    /// When the alerts fire.
    #[serde(default)]
    pub thresholds: AlertThresholdsSpec,
}

/// When the alerts fire; the defaults fit the limiter's budgets.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct AlertThresholdsSpec {
    /// `ScreenlimitPlaysDegraded`: percent of play-starts allowed without the store (failure
    /// policy) over 5 minutes.
    #[serde(default = "default_degraded_percent")]
    #[schemars(range(min = 1, max = 100))]
    pub degraded_percent: i32,
    /// `ScreenlimitPlayStartSlow`: play-start p99 budget in milliseconds.
    #[serde(default = "default_play_start_p99")]
    #[schemars(range(min = 1, max = 10000))]
    pub play_start_p99_millis: i32,
    /// `ScreenlimitStoreErrors`: store errors per second on one shard, summed over the pods.
    #[serde(default = "default_one")]
    #[schemars(range(min = 1, max = 1000000))]
    pub store_errors_per_second: i32,
    /// `ScreenlimitDenialsUnusual`: how many times its one-day share the denied share of
    /// play-starts may reach over 15 minutes.
    #[serde(default = "default_denial_factor")]
    #[schemars(range(min = 2, max = 100))]
    pub denial_factor: i32,
}

impl Default for AlertThresholdsSpec {
    fn default() -> Self {
        AlertThresholdsSpec {
            degraded_percent: default_degraded_percent(),
            play_start_p99_millis: default_play_start_p99(),
            store_errors_per_second: default_one(),
            denial_factor: default_denial_factor(),
        }
    }
}

fn default_scrape_interval() -> String {
    "30s".into()
}
fn default_degraded_percent() -> i32 {
    1
}
fn default_play_start_p99() -> i32 {
    50
}
fn default_denial_factor() -> i32 {
    3
}
