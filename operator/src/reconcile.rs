//! The reconcile pipeline: read → validate (pure) → build (pure) → apply (server-side apply,
//! one field manager) → prune → status. Plus the error policy.

use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::apps::v1::{Deployment, StatefulSet};
use k8s_openapi::api::autoscaling::v2::HorizontalPodAutoscaler;
use k8s_openapi::api::core::v1::{ConfigMap, ObjectReference, Secret, Service};
use k8s_openapi::api::networking::v1::NetworkPolicy;
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube::core::DeserializeGuard;
use kube::runtime::controller::Action;
use kube::runtime::events::{Event, EventType};
use kube::{Resource, ResourceExt};
use serde::Serialize;
use serde::de::DeserializeOwned;
use tracing::{info, instrument, warn};

use crate::build::{self, Desired, secret};
pub use crate::context::Context;
use crate::context::delete_unwanted;
use crate::crd::{RedisMode, StreamLimiter, StreamLimiterStatus};
use crate::error::{Error, Result};
use crate::monitoring_api::ASK_AGAIN_AFTER;
use crate::monitoring_apply::reconcile_monitoring;
use crate::names::{FIELD_MANAGER, Names};
use crate::region_peers::PeersObserved;
use crate::status::{self, Assessment, Observed};
use crate::validate::validate;

/// Requeue period once everything is ready (a safety net: owned objects are watched).
const READY_REQUEUE: Duration = Duration::from_secs(300);
/// Requeue period while something is rolling out.
const PROGRESS_REQUEUE: Duration = Duration::from_secs(30);

fn object_key(meta: &kube::core::ObjectMeta) -> String {
    format!(
        "{}/{}",
        meta.namespace.as_deref().unwrap_or_default(),
        meta.name.as_deref().unwrap_or_default()
    )
}

/// Entry point for the controller: one `StreamLimiter` (or one that did not deserialize).
pub async fn reconcile(
    guard: Arc<DeserializeGuard<StreamLimiter>>,
    ctx: Arc<Context>,
) -> Result<Action> {
    let _timer = ctx.metrics.duration.start_timer();
    ctx.metrics.reconciles.inc();
    let sl = match &guard.0 {
        Ok(sl) => sl,
        Err(invalid) => {
            warn!(object = %object_key(&invalid.metadata), error = %invalid.error, "malformed StreamLimiter skipped");
            let reference = ObjectReference {
                api_version: Some(StreamLimiter::api_version(&()).into_owned()),
                kind: Some(StreamLimiter::kind(&()).into_owned()),
                name: invalid.metadata.name.clone(),
                namespace: invalid.metadata.namespace.clone(),
                uid: invalid.metadata.uid.clone(),
                ..ObjectReference::default()
            };
            publish(
                &ctx,
                &reference,
                EventType::Warning,
                "Malformed",
                format!(
                    "the object does not match the StreamLimiter schema: {}",
                    invalid.error
                ),
            )
            .await;
            return Ok(Action::await_change());
        }
    };
    let result = reconcile_valid(sl, &ctx).await;
    let key = object_key(sl.meta());
    if result.is_ok() {
        ctx.failures.lock().expect("failures lock").remove(&key);
    }
    result
}

#[instrument(skip_all, fields(name = %sl.name_any(), namespace = sl.namespace().unwrap_or_default()))]
async fn reconcile_valid(sl: &StreamLimiter, ctx: &Context) -> Result<Action> {
    let reference = sl.object_ref(&());
    if let Err(errors) = validate(sl) {
        let assessment = Assessment::Invalid(errors);
        patch_status(sl, ctx, &reference, &assessment, None).await?;
        return Ok(Action::await_change());
    }
    let ns = sl.namespace().unwrap_or_default();
    let names = Names::new(&sl.name_any());
    let uid = sl.uid().unwrap_or_default();
    let desired = build::build(sl)?;

    // Read: what this instance owns now.
    let lp = ListParams::default().labels(&names.instance_selector());
    let stateful_sets = owned::<StatefulSet>(ctx, &ns, &lp, &uid).await?;
    let deployments = owned::<Deployment>(ctx, &ns, &lp, &uid).await?;
    let services = owned::<Service>(ctx, &ns, &lp, &uid).await?;
    let config_maps = owned::<ConfigMap>(ctx, &ns, &lp, &uid).await?;
    let pdbs = owned::<PodDisruptionBudget>(ctx, &ns, &lp, &uid).await?;
    let network_policies = owned::<NetworkPolicy>(ctx, &ns, &lp, &uid).await?;
    let hpas = owned::<HorizontalPodAutoscaler>(ctx, &ns, &lp, &uid).await?;

    // Apply, in a fixed order: Secrets, NetworkPolicies (before any pod they guard), Services,
    // ConfigMaps, PDBs, Deployments, StatefulSets.
    ensure_secrets(sl, ctx, &desired, &names, &ns).await?;
    for o in &desired.network_policies {
        apply(ctx, &ns, o).await?;
    }
    for o in &desired.services {
        recreate_if_cluster_ip_changes(ctx, &ns, &services, o).await?;
        apply(ctx, &ns, o).await?;
    }
    for o in &desired.config_maps {
        apply(ctx, &ns, o).await?;
    }
    for o in &desired.pdbs {
        apply(ctx, &ns, o).await?;
    }
    for o in &desired.deployments {
        match desired.hpas.is_empty() {
            true => apply(ctx, &ns, o).await?,
            false => apply(ctx, &ns, &with_live_replicas(o, &deployments)).await?,
        }
    }
    for o in &desired.hpas {
        apply(ctx, &ns, o).await?;
    }
    let mut drift = Vec::new();
    for want in &desired.stateful_sets {
        let existing = stateful_sets
            .iter()
            .find(|s| s.metadata.name == want.metadata.name);
        let fields = existing
            .map(|have| status::immutable_drift(have, want))
            .unwrap_or_default();
        if fields.is_empty() {
            apply(ctx, &ns, want).await?;
        } else {
            let name = want.name_any();
            warn!(statefulset = %name, ?fields, "immutable StatefulSet fields drifted; not patching");
            drift.push(format!("{name} ({})", fields.join(", ")));
        }
    }

    // Prune what the spec no longer wants (fewer shards, admin UI off).
    prune(ctx, &reference, &ns, &stateful_sets, &desired).await?;
    prune(ctx, &reference, &ns, &deployments, &desired).await?;
    prune(ctx, &reference, &ns, &services, &desired).await?;
    prune(ctx, &reference, &ns, &config_maps, &desired).await?;
    prune(ctx, &reference, &ns, &pdbs, &desired).await?;
    prune(ctx, &reference, &ns, &network_policies, &desired).await?;
    prune(ctx, &reference, &ns, &hpas, &desired).await?;
    // The Prometheus Operator's kinds, where the cluster serves them: applied and pruned alike.
    let monitoring =
        reconcile_monitoring(ctx, &reference, &ns, &lp, &uid, &desired.monitoring).await?;

    // Status, from what was read before this round's writes (their effects trigger the next).
    let mut observed = observe(sl, &names, &stateful_sets, &deployments, drift);
    let reports =
        crate::config_rollout::observe(&ctx.client, &ns, &names, &desired.config_revision).await;
    // Pods taking in a changed file make no event to watch: look again soon until they all do.
    let config_pending = !reports.config.complete();
    observed.config = Some(reports.config);
    observed.regions = sl.spec.regions.as_ref().map(|regions| {
        Box::new(PeersObserved {
            peers: regions.peers.iter().map(|p| p.name.clone()).collect(),
            pods: reports.peers,
        })
    });
    // Wanted but not served: look again soon, the Prometheus Operator may be on its way.
    let monitoring_missing = !monitoring.missing.is_empty();
    observed.monitoring = monitoring;
    let assessment = Assessment::Observed(observed);
    let new = patch_status(sl, ctx, &reference, &assessment, Some(&desired.config_hash)).await?;
    let ready = new
        .conditions
        .iter()
        .any(|c| c.type_ == status::READY && c.status == "True");
    let after = if ready && !config_pending {
        READY_REQUEUE
    } else {
        PROGRESS_REQUEUE
    };
    Ok(Action::requeue(if monitoring_missing {
        after.min(ASK_AGAIN_AFTER)
    } else {
        after
    }))
}

/// Under an autoscaler, a Deployment as built but with the replica count it has now: the
/// autoscaler owns the count; the operator keeps applying the field (dropping it from a
/// server-side apply would reset it to 1) at whatever value the autoscaler chose.
fn with_live_replicas(want: &Deployment, existing: &[Deployment]) -> Deployment {
    let mut want = want.clone();
    let live = existing
        .iter()
        .find(|d| d.metadata.name == want.metadata.name)
        .and_then(|d| d.spec.as_ref()?.replicas);
    if let (Some(live), Some(spec)) = (live, want.spec.as_mut()) {
        spec.replicas = Some(live);
    }
    want
}

/// Objects of kind `K` with this instance's labels and an owner reference to its uid.
async fn owned<K>(ctx: &Context, ns: &str, lp: &ListParams, uid: &str) -> Result<Vec<K>>
where
    K: Resource<DynamicType = (), Scope = kube::core::NamespaceResourceScope>
        + Clone
        + DeserializeOwned
        + std::fmt::Debug,
{
    let api: Api<K> = Api::namespaced(ctx.client.clone(), ns);
    let list = api.list(lp).await?;
    Ok(list
        .items
        .into_iter()
        .filter(|o| o.owner_references().iter().any(|r| r.uid == uid))
        .collect())
}

async fn apply<K>(ctx: &Context, ns: &str, object: &K) -> Result<()>
where
    K: Resource<DynamicType = (), Scope = kube::core::NamespaceResourceScope>
        + Clone
        + DeserializeOwned
        + Serialize
        + std::fmt::Debug,
{
    let api: Api<K> = Api::namespaced(ctx.client.clone(), ns);
    let params = PatchParams::apply(FIELD_MANAGER).force();
    api.patch(&object.name_any(), &params, &Patch::Apply(object))
        .await?;
    Ok(())
}

/// `spec.clusterIP` is immutable: a shard Service created as a ClusterIP Service (before the
/// shard Services became headless) is deleted so that the apply recreates it. Only DNS is
/// briefly affected; the Redis pods keep running.
async fn recreate_if_cluster_ip_changes(
    ctx: &Context,
    ns: &str,
    existing: &[Service],
    want: &Service,
) -> Result<()> {
    let ip = |s: &Service| s.spec.as_ref().and_then(|sp| sp.cluster_ip.clone());
    let Some(wanted_ip) = ip(want) else {
        return Ok(());
    };
    let Some(have) = existing
        .iter()
        .find(|s| s.metadata.name == want.metadata.name)
    else {
        return Ok(());
    };
    match ip(have) {
        Some(have_ip) if !have_ip.is_empty() && have_ip != wanted_ip => {
            let name = want.name_any();
            info!(service = %name, from = %have_ip, to = %wanted_ip, "clusterIP is immutable; recreating the Service");
            let api: Api<Service> = Api::namespaced(ctx.client.clone(), ns);
            match api.delete(&name, &DeleteParams::background()).await {
                Ok(_) => Ok(()),
                Err(kube::Error::Api(status)) if status.code == 404 => Ok(()),
                Err(e) => Err(e.into()),
            }
        }
        _ => Ok(()),
    }
}

/// Creates the generated Secrets once (the stream id key, the managed Redis passwords). An
/// existing one (409) is kept as is: never rotated, never read.
async fn ensure_secrets(
    sl: &StreamLimiter,
    ctx: &Context,
    desired: &Desired,
    names: &Names,
    ns: &str,
) -> Result<()> {
    let owner = sl
        .controller_owner_ref(&())
        .ok_or(build::BuildError::MissingMetadata("uid"))?;
    if let Some(name) = &desired.stream_id_secret {
        ensure_secret(sl, ctx, ns, name, "StreamIdSecretCreated", || {
            (
                secret::stream_id_secret(names, ns, &owner),
                format!("created Secret {name} with a random stream id key"),
            )
        })
        .await?;
    }
    if let Some(name) = &desired.redis_auth_secret {
        ensure_secret(sl, ctx, ns, name, "RedisAuthSecretCreated", || {
            (
                secret::redis_auth_secret(names, ns, &owner),
                format!("created Secret {name} with random Redis, limiter and Sentinel passwords"),
            )
        })
        .await?;
    }
    Ok(())
}

/// Creates Secret `name` (built by `fresh` only when needed) unless it exists.
async fn ensure_secret(
    sl: &StreamLimiter,
    ctx: &Context,
    ns: &str,
    name: &str,
    reason: &str,
    fresh: impl FnOnce() -> (Secret, String),
) -> Result<()> {
    let key = format!("{ns}/{name}");
    if ctx
        .ensured_secrets
        .lock()
        .expect("secrets lock")
        .contains(&key)
    {
        return Ok(());
    }
    let api: Api<Secret> = Api::namespaced(ctx.client.clone(), ns);
    let (secret, note) = fresh();
    match api
        .create(
            &PostParams {
                field_manager: Some(FIELD_MANAGER.to_owned()),
                ..PostParams::default()
            },
            &secret,
        )
        .await
    {
        Ok(_) => {
            info!(secret = %name, "created a generated Secret");
            publish(ctx, &sl.object_ref(&()), EventType::Normal, reason, note).await;
        }
        Err(kube::Error::Api(status)) if status.code == 409 => {}
        Err(e) => return Err(e.into()),
    }
    ctx.ensured_secrets
        .lock()
        .expect("secrets lock")
        .insert(key);
    Ok(())
}

async fn prune<K>(
    ctx: &Context,
    reference: &ObjectReference,
    ns: &str,
    existing: &[K],
    desired: &Desired,
) -> Result<()>
where
    K: Resource<DynamicType = (), Scope = kube::core::NamespaceResourceScope>
        + Clone
        + DeserializeOwned
        + std::fmt::Debug,
{
    let wanted = desired.names_of::<K>();
    let api: Api<K> = Api::namespaced(ctx.client.clone(), ns);
    for object in existing {
        let name = object.name_any();
        if wanted.contains(&name) {
            continue;
        }
        delete_unwanted(ctx, reference, &api, &K::kind(&()), object.object_ref(&())).await?;
    }
    Ok(())
}

fn observe(
    sl: &StreamLimiter,
    names: &Names,
    stateful_sets: &[StatefulSet],
    deployments: &[Deployment],
    drift: Vec<String>,
) -> Observed {
    let spec = &sl.spec;
    let external = spec.redis.mode == RedisMode::External;
    let ha = build::limiter_config::sentinel_enabled(sl);
    let shards = if external {
        Vec::new()
    } else {
        (0..spec.redis.shards)
            .map(|i| {
                let name = names.redis_shard(i);
                let sts = stateful_sets
                    .iter()
                    .find(|s| s.metadata.name.as_deref() == Some(&name));
                let master = ha.then(|| names.shard_master(i));
                status::shard_status(i, &name, build::redis::shard_pods(sl), master, sts)
            })
            .collect()
    };
    let sentinel = ha.then(|| {
        let name = names.sentinel();
        let sts = stateful_sets
            .iter()
            .find(|s| s.metadata.name.as_deref() == Some(&name));
        let desired = spec.redis.sentinel.replicas;
        let (ready, converged) = status::stateful_set_readiness(sts, desired);
        (ready, desired, converged)
    });
    let find = |name: String| {
        deployments
            .iter()
            .find(|d| d.metadata.name.as_deref() == Some(&name))
    };
    let (limiter_ready, limiter_converged) =
        status::deployment_readiness(find(names.limiter()), spec.limiter.replicas);
    let admin_ui = spec.admin_ui.enabled.then(|| {
        let (ready, _) =
            status::deployment_readiness(find(names.admin_ui()), spec.admin_ui.replicas);
        (ready, spec.admin_ui.replicas)
    });
    Observed {
        shards,
        limiter_desired: spec.limiter.replicas,
        limiter_ready,
        limiter_converged,
        admin_ui,
        drift,
        external_redis: external,
        sentinel,
        monitoring: Default::default(),
        redis_memory: (!external).then(|| {
            let limit = build::redis_memory::memory_limit(sl);
            match (limit, build::redis_memory::maxmemory(sl)) {
                (Some(limit), Some(maxmemory)) => status::MemoryBound::Bounded { limit, maxmemory },
                _ => status::MemoryBound::Unbounded,
            }
        }),
        config: None,
        regions: None,
    }
}

/// Server-side applies the status subresource; publishes an Event per condition transition.
async fn patch_status(
    sl: &StreamLimiter,
    ctx: &Context,
    reference: &ObjectReference,
    assessment: &Assessment,
    config_hash: Option<&str>,
) -> Result<StreamLimiterStatus> {
    let old = sl.status.as_ref();
    let now = (ctx.clock)();
    let new = status::compute(old, sl.meta().generation, assessment, config_hash, &now);
    if old != Some(&new) {
        let api: Api<StreamLimiter> =
            Api::namespaced(ctx.client.clone(), &sl.namespace().unwrap_or_default());
        let body = serde_json::json!({
            "apiVersion": StreamLimiter::api_version(&()),
            "kind": StreamLimiter::kind(&()),
            "status": new,
        });
        let params = PatchParams::apply(FIELD_MANAGER).force();
        api.patch_status(&sl.name_any(), &params, &Patch::Apply(&body))
            .await?;
    }
    for c in status::transitions(old, &new) {
        // Only transitions worth a person's attention.
        let (kind, reason) = match (c.type_.as_str(), c.status.as_str()) {
            (status::READY, "True") => (EventType::Normal, "Ready"),
            (status::READY, "False") if old.is_some() => (EventType::Warning, "NotReady"),
            (status::DEGRADED, "True") => (EventType::Warning, c.reason.as_str()),
            (status::DEGRADED, "False") if old.is_some() => (EventType::Normal, "Recovered"),
            (status::MONITORING, "False") => (EventType::Warning, c.reason.as_str()),
            (status::MONITORING, "True") if old.is_some() => {
                (EventType::Normal, "MonitoringApplied")
            }
            (status::REGIONS_REACHABLE, "False") => (EventType::Warning, c.reason.as_str()),
            (status::REGIONS_REACHABLE, "True") if was_false(old, status::REGIONS_REACHABLE) => {
                (EventType::Normal, "PeersReachable")
            }
            _ => continue,
        };
        publish(ctx, reference, kind, reason, c.message.clone()).await;
    }
    if let (Some(old), Assessment::Observed(obs)) = (old, assessment)
        && !obs.external_redis
        && !old.shards.is_empty()
        && old.shards.len() != obs.shards.len()
    {
        publish(ctx, reference, EventType::Normal, "ShardsChanged", format!(
            "Redis shards {} -> {}: about 1/N of accounts move; their live leases re-register on the next heartbeat",
            old.shards.len(), obs.shards.len()
        )).await;
    }
    Ok(new)
}

/// Whether condition `type_` was `False` in `old`.
fn was_false(old: Option<&StreamLimiterStatus>, type_: &str) -> bool {
    old.is_some_and(|o| {
        o.conditions
            .iter()
            .any(|c| c.type_ == type_ && c.status == "False")
    })
}

/// Publishes an Event; a failure is logged, never fails the reconcile.
async fn publish(
    ctx: &Context,
    reference: &ObjectReference,
    type_: EventType,
    reason: &str,
    note: String,
) {
    let event = Event {
        type_,
        reason: reason.to_owned(),
        note: Some(note.chars().take(1000).collect()),
        action: "Reconcile".to_owned(),
        secondary: None,
    };
    if let Err(error) = ctx.recorder.publish(&event, reference).await {
        warn!(%error, reason, "could not publish an Event");
    }
}

/// Logs, counts, and requeues with exponential backoff per object (5 s doubling to 5 min).
pub fn error_policy(
    guard: Arc<DeserializeGuard<StreamLimiter>>,
    error: &Error,
    ctx: Arc<Context>,
) -> Action {
    let meta = match &guard.0 {
        Ok(sl) => sl.meta(),
        Err(invalid) => &invalid.metadata,
    };
    let key = object_key(meta);
    ctx.metrics
        .failures
        .with_label_values(&[error.metric_label()])
        .inc();
    let attempts = {
        let mut failures = ctx.failures.lock().expect("failures lock");
        let n = failures.entry(key.clone()).or_insert(0);
        *n = n.saturating_add(1);
        *n
    };
    let delay = backoff(attempts);
    warn!(object = %key, %error, attempts, retry_in = ?delay, "reconcile failed");
    Action::requeue(delay)
}

/// Backoff after `attempts` consecutive failures.
pub fn backoff(attempts: u32) -> Duration {
    let secs = 5u64.saturating_mul(1u64 << attempts.saturating_sub(1).min(6));
    Duration::from_secs(secs.min(300))
}
