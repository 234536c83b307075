//! The test's cluster: the bridge, the namespace's ConfigMaps, Secrets and images, and the
//! pods laid out on it.

use std::collections::BTreeMap;
use std::fs;
use std::net::Ipv4Addr;
use std::time::Duration;

use k8s_openapi::api::apps::v1::{Deployment, StatefulSet};
use k8s_openapi::api::core::v1::{ConfigMap, PodSpec, Secret};

use super::config_volume::ConfigVolume;
use super::image::Image;
use super::layout::run_as;
use super::netns::Netns;
use super::pod::Pod;

/// The bridge's own address: the node, where port-forwards dial from.
const NODE_IP: &str = "10.77.0.1/24";

/// The test's cluster: a bridge every pod hangs off, the shared hosts file, the ConfigMaps.
pub struct Cluster {
    pub(super) dir: tempfile::TempDir,
    pub(super) bridge: Netns,
    pub(super) namespace: String,
    /// Every name the hosts file resolves: pods' DNS names, Services' names.
    pub(super) hosts: BTreeMap<String, Ipv4Addr>,
    pub(super) config_maps: BTreeMap<String, BTreeMap<String, String>>,
    pub(super) secrets: BTreeMap<String, BTreeMap<String, String>>,
    /// Every ConfigMap volume of every pod laid out, to update in place.
    pub(super) config_volumes: Vec<ConfigVolume>,
    /// The images init containers run, by reference.
    pub(super) images: BTreeMap<String, Image>,
    pub(super) next_ip: u8,
}

impl Cluster {
    pub fn new(namespace: &str, config_maps: &[ConfigMap]) -> Cluster {
        let bridge = Netns::new();
        bridge.run("ip", &["link", "add", "br0", "type", "bridge"]);
        bridge.run("ip", &["link", "set", "br0", "up"]);
        bridge.run("ip", &["addr", "add", NODE_IP, "dev", "br0"]);
        let cluster = Cluster {
            dir: tempfile::tempdir().expect("tempdir"),
            bridge,
            namespace: namespace.to_owned(),
            hosts: BTreeMap::new(),
            config_maps: config_maps
                .iter()
                .map(|cm| {
                    let name = cm.metadata.name.clone().expect("ConfigMap name");
                    (name, cm.data.clone().unwrap_or_default())
                })
                .collect(),
            secrets: BTreeMap::new(),
            config_volumes: Vec::new(),
            images: BTreeMap::new(),
            next_ip: 10,
        };
        cluster.write_hosts();
        cluster
    }

    /// The image `reference` (as a pod spec names it) for the init containers of pods laid out
    /// afterwards.
    pub fn add_image(&mut self, reference: &str, image: Image) {
        self.images.insert(reference.to_owned(), image);
    }

    /// A Secret of the namespace (as the operator or a person created it), for the pods'
    /// Secret volumes and `secretKeyRef` env. Pods laid out afterwards see it.
    pub fn add_secret(&mut self, name: &str, data: BTreeMap<String, String>) {
        self.secrets.insert(name.to_owned(), data);
    }

    /// The operator applied new ConfigMaps: pods laid out from now on (a rolled pod, a new
    /// StatefulSet's) see them, and every volume of a ConfigMap whose data changed gets its new
    /// version at once, as the kubelet writes it at its next sync (a minute or so on a node):
    /// a new hidden directory, the `..data` symlink swapped to it (running containers see the
    /// new files; a read never sees half of two versions).
    pub fn set_config_maps(&mut self, config_maps: &[ConfigMap]) {
        for cm in config_maps {
            let name = cm.metadata.name.clone().expect("ConfigMap name");
            let data = cm.data.clone().unwrap_or_default();
            if self.config_maps.get(&name) == Some(&data) {
                continue;
            }
            for volume in self.config_volumes.iter().filter(|v| v.config_map == name) {
                volume.write(&data);
            }
            self.config_maps.insert(name, data);
        }
    }

    /// A Secret object as the operator renders it (`stringData`).
    pub fn add_secret_object(&mut self, secret: &Secret) {
        let name = secret.metadata.name.as_deref().expect("Secret name");
        let data = secret.string_data.clone().expect("stringData");
        self.add_secret(name, data);
    }

    /// The bridge's (the node's) network namespace, for a thread to `setns` into.
    pub(super) fn node_netns(&self) -> fs::File {
        fs::File::open(format!("/proc/{}/ns/net", self.bridge.pid()))
            .expect("the bridge's network namespace")
    }

    /// Pod `ordinal` of a StatefulSet: its network, its DNS name under the StatefulSet's
    /// governing Service, its files. Not started yet.
    pub fn stateful_pod(&mut self, set: &StatefulSet, ordinal: u32) -> Pod {
        let spec = set.spec.as_ref().expect("StatefulSet spec");
        let set_name = set.metadata.name.as_deref().expect("StatefulSet name");
        let service = spec.service_name.as_deref().unwrap_or(set_name);
        let pod_spec = spec.template.spec.clone().expect("pod template");
        let name = format!("{set_name}-{ordinal}");
        let dns = format!("{name}.{service}.{}.svc", self.namespace);
        self.pod(name, dns, pod_spec)
    }

    /// A pod of a Deployment, named `name`, running `command` (the image's entrypoint, which
    /// the rendered container leaves out) before the container's args.
    pub fn deployment_pod(
        &mut self,
        deployment: &Deployment,
        name: &str,
        command: Vec<String>,
    ) -> Pod {
        let mut spec = deployment
            .spec
            .as_ref()
            .and_then(|s| s.template.spec.clone())
            .expect("pod template");
        spec.containers[0].command = Some(command);
        let dns = format!("{name}.{}.svc", self.namespace);
        self.pod(name.to_owned(), dns, spec)
    }

    fn pod(&mut self, name: String, dns: String, spec: PodSpec) -> Pod {
        let ip = Ipv4Addr::new(10, 77, 0, self.next_ip);
        self.next_ip += 1;
        let netns = Netns::new();
        let host_end = format!("veth{}", ip.octets()[3]);
        self.bridge.run(
            "ip",
            &[
                "link",
                "add",
                &host_end,
                "type",
                "veth",
                "peer",
                "name",
                "eth0",
                "netns",
                &netns.pid(),
            ],
        );
        self.bridge
            .run("ip", &["link", "set", &host_end, "master", "br0", "up"]);
        netns.run("ip", &["addr", "add", &format!("{ip}/24"), "dev", "eth0"]);
        netns.run("ip", &["link", "set", "eth0", "up"]);
        self.hosts.insert(dns.clone(), ip);
        self.write_hosts();

        // A pod recreated under the same name (a roll) is a new pod: fresh files, fresh emptyDirs.
        let dir = self.dir.path().join(format!("{name}@{ip}"));
        let container = spec.containers[0].clone();
        let grace = Duration::from_secs(
            u64::try_from(spec.termination_grace_period_seconds.unwrap_or(30)).unwrap(),
        );
        let init_containers = spec
            .init_containers
            .iter()
            .flatten()
            .map(|init| {
                let reference = init.image.as_deref().unwrap_or_default();
                let image = self.images.get(reference).cloned().unwrap_or_else(|| {
                    panic!(
                        "{name}: init container {} runs image {reference:?}: register it with \
                         Cluster::add_image",
                        init.name
                    )
                });
                (init.clone(), image)
            })
            .collect();
        let pod = Pod {
            name,
            dns,
            ip,
            netns,
            dir,
            container,
            init_containers,
            initialized: false,
            run_as: run_as(&spec),
            hosts: self.hosts_path(),
            empty_dirs: Vec::new(),
            config_volumes: Vec::new(),
            env: Vec::new(),
            grace,
            child: None,
        };
        let pod = pod.lay_out(&spec, &self.config_maps, &self.secrets);
        self.config_volumes
            .extend(pod.config_volumes.iter().cloned());
        pod
    }
}
