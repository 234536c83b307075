//! Suite **apiserver_pods**, on a real Kubernetes API server where `KUBEBUILDER_ASSETS` names one
//! (skipped in one line otherwise): `examples/dev.yaml` reconciled by the operator (as the
//! chart's ServiceAccount), then its pods started as local processes (the pods runner of the
//! `dev` suite) from what the **API server holds** — the StatefulSet, Deployment, ConfigMaps and
//! generated Secrets after admission and defaulting — instead of from the operator's build: a
//! play, a heartbeat and a denial at the plan's cap go through the limiter and its Redis shard.
//!
//! Besides the control plane it needs what the `dev` suite needs: root, Redis, the limiter
//! binary and the Redis module built beside the test.

use std::collections::BTreeMap;
use std::time::Duration;

use k8s_openapi::api::apps::v1::{Deployment, StatefulSet};
use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use kube::api::Api;
use reqwest::StatusCode;
use screenlimit_operator::names::Names;
use screenlimit_system_tests::api::{heartbeat, play};
use screenlimit_system_tests::apiserver::ApiServer;
use screenlimit_system_tests::apiserver::objects;
use screenlimit_system_tests::apiserver::operator::{ADMIN, Operator, Setup};
use screenlimit_system_tests::apiserver::streamlimiter::{
    self as sl_on, apply, assert_built_objects_present, example_json, observed,
};
use screenlimit_system_tests::pods::Cluster;
use screenlimit_system_tests::{add_limiter_image, binary, require_root};

const NS: &str = "video";
const START: Duration = Duration::from_secs(30);

/// A Secret as a pod sees it: its data as text.
fn secret_text(secret: &Secret) -> BTreeMap<String, String> {
    secret
        .data
        .iter()
        .flatten()
        .map(|(k, v)| {
            let text = String::from_utf8(v.0.clone()).unwrap_or_else(|_| {
                panic!("Secret {:?} key {k} is not text", secret.metadata.name)
            });
            (k.clone(), text)
        })
        .collect()
}

/// Fails at once, naming every one missing, unless the pods runner has what it needs (as
/// `scripts/install-test-deps.sh` and `cargo build --workspace` give it).
fn assert_pods_can_run() {
    let exe = std::env::current_exe().expect("the test binary's path");
    let built = exe
        .parent()
        .and_then(|deps| deps.parent())
        .expect("target dir");
    let mut missing: Vec<String> = ["screenlimit-limiter", "libscreenlimit_redis_module.so"]
        .iter()
        .filter(|name| !built.join(name).is_file())
        // The module may come from elsewhere, as `add_limiter_image` allows.
        .filter(|name| {
            !name.ends_with(".so") || std::env::var_os("SCREENLIMIT_MODULE_SO").is_none()
        })
        .map(|name| {
            format!(
                "{} (cargo build -p screenlimit-limiter -p screenlimit-redis-module)",
                built.join(name).display()
            )
        })
        .collect();
    for tool in ["redis-server", "ip", "unshare"] {
        let found = std::process::Command::new("sh")
            .args(["-c", &format!("command -v {tool}")])
            .output()
            .is_ok_and(|o| o.status.success());
        if !found {
            missing.push(format!("{tool} (scripts/install-test-deps.sh)"));
        }
    }
    assert!(
        missing.is_empty(),
        "apiserver_pods runs pods as local processes and lacks:\n  {}",
        missing.join("\n  ")
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_dev_example_runs_from_the_objects_the_api_server_holds() {
    let Some(server) = ApiServer::start_or_skip("apiserver_pods").await else {
        return;
    };
    require_root();
    assert_pods_can_run();
    let setup = Setup::install(&server).await;
    let operator = Operator::start(&server, &setup, "operator-0");
    let context = || format!("{}\n{}", operator.tail(), server.logs());
    let admin = server.client().await;
    objects::namespace(&admin, NS, ADMIN).await;
    let example = example_json("dev.yaml");
    let name = example["metadata"]["name"].as_str().unwrap().to_owned();
    apply(&admin, &example).await;
    let sl = observed(&admin, NS, &name, context).await;
    let desired = sl_on::desired(&sl);
    assert_built_objects_present(&admin, &sl, &desired, context).await;

    // Everything the pods need, read back from the API server.
    let config_maps: Api<ConfigMap> = Api::namespaced(admin.clone(), NS);
    let mut held = Vec::new();
    for cm in &desired.config_maps {
        let cm_name = cm.metadata.name.clone().unwrap();
        held.push(config_maps.get(&cm_name).await.unwrap());
    }
    let mut cluster = Cluster::new(NS, &held);
    add_limiter_image(&mut cluster, &sl);
    let secrets: Api<Secret> = Api::namespaced(admin.clone(), NS);
    for secret in [&desired.stream_id_secret, &desired.redis_auth_secret]
        .into_iter()
        .flatten()
    {
        let live = secrets.get(secret).await.unwrap();
        cluster.add_secret(secret, secret_text(&live));
    }
    let names = Names::new(&name);
    let sets: Api<StatefulSet> = Api::namespaced(admin.clone(), NS);
    let shard = sets.get(&names.redis_shard(0)).await.unwrap();
    let mut redis = cluster.stateful_pod(&shard, 0);
    redis.start();
    redis.wait_ready(START);
    cluster.add_service(&names.redis_shard(0), &redis);
    let deployments: Api<Deployment> = Api::namespaced(admin.clone(), NS);
    let deployment = deployments.get(&names.limiter()).await.unwrap();
    let mut limiter = cluster.deployment_pod(
        &deployment,
        &format!("{}-0", names.limiter()),
        vec![binary("screenlimit-limiter")],
    );
    limiter.start();
    limiter.wait_ready(START);
    let forward = cluster.port_forward(&limiter, 8080);
    let api = forward.url();

    let (status, body) = play(&api, "acct-held", "tv").await;
    assert_eq!(status, StatusCode::OK, "{body}\n{}", limiter.log());
    assert_ne!(
        body["degraded"],
        true,
        "{body}\n{}\n{}",
        limiter.log(),
        redis.log()
    );
    let stream = body["stream_id"].as_str().expect("a stream id").to_owned();
    assert_eq!(
        heartbeat(&api, "acct-held", &stream).await,
        (StatusCode::OK, String::new())
    );
    let (status, body) = play(&api, "acct-held", "phone").await;
    assert_eq!(
        status,
        StatusCode::CONFLICT,
        "the basic plan's cap of 1: {body}"
    );
}
