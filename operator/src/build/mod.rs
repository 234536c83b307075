//! The pure build step: from a validated `StreamLimiter`, every object it should own.

pub mod access;
pub mod admin_ui;
pub mod limiter;
pub mod limiter_config;
pub mod meta;
pub mod monitoring;
pub mod network_policy;
pub mod pod;
pub mod redis;
pub mod redis_memory;
pub mod redis_module;
pub mod regions;
pub mod secret;
pub mod sentinel;

use k8s_openapi::api::apps::v1::{Deployment, StatefulSet};
use k8s_openapi::api::autoscaling::v2::HorizontalPodAutoscaler;
use k8s_openapi::api::core::v1::{ConfigMap, Service};
use k8s_openapi::api::networking::v1::NetworkPolicy;
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use kube::{Resource, ResourceExt};

use crate::crd::{RedisMode, StreamLimiter};
use crate::names::Names;

/// Everything a `StreamLimiter` wants, in apply order.
#[derive(Clone, Debug, PartialEq)]
pub struct Desired {
    pub services: Vec<Service>,
    pub config_maps: Vec<ConfigMap>,
    pub pdbs: Vec<PodDisruptionBudget>,
    pub deployments: Vec<Deployment>,
    pub stateful_sets: Vec<StatefulSet>,
    pub network_policies: Vec<NetworkPolicy>,
    /// The limiter's autoscaler, when `limiter.autoscaling.enabled`.
    pub hpas: Vec<HorizontalPodAutoscaler>,
    /// The Prometheus Operator objects `spec.monitoring` asks for.
    pub monitoring: Vec<monitoring::MonitoringObject>,
    /// The stream id Secret to create if absent; `None` when the spec names its own.
    pub stream_id_secret: Option<String>,
    /// The managed Redis credentials Secret to create if absent; `None` with external Redis.
    pub redis_auth_secret: Option<String>,
    /// Hash of the part of the limiter config that needs a restart, and of the Secrets it names
    /// (in the limiter pod template: a change rolls the pods).
    pub config_hash: String,
    /// The `revision` of the rendered limiter config (a hash of its live part): the limiter
    /// pods report the one they run.
    pub config_revision: String,
    /// The rendered `limiter.yaml`.
    pub limiter_config: String,
}

/// Why nothing can be built.
#[derive(Debug, thiserror::Error)]
pub enum BuildError {
    #[error("the StreamLimiter has no {0}; it was not read from the API server")]
    MissingMetadata(&'static str),
}

/// Builds every desired object. Pure: the same resource always gives the same objects.
pub fn build(sl: &StreamLimiter) -> Result<Desired, BuildError> {
    let ns = sl
        .namespace()
        .ok_or(BuildError::MissingMetadata("namespace"))?;
    let owner = sl
        .controller_owner_ref(&())
        .ok_or(BuildError::MissingMetadata("uid"))?;
    let names = Names::new(&sl.name_any());
    let spec = &sl.spec;

    let limiter_config = limiter_config::render(sl, &names, &ns);
    let mut hash_inputs = vec![stream_id_secret_ref(sl, &names)];
    if let Some(external) = &spec.redis.external {
        if let Some(secret) = &external.urls_secret {
            hash_inputs.push(format!("urls-secret:{}/{}", secret.name, secret.key));
        }
        if let Some(secret) = &external.cluster_nodes_secret {
            hash_inputs.push(format!("cluster-secret:{}/{}", secret.name, secret.key));
        }
    }
    if let Some(token) = &spec.limiter.auth_token_secret {
        hash_inputs.push(format!("auth-token:{}/{}", token.name, token.key));
    }
    if let Some(token) = &spec.limiter.gateway_token_secret {
        hash_inputs.push(format!("gateway-token:{}/{}", token.name, token.key));
    }
    // The player keys' content is not hashed: a rotated key reaches the running pods through
    // the kubelet's update of the mounted Secret, without a roll.
    if let Some(key) = spec
        .limiter
        .player_auth
        .as_ref()
        .and_then(|p| p.hs256_secret.as_ref().or(p.jwks_secret.as_ref()))
    {
        hash_inputs.push(format!("player-keys:{}/{}", key.name, key.key));
    }
    // The Secret's name and key roll the limiter; its content cannot be seen from here.
    if let Some(db) = limiter::plan_db_secret(sl) {
        hash_inputs.push(format!("plan-db:{}/{}", db.name, db.key));
    }
    // The credentials and TLS Secrets' names (their content is read at start).
    if access::managed(sl) {
        hash_inputs.push(format!("redis-auth:{}", names.redis_auth_secret()));
    }
    if let Some(auth) = access::external_auth(sl) {
        let r = &auth.password_secret_ref;
        hash_inputs.push(format!("redis-password:{}/{}", r.name, r.key));
    }
    if let Some(tls) = access::tls_secret(sl) {
        hash_inputs.push(format!("redis-tls:{tls}"));
    }
    // The region Secrets' names and keys (the limiter reads the tokens and CAs at start).
    if let Some(regions) = &spec.regions {
        hash_inputs.extend(regions::hash_inputs(regions));
    }
    let refs: Vec<&str> = hash_inputs.iter().map(String::as_str).collect();
    // Plans, caps, lease timing, the failure policy, the renewal window and the history's bounds
    // change live in the running pods (the limiter watches its mounted file): only the rest
    // rolls them.
    let restart_part = limiter_config::restart_part(sl, &names, &ns);
    let config_hash = limiter_config::config_hash(&restart_part, &refs);

    let mut services = Vec::new();
    let mut stateful_sets = Vec::new();
    let mut config_maps = vec![limiter::config_map(
        &names,
        &ns,
        limiter_config.clone(),
        &owner,
    )];
    let mut pdbs = vec![limiter::pdb(&names, &ns, &owner)];
    let ha = limiter_config::sentinel_enabled(sl);
    if spec.redis.mode == RedisMode::Managed {
        for index in 0..spec.redis.shards {
            services.push(redis::service(&names, &ns, index, &owner));
            stateful_sets.push(redis::stateful_set(sl, &names, &ns, index, &owner));
            if ha {
                pdbs.push(redis::pdb(&names, &ns, index, &owner));
            }
        }
        if ha {
            services.push(sentinel::service(&names, &ns, &owner));
            config_maps.push(sentinel::config_map(sl, &names, &ns, &owner));
            pdbs.push(sentinel::pdb(&names, &ns, &owner));
            stateful_sets.push(sentinel::stateful_set(sl, &names, &ns, &owner));
        }
    }
    services.push(limiter::service(&names, &ns, &owner));
    let mut deployments = vec![limiter::deployment(sl, &names, &ns, &config_hash, &owner)];
    if spec.admin_ui.enabled {
        services.push(admin_ui::service(&names, &ns, &owner));
        deployments.push(admin_ui::deployment(sl, &names, &ns, &owner));
    }

    let hpas = limiter::hpa(sl, &names, &ns, &owner).into_iter().collect();
    Ok(Desired {
        network_policies: network_policy::network_policies(sl, &names, &ns, &owner),
        hpas,
        monitoring: monitoring::objects(sl, &names, &ns, &owner),
        config_maps,
        pdbs,
        services,
        deployments,
        stateful_sets,
        stream_id_secret: spec
            .stream_id_secret_name
            .is_none()
            .then(|| names.stream_id_secret()),
        redis_auth_secret: access::managed(sl).then(|| names.redis_auth_secret()),
        config_hash,
        config_revision: limiter_config::revision(sl, &names, &ns),
        limiter_config,
    })
}

fn stream_id_secret_ref(sl: &StreamLimiter, names: &Names) -> String {
    format!("stream-id:{}", limiter::stream_id_secret_name(sl, names))
}

impl Desired {
    /// Names of every desired object of kind `K`.
    pub fn names_of<K: Resource<DynamicType = ()>>(&self) -> Vec<String> {
        let kind = K::kind(&());
        let names = |v: Vec<&kube::core::ObjectMeta>| -> Vec<String> {
            v.into_iter().filter_map(|m| m.name.clone()).collect()
        };
        match kind.as_ref() {
            "Service" => names(self.services.iter().map(|o| &o.metadata).collect()),
            "ConfigMap" => names(self.config_maps.iter().map(|o| &o.metadata).collect()),
            "PodDisruptionBudget" => names(self.pdbs.iter().map(|o| &o.metadata).collect()),
            "Deployment" => names(self.deployments.iter().map(|o| &o.metadata).collect()),
            "StatefulSet" => names(self.stateful_sets.iter().map(|o| &o.metadata).collect()),
            "NetworkPolicy" => names(self.network_policies.iter().map(|o| &o.metadata).collect()),
            "HorizontalPodAutoscaler" => names(self.hpas.iter().map(|o| &o.metadata).collect()),
            _ => Vec::new(),
        }
    }
}
