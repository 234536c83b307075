//! The Helm chart as Helm's own engine renders it (PyPI `helm-python-sdk`, in the virtualenv
//! `target/helm-venv` that `scripts/check-operator-artifacts.sh` and `scripts/test-apiserver.sh`
//! make), for the suites that apply parts of it themselves.

use std::process::Command;

use serde_json::Value;

use super::helm::python;
use crate::workspace_root;

/// The release name and namespace the suites install the chart as.
pub const RELEASE: &str = "screenlimit";
pub const NAMESPACE: &str = "screenlimit-system";

/// The kinds of the chart's RBAC, in the order they can be applied.
pub const RBAC_KINDS: [&str; 5] = [
    "ServiceAccount",
    "ClusterRole",
    "ClusterRoleBinding",
    "Role",
    "RoleBinding",
];

const RENDER: &str = r#"
import json, sys
import helm_python, yaml
chart = helm_python.Chart.load(sys.argv[1])
out = chart.render(json.loads(sys.argv[2]), name=sys.argv[3], namespace=sys.argv[4])
docs = []
for path, text in sorted(out.items()):
    if path.endswith("NOTES.txt"):
        continue
    docs.extend(d for d in yaml.safe_load_all(text) if d)
print(json.dumps(docs))
"#;

/// Every object the chart's templates render with `values` (the CRD aside: Helm installs it
/// from `crds/`).
pub fn render(values: &Value) -> Vec<Value> {
    let root = workspace_root();
    let out = Command::new(python())
        .arg("-c")
        .arg(RENDER)
        .arg(root.join("charts/screenlimit"))
        .arg(values.to_string())
        .args([RELEASE, NAMESPACE])
        .output()
        .expect("the Helm engine's Python");
    assert!(
        out.status.success(),
        "helm template (values {values}): {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("rendered objects as JSON")
}

/// The rendered objects of `kind`.
pub fn of_kind<'a>(objects: &'a [Value], kind: &str) -> Vec<&'a Value> {
    objects.iter().filter(|o| o["kind"] == kind).collect()
}

/// The one ServiceAccount the chart renders: its name.
pub fn service_account(objects: &[Value]) -> String {
    let accounts = of_kind(objects, "ServiceAccount");
    assert_eq!(
        accounts.len(),
        1,
        "the chart renders one ServiceAccount: {accounts:?}"
    );
    accounts[0]["metadata"]["name"]
        .as_str()
        .expect("a name")
        .to_owned()
}
