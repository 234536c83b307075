//! Suite **apiserver_operator**, on a real Kubernetes API server where `KUBEBUILDER_ASSETS` names
//! one (skipped in one line otherwise): the chart's RBAC (rendered by Helm's engine) applied and
//! the operator run as a local process **as the chart's ServiceAccount** (a token from the
//! TokenRequest API). It reconciles `examples/dev.yaml`: every object its build renders appears
//! with the operator's field manager and an owner reference; the status gets its generation and
//! conditions; a spec change changes the limiter's Deployment and not the Redis StatefulSet;
//! an owned object edited by someone else comes back; the leader-election Lease names it; no
//! RBAC refusal in its log; with the controller-manager present, deleting the `StreamLimiter`
//! garbage-collects what it owned. No pod runs here (there is no kubelet): `Ready` stays false.

use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use k8s_openapi::api::apps::v1::{Deployment, StatefulSet};
use k8s_openapi::api::authentication::v1::TokenRequest;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{Namespace, ServiceAccount};
use kube::api::{Api, DeleteParams, DynamicObject, Patch, PatchParams, PostParams};
use kube::core::{ApiResource, GroupVersionKind};
use screenlimit_operator::build::build;
use screenlimit_operator::crd::StreamLimiter;
use screenlimit_system_tests::apiserver::ApiServer;
use screenlimit_system_tests::apiserver::chart::{self, NAMESPACE};
use screenlimit_system_tests::{binary, workspace_root};
use serde_json::{Value, json};

const ADMIN: &str = "screenlimit-tests";
const WAIT: Duration = Duration::from_secs(60);

/// The operator process, killed when dropped; its output in a file.
struct Operator {
    child: Child,
    log: std::path::PathBuf,
}

impl Operator {
    fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }
}

impl Drop for Operator {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

async fn create_namespace(client: &kube::Client, name: &str) {
    let api: Api<Namespace> = Api::all(client.clone());
    let ns = serde_json::from_value(json!({"metadata": {"name": name}})).unwrap();
    api.create(&PostParams::default(), &ns).await.unwrap();
}

/// Polls `check` until it gives a value, or fails with `what` and the operator's log.
async fn until<T, F, Fut>(what: &str, operator: &Operator, mut check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    let deadline = Instant::now() + WAIT;
    loop {
        if let Some(value) = check().await {
            return value;
        }
        assert!(
            Instant::now() < deadline,
            "never: {what}\n{}",
            operator.log()
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

fn resource(kind: &str) -> ApiResource {
    ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("screenlimit.io", "v1alpha1", kind),
        "streamlimiters",
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_operator_reconciles_the_dev_example_as_the_charts_service_account() {
    let Some(server) = ApiServer::start_or_skip("apiserver_operator").await else {
        return;
    };
    let admin = server.client().await;
    // The CRD, then the chart's RBAC (the ServiceAccount and its roles), as the chart installs
    // them; the operator's Deployment is this test's process instead.
    let crd_text =
        std::fs::read_to_string(workspace_root().join("crds/streamlimiter.yaml")).unwrap();
    let crd: Value = serde_yaml_ng::from_str(&crd_text).unwrap();
    let crds: Api<DynamicObject> = Api::all_with(
        admin.clone(),
        &ApiResource::from_gvk_with_plural(
            &GroupVersionKind::gvk("apiextensions.k8s.io", "v1", "CustomResourceDefinition"),
            "customresourcedefinitions",
        ),
    );
    crds.patch(
        "streamlimiters.screenlimit.io",
        &PatchParams::apply(ADMIN).force(),
        &Patch::Apply(&crd),
    )
    .await
    .unwrap();
    create_namespace(&admin, NAMESPACE).await;
    let rendered = chart::render(&json!({}));
    let mut account = None;
    for object in &rendered {
        let kind = object["kind"].as_str().unwrap_or_default();
        if matches!(
            kind,
            "ServiceAccount" | "ClusterRole" | "ClusterRoleBinding" | "Role" | "RoleBinding"
        ) {
            chart::apply(&admin, object, ADMIN).await;
        }
        if kind == "ServiceAccount" {
            account = object["metadata"]["name"].as_str().map(str::to_owned);
        }
    }
    let account = account.expect("the chart renders a ServiceAccount");
    let accounts: Api<ServiceAccount> = Api::namespaced(admin.clone(), NAMESPACE);
    let request: TokenRequest =
        serde_json::from_value(json!({"spec": {"audiences": [], "expirationSeconds": 3600}}))
            .unwrap();
    let token = accounts
        .create_token_request(&account, &PostParams::default(), &request)
        .await
        .expect("a token for the chart's ServiceAccount")
        .status
        .expect("a token")
        .token;
    let kubeconfig = server.token_kubeconfig("operator", &token);

    let log = server.scratch().join("operator.log");
    let out = std::fs::File::create(&log).unwrap();
    let http_port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let child = Command::new(binary("screenlimit-operator"))
        .args(["--http", &format!("127.0.0.1:{http_port}")])
        .env("KUBECONFIG", &kubeconfig)
        .env("POD_NAMESPACE", NAMESPACE)
        .env("POD_NAME", "operator-0")
        .env("RUST_LOG", "info")
        .stdin(Stdio::null())
        .stdout(out.try_clone().unwrap())
        .stderr(out)
        .spawn()
        .expect("the operator binary");
    let operator = Operator { child, log };

    // The example, as a user applies it.
    create_namespace(&admin, "video").await;
    let text = std::fs::read_to_string(workspace_root().join("examples/dev.yaml")).unwrap();
    let example: Value = serde_yaml_ng::from_str(&text).unwrap();
    let limiters: Api<DynamicObject> =
        Api::namespaced_with(admin.clone(), "video", &resource("StreamLimiter"));
    limiters
        .patch(
            "screenlimit-demo",
            &PatchParams::apply("kubectl"),
            &Patch::Apply(&example),
        )
        .await
        .expect("the API server takes examples/dev.yaml");

    // The status: its generation and the three conditions.
    let typed: Api<StreamLimiter> = Api::namespaced(admin.clone(), "video");
    let sl = until("a status for the current generation", &operator, || async {
        let sl = typed.get("screenlimit-demo").await.ok()?;
        let status = sl.status.as_ref()?;
        let types: Vec<&str> = status.conditions.iter().map(|c| c.type_.as_str()).collect();
        (status.observed_generation == sl.metadata.generation
            && ["Ready", "Progressing", "Degraded"]
                .iter()
                .all(|t| types.contains(t)))
        .then_some(sl.clone())
    })
    .await;

    // Every object the build renders, applied by the operator and owned by the resource.
    let desired = build(&sl).expect("the operator's build of the example");
    let uid = sl.metadata.uid.clone().unwrap();
    let sets: Api<StatefulSet> = Api::namespaced(admin.clone(), "video");
    let deployments: Api<Deployment> = Api::namespaced(admin.clone(), "video");
    let owned_by_operator = |meta: &kube::core::ObjectMeta| {
        let managed = meta
            .managed_fields
            .iter()
            .flatten()
            .any(|m| m.manager.as_deref() == Some(screenlimit_operator::names::FIELD_MANAGER));
        let owned = meta
            .owner_references
            .iter()
            .flatten()
            .any(|o| o.uid == uid && o.controller == Some(true));
        managed && owned
    };
    for wanted in &desired.stateful_sets {
        let name = wanted.metadata.name.clone().unwrap();
        let got = until(&format!("StatefulSet {name}"), &operator, || async {
            sets.get_opt(&name).await.ok().flatten()
        })
        .await;
        assert!(
            owned_by_operator(&got.metadata),
            "{name}: {:?}",
            got.metadata
        );
    }
    for wanted in &desired.deployments {
        let name = wanted.metadata.name.clone().unwrap();
        let got = until(&format!("Deployment {name}"), &operator, || async {
            deployments.get_opt(&name).await.ok().flatten()
        })
        .await;
        assert!(
            owned_by_operator(&got.metadata),
            "{name}: {:?}",
            got.metadata
        );
    }

    // A spec change: the limiter's replicas move, the Redis StatefulSet's spec does not.
    let limiter_name = desired
        .deployments
        .iter()
        .filter_map(|d| d.metadata.name.clone())
        .find(|n| n.ends_with("-limiter"))
        .expect("the limiter Deployment");
    let redis_name = desired.stateful_sets[0].metadata.name.clone().unwrap();
    let redis_generation = sets.get(&redis_name).await.unwrap().metadata.generation;
    let mut changed = example.clone();
    changed["spec"]["limiter"]["replicas"] = json!(3);
    limiters
        .patch(
            "screenlimit-demo",
            &PatchParams::apply("kubectl"),
            &Patch::Apply(&changed),
        )
        .await
        .unwrap();
    until(
        "the limiter Deployment at 3 replicas",
        &operator,
        || async {
            let d = deployments.get(&limiter_name).await.ok()?;
            (d.spec?.replicas == Some(3)).then_some(())
        },
    )
    .await;
    assert_eq!(
        sets.get(&redis_name).await.unwrap().metadata.generation,
        redis_generation,
        "a limiter change must not touch the Redis StatefulSet"
    );

    // Drift: someone scales the Deployment by hand; the operator puts it back.
    deployments
        .patch(
            &limiter_name,
            &PatchParams::apply("someone-else").force(),
            &Patch::Apply(json!({
                "apiVersion": "apps/v1", "kind": "Deployment",
                "metadata": {"name": limiter_name}, "spec": {"replicas": 7}
            })),
        )
        .await
        .unwrap();
    until("the drift repaired", &operator, || async {
        let d = deployments.get(&limiter_name).await.ok()?;
        (d.spec?.replicas == Some(3)).then_some(())
    })
    .await;

    // Leader election: the Lease in the operator's namespace names this replica.
    let leases: Api<Lease> = Api::namespaced(admin.clone(), NAMESPACE);
    until(
        "the leader-election Lease held by operator-0",
        &operator,
        || async {
            let list = leases.list(&Default::default()).await.ok()?;
            list.items
                .iter()
                .any(|l| {
                    l.spec.as_ref().and_then(|s| s.holder_identity.as_deref()) == Some("operator-0")
                })
                .then_some(())
        },
    )
    .await;

    let log = operator.log();
    assert!(
        !log.to_lowercase().contains("forbidden"),
        "the chart's RBAC refused the operator something:\n{log}"
    );

    // Garbage collection: the owned objects go with the resource (needs the controller-manager).
    if !server.controller_manager {
        println!("skipped garbage collection: no kube-controller-manager in KUBEBUILDER_ASSETS");
        return;
    }
    limiters
        .delete("screenlimit-demo", &DeleteParams::default())
        .await
        .unwrap();
    until("the owned objects garbage-collected", &operator, || async {
        let gone = sets.get_opt(&redis_name).await.ok()?.is_none()
            && deployments.get_opt(&limiter_name).await.ok()?.is_none();
        gone.then_some(())
    })
    .await;
}
