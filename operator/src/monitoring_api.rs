//! The Prometheus Operator objects of a `StreamLimiter` at run time: which of their kinds the
//! cluster serves (API discovery of `monitoring.coreos.com/v1`, remembered between reconciles),
//! and their server-side apply and prune as dynamic objects (the operator does not depend on
//! the Prometheus Operator's types).

use std::sync::Mutex;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::ObjectReference;
use kube::api::{Api, DynamicObject, ListParams, Patch, PatchParams};
use kube::{Client, Resource, ResourceExt};

use crate::build::monitoring::{API_VERSION, MonitoringKind, MonitoringObject};
use crate::error::Result;
use crate::names::FIELD_MANAGER;
use crate::reconcile::{Context, delete_unwanted};
use crate::status::MonitoringOutcome;

/// How long "not served" is believed before a reconcile that wants the kind asks again (so
/// installing the Prometheus Operator after screenlimit needs no restart).
pub const ASK_AGAIN_AFTER: Duration = Duration::from_secs(60);

/// What discovery said last, and when.
#[derive(Default)]
pub struct MonitoringApi {
    last: Mutex<Option<(Vec<MonitoringKind>, Instant)>>,
}

impl MonitoringApi {
    /// Asks the API server which of the kinds it serves, and remembers the answer.
    pub async fn discover(&self, client: &Client) -> Result<Vec<MonitoringKind>, kube::Error> {
        let served = match client.list_api_group_resources(API_VERSION).await {
            Ok(list) => MonitoringKind::ALL
                .into_iter()
                .filter(|k| list.resources.iter().any(|r| r.name == k.plural()))
                .collect(),
            Err(kube::Error::Api(status)) if status.code == 404 => Vec::new(),
            Err(e) => return Err(e),
        };
        *self.last.lock().expect("discovery lock") = Some((served.clone(), Instant::now()));
        Ok(served)
    }

    /// The kinds last seen served; `None` before the first discovery.
    pub fn known(&self) -> Option<Vec<MonitoringKind>> {
        let last = self.last.lock().expect("discovery lock");
        last.as_ref().map(|(served, _)| served.clone())
    }

    /// Forgets the last answer (a kind answered 404: its CRD is gone).
    fn forget(&self) {
        *self.last.lock().expect("discovery lock") = None;
    }

    /// The served kinds for a reconcile that wants `requested`: the remembered answer, asked
    /// again when a wanted kind was missing a while ago or nothing was ever asked. With nothing
    /// wanted and nothing known (no discovery at start), nothing is served as far as it knows.
    async fn served_for(
        &self,
        client: &Client,
        requested: &[MonitoringKind],
    ) -> Result<Vec<MonitoringKind>> {
        let last = self.last.lock().expect("discovery lock").clone();
        match last {
            Some((served, at))
                if requested.iter().all(|k| served.contains(k))
                    || at.elapsed() < ASK_AGAIN_AFTER =>
            {
                Ok(served)
            }
            None if requested.is_empty() => Ok(Vec::new()),
            _ => Ok(self.discover(client).await?),
        }
    }
}

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
