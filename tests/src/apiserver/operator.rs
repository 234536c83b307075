//! The operator binary as a local process that signs in as the chart's own ServiceAccount: the
//! CRD and the chart's RBAC (rendered by Helm's engine) applied, a token from the TokenRequest
//! API, and the arguments and environment of the chart's Deployment.

use std::path::PathBuf;
use std::time::Duration;

use k8s_openapi::api::authorization::v1::SubjectAccessReview;
use k8s_openapi::api::coordination::v1::Lease;
use kube::api::{Api, PostParams};
use serde_json::{Value, json};

use super::chart::{self, NAMESPACE, RBAC_KINDS};
use super::process::{Process, free_ports};
use super::wait::until;
use super::{ApiServer, objects};

/// The field manager the test's own writes use (the operator's is `names::FIELD_MANAGER`).
pub const ADMIN: &str = "screenlimit-tests";

/// The chart's RBAC and a kubeconfig of its ServiceAccount.
pub struct Setup {
    /// Every object the chart rendered (with default values).
    pub rendered: Vec<Value>,
    /// The ServiceAccount's name (in [`NAMESPACE`]).
    pub account: String,
    /// Signs in as that ServiceAccount.
    pub kubeconfig: PathBuf,
}

impl Setup {
    /// Installs the CRD (`crds/`) and the chart's ServiceAccount and roles, and gets the
    /// ServiceAccount a token.
    pub async fn install(server: &ApiServer) -> Setup {
        let admin = server.client().await;
        objects::install_crd(&admin, "crds/streamlimiter.yaml", ADMIN).await;
        objects::namespace(&admin, NAMESPACE, ADMIN).await;
        let rendered = chart::render(&json!({}));
        for kind in RBAC_KINDS {
            for object in chart::of_kind(&rendered, kind) {
                objects::apply(&admin, object, NAMESPACE, ADMIN).await;
            }
        }
        let account = chart::service_account(&rendered);
        let kubeconfig = server.service_account_kubeconfig(NAMESPACE, &account).await;
        let setup = Setup {
            rendered,
            account,
            kubeconfig,
        };
        // The authorizer learns of new bindings from a watch: asked as the admin (so the
        // operator's own audit trail stays free of refusals) until its first requests pass.
        let user = setup.user();
        for (ns, group, resource, verb) in [
            ("", "screenlimit.io", "streamlimiters", "list"),
            (NAMESPACE, "coordination.k8s.io", "leases", "create"),
        ] {
            authorized(&admin, &user, ns, group, resource, verb).await;
        }
        setup
    }

    /// The user name the API server gives the operator.
    pub fn user(&self) -> String {
        super::audit::service_account_user(NAMESPACE, &self.account)
    }

    /// The rules of every Role and ClusterRole the chart renders.
    pub fn rules(&self) -> Vec<Value> {
        ["ClusterRole", "Role"]
            .iter()
            .flat_map(|kind| chart::of_kind(&self.rendered, kind))
            .map(|role| role["rules"].clone())
            .collect()
    }
}

/// The chart's operator container (in `rendered`): its arguments and literal environment, with
/// the downward-API variables set as a pod named `identity` would have them.
pub fn command_line(rendered: &[Value], identity: &str) -> (Vec<String>, Vec<(String, String)>) {
    let deployments = chart::of_kind(rendered, "Deployment");
    let container = &deployments
        .first()
        .expect("the chart renders the operator's Deployment")["spec"]["template"]["spec"]["containers"]
        [0];
    let args: Vec<String> = container["args"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|a| a.as_str().map(str::to_owned))
        .collect();
    let mut env = Vec::new();
    for var in container["env"].as_array().into_iter().flatten() {
        let name = var["name"].as_str().expect("an env name").to_owned();
        let value = match var["valueFrom"]["fieldRef"]["fieldPath"].as_str() {
            Some("metadata.name") => identity.to_owned(),
            Some("metadata.namespace") => NAMESPACE.to_owned(),
            Some(other) => panic!("the operator's env {name} takes {other}: set it here too"),
            None => var["value"].as_str().unwrap_or_default().to_owned(),
        };
        env.push((name, value));
    }
    (args, env)
}

/// Waits (30 s at most) until `user`, a ServiceAccount, may `verb` `group/resource` (in `ns`,
/// or cluster-wide when empty).
async fn authorized(
    admin: &kube::Client,
    user: &str,
    ns: &str,
    group: &str,
    resource: &str,
    verb: &str,
) {
    let reviews: Api<SubjectAccessReview> = Api::all(admin.clone());
    let ns_group = format!("system:serviceaccounts:{NAMESPACE}");
    let review: SubjectAccessReview = serde_json::from_value(json!({
        "spec": {
            "user": user,
            "groups": ["system:serviceaccounts", ns_group, "system:authenticated"],
            "resourceAttributes": {"namespace": ns, "group": group, "resource": resource, "verb": verb},
        }
    }))
    .expect("a SubjectAccessReview");
    until(
        &format!("{user} allowed to {verb} {group}/{resource} by the chart's RBAC"),
        Duration::from_secs(30),
        || async {
            let answer = reviews.create(&PostParams::default(), &review).await.ok()?;
            answer.status?.allowed.then_some(())
        },
        String::new,
    )
    .await;
}

/// One operator replica; killed (its process group) when dropped.
pub struct Operator {
    pub identity: String,
    process: Process,
}

impl Operator {
    /// Starts `screenlimit-operator` (built beside the test) as the chart's ServiceAccount,
    /// named `identity` in the leader-election Lease.
    pub fn start(server: &ApiServer, setup: &Setup, identity: &str) -> Operator {
        let (mut args, env) = command_line(&setup.rendered, identity);
        args.extend([
            "--http".to_owned(),
            format!("127.0.0.1:{}", free_ports(1)[0]),
        ]);
        let kubeconfig = setup.kubeconfig.display().to_string();
        let mut all: Vec<(&str, &str)> =
            env.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
        all.push(("KUBECONFIG", &kubeconfig));
        let binary = PathBuf::from(crate::binary("screenlimit-operator"));
        let process = Process::spawn(server.scratch(), identity, &binary, &args, &all);
        Operator {
            identity: identity.to_owned(),
            process,
        }
    }

    /// Everything it logged.
    pub fn log(&self) -> String {
        self.process.log()
    }

    /// Its last lines, for a failure message.
    pub fn tail(&self) -> String {
        self.process.tail(40)
    }

    /// Fails the test when the operator has exited.
    pub fn assert_running(&mut self) {
        if let Some(status) = self.process.exited() {
            panic!(
                "operator {} exited ({status}):\n{}",
                self.identity,
                self.process.tail(60)
            );
        }
    }

    /// Kills it at once (no chance to give the Lease up).
    pub fn kill(&mut self) {
        self.process.kill();
    }
}

/// The identity holding the operator's leader-election Lease, once one does.
pub async fn leader(server: &ApiServer, limit: Duration, context: impl Fn() -> String) -> String {
    let leases: Api<Lease> = Api::namespaced(server.client().await, NAMESPACE);
    let name = screenlimit_operator::leader::LEASE_NAME;
    until(
        &format!("a holder of Lease {NAMESPACE}/{name}"),
        limit,
        || async {
            let lease = leases.get_opt(name).await.ok()??;
            lease.spec?.holder_identity.filter(|h| !h.is_empty())
        },
        context,
    )
    .await
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::apiserver::rbac::granted;

    /// With Helm's engine at hand (the venv): the operator runs as the chart runs it, and the
    /// chart's rules read as permissions.
    #[test]
    fn the_chart_gives_the_operator_its_command_line_and_rules() {
        if !crate::workspace_root()
            .join("target/helm-venv/bin/python")
            .is_file()
        {
            println!("skipped: no target/helm-venv (scripts/test-apiserver.sh makes it)");
            return;
        }
        let rendered = chart::render(&json!({}));
        for kind in RBAC_KINDS {
            assert!(
                !chart::of_kind(&rendered, kind).is_empty(),
                "no {kind} rendered"
            );
        }
        assert!(!chart::service_account(&rendered).is_empty());
        let (args, env) = command_line(&rendered, "operator-0");
        assert!(
            !args.contains(&"--no-leader-election".to_owned()),
            "{args:?}"
        );
        let get = |k: &str| env.iter().find(|(n, _)| n == k).map(|(_, v)| v.as_str());
        assert_eq!(get("POD_NAME"), Some("operator-0"));
        assert_eq!(get("POD_NAMESPACE"), Some(NAMESPACE));
        let setup = Setup {
            rendered,
            account: "screenlimit".into(),
            kubeconfig: PathBuf::new(),
        };
        let permissions: Vec<_> = setup.rules().iter().flat_map(granted).collect();
        let has = |g: &str, r: &str, v: &str| {
            permissions.iter().any(|p| p.0 == g && p.1 == r && p.2 == v)
        };
        assert!(
            has("coordination.k8s.io", "leases", "patch"),
            "{permissions:?}"
        );
        assert!(
            has("screenlimit.io", "streamlimiters/status", "patch"),
            "{permissions:?}"
        );
        assert_eq!(
            setup.user(),
            "system:serviceaccount:screenlimit-system:screenlimit"
        );
    }
}
