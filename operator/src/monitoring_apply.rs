//! The Prometheus Operator objects of a `StreamLimiter` at run time: their server-side apply and
//! prune as dynamic objects (the operator does not depend on the Prometheus Operator's types),
//! for the kinds discovery (`monitoring_api`) says the cluster serves.

use k8s_openapi::api::core::v1::ObjectReference;
use kube::api::{Api, DynamicObject, ListParams, Patch, PatchParams};
use kube::{Resource, ResourceExt};

use crate::build::monitoring::{MonitoringKind, MonitoringObject};
use crate::context::{Context, delete_unwanted};
use crate::error::Result;
use crate::names::FIELD_MANAGER;
use crate::status::MonitoringOutcome;

/// Applies the wanted monitoring objects whose kinds the cluster serves, deletes owned ones the
/// spec no longer wants, and says which wanted kinds are not served (for the status).
pub async fn reconcile_monitoring(
    ctx: &Context,
    reference: &ObjectReference,
    ns: &str,
    lp: &ListParams,
    uid: &str,
    wanted: &[MonitoringObject],
) -> Result<MonitoringOutcome> {
    let mut requested: Vec<MonitoringKind> = wanted.iter().map(|o| o.kind).collect();
    requested.dedup();
    let served = ctx
        .monitoring_api
        .served_for(&ctx.client, &requested)
        .await?;
    for kind in &served {
        let result = sync_kind(ctx, reference, ns, lp, uid, *kind, wanted).await;
        if let Err(crate::error::Error::Kube(kube::Error::Api(status))) = &result
            && status.code == 404
        {
            // The CRD went away since discovery: ask again on the retry.
            ctx.monitoring_api.forget();
        }
        result?;
    }
    let missing = requested
        .iter()
        .copied()
        .filter(|k| !served.contains(k))
        .collect();
    Ok(MonitoringOutcome { requested, missing })
}

/// One kind: list what this instance owns, apply what is wanted, delete the rest.
async fn sync_kind(
    ctx: &Context,
    reference: &ObjectReference,
    ns: &str,
    lp: &ListParams,
    uid: &str,
    kind: MonitoringKind,
    wanted: &[MonitoringObject],
) -> Result<()> {
    let resource = kind.api_resource();
    let api: Api<DynamicObject> = Api::namespaced_with(ctx.client.clone(), ns, &resource);
    let existing: Vec<DynamicObject> = api
        .list(lp)
        .await?
        .items
        .into_iter()
        .filter(|o| o.owner_references().iter().any(|r| r.uid == uid))
        .collect();
    let wanted: Vec<&MonitoringObject> = wanted.iter().filter(|o| o.kind == kind).collect();
    let params = PatchParams::apply(FIELD_MANAGER).force();
    for object in &wanted {
        api.patch(object.name(), &params, &Patch::Apply(&object.object))
            .await?;
    }
    for object in existing {
        let name = object.name_any();
        if wanted.iter().any(|w| w.name() == name) {
            continue;
        }
        delete_unwanted(
            ctx,
            reference,
            &api,
            kind.kind(),
            object.object_ref(&resource),
        )
        .await?;
    }
    Ok(())
}
