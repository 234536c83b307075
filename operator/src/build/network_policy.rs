//! Ingress NetworkPolicies (`networkPolicies.enabled`, on by default), one per component:
//!
//! - `<name>-redis`: Redis pods accept, on port `redis`, only this instance's limiter pods,
//!   Redis pods (replication, the start scripts asking each other) and Sentinels.
//! - `<name>-sentinel` (with Sentinel): Sentinels accept, on port `sentinel`, the same three.
//! - `<name>-limiter`: the limiter accepts, on port `http`, every pod of its namespace (the
//!   admin UI, in-namespace clients) and `networkPolicies.limiterClients`.
//! - `<name>-admin-ui` (with the admin UI): only `networkPolicies.adminUIClients` (the ingress
//!   controller); none: nothing over the pod network.
//!
//! Pods are selected by the same labels as the workloads' selectors; ports by name.

use k8s_openapi::api::networking::v1::{
    NetworkPolicy, NetworkPolicyIngressRule, NetworkPolicyPeer, NetworkPolicyPort,
    NetworkPolicySpec,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, OwnerReference};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;

use super::limiter_config::sentinel_enabled;
use super::meta::{meta, selector};
use crate::crd::{NetworkPeer, RedisMode, StreamLimiter};
use crate::names::{Component, Names};

fn pods(names: &Names, component: Component) -> NetworkPolicyPeer {
    NetworkPolicyPeer {
        pod_selector: Some(selector(names.selector_labels(component))),
        ..NetworkPolicyPeer::default()
    }
}

fn peer(p: &NetworkPeer) -> NetworkPolicyPeer {
    let labels = |l: &Option<std::collections::BTreeMap<String, String>>| {
        l.clone().map(|m| LabelSelector {
            match_labels: Some(m),
            ..LabelSelector::default()
        })
    };
    NetworkPolicyPeer {
        namespace_selector: labels(&p.namespace_labels),
        pod_selector: labels(&p.pod_labels),
        ..NetworkPolicyPeer::default()
    }
}

fn named_port(name: &str) -> NetworkPolicyPort {
    NetworkPolicyPort {
        port: Some(IntOrString::String(name.to_owned())),
        protocol: Some("TCP".to_owned()),
        ..NetworkPolicyPort::default()
    }
}

fn policy(
    names: &Names,
    ns: &str,
    owner: &OwnerReference,
    component: Component,
    port: &str,
    from: Vec<NetworkPolicyPeer>,
) -> NetworkPolicy {
    // No peer at all must mean "nobody": an ingress rule without `from` would admit everyone.
    let ingress = if from.is_empty() {
        Vec::new()
    } else {
        vec![NetworkPolicyIngressRule {
            from: Some(from),
            ports: Some(vec![named_port(port)]),
        }]
    };
    NetworkPolicy {
        metadata: meta(
            names.network_policy(component),
            ns,
            names.labels(component),
            owner,
        ),
        spec: Some(NetworkPolicySpec {
            pod_selector: Some(selector(names.selector_labels(component))),
            policy_types: Some(vec!["Ingress".to_owned()]),
            ingress: Some(ingress),
            ..NetworkPolicySpec::default()
        }),
    }
}

/// Every NetworkPolicy the resource wants (none when `networkPolicies.enabled` is false).
pub fn network_policies(
    sl: &StreamLimiter,
    names: &Names,
    ns: &str,
    owner: &OwnerReference,
) -> Vec<NetworkPolicy> {
    let spec = &sl.spec;
    let np = &spec.network_policies;
    if !np.enabled {
        return Vec::new();
    }
    let mut out = Vec::new();
    if spec.redis.mode == RedisMode::Managed {
        let ha = sentinel_enabled(sl);
        let mut store_peers = vec![
            pods(names, Component::Limiter),
            pods(names, Component::Redis),
        ];
        if ha {
            store_peers.push(pods(names, Component::Sentinel));
        }
        out.push(policy(
            names,
            ns,
            owner,
            Component::Redis,
            "redis",
            store_peers.clone(),
        ));
        if ha {
            out.push(policy(
                names,
                ns,
                owner,
                Component::Sentinel,
                "sentinel",
                store_peers,
            ));
        }
    }
    let mut limiter_peers = vec![NetworkPolicyPeer {
        // Every pod of the resource's namespace.
        pod_selector: Some(LabelSelector::default()),
        ..NetworkPolicyPeer::default()
    }];
    limiter_peers.extend(np.limiter_clients.iter().map(peer));
    out.push(policy(
        names,
        ns,
        owner,
        Component::Limiter,
        "http",
        limiter_peers,
    ));
    if spec.admin_ui.enabled {
        out.push(policy(
            names,
            ns,
            owner,
            Component::AdminUi,
            "http",
            np.admin_ui_clients.iter().map(peer).collect(),
        ));
    }
    out
}
