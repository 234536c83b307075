//! What every owned object carries and how it finds its pods: metadata with the owner
//! reference and labels, label selectors, and the PodDisruptionBudget that lets a drain take
//! one pod at a time.

use std::collections::BTreeMap;

use k8s_openapi::api::policy::v1::{PodDisruptionBudget, PodDisruptionBudgetSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta, OwnerReference};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;

/// Metadata of an owned object.
pub fn meta(
    name: String,
    namespace: &str,
    labels: BTreeMap<String, String>,
    owner: &OwnerReference,
) -> ObjectMeta {
    ObjectMeta {
        name: Some(name),
        namespace: Some(namespace.to_owned()),
        labels: Some(labels),
        owner_references: Some(vec![owner.clone()]),
        ..ObjectMeta::default()
    }
}

pub fn selector(labels: BTreeMap<String, String>) -> LabelSelector {
    LabelSelector {
        match_labels: Some(labels),
        ..LabelSelector::default()
    }
}

/// `maxUnavailable: 1` over the pods `pod_selector` selects: a drain always proceeds, one pod
/// at a time.
pub fn max_unavailable_one(
    name: String,
    ns: &str,
    labels: BTreeMap<String, String>,
    pod_selector: BTreeMap<String, String>,
    owner: &OwnerReference,
) -> PodDisruptionBudget {
    PodDisruptionBudget {
        metadata: meta(name, ns, labels, owner),
        spec: Some(PodDisruptionBudgetSpec {
            max_unavailable: Some(IntOrString::Int(1)),
            selector: Some(selector(pod_selector)),
            ..PodDisruptionBudgetSpec::default()
        }),
        ..PodDisruptionBudget::default()
    }
}
