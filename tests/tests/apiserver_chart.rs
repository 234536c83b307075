//! Suite **apiserver_chart**, on a real Kubernetes API server where `KUBEBUILDER_ASSETS` names
//! one (skipped in one line otherwise): the Helm chart installed, upgraded and uninstalled for
//! real by Helm v4's own engine (PyPI `helm-python-sdk`) with the test's kubeconfig. Values the
//! chart's schema refuses install nothing; an install creates the CRD (`Established`) and every
//! object of the release, each labelled and annotated as Helm's; an upgrade with other values
//! changes the Deployment, moves the operator's rules from a ClusterRole to a Role and adds the
//! chart's example StreamLimiter (which the CRD's rules must take); an uninstall removes every
//! object but the CRD, which Helm never deletes.

use std::time::Duration;

use serde::Deserialize;
use serde_json::{Value, json};

use screenlimit_system_tests::apiserver::ApiServer;
use screenlimit_system_tests::apiserver::chart::{NAMESPACE, RELEASE};
use screenlimit_system_tests::apiserver::helm::Helm;
use screenlimit_system_tests::apiserver::objects::{self, describe, established, live};
use screenlimit_system_tests::apiserver::wait::until;
use screenlimit_system_tests::workspace_root;

const CRD: &str = "streamlimiters.screenlimit.io";

fn chart_metadata() -> Value {
    let path = workspace_root().join("charts/screenlimit/Chart.yaml");
    let text = std::fs::read_to_string(&path).unwrap();
    serde_yaml_ng::from_str(&text).unwrap()
}

/// The least minor version `kubeVersion: ">=1.N…"` admits (`None`: no such bound).
fn least_minor(constraint: &str) -> Option<u32> {
    let rest = constraint
        .trim()
        .strip_prefix(">=")?
        .trim()
        .strip_prefix("1.")?;
    rest.split(|c: char| !c.is_ascii_digit())
        .next()?
        .parse()
        .ok()
}

/// The objects of a release's manifest (YAML documents).
fn manifest_objects(release: &Value) -> Vec<Value> {
    let text = release["manifest"]
        .as_str()
        .expect("a release with its manifest");
    serde_yaml_ng::Deserializer::from_str(text)
        .filter_map(|doc| Value::deserialize(doc).ok())
        .filter(|v| v.is_object())
        .collect()
}

/// Every object is labelled and annotated as the chart's templates and Helm make it.
fn assert_helm_owns(object: &Value, chart: &Value) {
    let what = describe(object);
    let labels = &object["metadata"]["labels"];
    let version = chart["version"].as_str().unwrap();
    assert_eq!(
        labels["app.kubernetes.io/managed-by"], "Helm",
        "{what}: {labels}"
    );
    assert_eq!(
        labels["app.kubernetes.io/instance"], RELEASE,
        "{what}: {labels}"
    );
    assert_eq!(
        labels["helm.sh/chart"],
        format!("screenlimit-{version}"),
        "{what}: {labels}"
    );
    let annotations = &object["metadata"]["annotations"];
    assert_eq!(
        annotations["meta.helm.sh/release-name"], RELEASE,
        "{what}: {annotations}"
    );
    assert_eq!(
        annotations["meta.helm.sh/release-namespace"], NAMESPACE,
        "{what}: {annotations}"
    );
}

async fn live_json(client: &kube::Client, object: &Value) -> Option<Value> {
    let got = live(client, object, NAMESPACE).await?;
    Some(serde_json::to_value(got).unwrap())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn helm_installs_upgrades_and_uninstalls_the_chart() {
    let Some(server) = ApiServer::start_or_skip("apiserver_chart").await else {
        return;
    };
    let client = server.client().await;
    let helm = Helm::new(&server.kubeconfig, NAMESPACE);
    let chart = chart_metadata();

    // A cluster older than the chart's kubeVersion: Helm must refuse, and that is all to see.
    let version = client
        .apiserver_version()
        .await
        .expect("the server's version");
    let minor: u32 = version
        .minor
        .trim_end_matches('+')
        .parse()
        .unwrap_or(u32::MAX);
    if let Some(least) = chart["kubeVersion"].as_str().and_then(least_minor)
        && minor < least
    {
        let refused = helm.install(RELEASE, &json!({})).await;
        let error = refused.expect_err("Helm installed on a Kubernetes older than kubeVersion");
        assert!(error.message.contains("kubeVersion"), "{error:?}");
        println!(
            "apiserver_chart: Kubernetes {} is older than the chart's kubeVersion {}: Helm refuses \
             it, as it should; nothing more to check",
            version.git_version, chart["kubeVersion"]
        );
        return;
    }

    // Values the schema refuses: no release, no operator.
    let error = helm
        .install(RELEASE, &json!({"logFormat": "xml", "replicaCount": -1}))
        .await
        .expect_err("values.schema.json lets logFormat: xml through");
    assert!(
        error.message.contains("logFormat") && error.message.contains("replicaCount"),
        "the refusal names both values: {error:?}"
    );
    assert_no_release(&helm).await;

    // Install.
    let installed = helm
        .install(RELEASE, &json!({}))
        .await
        .expect("helm install");
    assert_eq!(installed["status"], "deployed", "{installed:#}");
    assert_eq!(installed["revision"], 1);
    established(&client, CRD).await;
    let objects = manifest_objects(&installed);
    let kinds: Vec<&str> = objects.iter().filter_map(|o| o["kind"].as_str()).collect();
    for kind in [
        "ServiceAccount",
        "ClusterRole",
        "ClusterRoleBinding",
        "Role",
        "RoleBinding",
        "Deployment",
        "Service",
    ] {
        assert!(
            kinds.contains(&kind),
            "the release has no {kind}: {kinds:?}"
        );
    }
    for object in &objects {
        let got = live_json(&client, object)
            .await
            .unwrap_or_else(|| panic!("{} is not in the API server", describe(object)));
        assert_helm_owns(&got, &chart);
    }
    let deployment = objects
        .iter()
        .find(|o| o["kind"] == "Deployment")
        .unwrap()
        .clone();
    let account = objects
        .iter()
        .find(|o| o["kind"] == "ServiceAccount")
        .unwrap();
    let live_deployment = live_json(&client, &deployment).await.unwrap();
    assert_eq!(
        live_deployment["spec"]["template"]["spec"]["serviceAccountName"],
        account["metadata"]["name"],
        "the operator runs as the chart's ServiceAccount"
    );
    let cluster_role = objects
        .iter()
        .find(|o| o["kind"] == "ClusterRole")
        .unwrap()
        .clone();

    // Upgrade: two replicas, text logs, one watched namespace (a Role there instead).
    objects::namespace(&client, "video", "screenlimit-tests").await;
    // The chart's example StreamLimiter too: the CRD's own rules must take it.
    let values = json!({
        "replicaCount": 2, "logFormat": "text", "watchNamespace": "video",
        "example": {"enabled": true}
    });
    let upgraded = helm.upgrade(RELEASE, &values).await.expect("helm upgrade");
    assert_eq!(upgraded["status"], "deployed", "{upgraded:#}");
    assert_eq!(upgraded["revision"], 2);
    let upgraded_objects = manifest_objects(&upgraded);
    assert!(
        upgraded_objects
            .iter()
            .any(|o| o["kind"] == "StreamLimiter"),
        "the upgrade has no example StreamLimiter"
    );
    for object in &upgraded_objects {
        let got = live_json(&client, object)
            .await
            .unwrap_or_else(|| panic!("{} is not in the API server", describe(object)));
        assert_helm_owns(&got, &chart);
    }
    let live_deployment = live_json(&client, &deployment).await.unwrap();
    assert_eq!(live_deployment["spec"]["replicas"], 2);
    let env = &live_deployment["spec"]["template"]["spec"]["containers"][0]["env"];
    let var = |name: &str| {
        env.as_array()
            .into_iter()
            .flatten()
            .find(|v| v["name"] == name)
            .map(|v| v["value"].clone())
    };
    assert_eq!(
        var("SCREENLIMIT_WATCH_NAMESPACE"),
        Some(json!("video")),
        "{env}"
    );
    assert_eq!(var("SCREENLIMIT_LOG_FORMAT"), Some(json!("text")), "{env}");
    until(
        "the ClusterRole removed by the upgrade",
        Duration::from_secs(30),
        || async {
            live(&client, &cluster_role, NAMESPACE)
                .await
                .is_none()
                .then_some(())
        },
        String::new,
    )
    .await;
    let role = json!({
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
        "metadata": {"name": cluster_role["metadata"]["name"], "namespace": "video"}
    });
    let live_role = live_json(&client, &role)
        .await
        .expect("the operator's Role in video");
    assert_eq!(
        live_role["rules"], cluster_role["rules"],
        "the Role grants what the ClusterRole did"
    );
    let status = helm.status(RELEASE).await.expect("helm status");
    assert_eq!(status["revision"], 2);

    // Uninstall: every object of the release goes, the CRD stays.
    helm.uninstall(RELEASE).await.expect("helm uninstall");
    for object in &upgraded_objects {
        until(
            &format!("{} removed by helm uninstall", describe(object)),
            Duration::from_secs(60),
            || async {
                live(&client, object, NAMESPACE)
                    .await
                    .is_none()
                    .then_some(())
            },
            String::new,
        )
        .await;
    }
    established(&client, CRD).await;
    assert_no_release(&helm).await;
}

async fn assert_no_release(helm: &Helm) {
    let releases = helm.list().await.expect("helm list");
    let none = releases.is_null() || releases.as_array().is_some_and(Vec::is_empty);
    assert!(none, "a release is left: {releases:#}");
}

#[test]
fn the_kube_version_bound_is_read() {
    assert_eq!(least_minor(">=1.33.0-0"), Some(33));
    assert_eq!(least_minor(">= 1.30"), Some(30));
    assert_eq!(least_minor("^1.30"), None);
    let chart = chart_metadata();
    if let Some(constraint) = chart["kubeVersion"].as_str() {
        assert!(
            least_minor(constraint).is_some(),
            "kubeVersion {constraint} is not read here"
        );
    }
}
