//! The reconciler against a mocked API server (the "API server verifier" of controller-rs):
//! every request is recorded and answered like the API server would; the tests assert the
//! calls, their field manager, the status patch and the deletes.

mod common;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::fixture;
use http::{Method, Request, Response, StatusCode};
use kube::client::Body;
use kube::core::DeserializeGuard;
use kube::core::error_boundary::InvalidObject;
use kube::{Client, Resource};
use screenlimit_operator::crd::StreamLimiter;
use screenlimit_operator::metrics::Metrics;
use screenlimit_operator::reconcile::{Context, error_policy, reconcile};
use serde_json::{Value, json};

const NOW: &str = "2026-01-02T03:04:05Z";
/// Where the operator asks which Prometheus Operator kinds are served.
const MONITORING_DISCOVERY: &str = "/apis/monitoring.coreos.com/v1";

#[derive(Clone, Debug)]
struct Call {
    method: Method,
    path: String,
    query: String,
    body: Value,
}

/// How the fake API server answers.
#[derive(Clone, Default)]
struct Scenario {
    /// The StreamLimiter returned by status patches.
    object: Value,
    /// Items returned by list calls, by resource plural ("statefulsets", ...).
    lists: Vec<(&'static str, Value)>,
    /// The stream id Secret already exists.
    secret_exists: bool,
    /// Requests whose path contains this string fail with 500.
    fail_on: Option<&'static str>,
    /// The `monitoring.coreos.com/v1` resources the cluster serves; `None`: the group is not
    /// served at all (404).
    monitoring_served: Option<Vec<&'static str>>,
    /// Discovery runs before the reconcile, as the operator does at start.
    discover_first: bool,
    /// What each limiter pod's `/metrics` answers through the pod proxy, by pod name.
    pod_metrics: Vec<(&'static str, String)>,
}

fn status_body(code: u16, reason: &str) -> Value {
    json!({"apiVersion": "v1", "kind": "Status", "metadata": {}, "status": "Failure",
           "message": format!("fake {reason}"), "reason": reason, "code": code})
}

fn respond(scenario: &Scenario, call: &Call) -> (StatusCode, Value) {
    if let Some(fail) = scenario.fail_on
        && call.path.contains(fail)
    {
        return (
            StatusCode::INTERNAL_SERVER_ERROR,
            status_body(500, "InternalError"),
        );
    }
    match call.method {
        Method::GET if call.path == MONITORING_DISCOVERY => match &scenario.monitoring_served {
            None => (StatusCode::NOT_FOUND, status_body(404, "NotFound")),
            Some(plurals) => (
                StatusCode::OK,
                json!({"kind": "APIResourceList", "apiVersion": "v1",
                       "groupVersion": "monitoring.coreos.com/v1",
                       "resources": plurals.iter().map(|p| json!({
                           "name": p, "singularName": "", "namespaced": true,
                           "kind": if *p == "servicemonitors" { "ServiceMonitor" } else { "PrometheusRule" },
                           "verbs": ["get", "list", "watch", "create", "patch", "delete"]})).collect::<Vec<_>>()}),
            ),
        },
        Method::GET if call.path.ends_with("/proxy/metrics") => {
            let pod = call.path.split('/').nth(6).unwrap_or_default();
            let pod = pod.split(':').next().unwrap_or_default();
            match scenario.pod_metrics.iter().find(|(name, _)| *name == pod) {
                Some((_, text)) => (StatusCode::OK, Value::String(text.clone())),
                None => (
                    StatusCode::SERVICE_UNAVAILABLE,
                    status_body(503, "ServiceUnavailable"),
                ),
            }
        }
        Method::GET => {
            let plural = call.path.rsplit('/').next().unwrap();
            let items: Vec<Value> = scenario
                .lists
                .iter()
                .filter(|(p, _)| *p == plural)
                .map(|(_, v)| v.clone())
                .collect();
            (
                StatusCode::OK,
                json!({"apiVersion": "v1", "kind": "List", "metadata": {"resourceVersion": "1"}, "items": items}),
            )
        }
        Method::POST if call.path.ends_with("/secrets") && scenario.secret_exists => {
            (StatusCode::CONFLICT, status_body(409, "AlreadyExists"))
        }
        Method::PATCH if call.path.ends_with("/status") => {
            let mut object = scenario.object.clone();
            object["status"] = call.body["status"].clone();
            (StatusCode::OK, object)
        }
        Method::DELETE => (
            StatusCode::OK,
            json!({"apiVersion": "v1", "kind": "Status", "metadata": {}, "status": "Success"}),
        ),
        _ => (StatusCode::OK, call.body.clone()),
    }
}

/// Runs one reconcile of `object` against the fake server; returns the result and the calls.
async fn run(
    object: DeserializeGuard<StreamLimiter>,
    scenario: Scenario,
) -> (
    Result<kube::runtime::controller::Action, screenlimit_operator::error::Error>,
    Vec<Call>,
    Arc<Context>,
    Arc<DeserializeGuard<StreamLimiter>>,
) {
    let discover_first = scenario.discover_first;
    let (service, mut handle) = tower_test::mock::pair::<Request<Body>, Response<Body>>();
    let calls = Arc::new(Mutex::new(Vec::new()));
    let recorded = calls.clone();
    let server = tokio::spawn(async move {
        while let Some((request, send)) = handle.next_request().await {
            let (parts, body) = request.into_parts();
            let bytes = body.collect_bytes().await.unwrap();
            let call = Call {
                method: parts.method.clone(),
                path: parts.uri.path().to_owned(),
                query: parts.uri.query().unwrap_or_default().to_owned(),
                body: serde_json::from_slice(&bytes).unwrap_or(Value::Null),
            };
            let (status, reply) = respond(&scenario, &call);
            recorded.lock().unwrap().push(call);
            // A text reply (a pod's /metrics through the proxy) goes as it is.
            let (content_type, bytes) = match reply {
                Value::String(text) => ("text/plain; version=0.0.4", text.into_bytes()),
                json => ("application/json", serde_json::to_vec(&json).unwrap()),
            };
            let response = Response::builder()
                .status(status)
                .header("content-type", content_type)
                .body(Body::from(bytes))
                .unwrap();
            send.send_response(response);
        }
    });
    let client = Client::new(service, "default");
    let ctx = Arc::new(
        Context::new(client, Arc::new(Metrics::default()), Some("test".into()))
            .with_clock(|| NOW.to_owned()),
    );
    if discover_first {
        ctx.monitoring_api
            .discover(&ctx.client)
            .await
            .expect("discovery at start");
    }
    let object = Arc::new(object);
    let result = tokio::time::timeout(
        Duration::from_secs(10),
        reconcile(object.clone(), ctx.clone()),
    )
    .await
    .expect("reconcile finished");
    server.abort();
    let calls = calls.lock().unwrap().clone();
    (result, calls, ctx, object)
}

fn scenario_for(sl: &StreamLimiter) -> Scenario {
    Scenario {
        object: serde_json::to_value(sl).unwrap(),
        ..Scenario::default()
    }
}

/// Calls other than Events, as "METHOD path".
fn api_calls(calls: &[Call]) -> Vec<String> {
    calls
        .iter()
        .filter(|c| !c.path.contains("/events"))
        .map(|c| format!("{} {}", c.method, c.path))
        .collect()
}

fn event_reasons(calls: &[Call]) -> Vec<String> {
    calls
        .iter()
        .filter(|c| c.path.contains("/events") && c.method == Method::POST)
        .map(|c| c.body["reason"].as_str().unwrap_or_default().to_owned())
        .collect()
}

fn status_patch(calls: &[Call]) -> Value {
    calls
        .iter()
        .find(|c| c.path.ends_with("/status"))
        .expect("a status patch")
        .body["status"]
        .clone()
}

fn condition<'a>(status: &'a Value, type_: &str) -> &'a Value {
    status["conditions"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["type"] == type_)
        .unwrap()
}

/// An object the instance `demo` owns, as a list item.
fn owned(kind: &str, api_version: &str, name: &str, uid: &str) -> Value {
    json!({"apiVersion": api_version, "kind": kind, "metadata": {
        "name": name, "namespace": "video",
        "labels": {"app.kubernetes.io/name": "screenlimit", "app.kubernetes.io/instance": "demo",
                   "app.kubernetes.io/managed-by": "screenlimit-operator"},
        "ownerReferences": [{"apiVersion": "screenlimit.io/v1alpha1", "kind": "StreamLimiter",
                             "name": "demo", "uid": uid, "controller": true}]}})
}

const UID: &str = "7c0e5a52-0000-4000-8000-000000000001";

#[tokio::test]
async fn first_reconcile_applies_everything_with_one_field_manager_then_patches_status() {
    let sl = fixture("managed.yaml");
    let (result, calls, _, _) = run(DeserializeGuard(Ok(sl.clone())), scenario_for(&sl)).await;
    result.unwrap();
    let ns = "/api/v1/namespaces/video";
    let apps = "/apis/apps/v1/namespaces/video";
    let net = "/apis/networking.k8s.io/v1/namespaces/video";
    assert_eq!(
        api_calls(&calls),
        [
            format!("GET {apps}/statefulsets"),
            format!("GET {apps}/deployments"),
            format!("GET {ns}/services"),
            format!("GET {ns}/configmaps"),
            "GET /apis/policy/v1/namespaces/video/poddisruptionbudgets".to_owned(),
            format!("GET {net}/networkpolicies"),
            "GET /apis/autoscaling/v2/namespaces/video/horizontalpodautoscalers".to_owned(),
            format!("POST {ns}/secrets"),
            format!("POST {ns}/secrets"),
            format!("PATCH {net}/networkpolicies/demo-redis"),
            format!("PATCH {net}/networkpolicies/demo-limiter"),
            format!("PATCH {ns}/services/demo-redis-0"),
            format!("PATCH {ns}/services/demo-redis-1"),
            format!("PATCH {ns}/services/demo-limiter"),
            format!("PATCH {ns}/configmaps/demo-limiter"),
            "PATCH /apis/policy/v1/namespaces/video/poddisruptionbudgets/demo-limiter".to_owned(),
            format!("PATCH {apps}/deployments/demo-limiter"),
            format!("PATCH {apps}/statefulsets/demo-redis-0"),
            format!("PATCH {apps}/statefulsets/demo-redis-1"),
            format!("GET {ns}/pods"),
            "PATCH /apis/screenlimit.io/v1alpha1/namespaces/video/streamlimiters/demo/status"
                .to_owned(),
        ]
    );
    // Lists select by this instance's labels.
    for list in calls.iter().filter(|c| c.method == Method::GET) {
        assert!(
            list.query.contains("app.kubernetes.io%2Finstance%3Ddemo"),
            "{}",
            list.query
        );
    }
    // Every apply: server-side apply, one field manager, forced.
    for patch in calls.iter().filter(|c| c.method == Method::PATCH) {
        assert!(
            patch.query.contains("fieldManager=screenlimit-operator"),
            "{}",
            patch.query
        );
        assert!(patch.query.contains("force=true"), "{}", patch.query);
        assert!(patch.body["apiVersion"].is_string() && patch.body["kind"].is_string());
    }
    // The Secrets: the stream id key (32 random bytes) and the managed Redis passwords, each
    // owned by the resource.
    let secrets: Vec<&Call> = calls
        .iter()
        .filter(|c| c.path.ends_with("/secrets"))
        .collect();
    let auth = secrets[1];
    assert!(auth.query.contains("fieldManager=screenlimit-operator"));
    assert_eq!(auth.body["metadata"]["name"], "demo-redis-auth");
    assert_eq!(auth.body["metadata"]["ownerReferences"][0]["uid"], UID);
    for key in ["redis-password", "limiter-password", "sentinel-password"] {
        assert_eq!(
            auth.body["stringData"][key].as_str().unwrap().len(),
            64,
            "{key}"
        );
    }
    let secret = secrets[0];
    assert!(secret.query.contains("fieldManager=screenlimit-operator"));
    assert_eq!(secret.body["metadata"]["name"], "demo-stream-id");
    assert_eq!(secret.body["metadata"]["ownerReferences"][0]["uid"], UID);
    assert_eq!(
        secret.body["stringData"]["stream-id-secret"]
            .as_str()
            .unwrap()
            .len(),
        44
    );
    assert_eq!(
        event_reasons(&calls),
        ["StreamIdSecretCreated", "RedisAuthSecretCreated"]
    );

    // The status: nothing is ready yet, the rollout is progressing, nothing degraded.
    let status = status_patch(&calls);
    assert_eq!(status["observedGeneration"], 3);
    assert_eq!(status["readyShards"], 0);
    assert_eq!(status["limiterReadyReplicas"], 0);
    assert_eq!(status["shards"].as_array().unwrap().len(), 2);
    assert_eq!(status["shards"][1]["name"], "demo-redis-1");
    assert_eq!(status["shards"][1]["ready"], false);
    let ready = condition(&status, "Ready");
    assert_eq!(
        (ready["status"].as_str(), ready["reason"].as_str()),
        (Some("False"), Some("ComponentsNotReady"))
    );
    assert_eq!(ready["lastTransitionTime"], NOW);
    assert_eq!(condition(&status, "Progressing")["status"], "True");
    assert_eq!(condition(&status, "Degraded")["status"], "False");
}

#[tokio::test]
async fn an_existing_secret_is_kept_and_unwanted_objects_are_deleted() {
    let mut sl = fixture("managed.yaml");
    sl.spec.redis.shards = 1;
    let mut scenario = scenario_for(&sl);
    scenario.secret_exists = true;
    scenario.lists = vec![
        (
            "statefulsets",
            owned("StatefulSet", "apps/v1", "demo-redis-1", UID),
        ),
        ("services", owned("Service", "v1", "demo-redis-1", UID)),
        (
            "deployments",
            owned("Deployment", "apps/v1", "demo-admin-ui", UID),
        ),
        ("services", owned("Service", "v1", "demo-admin-ui", UID)),
        (
            "networkpolicies",
            owned(
                "NetworkPolicy",
                "networking.k8s.io/v1",
                "demo-admin-ui",
                UID,
            ),
        ),
        // Same labels, another owner: never touched.
        (
            "deployments",
            owned("Deployment", "apps/v1", "demo-other", "someone-else"),
        ),
    ];
    let (result, calls, _, _) = run(DeserializeGuard(Ok(sl)), scenario).await;
    result.unwrap();
    let deletes: Vec<_> = api_calls(&calls)
        .into_iter()
        .filter(|c| c.starts_with("DELETE"))
        .collect();
    assert_eq!(
        deletes,
        [
            "DELETE /apis/apps/v1/namespaces/video/statefulsets/demo-redis-1",
            "DELETE /apis/apps/v1/namespaces/video/deployments/demo-admin-ui",
            "DELETE /api/v1/namespaces/video/services/demo-redis-1",
            "DELETE /api/v1/namespaces/video/services/demo-admin-ui",
            "DELETE /apis/networking.k8s.io/v1/namespaces/video/networkpolicies/demo-admin-ui",
        ]
    );
    // 409 on the Secrets is fine (never rotated, never read); no event for them.
    assert!(!event_reasons(&calls).contains(&"StreamIdSecretCreated".to_owned()));
    assert!(!event_reasons(&calls).contains(&"RedisAuthSecretCreated".to_owned()));
    let events: Vec<_> = calls
        .iter()
        .filter(|c| c.path.contains("/events"))
        .map(|c| {
            (
                c.method.to_string(),
                c.body["reason"].clone(),
                c.body["related"]["name"].clone(),
            )
        })
        .collect();
    assert_eq!(
        event_reasons(&calls)
            .iter()
            .filter(|r| *r == "Deleted")
            .count(),
        5,
        "{events:?}"
    );
}

#[tokio::test]
async fn immutable_statefulset_drift_is_reported_not_patched() {
    let sl = fixture("managed.yaml");
    let mut drifted = owned("StatefulSet", "apps/v1", "demo-redis-0", UID);
    drifted["spec"] = json!({
        "serviceName": "something-else",
        "podManagementPolicy": "Parallel",
        "selector": {"matchLabels": {"app": "old"}},
        "template": {"metadata": {}, "spec": {"containers": []}}
    });
    let mut scenario = scenario_for(&sl);
    scenario.lists = vec![("statefulsets", drifted)];
    let (result, calls, _, _) = run(DeserializeGuard(Ok(sl)), scenario).await;
    result.unwrap();
    let calls_made = api_calls(&calls);
    assert!(
        !calls_made
            .contains(&"PATCH /apis/apps/v1/namespaces/video/statefulsets/demo-redis-0".to_owned())
    );
    assert!(
        calls_made
            .contains(&"PATCH /apis/apps/v1/namespaces/video/statefulsets/demo-redis-1".to_owned())
    );
    let degraded = condition(&status_patch(&calls), "Degraded").clone();
    assert_eq!(degraded["status"], "True");
    assert_eq!(degraded["reason"], "StatefulSetDrift");
    let message = degraded["message"].as_str().unwrap();
    assert!(
        message.contains("demo-redis-0 (selector, serviceName)"),
        "{message}"
    );
    assert!(message.contains("--cascade=orphan"), "{message}");
    assert!(event_reasons(&calls).contains(&"StatefulSetDrift".to_owned()));
}

#[tokio::test]
async fn an_invalid_spec_only_gets_a_degraded_status() {
    let mut sl = fixture("managed.yaml");
    sl.spec.default_plan = "gold".into();
    let (result, calls, _, _) = run(DeserializeGuard(Ok(sl.clone())), scenario_for(&sl)).await;
    result.unwrap();
    assert_eq!(
        api_calls(&calls),
        ["PATCH /apis/screenlimit.io/v1alpha1/namespaces/video/streamlimiters/demo/status"]
    );
    let status = status_patch(&calls);
    let degraded = condition(&status, "Degraded");
    assert_eq!(degraded["reason"], "InvalidSpec");
    assert!(
        degraded["message"]
            .as_str()
            .unwrap()
            .contains("spec.defaultPlan")
    );
    assert_eq!(condition(&status, "Ready")["status"], "False");
    assert_eq!(event_reasons(&calls), ["InvalidSpec"]);
}

#[tokio::test]
async fn an_api_error_fails_the_reconcile_and_backs_off() {
    let sl = fixture("managed.yaml");
    let mut scenario = scenario_for(&sl);
    scenario.fail_on = Some("/configmaps/demo-limiter");
    let (result, calls, ctx, object) = run(DeserializeGuard(Ok(sl)), scenario).await;
    let error = result.unwrap_err();
    assert_eq!(error.metric_label(), "api");
    // It stopped at the failing call: nothing after it, no status patch.
    assert_eq!(
        api_calls(&calls).last().unwrap(),
        "PATCH /api/v1/namespaces/video/configmaps/demo-limiter"
    );
    assert!(!calls.iter().any(|c| c.path.ends_with("/status")));
    let first = error_policy(object.clone(), &error, ctx.clone());
    let second = error_policy(object, &error, ctx.clone());
    assert_eq!(
        first,
        kube::runtime::controller::Action::requeue(Duration::from_secs(5))
    );
    assert_eq!(
        second,
        kube::runtime::controller::Action::requeue(Duration::from_secs(10))
    );
    assert!(
        ctx.metrics
            .render()
            .contains("screenlimit_operator_reconcile_errors_total{error=\"api\"} 2")
    );
}

#[tokio::test]
async fn a_malformed_object_is_skipped_with_an_event() {
    let sl = fixture("managed.yaml");
    let invalid = InvalidObject {
        error: "spec.plans: invalid type: string, expected a sequence".into(),
        metadata: sl.meta().clone(),
    };
    let (result, calls, _, _) = run(DeserializeGuard(Err(invalid)), scenario_for(&sl)).await;
    assert_eq!(
        result.unwrap(),
        kube::runtime::controller::Action::await_change()
    );
    assert!(api_calls(&calls).is_empty());
    assert_eq!(event_reasons(&calls), ["Malformed"]);
}

#[tokio::test]
async fn sentinel_mode_applies_the_sentinel_objects_and_reports_them_in_status() {
    let sl = fixture("ha.yaml");
    let mut scenario = scenario_for(&sl);
    scenario.secret_exists = true;
    let (result, calls, _, _) = run(DeserializeGuard(Ok(sl)), scenario).await;
    result.unwrap();
    let ns = "/api/v1/namespaces/video";
    let apps = "/apis/apps/v1/namespaces/video";
    let policy = "/apis/policy/v1/namespaces/video/poddisruptionbudgets";
    let net = "/apis/networking.k8s.io/v1/namespaces/video/networkpolicies";
    let writes: Vec<_> = api_calls(&calls)
        .into_iter()
        .filter(|c| !c.starts_with("GET"))
        .collect();
    assert_eq!(
        writes,
        [
            format!("POST {ns}/secrets"),
            format!("POST {ns}/secrets"),
            format!("PATCH {net}/demo-redis"),
            format!("PATCH {net}/demo-sentinel"),
            format!("PATCH {net}/demo-limiter"),
            format!("PATCH {ns}/services/demo-redis-0"),
            format!("PATCH {ns}/services/demo-redis-1"),
            format!("PATCH {ns}/services/demo-sentinel"),
            format!("PATCH {ns}/services/demo-limiter"),
            format!("PATCH {ns}/configmaps/demo-limiter"),
            format!("PATCH {ns}/configmaps/demo-redis-ha"),
            format!("PATCH {policy}/demo-limiter"),
            format!("PATCH {policy}/demo-redis-0"),
            format!("PATCH {policy}/demo-redis-1"),
            format!("PATCH {policy}/demo-sentinel"),
            format!("PATCH {apps}/deployments/demo-limiter"),
            format!("PATCH {apps}/statefulsets/demo-redis-0"),
            format!("PATCH {apps}/statefulsets/demo-redis-1"),
            format!("PATCH {apps}/statefulsets/demo-sentinel"),
            "PATCH /apis/screenlimit.io/v1alpha1/namespaces/video/streamlimiters/demo/status"
                .to_owned(),
        ]
    );
    for patch in calls.iter().filter(|c| c.method == Method::PATCH) {
        assert!(patch.query.contains("fieldManager=screenlimit-operator"));
    }
    let status = status_patch(&calls);
    assert_eq!(status["sentinelReadyReplicas"], 0);
    assert_eq!(status["shards"][0]["replicas"], 2);
    assert_eq!(status["shards"][1]["sentinelMaster"], "demo-shard-1");
    let progressing = condition(&status, "Progressing");
    assert!(
        progressing["message"]
            .as_str()
            .unwrap()
            .contains("Sentinel 0/3 pods ready"),
        "{progressing}"
    );
}

/// A StatefulSet as the API server reports it: `ready` of `replicas` pods, converged.
fn ready_stateful_set(name: &str, replicas: i32, ready: i32) -> Value {
    let mut sts = owned("StatefulSet", "apps/v1", name, UID);
    sts["metadata"]["generation"] = json!(1);
    sts["spec"] = json!({
        "replicas": replicas, "serviceName": name, "podManagementPolicy": "Parallel",
        "selector": {"matchLabels": {}}, "template": {"metadata": {}, "spec": {"containers": []}}
    });
    sts["status"] = json!({"replicas": replicas, "readyReplicas": ready, "observedGeneration": 1,
                           "currentRevision": "r1", "updateRevision": "r1"});
    sts
}

#[tokio::test]
async fn per_shard_readiness_counts_the_primary_and_its_replicas() {
    let sl = fixture("ha.yaml");
    let mut scenario = scenario_for(&sl);
    scenario.secret_exists = true;
    scenario.lists = vec![
        ("statefulsets", ready_stateful_set("demo-redis-0", 2, 2)),
        ("statefulsets", ready_stateful_set("demo-redis-1", 2, 1)),
        ("statefulsets", ready_stateful_set("demo-sentinel", 3, 3)),
    ];
    let (result, calls, _, _) = run(DeserializeGuard(Ok(sl)), scenario).await;
    result.unwrap();
    let status = status_patch(&calls);
    assert_eq!(status["readyShards"], 1);
    assert_eq!(status["shards"][0]["ready"], true);
    assert_eq!(status["shards"][1]["ready"], false);
    assert_eq!(status["shards"][1]["readyReplicas"], 1);
    assert_eq!(status["sentinelReadyReplicas"], 3);
    let message = condition(&status, "Ready")["message"]
        .as_str()
        .unwrap()
        .to_owned();
    assert!(
        message.contains("1/2 Redis shards ready (waiting for demo-redis-1)"),
        "{message}"
    );
    assert!(!message.contains("Sentinel"), "{message}");
}

#[tokio::test]
async fn a_shard_service_with_a_cluster_ip_is_recreated_headless() {
    let sl = fixture("managed.yaml");
    let mut old = owned("Service", "v1", "demo-redis-0", UID);
    old["spec"] = json!({"clusterIP": "10.0.0.12", "ports": [{"port": 6379}]});
    let mut headless = owned("Service", "v1", "demo-redis-1", UID);
    headless["spec"] = json!({"clusterIP": "None", "ports": [{"port": 6379}]});
    let mut limiter = owned("Service", "v1", "demo-limiter", UID);
    limiter["spec"] = json!({"clusterIP": "10.0.0.13", "ports": [{"port": 8080}]});
    let mut scenario = scenario_for(&sl);
    scenario.secret_exists = true;
    scenario.lists = vec![
        ("services", old),
        ("services", headless),
        ("services", limiter),
    ];
    let (result, calls, _, _) = run(DeserializeGuard(Ok(sl)), scenario).await;
    result.unwrap();
    let ns = "/api/v1/namespaces/video";
    let services: Vec<_> = api_calls(&calls)
        .into_iter()
        .filter(|c| c.contains("/services/"))
        .collect();
    assert_eq!(
        services,
        [
            format!("DELETE {ns}/services/demo-redis-0"),
            format!("PATCH {ns}/services/demo-redis-0"),
            format!("PATCH {ns}/services/demo-redis-1"),
            format!("PATCH {ns}/services/demo-limiter"),
        ],
        "only the shard Service whose clusterIP must change is recreated"
    );
}

#[tokio::test]
async fn autoscaling_applies_an_hpa_keeps_the_live_replica_count_and_is_pruned_when_off() {
    let mut sl = fixture("managed.yaml");
    sl.spec.limiter.autoscaling = Some(screenlimit_operator::crd::AutoscalingSpec {
        enabled: true,
        min_replicas: 3,
        max_replicas: 12,
        target_cpu_utilization_percent: 60,
    });
    sl.spec.limiter.resources =
        Some(serde_json::from_value(json!({"requests": {"cpu": "500m"}})).unwrap());
    let mut scenario = scenario_for(&sl);
    scenario.secret_exists = true;
    // The autoscaler has scaled the Deployment to 7.
    let mut live = owned("Deployment", "apps/v1", "demo-limiter", UID);
    live["spec"] = json!({"replicas": 7});
    scenario.lists.push(("deployments", live));
    let (result, calls, _, _) = run(DeserializeGuard(Ok(sl.clone())), scenario).await;
    result.unwrap();
    let hpas = "/apis/autoscaling/v2/namespaces/video/horizontalpodautoscalers";
    let hpa = calls
        .iter()
        .find(|c| c.method == Method::PATCH && c.path == format!("{hpas}/demo-limiter"))
        .expect("the HPA is applied");
    assert_eq!(hpa.body["spec"]["minReplicas"], 3);
    assert_eq!(hpa.body["spec"]["maxReplicas"], 12);
    assert_eq!(
        hpa.body["spec"]["scaleTargetRef"],
        json!({"apiVersion": "apps/v1", "kind": "Deployment", "name": "demo-limiter"})
    );
    assert_eq!(
        hpa.body["spec"]["metrics"][0]["resource"],
        json!({"name": "cpu", "target": {"type": "Utilization", "averageUtilization": 60}})
    );
    let deployment = calls
        .iter()
        .find(|c| c.method == Method::PATCH && c.path.ends_with("/deployments/demo-limiter"))
        .unwrap();
    assert_eq!(
        deployment.body["spec"]["replicas"], 7,
        "the operator applies the autoscaler's count back"
    );

    // Autoscaling off: the HPA is deleted and the spec's replicas apply again.
    sl.spec.limiter.autoscaling = None;
    let mut scenario = scenario_for(&sl);
    scenario.secret_exists = true;
    scenario.lists.push((
        "horizontalpodautoscalers",
        owned(
            "HorizontalPodAutoscaler",
            "autoscaling/v2",
            "demo-limiter",
            UID,
        ),
    ));
    let (result, calls, _, _) = run(DeserializeGuard(Ok(sl.clone())), scenario).await;
    result.unwrap();
    assert!(
        api_calls(&calls).contains(&format!("DELETE {hpas}/demo-limiter")),
        "{:?}",
        api_calls(&calls)
    );
    let deployment = calls
        .iter()
        .find(|c| c.method == Method::PATCH && c.path.ends_with("/deployments/demo-limiter"))
        .unwrap();
    assert_eq!(
        deployment.body["spec"]["replicas"],
        sl.spec.limiter.replicas
    );
}

/// `spec.monitoring` with both objects on, labels for the Prometheus that selects them.
fn with_monitoring(mut sl: StreamLimiter) -> StreamLimiter {
    let m = &mut sl.spec.monitoring;
    m.service_monitor.enabled = true;
    m.service_monitor.interval = "15s".into();
    m.service_monitor.labels = [("release".to_owned(), "kps".to_owned())].into();
    m.prometheus_rule.enabled = true;
    m.prometheus_rule.labels = [("release".to_owned(), "kps".to_owned())].into();
    m.prometheus_rule.thresholds.degraded_percent = 5;
    sl
}

const MONITORING: &str = "/apis/monitoring.coreos.com/v1/namespaces/video";

#[tokio::test]
async fn monitoring_kinds_served_are_applied_owned_and_reported() {
    let sl = with_monitoring(fixture("managed.yaml"));
    let mut scenario = scenario_for(&sl);
    scenario.secret_exists = true;
    scenario.monitoring_served = Some(vec!["servicemonitors", "prometheusrules", "podmonitors"]);
    let (result, calls, _, _) = run(DeserializeGuard(Ok(sl)), scenario).await;
    result.unwrap();
    let made = api_calls(&calls);
    let tail: Vec<&str> = made[made.len() - 7..].iter().map(String::as_str).collect();
    assert_eq!(
        tail,
        [
            format!("GET {MONITORING_DISCOVERY}").as_str(),
            &format!("GET {MONITORING}/servicemonitors"),
            &format!("PATCH {MONITORING}/servicemonitors/demo-limiter"),
            &format!("GET {MONITORING}/prometheusrules"),
            &format!("PATCH {MONITORING}/prometheusrules/demo-limiter"),
            "GET /api/v1/namespaces/video/pods",
            "PATCH /apis/screenlimit.io/v1alpha1/namespaces/video/streamlimiters/demo/status",
        ],
        "discovered when wanted, applied after the other children, before the status: {made:?}"
    );
    for list in calls
        .iter()
        .filter(|c| c.method == Method::GET && c.path.starts_with(MONITORING))
    {
        assert!(
            list.query.contains("app.kubernetes.io%2Finstance%3Ddemo"),
            "{}",
            list.query
        );
    }
    let applied = |plural: &str| {
        calls
            .iter()
            .find(|c| {
                c.method == Method::PATCH && c.path == format!("{MONITORING}/{plural}/demo-limiter")
            })
            .unwrap()
    };
    let monitor = applied("servicemonitors");
    let rule = applied("prometheusrules");
    for (object, kind) in [(monitor, "ServiceMonitor"), (rule, "PrometheusRule")] {
        assert!(object.query.contains("fieldManager=screenlimit-operator"));
        assert!(object.query.contains("force=true"));
        assert_eq!(object.body["apiVersion"], "monitoring.coreos.com/v1");
        assert_eq!(object.body["kind"], kind);
        assert_eq!(object.body["metadata"]["ownerReferences"][0]["uid"], UID);
        assert_eq!(object.body["metadata"]["labels"]["release"], "kps");
        assert_eq!(
            object.body["metadata"]["labels"]["app.kubernetes.io/instance"],
            "demo"
        );
    }
    assert_eq!(monitor.body["spec"]["endpoints"][0]["interval"], "15s");
    let degraded = &rule.body["spec"]["groups"][0]["rules"][0];
    assert_eq!(degraded["alert"], "ScreenlimitPlaysDegraded");
    assert!(
        degraded["expr"].as_str().unwrap().contains("> 0.05 and"),
        "the threshold from the spec: {degraded}"
    );
    let available = condition(&status_patch(&calls), "MonitoringAvailable").clone();
    assert_eq!(available["status"], "True");
    assert_eq!(available["reason"], "Applied");
    assert_eq!(
        available["message"],
        "ServiceMonitor and PrometheusRule applied"
    );
}

#[tokio::test]
async fn monitoring_the_cluster_does_not_serve_is_a_condition_not_an_error() {
    // No Prometheus Operator at all: nothing is created, the condition names both kinds.
    let sl = with_monitoring(fixture("managed.yaml"));
    let mut scenario = scenario_for(&sl);
    scenario.secret_exists = true;
    let (result, calls, _, _) = run(DeserializeGuard(Ok(sl.clone())), scenario).await;
    assert_eq!(
        result.unwrap(),
        kube::runtime::controller::Action::requeue(Duration::from_secs(30)),
        "looked at again within a minute (here sooner: the rollout is in progress)"
    );
    let made = api_calls(&calls);
    assert!(made.contains(&format!("GET {MONITORING_DISCOVERY}")));
    assert!(
        !made
            .iter()
            .any(|c| c.contains("/namespaces/video/servicemonitors")
                || c.contains("/namespaces/video/prometheusrules")),
        "{made:?}"
    );
    let status = status_patch(&calls);
    let available = condition(&status, "MonitoringAvailable");
    assert_eq!(available["status"], "False");
    assert_eq!(
        available["reason"],
        "ServiceMonitorAndPrometheusRuleNotServed"
    );
    let message = available["message"].as_str().unwrap();
    assert!(
        message
            .contains("does not serve monitoring.coreos.com/v1 ServiceMonitor and PrometheusRule"),
        "{message}"
    );
    assert!(
        message.contains("install the Prometheus Operator"),
        "{message}"
    );
    // The limiter itself is unaffected.
    assert_eq!(condition(&status, "Degraded")["status"], "False");
    assert!(event_reasons(&calls).contains(&"ServiceMonitorAndPrometheusRuleNotServed".to_owned()));

    // Only ServiceMonitors served: that one is applied, the condition names the other.
    let mut scenario = scenario_for(&sl);
    scenario.secret_exists = true;
    scenario.monitoring_served = Some(vec!["servicemonitors"]);
    let (result, calls, _, _) = run(DeserializeGuard(Ok(sl)), scenario).await;
    result.unwrap();
    let made = api_calls(&calls);
    assert!(made.contains(&format!("PATCH {MONITORING}/servicemonitors/demo-limiter")));
    assert!(
        !made.iter().any(|c| c.contains("prometheusrules")),
        "{made:?}"
    );
    let available = condition(&status_patch(&calls), "MonitoringAvailable").clone();
    assert_eq!(available["status"], "False");
    assert_eq!(available["reason"], "PrometheusRuleNotServed");
}

#[tokio::test]
async fn monitoring_switched_off_is_pruned() {
    let sl = fixture("managed.yaml");
    let mut scenario = scenario_for(&sl);
    scenario.secret_exists = true;
    scenario.discover_first = true;
    scenario.monitoring_served = Some(vec!["servicemonitors", "prometheusrules"]);
    scenario.lists = vec![
        (
            "servicemonitors",
            owned(
                "ServiceMonitor",
                "monitoring.coreos.com/v1",
                "demo-limiter",
                UID,
            ),
        ),
        (
            "prometheusrules",
            owned(
                "PrometheusRule",
                "monitoring.coreos.com/v1",
                "demo-limiter",
                UID,
            ),
        ),
        // Same labels, another owner: never touched.
        (
            "prometheusrules",
            owned(
                "PrometheusRule",
                "monitoring.coreos.com/v1",
                "team-rules",
                "someone-else",
            ),
        ),
    ];
    let (result, calls, _, _) = run(DeserializeGuard(Ok(sl)), scenario).await;
    result.unwrap();
    let made = api_calls(&calls);
    // Discovery happened once, at "start"; the reconcile did not ask again.
    assert_eq!(
        made.iter()
            .filter(|c| **c == format!("GET {MONITORING_DISCOVERY}"))
            .count(),
        1
    );
    let monitoring: Vec<&String> = made
        .iter()
        .filter(|c| c.contains("monitoring.coreos.com/v1/namespaces"))
        .collect();
    assert_eq!(
        monitoring,
        [
            &format!("GET {MONITORING}/servicemonitors"),
            &format!("DELETE {MONITORING}/servicemonitors/demo-limiter"),
            &format!("GET {MONITORING}/prometheusrules"),
            &format!("DELETE {MONITORING}/prometheusrules/demo-limiter"),
        ]
    );
    let deleted: Vec<(String, String)> = calls
        .iter()
        .filter(|c| c.path.contains("/events") && c.body["reason"] == "Deleted")
        .map(|c| {
            (
                c.body["related"]["kind"]
                    .as_str()
                    .unwrap_or_default()
                    .to_owned(),
                c.body["note"].as_str().unwrap_or_default().to_owned(),
            )
        })
        .collect();
    assert_eq!(deleted.len(), 2, "{deleted:?}");
    assert_eq!(deleted[0].0, "ServiceMonitor");
    assert!(
        deleted[1].1.contains("deleted PrometheusRule demo-limiter"),
        "{deleted:?}"
    );
    // Nothing asked for: no monitoring condition.
    let status = status_patch(&calls);
    assert!(
        !status["conditions"]
            .as_array()
            .unwrap()
            .iter()
            .any(|c| c["type"] == "MonitoringAvailable"),
        "{status}"
    );
}

/// A limiter pod as the API server lists it.
fn limiter_pod(name: &str, ready: bool) -> Value {
    json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": "video"},
           "status": {"conditions": [{"type": "Ready", "status": if ready { "True" } else { "False" }}]}})
}

fn info_metric(revision: &str) -> String {
    format!(
        "# TYPE screenlimit_config_info gauge\nscreenlimit_config_info{{revision=\"{revision}\"}} 1\n"
    )
}

#[tokio::test]
async fn the_status_says_when_every_ready_limiter_pod_runs_the_rendered_config_revision() {
    let sl = fixture("managed.yaml");
    let revision = screenlimit_operator::build::build(&sl)
        .unwrap()
        .config_revision;
    let mut scenario = scenario_for(&sl);
    scenario.secret_exists = true;
    scenario.lists = vec![
        ("pods", limiter_pod("demo-limiter-a", true)),
        ("pods", limiter_pod("demo-limiter-b", true)),
        ("pods", limiter_pod("demo-limiter-c", false)),
    ];
    // One pod has taken in the new file; the other still runs the one before.
    scenario.pod_metrics = vec![
        ("demo-limiter-a", info_metric(&revision)),
        ("demo-limiter-b", info_metric("0ld0ld0ld0ld0ld0")),
    ];
    let (result, calls, _, _) = run(DeserializeGuard(Ok(sl.clone())), scenario.clone()).await;
    result.unwrap();
    let asked: Vec<String> = calls
        .iter()
        .filter(|c| c.path.ends_with("/proxy/metrics"))
        .map(|c| c.path.clone())
        .collect();
    assert_eq!(asked.len(), 2, "only ready pods are asked: {asked:?}");
    assert!(
        asked.contains(
            &"/api/v1/namespaces/video/pods/demo-limiter-a:8080/proxy/metrics".to_owned()
        )
    );
    let status = status_patch(&calls);
    assert_eq!(status["configRevision"], revision.as_str());
    assert_eq!(status["limiterPodsOnConfigRevision"], 1);
    let applied = condition(&status, "ConfigApplied");
    assert_eq!(
        (applied["status"].as_str(), applied["reason"].as_str()),
        (Some("False"), Some("PodsOnOlderRevision"))
    );
    assert!(
        applied["message"]
            .as_str()
            .unwrap()
            .starts_with("1/2 ready limiter pods")
    );

    // Both ready pods on the revision (the third is still not ready): applied.
    scenario.pod_metrics[1].1 = info_metric(&revision);
    let (result, calls, _, _) = run(DeserializeGuard(Ok(sl.clone())), scenario.clone()).await;
    result.unwrap();
    let status = status_patch(&calls);
    assert_eq!(status["limiterPodsOnConfigRevision"], 2);
    let applied = condition(&status, "ConfigApplied");
    assert_eq!(
        (applied["status"].as_str(), applied["reason"].as_str()),
        (Some("True"), Some("AllPodsOnRevision"))
    );

    // A pod that cannot be asked is not counted as done, and the message says why it may be.
    scenario.pod_metrics.pop();
    let (result, calls, _, _) = run(DeserializeGuard(Ok(sl)), scenario).await;
    result.unwrap();
    let status = status_patch(&calls);
    let applied = condition(&status, "ConfigApplied");
    assert_eq!(applied["status"], "False");
    assert!(
        applied["message"].as_str().unwrap().contains("pods/proxy"),
        "{applied}"
    );
}

#[tokio::test]
async fn the_status_says_which_peer_regions_the_limiter_pods_reach() {
    let sl = fixture("regions.yaml");
    let revision = screenlimit_operator::build::build(&sl)
        .unwrap()
        .config_revision;
    let mut scenario = scenario_for(&sl);
    scenario.secret_exists = true;
    scenario.lists = vec![
        ("pods", limiter_pod("demo-limiter-a", true)),
        ("pods", limiter_pod("demo-limiter-b", true)),
    ];
    // Both pods reach `us`; neither has called `ap` yet.
    let peers = |up: u8, seconds: &str| {
        format!(
            "{}screenlimit_region_peer_up{{peer=\"us\"}} {up}\n\
             screenlimit_region_last_call_seconds{{peer=\"us\"}} {seconds}\n",
            info_metric(&revision)
        )
    };
    scenario.pod_metrics = vec![
        ("demo-limiter-a", peers(1, "0.0834")),
        ("demo-limiter-b", peers(1, "0.0712")),
    ];
    let (result, calls, _, _) = run(DeserializeGuard(Ok(sl.clone())), scenario.clone()).await;
    result.unwrap();
    let asked = calls
        .iter()
        .filter(|c| c.path.ends_with("/proxy/metrics"))
        .count();
    assert_eq!(asked, 2, "one read per pod for the revision and the peers");
    let status = status_patch(&calls);
    assert_eq!(status["limiterPodsOnConfigRevision"], 2);
    assert_eq!(
        status["regions"],
        json!({"peers": [
            {"name": "us", "state": "Reachable", "podsReachable": 2, "podsAsked": 2, "lastCallMillis": 83},
            {"name": "ap", "state": "Unknown", "podsReachable": 0, "podsAsked": 2},
        ]})
    );
    let regions = condition(&status, "RegionsReachable");
    assert_eq!(
        (regions["status"].as_str(), regions["reason"].as_str()),
        (Some("Unknown"), Some("PeersNotCalledYet"))
    );

    // `us` stops answering every pod: the condition turns False with a Warning Event.
    scenario.pod_metrics = vec![
        ("demo-limiter-a", peers(0, "0.0834")),
        ("demo-limiter-b", peers(0, "0.0712")),
    ];
    let (result, calls, _, _) = run(DeserializeGuard(Ok(sl)), scenario).await;
    result.unwrap();
    let status = status_patch(&calls);
    assert_eq!(status["regions"]["peers"][0]["state"], "Unreachable");
    let regions = condition(&status, "RegionsReachable");
    assert_eq!(
        (regions["status"].as_str(), regions["reason"].as_str()),
        (Some("False"), Some("PeerUnreachable"))
    );
    assert!(
        event_reasons(&calls).contains(&"PeerUnreachable".to_owned()),
        "{:?}",
        event_reasons(&calls)
    );
}
