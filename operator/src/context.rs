//! What every reconcile shares ([`Context`]: the client, the Event recorder, metrics, the clock,
//! the error policy's failure counts, the Secrets known to exist, the monitoring discovery) and
//! the one prune step both the typed children and the monitoring objects go through
//! ([`delete_unwanted`]).

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};

use k8s_openapi::api::core::v1::ObjectReference;
use kube::Client;
use kube::api::{Api, DeleteParams};
use kube::runtime::events::{Event, EventType, Recorder, Reporter};
use serde::de::DeserializeOwned;
use tracing::{info, warn};

use crate::error::Result;
use crate::metrics::Metrics;
use crate::monitoring_api::MonitoringApi;
use crate::names::FIELD_MANAGER;

/// What every reconcile shares.
pub struct Context {
    pub client: Client,
    pub recorder: Recorder,
    pub metrics: Arc<Metrics>,
    /// RFC 3339 "now"; injectable for tests.
    pub clock: Box<dyn Fn() -> String + Send + Sync>,
    /// Consecutive failures per object, for the error policy's backoff.
    pub(crate) failures: Mutex<HashMap<String, u32>>,
    /// Generated Secrets known to exist ("namespace/name"): not re-created each reconcile.
    pub(crate) ensured_secrets: Mutex<HashSet<String>>,
    /// Which Prometheus Operator kinds the cluster serves (discovery at start, asked again
    /// when a wanted kind was missing).
    pub monitoring_api: MonitoringApi,
}

impl Context {
    pub fn new(client: Client, metrics: Arc<Metrics>, instance: Option<String>) -> Self {
        let reporter = Reporter {
            controller: FIELD_MANAGER.to_owned(),
            instance,
        };
        Context {
            recorder: Recorder::new(client.clone(), reporter),
            client,
            metrics,
            clock: Box::new(|| {
                k8s_openapi::jiff::Timestamp::now()
                    .round(k8s_openapi::jiff::Unit::Second)
                    .map(|t| t.to_string())
                    .unwrap_or_default()
            }),
            failures: Mutex::default(),
            ensured_secrets: Mutex::default(),
            monitoring_api: MonitoringApi::default(),
        }
    }

    pub fn with_clock(mut self, clock: impl Fn() -> String + Send + Sync + 'static) -> Self {
        self.clock = Box::new(clock);
        self
    }
}

/// Deletes a child the spec no longer wants and says so in an Event, the deleted object as
/// `related` (so Events for several deletions stay distinct). Already gone: nothing to say.
pub(crate) async fn delete_unwanted<K>(
    ctx: &Context,
    reference: &ObjectReference,
    api: &Api<K>,
    kind: &str,
    deleted: ObjectReference,
) -> Result<()>
where
    K: Clone + DeserializeOwned + std::fmt::Debug,
{
    let name = deleted.name.clone().unwrap_or_default();
    info!(%kind, %name, "deleting an object the spec no longer wants");
    match api.delete(&name, &DeleteParams::background()).await {
        Ok(_) => {}
        Err(kube::Error::Api(status)) if status.code == 404 => return Ok(()),
        Err(e) => return Err(e.into()),
    }
    let event = Event {
        type_: EventType::Normal,
        reason: "Deleted".to_owned(),
        note: Some(format!(
            "deleted {kind} {name}: the spec no longer wants it"
        )),
        action: "Prune".to_owned(),
        secondary: Some(deleted),
    };
    if let Err(error) = ctx.recorder.publish(&event, reference).await {
        warn!(%error, "could not publish an Event");
    }
    Ok(())
}
