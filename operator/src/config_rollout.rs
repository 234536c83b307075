//! What the limiter pods report on their `/metrics`, read once per ready pod. Plans and limits
//! reach the running pods through their mounted ConfigMap (the limiter reloads it,
//! `limiter/src/reload/`), without a roll, so the Deployment's status cannot say when a plan
//! change is everywhere: each ready pod is asked for `screenlimit_config_info{revision="…"}` on
//! its `/metrics` (open without the API token), through the API server's pod proxy, with a short
//! deadline. A pod that cannot be asked counts as not yet on the revision; asking never fails the
//! reconcile. The same text says which peer regions the pod reaches (`region_peers.rs`).

use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, ListParams};

use crate::names::{Component, LIMITER_PORT, Names};
use crate::region_peers::{PodPeers, peers_in};

/// How long one pod's `/metrics` may take through the proxy.
const ASK_DEADLINE: Duration = Duration::from_secs(2);

/// How far the rendered config revision has reached.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ConfigRollout {
    /// The revision the operator rendered.
    pub revision: String,
    /// Limiter pods ready now.
    pub ready_pods: i32,
    /// Of those, the pods that report running `revision`.
    pub on_revision: i32,
    /// Of those, the pods that could not be asked (proxy refused, timed out, no such metric).
    pub unknown: i32,
}

impl ConfigRollout {
    /// Every ready pod runs the revision (and there is one).
    pub fn complete(&self) -> bool {
        self.ready_pods > 0 && self.on_revision == self.ready_pods
    }
}

/// What the ready limiter pods report.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct LimiterReports {
    pub config: ConfigRollout,
    /// The peer regions' series of each pod whose `/metrics` was read.
    pub peers: Vec<PodPeers>,
}

/// Asks every ready limiter pod which config revision it runs and how it reaches its peers.
pub async fn observe(
    client: &kube::Client,
    ns: &str,
    names: &Names,
    revision: &str,
) -> LimiterReports {
    let selector = names
        .selector_labels(Component::Limiter)
        .iter()
        .map(|(k, v)| format!("{k}={v}"))
        .collect::<Vec<_>>()
        .join(",");
    let pods: Api<Pod> = Api::namespaced(client.clone(), ns);
    let mut reports = LimiterReports {
        config: ConfigRollout {
            revision: revision.to_owned(),
            ..ConfigRollout::default()
        },
        peers: Vec::new(),
    };
    let listed = match pods.list(&ListParams::default().labels(&selector)).await {
        Ok(list) => list.items,
        Err(error) => {
            tracing::debug!(%error, "cannot list the limiter pods; config rollout unknown");
            return reports;
        }
    };
    let ready: Vec<String> = listed
        .iter()
        .filter(|pod| is_ready(pod))
        .filter_map(|pod| pod.metadata.name.clone())
        .collect();
    let asked = futures::future::join_all(ready.iter().map(|name| ask(client, ns, name))).await;
    let rollout = &mut reports.config;
    rollout.ready_pods = ready.len() as i32;
    for text in asked {
        match text.as_deref().and_then(revision_in) {
            Some(r) if r == revision => rollout.on_revision += 1,
            Some(_) => {}
            None => rollout.unknown += 1,
        }
        if let Some(text) = text {
            reports.peers.push(peers_in(&text));
        }
    }
    reports
}

fn is_ready(pod: &Pod) -> bool {
    pod.metadata.deletion_timestamp.is_none()
        && pod
            .status
            .as_ref()
            .and_then(|s| s.conditions.as_ref())
            .is_some_and(|cs| cs.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
}

/// One pod's `/metrics` text, or `None` when it cannot be read within the deadline.
async fn ask(client: &kube::Client, ns: &str, pod: &str) -> Option<String> {
    let path = format!("/api/v1/namespaces/{ns}/pods/{pod}:{LIMITER_PORT}/proxy/metrics");
    let request = ::http::Request::get(path).body(Vec::new()).ok()?;
    tokio::time::timeout(ASK_DEADLINE, client.request_text(request))
        .await
        .ok()?
        .ok()
}

/// The `revision` label of `screenlimit_config_info` in Prometheus text.
pub fn revision_in(metrics: &str) -> Option<String> {
    let line = metrics
        .lines()
        .find(|l| l.starts_with("screenlimit_config_info{"))?;
    let start = line.find("revision=\"")? + "revision=\"".len();
    let end = start + line[start..].find('"')?;
    Some(line[start..end].to_owned())
}

#[cfg(test)]
mod tests {
    use super::revision_in;

    #[test]
    fn the_revision_is_read_from_the_info_metric() {
        let text = "# HELP screenlimit_config_info x\n# TYPE screenlimit_config_info gauge\n\
                    screenlimit_config_info{revision=\"ab12\"} 1\nscreenlimit_config_generation 3\n";
        assert_eq!(revision_in(text).as_deref(), Some("ab12"));
        assert_eq!(revision_in("screenlimit_config_generation 3\n"), None);
    }
}
