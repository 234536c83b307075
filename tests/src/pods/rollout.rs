//! A Deployment's rollout: whether it rolls, and the roll itself.

use std::thread::JoinHandle;
use std::time::Duration;

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;

use super::cluster::Cluster;
use super::pod::Pod;
use super::service::ServiceProxy;
use super::terminate::Terminated;

/// The Deployment controller's rule: a Deployment rolls when its pod template changed (the
/// config hash annotation, the image, the env, …), and only then.
pub fn template_changed(before: &Deployment, after: &Deployment) -> bool {
    let template = |d: &Deployment| {
        serde_json::to_string(&d.spec.as_ref().expect("Deployment spec").template)
            .expect("a pod template serializes")
    };
    template(before) != template(after)
}

impl Cluster {
    /// A rolling update of `pods` to `deployment`'s new template, as the Deployment
    /// controller runs it with `maxUnavailable: 0` (the rendered strategy; asserted): for each
    /// old pod in turn, a new pod (`new_names`, in order) is laid out, started and added to
    /// `service`, and once the kubelet's probe has found it Ready, the old pod is deleted: out
    /// of the Service's endpoints (after [`ENDPOINTS_LAG`](super::service::ENDPOINTS_LAG))
    /// while its stop ([`Pod::terminate`]) runs in the background, as the kubelet's does. The
    /// new pods, and the old pods' stops.
    pub fn roll(
        &mut self,
        pods: Vec<Pod>,
        deployment: &Deployment,
        command: &[String],
        new_names: &[String],
        service: &ServiceProxy,
        timeout: Duration,
    ) -> (Vec<Pod>, Vec<JoinHandle<Terminated>>) {
        let strategy = deployment
            .spec
            .as_ref()
            .and_then(|s| s.strategy.as_ref())
            .and_then(|s| s.rolling_update.as_ref());
        assert_eq!(
            strategy.and_then(|r| r.max_unavailable.clone()),
            Some(IntOrString::Int(0)),
            "this runner rolls a Deployment with maxUnavailable: 0"
        );
        assert_eq!(pods.len(), new_names.len(), "one new pod per old one");
        let mut new_pods = Vec::new();
        let mut stops = Vec::new();
        for (old, name) in pods.into_iter().zip(new_names) {
            let mut pod = self.deployment_pod(deployment, name, command.to_vec());
            pod.start();
            service.add(&pod);
            service.wait_ready(&mut pod, timeout);
            stops.push(service.delete(old));
            new_pods.push(pod);
        }
        (new_pods, stops)
    }
}
