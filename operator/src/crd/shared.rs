//! Pieces several parts of the spec share: a Secret key reference, the compact container
//! resources schema, and the `true`/`1` serde defaults.

use kube::KubeSchema;
use serde::{Deserialize, Serialize};

/// A key in a Secret of the resource's namespace.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct SecretKeyRef {
    /// Secret name.
    #[schemars(length(min = 1, max = 253))]
    pub name: String,
    /// Key inside the Secret.
    #[schemars(length(min = 1, max = 253))]
    pub key: String,
}

/// A compact schema for container resources: `requests` and `limits` as maps of quantities
/// (the full upstream schema repeats a long Quantity description four times over).
pub(crate) fn resources_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
    // Quantities are Kubernetes' own type (int or string, checked by the API server's quantity
    // parser); no rule reads them, so only the map is bounded.
    let quantities = serde_json::json!({
        "type": "object",
        "maxProperties": MAX_RESOURCE_NAMES,
        "additionalProperties": {"x-kubernetes-int-or-string": true}
    });
    let mut requests = quantities.clone();
    requests["description"] = "Minimum CPU and memory, e.g. `{cpu: 100m, memory: 64Mi}`.".into();
    let mut limits = quantities;
    limits["description"] = "Maximum CPU and memory, e.g. `{memory: 256Mi}`.".into();
    schemars::json_schema!({
        "type": "object",
        "nullable": true,
        "description": "Container resources, as in a Pod spec.",
        "properties": {"requests": requests, "limits": limits}
    })
}

/// Most resource names in one `requests` or `limits` map (cpu, memory, ephemeral-storage,
/// hugepages of each size, extended resources).
const MAX_RESOURCE_NAMES: usize = 16;

/// Most labels in one label map the spec declares.
pub const MAX_LABELS: usize = 16;

/// Kubernetes' own bound on a label value.
pub const MAX_LABEL_VALUE_LEN: usize = 63;

/// A map of labels: at most [`MAX_LABELS`] keys, each value a label value. A key's length cannot
/// be declared in a structural schema; the API server checks keys as label keys where they are
/// used, and a rule that reads keys is bounded by the count.
pub(crate) fn labels_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
    schemars::json_schema!({
        "type": "object",
        "maxProperties": MAX_LABELS,
        "additionalProperties": {"type": "string", "maxLength": MAX_LABEL_VALUE_LEN}
    })
}

/// [`labels_schema`] for an optional field.
pub(crate) fn optional_labels_schema(
    generator: &mut schemars::SchemaGenerator,
) -> schemars::Schema {
    let mut schema = labels_schema(generator);
    schema.insert("nullable".into(), true.into());
    schema
}

pub(crate) fn default_true() -> bool {
    true
}
pub(crate) fn default_one() -> i32 {
    1
}
