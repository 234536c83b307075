//! Suite **apiserver_crd**, on a real Kubernetes API server where `KUBEBUILDER_ASSETS` names
//! one (skipped in one line otherwise): both copies of the CRD (`crds/` and the chart's) are
//! taken and `Established`; every row of `operator/tests/fixtures/cel-rules.yaml` is refused by
//! the server with its rule's message, and admitted once it keeps the rule; an empty spec comes
//! back with the documented defaults, the same the operator's own types fill in; a field the
//! schema does not know is refused by strict server-side apply; a `Table` (what `kubectl get`
//! shows) has the printer columns.

#[path = "../../operator/tests/common/cel_rules.rs"]
mod cel_rules;

use std::time::Duration;

use kube::api::{
    Api, DeleteParams, DynamicObject, Patch, PatchParams, PostParams, ValidationDirective,
};
use kube::core::{ApiResource, GroupVersionKind};
use screenlimit_operator::crd::StreamLimiterSpec;
use screenlimit_system_tests::apiserver::ApiServer;
use screenlimit_system_tests::apiserver::objects::{as_sent, install_crd, namespace};
use screenlimit_system_tests::apiserver::wait::until;
use screenlimit_system_tests::workspace_root;
use serde_json::{Value, json};

const MANAGER: &str = "screenlimit-tests";
const NAMESPACE: &str = "rules";
const COPIES: [&str; 2] = [
    "crds/streamlimiter.yaml",
    "charts/screenlimit/crds/streamlimiter.yaml",
];

fn streamlimiters(client: &kube::Client) -> Api<DynamicObject> {
    let resource = ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("screenlimit.io", "v1alpha1", "StreamLimiter"),
        "streamlimiters",
    );
    Api::namespaced_with(client.clone(), NAMESPACE, &resource)
}

/// Both copies, each applied over the other as a CRD update would be.
async fn install_both(server: &ApiServer) -> kube::Client {
    let client = server.client().await;
    for copy in COPIES {
        install_crd(&client, copy, MANAGER).await;
    }
    namespace(&client, NAMESPACE, MANAGER).await;
    client
}

/// Deletes `name` and waits until it is gone (rows reuse names).
async fn delete(api: &Api<DynamicObject>, name: &str) {
    let _ = api.delete(name, &DeleteParams::default()).await;
    until(
        &format!("{name} deleted"),
        Duration::from_secs(20),
        || async { api.get_opt(name).await.ok()?.is_none().then_some(()) },
        String::new,
    )
    .await;
}

fn object(value: Value) -> DynamicObject {
    serde_json::from_value(value).expect("a StreamLimiter object")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_cel_rule_refuses_and_admits_as_its_row_says() {
    let Some(server) = ApiServer::start_or_skip("apiserver_crd (CEL rules)").await else {
        return;
    };
    let client = install_both(&server).await;
    let api = streamlimiters(&client);
    let fixtures = workspace_root().join("operator/tests/fixtures");
    let mut problems = Vec::new();
    let rows = cel_rules::rule_rows();
    assert!(!rows.is_empty(), "cel-rules.yaml has no rows");
    for row in &rows {
        let rule = format!("{} `{}`", row.path, row.message);
        let refused = object(as_sent(row.object(&fixtures, true), NAMESPACE));
        match api.create(&PostParams::default(), &refused).await {
            Err(kube::Error::Api(error)) if error.code == 422 => {
                if !error.message.contains(&row.message) {
                    problems.push(format!(
                        "{rule}: refused with another message: {}",
                        error.message
                    ));
                }
            }
            Err(other) => problems.push(format!(
                "{rule}: refused, but not as invalid (422): {other}"
            )),
            Ok(_) => {
                problems.push(format!("{rule}: the object breaking it was admitted"));
                delete(&api, refused.metadata.name.as_deref().unwrap()).await;
            }
        }
        let admitted = object(as_sent(row.object(&fixtures, false), NAMESPACE));
        let name = admitted.metadata.name.clone().expect("a fixture name");
        match api.create(&PostParams::default(), &admitted).await {
            Ok(_) => delete(&api, &name).await,
            Err(error) => problems.push(format!(
                "{rule}: the object keeping it was refused: {error}"
            )),
        }
    }
    assert!(
        problems.is_empty(),
        "{} of {} rows disagree with the API server:\n{}",
        problems.len(),
        rows.len(),
        problems.join("\n")
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_empty_spec_gets_the_documented_defaults() {
    let Some(server) = ApiServer::start_or_skip("apiserver_crd (defaults)").await else {
        return;
    };
    let client = install_both(&server).await;
    let api = streamlimiters(&client);
    let empty = object(json!({
        "apiVersion": "screenlimit.io/v1alpha1", "kind": "StreamLimiter",
        "metadata": {"name": "defaults", "namespace": NAMESPACE}, "spec": {}
    }));
    let created = api
        .create(&PostParams::default(), &empty)
        .await
        .expect("the API server takes an empty spec");
    let spec = &created.data["spec"];
    // As docs/crd-reference.md states them.
    assert_eq!(
        spec["plans"],
        json!([
            {"name": "basic", "maxStreams": 1},
            {"name": "standard", "maxStreams": 2},
            {"name": "premium", "maxStreams": 4}
        ]),
        "{spec:#}"
    );
    let expected = [
        ("/defaultPlan", json!("basic")),
        ("/lease/heartbeatIntervalSeconds", json!(30)),
        ("/lease/ttlSeconds", json!(90)),
        ("/redis/mode", json!("managed")),
        ("/redis/shards", json!(1)),
        ("/redis/replicasPerShard", json!(0)),
        ("/redis/persistence", json!("none")),
        ("/limiter/replicas", json!(2)),
        ("/failurePolicy/mode", json!("open")),
        ("/failurePolicy/storeTimeoutMillis", json!(25)),
        ("/planSource/kind", json!("request")),
        ("/networkPolicies/enabled", json!(true)),
        ("/adminUI/enabled", json!(false)),
    ];
    for (pointer, want) in expected {
        assert_eq!(
            spec.pointer(pointer),
            Some(&want),
            "spec{pointer}: {spec:#}"
        );
    }
    // The operator's types fill in the same: what the server stored reads back as `{}` does.
    let from_server: StreamLimiterSpec = serde_json::from_value(spec.clone())
        .expect("the defaulted spec reads as the operator's type");
    let from_types: StreamLimiterSpec = serde_json::from_value(json!({})).unwrap();
    assert_eq!(
        serde_json::to_value(&from_server).unwrap(),
        serde_json::to_value(&from_types).unwrap(),
        "the CRD's schema defaults and the operator's serde defaults differ"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unknown_fields_are_refused_and_kubectl_shows_the_printer_columns() {
    let Some(server) = ApiServer::start_or_skip("apiserver_crd (fields, columns)").await else {
        return;
    };
    let client = install_both(&server).await;
    let api = streamlimiters(&client);
    let typo = json!({
        "apiVersion": "screenlimit.io/v1alpha1", "kind": "StreamLimiter",
        "metadata": {"name": "typo", "namespace": NAMESPACE},
        "spec": {"redis": {"shardz": 2}}
    });
    let strict = PatchParams {
        field_validation: Some(ValidationDirective::Strict),
        ..PatchParams::apply(MANAGER)
    };
    match api.patch("typo", &strict, &Patch::Apply(&typo)).await {
        Err(kube::Error::Api(error)) => {
            assert!(
                error.message.contains("shardz"),
                "the refusal names the field: {error:?}"
            );
        }
        other => panic!("strict server-side apply took an unknown field: {other:?}"),
    }
    let fine = json!({
        "apiVersion": "screenlimit.io/v1alpha1", "kind": "StreamLimiter",
        "metadata": {"name": "shown", "namespace": NAMESPACE}, "spec": {}
    });
    api.patch("shown", &strict, &Patch::Apply(&fine))
        .await
        .expect("strict server-side apply of a known spec");

    let request = http::Request::get(format!(
        "/apis/screenlimit.io/v1alpha1/namespaces/{NAMESPACE}/streamlimiters"
    ))
    .header("Accept", "application/json;as=Table;v=v1;g=meta.k8s.io")
    .body(Vec::new())
    .unwrap();
    let table: Value = client.request(request).await.expect("a Table");
    let columns: Vec<&str> = table["columnDefinitions"]
        .as_array()
        .unwrap_or_else(|| panic!("not a Table: {table}"))
        .iter()
        .filter_map(|c| c["name"].as_str())
        .collect();
    assert_eq!(
        columns,
        [
            "Name",
            "Ready",
            "Reason",
            "Mode",
            "Shards",
            "Ready-Shards",
            "Limiters",
            "Ready-Limiters",
            "Age"
        ],
        "{table:#}"
    );
    let rows = table["rows"].as_array().expect("rows");
    assert_eq!(rows.len(), 1, "{table:#}");
    assert_eq!(rows[0]["cells"][0], "shown");
}
