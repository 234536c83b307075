//! Helm releases for real (install, upgrade, uninstall, status) through Helm v4's own engine,
//! the PyPI package `helm-python-sdk` (0.2.2), against a kubeconfig: a small Python script run
//! as a subprocess, one JSON request in, one JSON answer out.

use std::path::{Path, PathBuf};
use std::time::Duration;

use serde_json::{Value, json};

use crate::workspace_root;

/// How long one Helm action may take (it waits for nothing but its own requests).
const ACTION: Duration = Duration::from_secs(180);

/// The virtualenv's Python, which `scripts/test-apiserver.sh` makes.
pub fn python() -> PathBuf {
    let python = workspace_root().join("target/helm-venv/bin/python");
    assert!(
        python.is_file(),
        "no {}: scripts/test-apiserver.sh makes it (helm-python-sdk==0.2.2 and PyYAML)",
        python.display()
    );
    python
}

const SCRIPT: &str = r#"
import json, sys
import helm_python
req = json.loads(sys.argv[1])
try:
    cfg = helm_python.Config(kubeconfig_path=req["kubeconfig"], namespace=req["namespace"])
    action, name, ns, timeout = req["action"], req["release"], req["namespace"], req["timeout"]
    if action in ("install", "upgrade"):
        chart = helm_python.Chart.load(req["chart"])
        kwargs = dict(namespace=ns, timeout=timeout, wait="hookOnly")
        if action == "install":
            out = cfg.install(chart, name, req["values"], create_namespace=True, **kwargs)
        else:
            out = cfg.upgrade(chart, name, req["values"], **kwargs)
    elif action == "uninstall":
        out = cfg.uninstall(name, timeout=timeout, wait="hookOnly")
    elif action == "status":
        out = cfg.status(name)
    elif action == "list":
        out = cfg.list(all_states=True)
    else:
        raise SystemExit("unknown action " + action)
    print(json.dumps({"ok": out}))
except helm_python.HelmError as e:
    print(json.dumps({"error": {"type": type(e).__name__, "message": str(e)}}))
"#;

/// What Helm refused, and why.
#[derive(Debug, Clone)]
pub struct HelmError {
    /// The SDK's exception class, e.g. `HelmReleaseError`.
    pub kind: String,
    pub message: String,
}

/// Helm against one cluster (a kubeconfig) and namespace.
pub struct Helm {
    pub kubeconfig: PathBuf,
    pub namespace: String,
}

impl Helm {
    pub fn new(kubeconfig: &Path, namespace: &str) -> Helm {
        Helm {
            kubeconfig: kubeconfig.to_owned(),
            namespace: namespace.to_owned(),
        }
    }

    /// `helm install RELEASE charts/screenlimit --create-namespace` with `values`.
    pub async fn install(&self, release: &str, values: &Value) -> Result<Value, HelmError> {
        self.run("install", release, values).await
    }

    /// `helm upgrade RELEASE charts/screenlimit` with `values` (not reusing the old ones).
    pub async fn upgrade(&self, release: &str, values: &Value) -> Result<Value, HelmError> {
        self.run("upgrade", release, values).await
    }

    pub async fn uninstall(&self, release: &str) -> Result<Value, HelmError> {
        self.run("uninstall", release, &json!({})).await
    }

    pub async fn status(&self, release: &str) -> Result<Value, HelmError> {
        self.run("status", release, &json!({})).await
    }

    /// Every release in the namespace, whatever its state.
    pub async fn list(&self) -> Result<Value, HelmError> {
        self.run("list", "", &json!({})).await
    }

    async fn run(&self, action: &str, release: &str, values: &Value) -> Result<Value, HelmError> {
        let request = json!({
            "action": action,
            "release": release,
            "namespace": self.namespace,
            "kubeconfig": self.kubeconfig.display().to_string(),
            "chart": workspace_root().join("charts/screenlimit").display().to_string(),
            "values": values,
            "timeout": ACTION.as_secs() - 10,
        });
        let child = tokio::process::Command::new(python())
            .arg("-c")
            .arg(SCRIPT)
            .arg(request.to_string())
            .kill_on_drop(true)
            .output();
        let out = tokio::time::timeout(ACTION, child)
            .await
            .unwrap_or_else(|_| panic!("helm {action} {release} took over {ACTION:?}"))
            .expect("the Helm engine's Python");
        let stdout = String::from_utf8_lossy(&out.stdout);
        let answer: Value = stdout
            .lines()
            .last()
            .and_then(|line| serde_json::from_str(line).ok())
            .unwrap_or_else(|| {
                panic!(
                    "helm {action} {release} gave no answer ({}):\n{stdout}\n{}",
                    out.status,
                    String::from_utf8_lossy(&out.stderr)
                )
            });
        match answer.get("error") {
            Some(error) => Err(HelmError {
                kind: error["type"].as_str().unwrap_or_default().to_owned(),
                message: error["message"].as_str().unwrap_or_default().to_owned(),
            }),
            None => Ok(answer["ok"].clone()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The script and its plumbing, where a venv exists: an unreachable cluster is Helm's
    /// `HelmKubeError`, reported as an answer, not a crash.
    #[tokio::test]
    async fn an_unreachable_cluster_is_an_error_answer() {
        if !workspace_root()
            .join("target/helm-venv/bin/python")
            .is_file()
        {
            println!("skipped: no target/helm-venv (scripts/test-apiserver.sh makes it)");
            return;
        }
        let dir = tempfile::tempdir().unwrap();
        let kubeconfig = dir.path().join("kubeconfig");
        let port = crate::apiserver::process::free_ports(1)[0];
        let pki = crate::apiserver::Pki::make(&dir.path().join("pki"));
        let text = crate::apiserver::kubeconfig::kubeconfig(
            &format!("https://127.0.0.1:{port}"),
            &pki.ca_crt(),
            &crate::apiserver::Credential::Token("t"),
        );
        std::fs::write(&kubeconfig, text).unwrap();
        let helm = Helm::new(&kubeconfig, "screenlimit-system");
        let error = helm
            .install("screenlimit", &json!({}))
            .await
            .expect_err("nothing listens there");
        assert_eq!(error.kind, "HelmKubeError", "{error:?}");
        assert!(error.message.contains("unreachable"), "{error:?}");
    }
}
