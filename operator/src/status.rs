//! The pure status step: readiness of what exists, drift, and the conditions that follow.
//! A condition's `lastTransitionTime` moves only when its `status` changes.

use k8s_openapi::api::apps::v1::{Deployment, StatefulSet};

use crate::build::monitoring::MonitoringKind;
use crate::crd::{Condition, PeerState, RegionsStatus, ShardStatus, StreamLimiterStatus};
use crate::region_peers::PeersObserved;
use crate::validate::FieldError;

pub const READY: &str = "Ready";
pub const PROGRESSING: &str = "Progressing";
pub const DEGRADED: &str = "Degraded";
/// In managed mode: whether the shards run with a `maxmemory` (from their memory limit).
pub const REDIS_MEMORY: &str = "RedisMemoryBounded";
/// Present while `spec.monitoring` asks for something: whether the cluster serves it.
pub const MONITORING: &str = "MonitoringAvailable";
/// Whether every ready limiter pod runs the config revision last rendered.
pub const CONFIG_APPLIED: &str = "ConfigApplied";
/// With `spec.regions`: whether the limiter pods reach every peer region.
pub const REGIONS_REACHABLE: &str = "RegionsReachable";

/// What became of `spec.monitoring`: the kinds it asks for, and those the cluster does not
/// serve (so they were not created).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct MonitoringOutcome {
    pub requested: Vec<MonitoringKind>,
    pub missing: Vec<MonitoringKind>,
}

/// What the operator saw of the objects it owns.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Observed {
    /// Managed shards in index order (empty in external mode).
    pub shards: Vec<ShardStatus>,
    pub limiter_desired: i32,
    pub limiter_ready: i32,
    /// The limiter Deployment runs the current template everywhere.
    pub limiter_converged: bool,
    /// The admin UI, when enabled: (ready, desired).
    pub admin_ui: Option<(i32, i32)>,
    /// StatefulSets whose immutable fields differ from what the spec wants.
    pub drift: Vec<String>,
    /// Whether Redis is external (shard readiness is then not tracked).
    pub external_redis: bool,
    /// The Sentinel set, when it owns the shards: (ready pods, wanted pods, all ready on the
    /// current revision).
    pub sentinel: Option<(i32, i32, bool)>,
    /// The monitoring objects asked for and not served.
    pub monitoring: MonitoringOutcome,
    /// Managed shards' memory bound: `None` in external mode.
    pub redis_memory: Option<MemoryBound>,
    /// Which config revision the limiter pods run, when they were asked.
    pub config: Option<crate::config_rollout::ConfigRollout>,
    /// With `spec.regions`: what the limiter pods said of the peers (boxed: most installs run
    /// one region).
    pub regions: Option<Box<PeersObserved>>,
}

/// What bounds a managed shard's memory.
#[derive(Clone, Debug, PartialEq)]
pub enum MemoryBound {
    /// `maxmemory` (bytes) from the container's memory limit (as written).
    Bounded { limit: String, maxmemory: u64 },
    /// No memory limit (or one that is not a byte quantity): Redis runs without `maxmemory`.
    Unbounded,
}

/// `RedisMemoryBounded`, for managed shards.
fn memory_condition(bound: &MemoryBound, generation: Option<i64>) -> Condition {
    match bound {
        MemoryBound::Bounded { limit, maxmemory } => condition(
            REDIS_MEMORY,
            true,
            "MaxmemoryFromLimit",
            format!(
                "each shard runs with maxmemory {maxmemory} bytes ({} % of its memory limit {limit}) and noeviction: \
                 a full shard refuses new plays (the failure policy decides) instead of being killed",
                crate::build::redis_memory::MAXMEMORY_PERCENT
            ),
            generation,
        ),
        MemoryBound::Unbounded => condition(
            REDIS_MEMORY,
            false,
            "NoMemoryLimit",
            "spec.redis.resources.limits.memory is not set (or not a byte quantity): the shards run without maxmemory, \
             grow until the kubelet kills them and lose every lease and tombstone at once; set a memory limit \
             (maxmemory is derived from it; README, \"Sizing Redis\")"
                .to_owned(),
            generation,
        ),
    }
}

/// The outcome a status is computed from.
#[derive(Clone, Debug, PartialEq)]
pub enum Assessment {
    Invalid(Vec<FieldError>),
    Observed(Observed),
}

/// Readiness of one managed shard from its StatefulSet (absent: not ready).
pub fn shard_status(
    index: i32,
    name: &str,
    replicas: i32,
    sentinel_master: Option<String>,
    sts: Option<&StatefulSet>,
) -> ShardStatus {
    let (ready_replicas, ready) = stateful_set_readiness(sts, replicas);
    ShardStatus {
        index,
        name: name.to_owned(),
        ready,
        ready_replicas,
        replicas,
        sentinel_master,
    }
}

/// (ready pods, every pod ready on the current revision) of a StatefulSet (absent: not ready).
pub fn stateful_set_readiness(sts: Option<&StatefulSet>, replicas: i32) -> (i32, bool) {
    let status = sts.and_then(|s| s.status.as_ref());
    let ready_replicas = status.and_then(|s| s.ready_replicas).unwrap_or(0);
    let current = sts.is_some_and(|s| {
        let generation = s.metadata.generation.unwrap_or(0);
        let st = s.status.as_ref();
        st.and_then(|st| st.observed_generation).unwrap_or(0) >= generation
            && st.and_then(|st| st.current_revision.as_ref())
                == st.and_then(|st| st.update_revision.as_ref())
            && s.spec.as_ref().and_then(|sp| sp.replicas) == Some(replicas)
    });
    (ready_replicas, current && ready_replicas >= replicas)
}

/// (ready replicas, converged) of a Deployment.
pub fn deployment_readiness(deployment: Option<&Deployment>, desired: i32) -> (i32, bool) {
    let Some(d) = deployment else {
        return (0, false);
    };
    let st = d.status.as_ref();
    let ready = st.and_then(|s| s.ready_replicas).unwrap_or(0);
    let updated = st.and_then(|s| s.updated_replicas).unwrap_or(0);
    let total = st.and_then(|s| s.replicas).unwrap_or(0);
    let observed = st.and_then(|s| s.observed_generation).unwrap_or(0);
    let converged = observed >= d.metadata.generation.unwrap_or(0)
        && d.spec.as_ref().and_then(|s| s.replicas) == Some(desired)
        && updated == desired
        && total == desired
        && ready >= desired;
    (ready, converged)
}

/// Names of the immutable fields of `existing` that `desired` would change.
pub fn immutable_drift(existing: &StatefulSet, desired: &StatefulSet) -> Vec<&'static str> {
    let (Some(have), Some(want)) = (existing.spec.as_ref(), desired.spec.as_ref()) else {
        return Vec::new();
    };
    let mut drift = Vec::new();
    if have.selector != want.selector {
        drift.push("selector");
    }
    if have.service_name != want.service_name {
        drift.push("serviceName");
    }
    let policy = |p: &Option<String>| p.clone().unwrap_or_else(|| "OrderedReady".to_owned());
    if policy(&have.pod_management_policy) != policy(&want.pod_management_policy) {
        drift.push("podManagementPolicy");
    }
    let claims = |c: &Option<Vec<_>>| c.clone().unwrap_or_default();
    if claims(&have.volume_claim_templates) != claims(&want.volume_claim_templates) {
        drift.push("volumeClaimTemplates");
    }
    drift
}

/// The CRD's bound on a condition's message (`metav1.Condition`'s): a longer one would make the
/// API server refuse the whole status.
pub const MAX_CONDITION_MESSAGE: usize = 32_768;

fn condition(
    type_: &str,
    status: bool,
    reason: &str,
    mut message: String,
    generation: Option<i64>,
) -> Condition {
    if message.len() > MAX_CONDITION_MESSAGE {
        let mut end = MAX_CONDITION_MESSAGE - "…".len();
        while !message.is_char_boundary(end) {
            end -= 1;
        }
        message.truncate(end);
        message.push('…');
    }
    Condition {
        type_: type_.to_owned(),
        status: if status { "True" } else { "False" }.to_owned(),
        reason: reason.to_owned(),
        message,
        last_transition_time: String::new(),
        observed_generation: generation,
    }
}

/// `MonitoringAvailable`, when `spec.monitoring` asks for anything.
fn monitoring_condition(m: &MonitoringOutcome, generation: Option<i64>) -> Option<Condition> {
    if m.requested.is_empty() {
        return None;
    }
    let kinds = |list: &[MonitoringKind]| {
        list.iter()
            .map(|k| k.kind())
            .collect::<Vec<_>>()
            .join(" and ")
    };
    Some(if m.missing.is_empty() {
        condition(
            MONITORING,
            true,
            "Applied",
            format!("{} applied", kinds(&m.requested)),
            generation,
        )
    } else {
        let missing = kinds(&m.missing);
        condition(
            MONITORING,
            false,
            &format!("{}NotServed", missing.replace(" and ", "And")),
            format!(
                "spec.monitoring asks for {missing} but the cluster does not serve monitoring.coreos.com/v1 {missing}: \
                 install the Prometheus Operator's CRDs (the operator looks again within a minute) or switch it off in spec.monitoring"
            ),
            generation,
        )
    })
}

/// `ConfigApplied`: whether every ready limiter pod runs the rendered config revision.
fn config_condition(
    config: &crate::config_rollout::ConfigRollout,
    generation: Option<i64>,
) -> Condition {
    let (on, ready, revision) = (config.on_revision, config.ready_pods, &config.revision);
    if config.complete() {
        return condition(
            CONFIG_APPLIED,
            true,
            "AllPodsOnRevision",
            format!("every ready limiter pod ({ready}) runs config revision {revision}"),
            generation,
        );
    }
    let unknown = match config.unknown {
        0 => String::new(),
        n => format!(
            "; {n} could not be asked for /metrics through the API server's pod proxy (RBAC pods/proxy, NetworkPolicies)"
        ),
    };
    condition(
        CONFIG_APPLIED,
        false,
        "PodsOnOlderRevision",
        format!(
            "{on}/{ready} ready limiter pods run config revision {revision}{unknown}; a changed ConfigMap reaches running pods \
             within the kubelet's sync period (about a minute), then the limiter applies it within a second"
        ),
        generation,
    )
}

/// `RegionsReachable`: `False` when some peer is unreachable from every pod that called it,
/// `Unknown` while a peer has not been called yet (or no pod could be asked), else `True`.
fn regions_condition(regions: &RegionsStatus, generation: Option<i64>) -> Condition {
    let named = |state: PeerState| {
        regions
            .peers
            .iter()
            .filter(|p| p.state == state)
            .map(|p| p.name.as_str())
            .collect::<Vec<_>>()
            .join(", ")
    };
    let unreachable = named(PeerState::Unreachable);
    if !unreachable.is_empty() {
        return condition(
            REGIONS_REACHABLE,
            false,
            "PeerUnreachable",
            format!(
                "peer region {unreachable} did not answer the last call of any limiter pod that called it: \
                 until it answers, the plays of the accounts homed there are decided by this region's own store \
                 (provisional leases; 503 with failure policy closed); check the link to its url and its limiter \
                 pods (docs/regions.md, \"When a home does not answer\")"
            ),
            generation,
        );
    }
    let unknown = named(PeerState::Unknown);
    if !unknown.is_empty() {
        let asked = regions.peers.first().map_or(0, |p| p.pods_asked);
        let (reason, message) = if asked == 0 {
            (
                "NoPodAsked",
                "no ready limiter pod's /metrics could be read through the API server's pod proxy"
                    .to_owned(),
            )
        } else {
            (
                "PeersNotCalledYet",
                format!(
                    "no asked limiter pod has called peer region {unknown} yet (a limiter calls a peer for the \
                     plays and heartbeats of the accounts homed there)"
                ),
            )
        };
        let mut c = condition(REGIONS_REACHABLE, false, reason, message, generation);
        c.status = "Unknown".to_owned();
        return c;
    }
    condition(
        REGIONS_REACHABLE,
        true,
        "PeersReachable",
        format!(
            "every peer region ({}) answered the last call of at least one limiter pod",
            named(PeerState::Reachable)
        ),
        generation,
    )
}

/// The new status. `now` is an RFC 3339 time used only for conditions whose status changed.
pub fn compute(
    old: Option<&StreamLimiterStatus>,
    generation: Option<i64>,
    assessment: &Assessment,
    config_hash: Option<&str>,
    now: &str,
) -> StreamLimiterStatus {
    let mut status = StreamLimiterStatus {
        observed_generation: generation,
        ..StreamLimiterStatus::default()
    };
    let conditions = match assessment {
        Assessment::Invalid(errors) => {
            let message = errors
                .iter()
                .map(ToString::to_string)
                .collect::<Vec<_>>()
                .join("; ");
            // Keep what was last observed so a typo does not blank the readiness columns.
            if let Some(old) = old {
                status.shards = old.shards.clone();
                status.ready_shards = old.ready_shards;
                status.limiter_ready_replicas = old.limiter_ready_replicas;
                status.sentinel_ready_replicas = old.sentinel_ready_replicas;
                status.config_hash = old.config_hash.clone();
                status.config_revision = old.config_revision.clone();
                status.limiter_pods_on_config_revision = old.limiter_pods_on_config_revision;
                status.regions = old.regions.clone();
            }
            let kept_monitoring = old
                .into_iter()
                .flat_map(|o| &o.conditions)
                .filter(|c| {
                    c.type_ == MONITORING
                        || c.type_ == REDIS_MEMORY
                        || c.type_ == CONFIG_APPLIED
                        || c.type_ == REGIONS_REACHABLE
                })
                .cloned();
            let mut conditions = vec![
                condition(
                    READY,
                    false,
                    "InvalidSpec",
                    format!("fix the spec: {message}"),
                    generation,
                ),
                condition(
                    PROGRESSING,
                    false,
                    "InvalidSpec",
                    "nothing is rolled out until the spec is valid".to_owned(),
                    generation,
                ),
                condition(DEGRADED, true, "InvalidSpec", message, generation),
            ];
            conditions.extend(kept_monitoring);
            conditions
        }
        Assessment::Observed(obs) => {
            status.shards = obs.shards.clone();
            let ready_shards = obs.shards.iter().filter(|s| s.ready).count() as i32;
            if !obs.external_redis {
                status.ready_shards = Some(ready_shards);
            }
            status.limiter_ready_replicas = obs.limiter_ready;
            status.sentinel_ready_replicas = obs.sentinel.map(|(ready, _, _)| ready);
            status.config_hash = config_hash.map(str::to_owned);

            let mut waiting = Vec::new();
            if !obs.external_redis && ready_shards < obs.shards.len() as i32 {
                let names: Vec<_> = obs
                    .shards
                    .iter()
                    .filter(|s| !s.ready)
                    .map(|s| s.name.as_str())
                    .collect();
                waiting.push(format!(
                    "{ready_shards}/{} Redis shards ready (waiting for {})",
                    obs.shards.len(),
                    names.join(", ")
                ));
            }
            if let Some((ready, desired, false)) = obs.sentinel {
                waiting.push(format!(
                    "Sentinel {ready}/{desired} pods ready on the current revision"
                ));
            }
            if !obs.limiter_converged {
                waiting.push(format!(
                    "limiter {}/{} replicas ready on the current config",
                    obs.limiter_ready, obs.limiter_desired
                ));
            }
            if let Some((ready, desired)) = obs.admin_ui
                && ready < desired
            {
                waiting.push(format!("admin UI {ready}/{desired} replicas ready"));
            }
            let degraded = if obs.drift.is_empty() {
                condition(
                    DEGRADED,
                    false,
                    "AsExpected",
                    "no problem found".to_owned(),
                    generation,
                )
            } else {
                condition(
                    DEGRADED,
                    true,
                    "StatefulSetDrift",
                    format!(
                        "immutable fields of StatefulSet {} differ from the spec and are not patched; \
                         delete it with `kubectl delete statefulset <name> --cascade=orphan` and the operator recreates it",
                        obs.drift.join(", ")
                    ),
                    generation,
                )
            };
            let mut conditions = if waiting.is_empty() {
                vec![
                    condition(
                        READY,
                        true,
                        "AllReady",
                        "every shard and limiter replica is ready".to_owned(),
                        generation,
                    ),
                    condition(
                        PROGRESSING,
                        false,
                        "RolloutComplete",
                        "the current spec is rolled out".to_owned(),
                        generation,
                    ),
                    degraded,
                ]
            } else {
                let message = waiting.join("; ");
                vec![
                    condition(
                        READY,
                        false,
                        "ComponentsNotReady",
                        message.clone(),
                        generation,
                    ),
                    condition(PROGRESSING, true, "RollingOut", message, generation),
                    degraded,
                ]
            };
            conditions.extend(monitoring_condition(&obs.monitoring, generation));
            conditions.extend(
                obs.redis_memory
                    .as_ref()
                    .map(|bound| memory_condition(bound, generation)),
            );
            if let Some(config) = &obs.config {
                status.config_revision = Some(config.revision.clone());
                status.limiter_pods_on_config_revision = Some(config.on_revision);
                conditions.push(config_condition(config, generation));
            }
            if let Some(peers) = &obs.regions {
                let regions = crate::region_peers::status(
                    &peers.peers,
                    &peers.pods,
                    old.and_then(|o| o.regions.as_ref()),
                );
                conditions.push(regions_condition(&regions, generation));
                status.regions = Some(regions);
            }
            conditions
        }
    };
    let old_conditions = old.map(|o| o.conditions.as_slice()).unwrap_or_default();
    status.conditions = conditions
        .into_iter()
        .map(|mut c| {
            c.last_transition_time = old_conditions
                .iter()
                .find(|o| o.type_ == c.type_ && o.status == c.status)
                .map(|o| o.last_transition_time.clone())
                .unwrap_or_else(|| now.to_owned());
            c
        })
        .collect();
    status
}

/// Conditions whose status changed from `old` to `new` (for Events).
pub fn transitions<'a>(
    old: Option<&StreamLimiterStatus>,
    new: &'a StreamLimiterStatus,
) -> Vec<&'a Condition> {
    let old_conditions = old.map(|o| o.conditions.as_slice()).unwrap_or_default();
    new.conditions
        .iter()
        .filter(|c| {
            !old_conditions
                .iter()
                .any(|o| o.type_ == c.type_ && o.status == c.status)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::{MAX_CONDITION_MESSAGE, condition};

    #[test]
    fn a_message_over_the_crd_bound_is_cut_on_a_character() {
        let long = "é".repeat(MAX_CONDITION_MESSAGE);
        let c = condition("Ready", false, "Invalid", long, None);
        assert!(
            c.message.len() <= MAX_CONDITION_MESSAGE,
            "{}",
            c.message.len()
        );
        assert!(c.message.ends_with('…'));
        let short = condition("Ready", true, "Ok", "fine".into(), None);
        assert_eq!(short.message, "fine");
    }
}
