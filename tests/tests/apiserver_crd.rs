//! Suite **apiserver_crd**, on a real Kubernetes API server where `KUBEBUILDER_ASSETS` names
//! one (skipped in one line otherwise): both copies of the CRD (`crds/` and the chart's) are
//! accepted and `Established`; every CEL rule's row of `operator/tests/fixtures/cel-rules.yaml` is
//! refused by the server with the rule's message, and admitted when it keeps the rule; an empty
//! spec comes back with the defaults the README states; a field the schema does not know is
//! refused by server-side apply with strict field validation; `kubectl get` shows the printer
//! columns.

#[path = "../../operator/tests/common/cel_rules.rs"]
mod cel_rules;

use std::time::{Duration, Instant};

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{
    Api, DeleteParams, DynamicObject, Patch, PatchParams, PostParams, ValidationDirective,
};
use kube::core::{ApiResource, GroupVersionKind};
use screenlimit_system_tests::apiserver::ApiServer;
use screenlimit_system_tests::workspace_root;
use serde_json::{Value, json};

const MANAGER: &str = "screenlimit-tests";
const NAMESPACE: &str = "rules";

fn resource() -> ApiResource {
    ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("screenlimit.io", "v1alpha1", "StreamLimiter"),
        "streamlimiters",
    )
}

fn read_crd(copy: &str) -> CustomResourceDefinition {
    let text = std::fs::read_to_string(workspace_root().join(copy)).unwrap();
    serde_yaml_ng::from_str(&text).unwrap_or_else(|e| panic!("{copy}: {e}"))
}

/// Applies a copy of the CRD (server-side) and waits for `Established`.
async fn install_crd(client: &kube::Client, copy: &str) {
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    let crd = read_crd(copy);
    let name = crd.metadata.name.clone().unwrap();
    crds.patch(
        &name,
        &PatchParams::apply(MANAGER).force(),
        &Patch::Apply(&crd),
    )
    .await
    .unwrap_or_else(|e| panic!("the API server refused {copy}: {e}"));
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let got = crds.get(&name).await.unwrap();
        let established = got
            .status
            .as_ref()
            .and_then(|s| s.conditions.as_ref())
            .into_iter()
            .flatten()
            .any(|c| c.type_ == "Established" && c.status == "True");
        if established {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "{copy} never Established: {:?}",
            got.status
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

async fn namespace(client: &kube::Client, name: &str) {
    let namespaces: Api<k8s_openapi::api::core::v1::Namespace> = Api::all(client.clone());
    let ns = serde_json::from_value(json!({"metadata": {"name": name}})).unwrap();
    namespaces
        .create(&PostParams::default(), &ns)
        .await
        .unwrap();
}

/// A fixture object as a user would send it: no server-set metadata, in the test namespace.
fn as_sent(mut object: Value) -> DynamicObject {
    let metadata = object["metadata"].as_object_mut().unwrap();
    for key in ["uid", "generation", "resourceVersion", "creationTimestamp"] {
        metadata.remove(key);
    }
    metadata.insert("namespace".into(), NAMESPACE.into());
    serde_json::from_value(object).expect("a StreamLimiter object")
}

/// Until a deleted object is gone (names repeat between rows).
async fn delete(api: &Api<DynamicObject>, name: &str) {
    let _ = api.delete(name, &DeleteParams::default()).await;
    let deadline = Instant::now() + Duration::from_secs(20);
    while api.get_opt(name).await.unwrap().is_some() {
        assert!(Instant::now() < deadline, "{name} was never deleted");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_crd_and_its_rules_hold_on_a_real_api_server() {
    let Some(server) = ApiServer::start_or_skip("apiserver_crd").await else {
        return;
    };
    let client = server.client().await;
    for copy in [
        "crds/streamlimiter.yaml",
        "charts/screenlimit/crds/streamlimiter.yaml",
    ] {
        install_crd(&client, copy).await;
    }
    namespace(&client, NAMESPACE).await;
    let api: Api<DynamicObject> = Api::namespaced_with(client.clone(), NAMESPACE, &resource());
    let fixtures = workspace_root().join("operator/tests/fixtures");

    let mut problems = Vec::new();
    for row in cel_rules::rule_rows() {
        let rule = format!("{}: {}", row.path, row.message);
        let refused = as_sent(row.object(&fixtures, true));
        match api.create(&PostParams::default(), &refused).await {
            Err(kube::Error::Api(error)) if error.code == 422 => {
                if !error.message.contains(&row.message) {
                    problems.push(format!(
                        "{rule}: refused with another message: {}",
                        error.message
                    ));
                }
            }
            Err(other) => problems.push(format!("{rule}: refused otherwise: {other}")),
            Ok(_) => {
                problems.push(format!("{rule}: the refused object was admitted"));
                delete(&api, refused.metadata.name.as_deref().unwrap()).await;
            }
        }
        let admitted = as_sent(row.object(&fixtures, false));
        let name = admitted.metadata.name.clone().unwrap();
        match api.create(&PostParams::default(), &admitted).await {
            Ok(_) => delete(&api, &name).await,
            Err(error) => {
                problems.push(format!("{rule}: the admitted object was refused: {error}"))
            }
        }
    }
    assert!(problems.is_empty(), "{problems:#?}");

    // Defaults, as the README states them, from the server's own defaulting.
    let empty: DynamicObject = serde_json::from_value(json!({
        "apiVersion": "screenlimit.io/v1alpha1", "kind": "StreamLimiter",
        "metadata": {"name": "defaults", "namespace": NAMESPACE}, "spec": {}
    }))
    .unwrap();
    let created = api.create(&PostParams::default(), &empty).await.unwrap();
    let spec = &created.data["spec"];
    let plans: Vec<(String, i64)> = spec["plans"]
        .as_array()
        .expect("plans defaulted")
        .iter()
        .map(|p| {
            (
                p["name"].as_str().unwrap().to_owned(),
                p["maxStreams"].as_i64().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        plans,
        [
            ("basic".into(), 1),
            ("standard".into(), 2),
            ("premium".into(), 4)
        ],
        "{spec}"
    );
    assert_eq!(spec["defaultPlan"], "basic", "{spec}");
    assert_eq!(
        spec["lease"],
        json!({"heartbeatIntervalSeconds": 30, "ttlSeconds": 90}),
        "{spec}"
    );
    assert_eq!(spec["redis"]["mode"], "managed", "{spec}");
    assert_eq!(spec["redis"]["shards"], 1, "{spec}");
    assert_eq!(spec["limiter"]["replicas"], 2, "{spec}");
    assert_eq!(spec["failurePolicy"]["mode"], "open", "{spec}");
    assert_eq!(spec["failurePolicy"]["storeTimeoutMillis"], 25, "{spec}");

    // A field the schema does not know: refused by server-side apply with Strict validation.
    let mut typo = serde_json::to_value(&empty).unwrap();
    typo["metadata"]["name"] = "typo".into();
    typo["spec"] = json!({"redis": {"shardz": 2}});
    let strict = PatchParams {
        field_validation: Some(ValidationDirective::Strict),
        ..PatchParams::apply(MANAGER)
    };
    match api.patch("typo", &strict, &Patch::Apply(&typo)).await {
        Err(kube::Error::Api(error)) => {
            assert!(error.message.contains("shardz"), "{}", error.message);
        }
        other => panic!("an unknown field was taken: {other:?}"),
    }

    // The printer columns, as `kubectl get streamlimiters` shows them.
    let request = http::Request::get(format!(
        "/apis/screenlimit.io/v1alpha1/namespaces/{NAMESPACE}/streamlimiters"
    ))
    .header("Accept", "application/json;as=Table;v=v1;g=meta.k8s.io")
    .body(Vec::new())
    .unwrap();
    let table: Value = client.request(request).await.unwrap();
    let columns: Vec<&str> = table["columnDefinitions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["name"].as_str().unwrap())
        .collect();
    for column in [
        "Ready",
        "Reason",
        "Mode",
        "Shards",
        "Ready-Shards",
        "Limiters",
        "Ready-Limiters",
        "Age",
    ] {
        assert!(
            columns.contains(&column),
            "{column} missing from {columns:?}"
        );
    }
}
