//! Wiring: the CRD check, the watches, and the controller loop.

use std::sync::Arc;

use futures::StreamExt;
use k8s_openapi::api::apps::v1::{Deployment, StatefulSet};
use k8s_openapi::api::autoscaling::v2::HorizontalPodAutoscaler;
use k8s_openapi::api::core::v1::{ConfigMap, Service};
use k8s_openapi::api::networking::v1::NetworkPolicy;
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use kube::Client;
use kube::api::{Api, DynamicObject, ListParams};
use kube::core::DeserializeGuard;
use kube::runtime::{Controller, watcher};
use tracing::{info, warn};

use crate::crd::StreamLimiter;
use crate::names::{APP_NAME, MANAGED_BY};
use crate::reconcile::{Context, error_policy, reconcile};

/// Why the operator cannot start.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    #[error(
        "the StreamLimiter CRD (streamlimiters.screenlimit.io) is not installed: is the CRD installed? \
         Install it with `helm install screenlimit charts/screenlimit` or `kubectl apply -f crds/streamlimiter.yaml`"
    )]
    CrdMissing,
    #[error("cannot list StreamLimiters ({0}); check the operator's RBAC and API server access")]
    Api(#[source] kube::Error),
}

/// Fails fast when the CRD is missing, instead of installing it.
pub async fn check_crd(client: &Client, namespace: Option<&str>) -> Result<(), StartError> {
    let api: Api<StreamLimiter> = match namespace {
        Some(ns) => Api::namespaced(client.clone(), ns),
        None => Api::all(client.clone()),
    };
    match api.list(&ListParams::default().limit(1)).await {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(status)) if status.code == 404 => Err(StartError::CrdMissing),
        Err(e) => Err(StartError::Api(e)),
    }
}

/// Runs the controller until shutdown (SIGTERM / ctrl-c).
pub async fn run(client: Client, namespace: Option<String>, ctx: Arc<Context>) {
    fn api<K>(client: &Client, ns: &Option<String>) -> Api<K>
    where
        K: kube::Resource<DynamicType = (), Scope = kube::core::NamespaceResourceScope>,
    {
        match ns {
            Some(ns) => Api::namespaced(client.clone(), ns),
            None => Api::all(client.clone()),
        }
    }
    // Owned objects are watched through their labels only: small caches, no unrelated events.
    let owned = watcher::Config::default()
        .labels(&format!(
            "app.kubernetes.io/name={APP_NAME},app.kubernetes.io/managed-by={MANAGED_BY}"
        ))
        .any_semantic();
    let main: Api<DeserializeGuard<StreamLimiter>> = api(&client, &namespace);
    info!(
        namespace = namespace.as_deref().unwrap_or("<all>"),
        "starting the StreamLimiter controller"
    );
    let mut controller = Controller::new(main, watcher::Config::default().any_semantic())
        .owns(api::<StatefulSet>(&client, &namespace), owned.clone())
        .owns(api::<Deployment>(&client, &namespace), owned.clone())
        .owns(api::<Service>(&client, &namespace), owned.clone())
        .owns(api::<ConfigMap>(&client, &namespace), owned.clone())
        .owns(
            api::<PodDisruptionBudget>(&client, &namespace),
            owned.clone(),
        )
        .owns(api::<NetworkPolicy>(&client, &namespace), owned.clone())
        .owns(
            api::<HorizontalPodAutoscaler>(&client, &namespace),
            owned.clone(),
        );
    // The Prometheus Operator's kinds are watched when the cluster served them at start (one
    // installed later is still applied; drift is then repaired at the periodic requeue).
    for kind in ctx.monitoring_api.known().unwrap_or_default() {
        let resource = kind.api_resource();
        let api: Api<DynamicObject> = match &namespace {
            Some(ns) => Api::namespaced_with(client.clone(), ns, &resource),
            None => Api::all_with(client.clone(), &resource),
        };
        controller = controller.owns_with(api, resource, owned.clone());
    }
    controller
        .shutdown_on_signal()
        .run(reconcile, error_policy, ctx)
        .for_each(|result| async move {
            match result {
                Ok((object, _)) => tracing::debug!(%object, "reconciled"),
                Err(error) => warn!(%error, "reconcile loop error"),
            }
        })
        .await;
}
