//! `spec.networkPolicies`: which pods the NetworkPolicies let in.

use std::collections::BTreeMap;

use kube::KubeSchema;
use serde::{Deserialize, Serialize};

use super::shared::{default_true, optional_labels_schema};

/// Ingress NetworkPolicies for the pods of this resource (`<name>-redis`, `<name>-sentinel`,
/// `<name>-limiter`, `<name>-admin-ui`).
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct NetworkPoliciesSpec {
    /// Render the NetworkPolicies (default true). Redis and Sentinel pods then accept only
    /// this resource's limiter pods, each other and the Sentinels; the limiter accepts the pods
    /// of its own namespace and `limiterClients`; the admin UI only `adminUIClients` (none:
    /// nothing over the pod network; `kubectl port-forward` still works). They take effect only
    /// where the cluster's network plugin enforces NetworkPolicies.
    #[serde(default = "default_true")]
    pub enabled: bool,
    /// Pods outside this namespace that may call the limiter (port `http`, 8080): e.g. the
    /// playback API's namespace, your Prometheus. Pods of the resource's own namespace always
    /// may.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 16))]
    pub limiter_clients: Vec<NetworkPeer>,
    /// The only pods that may reach the admin UI (port `http`, 8081): your ingress
    /// controller, e.g. `{namespaceLabels: {kubernetes.io/metadata.name: ingress-nginx}}`.
    #[serde(
        default,
        rename = "adminUIClients",
        skip_serializing_if = "Vec::is_empty"
    )]
    #[schemars(length(max = 16))]
    pub admin_ui_clients: Vec<NetworkPeer>,
}

impl Default for NetworkPoliciesSpec {
    fn default() -> Self {
        NetworkPoliciesSpec {
            enabled: true,
            limiter_clients: Vec::new(),
            admin_ui_clients: Vec::new(),
        }
    }
}

/// Pods allowed in by a NetworkPolicy, as a NetworkPolicy peer: the pods with `podLabels`
/// (none: every pod) in the namespaces with `namespaceLabels` (none: the resource's own
/// namespace).
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
#[x_kube(
    validation = Rule::new("has(self.namespaceLabels) || has(self.podLabels)").message("give namespaceLabels, podLabels or both").reason(Reason::FieldValueRequired)
)]
#[serde(rename_all = "camelCase")]
pub struct NetworkPeer {
    /// Labels of the namespaces, e.g. `{kubernetes.io/metadata.name: playback}`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "optional_labels_schema")]
    pub namespace_labels: Option<BTreeMap<String, String>>,
    /// Labels of the pods, e.g. `{app: playback-api}`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "optional_labels_schema")]
    pub pod_labels: Option<BTreeMap<String, String>>,
}
