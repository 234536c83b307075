//! Suite **apiserver_operator**, on a real Kubernetes API server where `KUBEBUILDER_ASSETS` names
//! one (skipped in one line otherwise): the operator binary run as a local process **as the
//! chart's own ServiceAccount** (its RBAC rendered by Helm's engine, a token from the
//! TokenRequest API, the Deployment's arguments and environment).
//!
//! - `examples/dev.yaml`: every object the operator's build renders appears, written by its
//!   field manager and controlled by the `StreamLimiter`; the status gets its generation and
//!   conditions; a limiter change moves the Deployment and leaves the Redis StatefulSets' specs
//!   alone; an owned object changed by someone else comes back; the operator holds the Lease; no
//!   request is refused; with the controller-manager, deleting the `StreamLimiter`
//!   garbage-collects what it owned.
//! - `examples/production.yaml` (its Secrets created first): the same objects check; fewer
//!   shards, no replicas and the admin UI off delete what the spec dropped; and, from the API
//!   server's audit log, every verb the chart's roles grant was used (or is listed below with
//!   the reason a test cannot use it).
//! - Two replicas: only the Lease's holder leads; killed, the other takes over and reconciles.
//!
//! No pod runs here (there is no kubelet): `Ready` stays false.

use std::collections::BTreeSet;

use k8s_openapi::api::apps::v1::{Deployment, StatefulSet};
use k8s_openapi::api::core::v1::Secret;
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use screenlimit_operator::crd::StreamLimiter;
use screenlimit_operator::names::Names;
use screenlimit_system_tests::apiserver::ApiServer;
use screenlimit_system_tests::apiserver::audit::{forbidden, used_by};
use screenlimit_system_tests::apiserver::objects::{self, desired_objects};
use screenlimit_system_tests::apiserver::operator::{ADMIN, Operator, Setup, leader};
use screenlimit_system_tests::apiserver::rbac::{self, Exempt};
use screenlimit_system_tests::apiserver::streamlimiter::{
    self as sl_on, ACT, apply, assert_absent, assert_built_objects_present, dropped, example_json,
    observed,
};
use screenlimit_system_tests::apiserver::wait::until;
use screenlimit_system_tests::certs::tls_secret;
use serde_json::json;

const NS: &str = "video";

/// Permissions the chart grants that no test here can exercise, and why that is fine. Anything
/// else granted and never used fails the production test: drop it from the chart's roles
/// (`charts/screenlimit/templates/_helpers.tpl`, `rbac.yaml`) or, when only a path a short test
/// never takes uses it, add it here with that path.
const EXEMPT: &[Exempt] = &[
    Exempt {
        group: "",
        resource: "pods/proxy",
        verb: "get",
        why: "no kubelet here: no limiter pod is ever ready, so none is asked for its config revision",
    },
    Exempt {
        group: "events.k8s.io",
        resource: "events",
        verb: "patch",
        why: "the recorder patches an Event only when the same one repeats (a series)",
    },
    Exempt {
        group: "autoscaling",
        resource: "horizontalpodautoscalers",
        verb: "create",
        why: "production.yaml has no autoscaler",
    },
    Exempt {
        group: "autoscaling",
        resource: "horizontalpodautoscalers",
        verb: "patch",
        why: "production.yaml has no autoscaler",
    },
    Exempt {
        group: "autoscaling",
        resource: "horizontalpodautoscalers",
        verb: "delete",
        why: "production.yaml has no autoscaler",
    },
    Exempt {
        group: "monitoring.coreos.com",
        resource: "servicemonitors",
        verb: "get",
        why: "no Prometheus Operator CRDs here",
    },
    Exempt {
        group: "monitoring.coreos.com",
        resource: "servicemonitors",
        verb: "list",
        why: "no Prometheus Operator CRDs here",
    },
    Exempt {
        group: "monitoring.coreos.com",
        resource: "servicemonitors",
        verb: "watch",
        why: "no Prometheus Operator CRDs here",
    },
    Exempt {
        group: "monitoring.coreos.com",
        resource: "servicemonitors",
        verb: "create",
        why: "no Prometheus Operator CRDs here",
    },
    Exempt {
        group: "monitoring.coreos.com",
        resource: "servicemonitors",
        verb: "patch",
        why: "no Prometheus Operator CRDs here",
    },
    Exempt {
        group: "monitoring.coreos.com",
        resource: "servicemonitors",
        verb: "delete",
        why: "no Prometheus Operator CRDs here",
    },
    Exempt {
        group: "monitoring.coreos.com",
        resource: "prometheusrules",
        verb: "get",
        why: "no Prometheus Operator CRDs here",
    },
    Exempt {
        group: "monitoring.coreos.com",
        resource: "prometheusrules",
        verb: "list",
        why: "no Prometheus Operator CRDs here",
    },
    Exempt {
        group: "monitoring.coreos.com",
        resource: "prometheusrules",
        verb: "watch",
        why: "no Prometheus Operator CRDs here",
    },
    Exempt {
        group: "monitoring.coreos.com",
        resource: "prometheusrules",
        verb: "create",
        why: "no Prometheus Operator CRDs here",
    },
    Exempt {
        group: "monitoring.coreos.com",
        resource: "prometheusrules",
        verb: "patch",
        why: "no Prometheus Operator CRDs here",
    },
    Exempt {
        group: "monitoring.coreos.com",
        resource: "prometheusrules",
        verb: "delete",
        why: "no Prometheus Operator CRDs here",
    },
];

/// The operator's log and the API server's, for a failure message.
fn context<'a>(server: &'a ApiServer, operator: &'a Operator) -> impl Fn() -> String + 'a {
    move || format!("{}\n{}", operator.tail(), server.logs())
}

/// Fails when the API server refused the operator anything, or its log says so.
fn assert_nothing_forbidden(server: &ApiServer, setup: &Setup, operator: &Operator) {
    let refused = forbidden(&server.audit(), &setup.user());
    assert!(
        refused.is_empty(),
        "the chart's RBAC refused the operator: {refused:#?}"
    );
    let log = operator.log();
    assert!(
        !log.to_lowercase().contains("forbidden"),
        "the operator's log reports a refusal:\n{log}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_operator_reconciles_the_dev_example_as_the_charts_service_account() {
    let Some(mut server) = ApiServer::start_or_skip("apiserver_operator (dev)").await else {
        return;
    };
    let setup = Setup::install(&server).await;
    let mut operator = Operator::start(&server, &setup, "operator-0");
    let admin = server.client().await;
    objects::namespace(&admin, NS, ADMIN).await;
    let example = example_json("dev.yaml");
    let name = example["metadata"]["name"].as_str().unwrap().to_owned();
    apply(&admin, &example).await;

    let sl = observed(&admin, NS, &name, context(&server, &operator)).await;
    operator.assert_running();
    let desired = sl_on::desired(&sl);
    assert_built_objects_present(&admin, &sl, &desired, context(&server, &operator)).await;

    // A limiter change: its Deployment follows; no Redis StatefulSet's spec moves.
    let names = Names::new(&name);
    let sets: Api<StatefulSet> = Api::namespaced(admin.clone(), NS);
    let deployments: Api<Deployment> = Api::namespaced(admin.clone(), NS);
    let mut generations = Vec::new();
    for set in &desired.stateful_sets {
        let set_name = set.metadata.name.clone().unwrap();
        let live = sets.get(&set_name).await.unwrap();
        generations.push((set_name, live.metadata.generation));
    }
    let mut changed = example.clone();
    changed["spec"]["limiter"]["replicas"] = json!(3);
    apply(&admin, &changed).await;
    let limiter = names.limiter();
    until(
        "the limiter Deployment at 3 replicas",
        ACT,
        || async {
            (deployments.get(&limiter).await.ok()?.spec?.replicas == Some(3)).then_some(())
        },
        context(&server, &operator),
    )
    .await;
    observed(&admin, NS, &name, context(&server, &operator)).await;
    for (set_name, generation) in &generations {
        let now = sets.get(set_name).await.unwrap().metadata.generation;
        assert_eq!(
            now, *generation,
            "a limiter change rewrote StatefulSet {set_name}'s spec (its pods would restart)"
        );
    }

    // Drift: someone scales the Deployment by hand; the operator puts its own value back.
    let drift = json!({
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": limiter, "namespace": NS}, "spec": {"replicas": 7}
    });
    deployments
        .patch(
            &limiter,
            &PatchParams::apply("someone-else").force(),
            &Patch::Apply(&drift),
        )
        .await
        .expect("a change by another field manager");
    until(
        "the hand-made change to the limiter Deployment repaired",
        ACT,
        || async {
            (deployments.get(&limiter).await.ok()?.spec?.replicas == Some(3)).then_some(())
        },
        context(&server, &operator),
    )
    .await;

    let holder = leader(&server, ACT, context(&server, &operator)).await;
    assert_eq!(
        holder, operator.identity,
        "the only replica holds the Lease"
    );
    operator.assert_running();
    assert_nothing_forbidden(&server, &setup, &operator);

    // Garbage collection: the owned objects go with the StreamLimiter.
    if !server.garbage_collector() {
        println!("skipped garbage collection: no kube-controller-manager in KUBEBUILDER_ASSETS");
        return;
    }
    let limiters: Api<StreamLimiter> = Api::namespaced(admin.clone(), NS);
    limiters
        .delete(&name, &DeleteParams::background())
        .await
        .expect("deleting the StreamLimiter");
    let owned = desired_objects(&desired);
    let ctx = || format!("{}\n{}", operator.tail(), server.logs());
    // The collector learns of the CRD's kind at its next discovery (every 30 s): allow that.
    let limit = std::time::Duration::from_secs(120);
    assert_absent(
        &admin,
        &owned,
        NS,
        "garbage-collected with their owner",
        limit,
        ctx,
    )
    .await;
    assert!(server.garbage_collector(), "the controller-manager stopped");
}

/// The Secrets `examples/production.yaml` names, as its comments tell a user to create them.
async fn production_secrets(client: &kube::Client, shards: usize) {
    let api: Api<Secret> = Api::namespaced(client.clone(), NS);
    let mut names = vec!["*.screenlimit-sentinel.video.svc".to_owned()];
    for i in 0..shards {
        names.push(format!("screenlimit-redis-{i}.video.svc"));
        names.push(format!("*.screenlimit-redis-{i}.video.svc"));
    }
    let dns: Vec<&str> = names.iter().map(String::as_str).collect();
    let tls = tls_secret(&dns);
    let secrets = [
        (
            "screenlimit-api-token",
            json!({"token": "0123456789abcdef0123456789abcdef"}),
            "Opaque",
        ),
        (
            "screenlimit-admin-users",
            json!({"users": "never read here\n"}),
            "Opaque",
        ),
        (
            "screenlimit-plan-db",
            json!({"url": "postgres://screenlimit:pw@billing-db.data.svc:5432/billing"}),
            "Opaque",
        ),
        (
            "screenlimit-redis-tls",
            serde_json::to_value(&tls).unwrap(),
            "kubernetes.io/tls",
        ),
    ];
    for (name, data, type_) in secrets {
        let secret: Secret = serde_json::from_value(json!({
            "metadata": {"name": name, "namespace": NS}, "type": type_, "stringData": data
        }))
        .unwrap();
        api.create(&PostParams::default(), &secret)
            .await
            .unwrap_or_else(|e| panic!("Secret {name}: {e}"));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_production_example_is_reconciled_and_the_charts_rules_are_all_used() {
    let Some(server) = ApiServer::start_or_skip("apiserver_operator (production)").await else {
        return;
    };
    let setup = Setup::install(&server).await;
    let mut operator = Operator::start(&server, &setup, "operator-0");
    let admin = server.client().await;
    objects::namespace(&admin, NS, ADMIN).await;
    let example = example_json("production.yaml");
    let shards = example["spec"]["redis"]["shards"].as_u64().expect("shards") as usize;
    production_secrets(&admin, shards).await;
    let name = example["metadata"]["name"].as_str().unwrap().to_owned();
    apply(&admin, &example).await;
    let sl = observed(&admin, NS, &name, context(&server, &operator)).await;
    let before = sl_on::desired(&sl);
    assert_built_objects_present(&admin, &sl, &before, context(&server, &operator)).await;

    // One shard fewer, no replicas (so no Sentinels) and the admin UI off: what the spec no
    // longer wants is deleted, of every kind the operator prunes.
    let mut changed = example.clone();
    changed["spec"]["redis"]["shards"] = json!(shards - 1);
    changed["spec"]["redis"]["replicasPerShard"] = json!(0);
    changed["spec"]["adminUI"]["enabled"] = json!(false);
    apply(&admin, &changed).await;
    let sl = observed(&admin, NS, &name, context(&server, &operator)).await;
    let after = sl_on::desired(&sl);
    let gone = dropped(&desired_objects(&before), &desired_objects(&after));
    assert!(
        !gone.is_empty(),
        "the change drops nothing: the test no longer tests pruning"
    );
    assert_absent(
        &admin,
        &gone,
        NS,
        "the spec dropped them",
        ACT,
        context(&server, &operator),
    )
    .await;
    assert_built_objects_present(&admin, &sl, &after, context(&server, &operator)).await;
    operator.assert_running();
    assert_nothing_forbidden(&server, &setup, &operator);

    // The chart's roles against what the operator used (the audit log, which the server
    // writes as each answer completes: a moment for the last ones).
    tokio::time::sleep(std::time::Duration::from_secs(2)).await;
    let used = used_by(&server.audit(), &setup.user());
    let granted: BTreeSet<_> = setup.rules().iter().flat_map(rbac::granted).collect();
    assert!(!granted.is_empty(), "the chart renders no rules");
    let unused = rbac::unused(&granted, &used, EXEMPT);
    assert!(
        unused.is_empty(),
        "the chart grants the operator what it never used over this test:\n  {}\n\
         drop them from charts/screenlimit/templates (_helpers.tpl, rbac.yaml), or list them in \
         EXEMPT with the path that uses them. Used: {used:#?}",
        unused.join("\n  ")
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_replica_leads_and_a_standby_takes_over_when_it_dies() {
    let Some(server) = ApiServer::start_or_skip("apiserver_operator (leader election)").await
    else {
        return;
    };
    let setup = Setup::install(&server).await;
    let mut replicas = [
        Operator::start(&server, &setup, "operator-a"),
        Operator::start(&server, &setup, "operator-b"),
    ];
    let logs = |replicas: &[Operator]| {
        let tails: Vec<String> = replicas.iter().map(Operator::tail).collect();
        format!("{}\n{}", tails.join("\n"), server.logs())
    };
    let holder = leader(&server, ACT, || logs(&replicas)).await;
    let (lead, standby) = match replicas.iter().position(|r| r.identity == holder) {
        Some(0) => (0, 1),
        Some(_) => (1, 0),
        None => panic!(
            "the Lease names {holder}, neither replica\n{}",
            logs(&replicas)
        ),
    };
    let admin = server.client().await;
    objects::namespace(&admin, NS, ADMIN).await;
    let example = example_json("dev.yaml");
    let name = example["metadata"]["name"].as_str().unwrap().to_owned();
    apply(&admin, &example).await;
    observed(&admin, NS, &name, || logs(&replicas)).await;
    const LEADING: &str = "became the leader";
    assert!(
        replicas[lead].log().contains(LEADING),
        "{}",
        logs(&replicas)
    );
    assert!(
        !replicas[standby].log().contains(LEADING),
        "two replicas lead at once\n{}",
        logs(&replicas)
    );
    replicas[standby].assert_running();

    // The leader dies without giving the Lease up: the standby takes it once it expires, and
    // reconciles what changed meanwhile.
    replicas[lead].kill();
    let mut changed = example.clone();
    changed["spec"]["limiter"]["replicas"] = json!(2);
    apply(&admin, &changed).await;
    let leases: Api<k8s_openapi::api::coordination::v1::Lease> = Api::namespaced(
        admin.clone(),
        screenlimit_system_tests::apiserver::chart::NAMESPACE,
    );
    let want = replicas[standby].identity.clone();
    until(
        &format!("{want} holding the Lease after the leader died"),
        ACT,
        || async {
            let lease = leases
                .get_opt(screenlimit_operator::leader::LEASE_NAME)
                .await
                .ok()??;
            (lease.spec?.holder_identity.as_deref() == Some(want.as_str())).then_some(())
        },
        || logs(&replicas),
    )
    .await;
    observed(&admin, NS, &name, || logs(&replicas)).await;
    let deployments: Api<Deployment> = Api::namespaced(admin.clone(), NS);
    let limiter = Names::new(&name).limiter();
    let replicas_now = deployments
        .get(&limiter)
        .await
        .unwrap()
        .spec
        .unwrap()
        .replicas;
    assert_eq!(
        replicas_now,
        Some(2),
        "the new leader did not apply the change"
    );
    assert!(
        replicas[standby].log().contains(LEADING),
        "{}",
        logs(&replicas)
    );
    replicas[standby].assert_running();
}
