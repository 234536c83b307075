//! The Helm chart as Helm's own engine renders it (PyPI `helm-python-sdk`, in the virtualenv
//! `target/helm-venv` that `scripts/check-operator-artifacts.sh` and `scripts/test-apiserver.sh`
//! make), and its objects applied to an API server with server-side apply.

use std::process::Command;

use kube::api::{Api, DynamicObject, Patch, PatchParams};
use kube::core::{ApiResource, GroupVersionKind};
use serde_json::Value;

use crate::workspace_root;

/// The release name and namespace the suites install the chart as.
pub const RELEASE: &str = "screenlimit";
pub const NAMESPACE: &str = "screenlimit-system";

const RENDER: &str = r#"
import json, sys
import helm_python, yaml
out = helm_python.Chart.load(sys.argv[1]).render(json.loads(sys.argv[2]), name=sys.argv[3], namespace=sys.argv[4])
docs = []
for path, text in sorted(out.items()):
    if path.endswith("NOTES.txt"):
        continue
    docs.extend(d for d in yaml.safe_load_all(text) if d)
print(json.dumps(docs))
"#;

/// Every object the chart renders with `values` (CRDs aside: Helm installs them from `crds/`).
pub fn render(values: &Value) -> Vec<Value> {
    let root = workspace_root();
    let python = root.join("target/helm-venv/bin/python");
    assert!(
        python.is_file(),
        "no {}: scripts/test-apiserver.sh makes it (helm-python-sdk)",
        python.display()
    );
    let out = Command::new(&python)
        .arg("-c")
        .arg(RENDER)
        .arg(root.join("charts/screenlimit"))
        .arg(values.to_string())
        .args([RELEASE, NAMESPACE])
        .output()
        .expect("the Helm engine");
    assert!(
        out.status.success(),
        "helm template: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("rendered objects as JSON")
}

/// The API resource of a rendered object (the kinds the chart holds).
pub fn resource_of(object: &Value) -> ApiResource {
    let api_version = object["apiVersion"].as_str().expect("apiVersion");
    let kind = object["kind"].as_str().expect("kind");
    let (group, version) = api_version.split_once('/').unwrap_or(("", api_version));
    let plural = match kind {
        "Deployment" => "deployments",
        "Service" => "services",
        "ServiceAccount" => "serviceaccounts",
        "ClusterRole" => "clusterroles",
        "ClusterRoleBinding" => "clusterrolebindings",
        "Role" => "roles",
        "RoleBinding" => "rolebindings",
        "ConfigMap" => "configmaps",
        "Pod" => "pods",
        other => panic!("the chart renders a {other} this suite does not know"),
    };
    ApiResource::from_gvk_with_plural(&GroupVersionKind::gvk(group, version, kind), plural)
}

/// Applies `object` (server-side, as `manager`) where it belongs.
pub async fn apply(client: &kube::Client, object: &Value, manager: &str) {
    let resource = resource_of(object);
    let name = object["metadata"]["name"].as_str().expect("a name");
    let api: Api<DynamicObject> = match object["metadata"]["namespace"].as_str() {
        Some(ns) => Api::namespaced_with(client.clone(), ns, &resource),
        None if matches!(
            object["kind"].as_str(),
            Some("ClusterRole" | "ClusterRoleBinding")
        ) =>
        {
            Api::all_with(client.clone(), &resource)
        }
        None => Api::namespaced_with(client.clone(), NAMESPACE, &resource),
    };
    api.patch(
        name,
        &PatchParams::apply(manager).force(),
        &Patch::Apply(object),
    )
    .await
    .unwrap_or_else(|e| panic!("the API server refused {} {name}: {e}", object["kind"]));
}
