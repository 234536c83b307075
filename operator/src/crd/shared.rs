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
    let quantities = serde_json::json!({
        "type": "object",
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

pub(crate) fn default_true() -> bool {
    true
}
pub(crate) fn default_one() -> i32 {
    1
}
