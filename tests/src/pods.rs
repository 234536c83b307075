//! A small kubelet for tests: runs a rendered pod's container the way a cluster would.
//!
//! Each pod gets its own network namespace on a private bridge (its own IP, nothing on the
//! host's network), a hosts file that gives every pod of the test its stable DNS name
//! (`<pod>.<service>.<namespace>.svc`), and, at each container start, a fresh mount namespace:
//! a read-only root (the host's, with ConfigMap and Secret volumes laid over it at their mount
//! paths and with their `defaultMode`, Secret files owned by the pod's `fsGroup`), emptyDir volumes bound read-write (they outlive container restarts,
//! as on a node), and the container's user with every capability dropped. A restart runs the
//! container's command again over the same emptyDirs, as the kubelet does. A Service with one
//! pod behind it is a name in the hosts file ([`Cluster::add_service`]); the test reaches a pod
//! from outside through [`Cluster::port_forward`], as `kubectl port-forward` does.
//!
//! **Init containers** run to completion, one after another, before a pod's first start (not
//! at a restart, as on a node), each in its own sandbox with its emptyDir mounts; their image is
//! what the test registered with [`Cluster::add_image`]: its entrypoint and the files it carries
//! (bound read-only at their paths). An init container that fails fails the test, as a pod
//! stuck in `Init:Error` would.
//!
//! What a rollout needs of a node and of kube-proxy, kept as small as the real ones allow:
//! - **ConfigMap volumes are updated in place** ([`Cluster::set_config_maps`]) the way the
//!   kubelet's atomic writer does it: each version in its own hidden timestamped directory, the
//!   `..data` symlink swapped to it by a rename, the visible files symlinks through `..data`; the
//!   volume is bind-mounted read-only, so a running container sees the new files at once.
//! - **A Service over several pods** ([`Cluster::service_proxy`], [`ServiceProxy`]): the
//!   kubelet's readiness probe (the container's HTTP probe, from the node, with its period and
//!   thresholds), the endpoints a pod enters and leaves [`ENDPOINTS_LAG`] after it turns ready,
//!   unready or is deleted (the endpoints controller, the watch, kube-proxy's sync), and each
//!   new connection sent to the next endpoint in rotation (kube-proxy's userspace mode), reached
//!   from the test's network like a LoadBalancer Service.
//! - **A pod's stop** ([`Pod::terminate`]): its preStop hook, SIGTERM, SIGKILL at the end of
//!   `terminationGracePeriodSeconds`; **a Deployment's roll** ([`Cluster::roll`]), as the
//!   controller does it with `maxUnavailable: 0`: a new pod started and Ready, then an old one
//!   deleted (out of the endpoints, stopped in the background), one at a time. Whether a roll
//!   happens at all is the Deployment controller's rule: the pod template changed
//!   ([`template_changed`]).
//!
//! Needs root (namespaces, mounts, `setpriv`), as the CI machine has.

use std::collections::BTreeMap;
use std::fs;
use std::io::Read;
use std::io::{self, Write};
use std::net::{Ipv4Addr, Shutdown, SocketAddr, TcpListener, TcpStream};
use std::os::fd::AsRawFd;
use std::os::unix::fs::symlink;
use std::os::unix::fs::{PermissionsExt, chown};
use std::path::PathBuf;
use std::process::{Child, Command, Output, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use k8s_openapi::api::apps::v1::{Deployment, StatefulSet};
use k8s_openapi::api::core::v1::{ConfigMap, Container, PodSpec, Probe, Secret, Volume};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;

/// The image's `PATH` (the official Redis image's), so the scripts find the same tools.
const PATH: &str = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";

/// Sets up one container start inside a fresh mount namespace, then execs the command as the
/// pod's user. `$1` pod dir, `$2` uid, `$3` gid, `$4` number of `src dst rw|ro` binds, then
/// the binds, then the command. The layer is copied onto a tmpfs first: overlayfs refuses a
/// lower layer that sits on the same filesystem as `/` below it.
const SANDBOX: &str = r#"set -eu
pod=$1 uid=$2 gid=$3 binds=$4
shift 4
mount -t tmpfs tmpfs "$pod/ns"
cp -a "$pod/layer" "$pod/ns/layer"
mkdir "$pod/ns/root"
mount -t overlay overlay -o "ro,lowerdir=$pod/ns/layer:/" "$pod/ns/root"
while [ "$binds" -gt 0 ]; do
  mount --bind "$1" "$pod/ns/root$2"
  if [ "$3" = ro ]; then mount -o remount,bind,ro "$pod/ns/root$2"; fi
  shift 3
  binds=$((binds - 1))
done
mount --rbind /proc "$pod/ns/root/proc"
mount --rbind /dev "$pod/ns/root/dev"
exec chroot "$pod/ns/root" setpriv --reuid "$uid" --regid "$gid" --clear-groups \
  --inh-caps=-all --bounding-set=-all --no-new-privs "$@"
"#;

/// A process that holds a network namespace open for as long as it lives.
struct Netns(Child);

impl Netns {
    fn new() -> Netns {
        let child = Command::new("unshare")
            .args(["--net", "sh", "-c", "ip link set lo up && exec sleep 86400"])
            .stdin(Stdio::null())
            .spawn()
            .expect("unshare --net (the pod tests need root and util-linux)");
        let netns = Netns(child);
        // `sleep` runs once the namespace exists and its loopback is up.
        let comm = format!("/proc/{}/comm", netns.pid());
        wait_for(Duration::from_secs(5), "network namespace", || {
            fs::read_to_string(&comm).is_ok_and(|c| c.trim() == "sleep")
        });
        netns
    }

    fn pid(&self) -> String {
        self.0.id().to_string()
    }

    /// `program args` inside this namespace (network only; the host's files).
    fn command(&self, program: &str, args: &[&str]) -> Command {
        let mut command = Command::new("nsenter");
        command.args(["-t", &self.pid(), "-n", program]).args(args);
        command
    }

    fn run(&self, program: &str, args: &[&str]) {
        let output = self.command(program, args).output().expect("nsenter");
        assert!(
            output.status.success(),
            "{program} {args:?}: {}",
            String::from_utf8_lossy(&output.stderr)
        );
    }
}

impl Drop for Netns {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// The bridge's own address: the node, where port-forwards dial from.
const NODE_IP: &str = "10.77.0.1/24";

/// The test's cluster: a bridge every pod hangs off, the shared hosts file, the ConfigMaps.
pub struct Cluster {
    dir: tempfile::TempDir,
    bridge: Netns,
    namespace: String,
    /// Every name the hosts file resolves: pods' DNS names, Services' names.
    hosts: BTreeMap<String, Ipv4Addr>,
    config_maps: BTreeMap<String, BTreeMap<String, String>>,
    secrets: BTreeMap<String, BTreeMap<String, String>>,
    /// Every ConfigMap volume of every pod laid out, to update in place.
    config_volumes: Vec<ConfigVolume>,
    /// The images init containers run, by reference.
    images: BTreeMap<String, Image>,
    next_ip: u8,
}

/// What an image is to this runner: its entrypoint (a local binary) and the files it carries,
/// `(host file, path in the image)`.
#[derive(Debug, Clone)]
pub struct Image {
    pub entrypoint: Vec<String>,
    pub files: Vec<(PathBuf, String)>,
}

/// How long an init container may run.
const INIT_TIMEOUT: Duration = Duration::from_secs(30);

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

    /// Service `name` with `pod` as its one endpoint: the short name and `<name>.<ns>.svc`
    /// resolve to the pod, as cluster DNS resolves a Service. Pointing it at another pod later
    /// is a new endpoint.
    pub fn add_service(&mut self, name: &str, pod: &Pod) {
        for alias in [name.to_owned(), format!("{name}.{}.svc", self.namespace)] {
            self.hosts.insert(alias, pod.ip);
        }
        self.write_hosts();
    }

    /// `kubectl port-forward`: a loopback port of the test's own network that reaches `port` of
    /// `pod` (dialled from the bridge's namespace, a thread per direction and connection).
    /// The forward stops taking connections when dropped.
    pub fn port_forward(&self, pod: &Pod, port: u16) -> PortForward {
        let listener = TcpListener::bind("127.0.0.1:0").expect("a loopback port");
        let local = listener.local_addr().unwrap();
        let target = SocketAddr::from((pod.ip, port));
        let netns = self.node_netns();
        let stop = Arc::new(AtomicBool::new(false));
        let stopped = Arc::clone(&stop);
        std::thread::spawn(move || {
            // This thread, and those it starts, dial from the bridge's namespace; the listener
            // was bound before, in the test's.
            enter(&netns);
            for client in listener.incoming() {
                if stopped.load(Ordering::SeqCst) {
                    break;
                }
                let Ok(client) = client else { continue };
                // Not reachable: the client's connection closes, as a refused one would.
                if let Ok(upstream) = TcpStream::connect_timeout(&target, Duration::from_secs(5)) {
                    splice(client, upstream);
                }
            }
        });
        PortForward { local, stop }
    }

    /// The bridge's (the node's) network namespace, for a thread to `setns` into.
    fn node_netns(&self) -> fs::File {
        fs::File::open(format!("/proc/{}/ns/net", self.bridge.pid()))
            .expect("the bridge's network namespace")
    }

    fn hosts_path(&self) -> PathBuf {
        self.dir.path().join("hosts")
    }

    /// Rewritten in place: every pod's bind mount keeps seeing the same file, like DNS.
    fn write_hosts(&self) {
        let mut text = String::from("127.0.0.1 localhost\n");
        for (name, ip) in &self.hosts {
            text.push_str(&format!("{ip} {name}\n"));
        }
        let mut file = fs::OpenOptions::new()
            .create(true)
            .write(true)
            .truncate(true)
            .open(self.hosts_path())
            .expect("hosts file");
        file.write_all(text.as_bytes()).expect("hosts file");
        fs::set_permissions(self.hosts_path(), fs::Permissions::from_mode(0o644)).unwrap();
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

/// The user the container runs as: the container's `runAsUser`, else the pod's; the group
/// is the pod's `fsGroup` (it owns the volumes), else the user's.
fn run_as(spec: &PodSpec) -> (i64, i64) {
    let container = &spec.containers[0];
    let uid = container
        .security_context
        .as_ref()
        .and_then(|s| s.run_as_user)
        .or_else(|| spec.security_context.as_ref().and_then(|s| s.run_as_user))
        .expect("a runAsUser: pods here never run as root");
    let gid = spec
        .security_context
        .as_ref()
        .and_then(|s| s.fs_group)
        .unwrap_or(uid);
    (uid, gid)
}

/// One pod: its network namespace, its files, its running container (if any).
pub struct Pod {
    pub name: String,
    /// `<pod>.<service>.<namespace>.svc`
    pub dns: String,
    /// Its address on the bridge.
    pub ip: Ipv4Addr,
    netns: Netns,
    dir: PathBuf,
    container: Container,
    /// The init containers and their images, run before the first start.
    init_containers: Vec<(Container, Image)>,
    initialized: bool,
    run_as: (i64, i64),
    hosts: PathBuf,
    /// `(host dir, mount path)` of each emptyDir.
    empty_dirs: Vec<(PathBuf, String)>,
    /// Each ConfigMap volume, bind-mounted read-only.
    config_volumes: Vec<ConfigVolume>,
    /// The container's env as `NAME=value`, Secret references resolved.
    env: Vec<String>,
    /// `terminationGracePeriodSeconds` (30 when the spec says none).
    grace: Duration,
    child: Option<Child>,
}

impl Pod {
    /// Writes the read-only layer (ConfigMap files at their mount paths, mount points for the
    /// rest) and creates the emptyDirs, world-writable as the kubelet makes them.
    fn lay_out(
        mut self,
        spec: &PodSpec,
        config_maps: &BTreeMap<String, BTreeMap<String, String>>,
        secrets: &BTreeMap<String, BTreeMap<String, String>>,
    ) -> Pod {
        self.env = resolve_env(&self.container, secrets);
        let layer = self.dir.join("layer");
        fs::create_dir_all(self.dir.join("ns")).unwrap();
        fs::create_dir_all(&layer).unwrap();
        let volumes: BTreeMap<&str, &Volume> = spec
            .volumes
            .iter()
            .flatten()
            .map(|v| (v.name.as_str(), v))
            .collect();
        for mount in self.container.volume_mounts.clone().unwrap_or_default() {
            let volume = volumes
                .get(mount.name.as_str())
                .unwrap_or_else(|| panic!("volume {} is not in the pod", mount.name));
            let target = layer.join(mount.mount_path.trim_start_matches('/'));
            fs::create_dir_all(&target).unwrap();
            if let Some(source) = &volume.config_map {
                let data = config_maps
                    .get(&source.name)
                    .unwrap_or_else(|| panic!("ConfigMap {} was not rendered", source.name));
                let volume = ConfigVolume {
                    config_map: source.name.clone(),
                    dir: self.dir.join("volumes").join(&mount.name),
                    mount_path: mount.mount_path.clone(),
                    items: source.items.as_ref().map(|items| {
                        items
                            .iter()
                            .map(|i| (i.key.clone(), i.path.clone(), i.mode))
                            .collect()
                    }),
                    default_mode: u32::try_from(source.default_mode.unwrap_or(0o644)).unwrap(),
                };
                fs::create_dir_all(&volume.dir).unwrap();
                fs::set_permissions(&volume.dir, fs::Permissions::from_mode(0o755)).unwrap();
                volume.write(data);
                self.config_volumes.push(volume);
            } else if let Some(source) = &volume.secret {
                let name = source.secret_name.as_deref().expect("secretName");
                let data = secrets
                    .get(name)
                    .unwrap_or_else(|| panic!("Secret {name} was not added to the cluster"));
                let mode = u32::try_from(source.default_mode.unwrap_or(0o644)).unwrap();
                let items: Vec<(String, String)> = match &source.items {
                    Some(items) => items
                        .iter()
                        .map(|i| (i.key.clone(), i.path.clone()))
                        .collect(),
                    None => data.keys().map(|k| (k.clone(), k.clone())).collect(),
                };
                for (key, path) in items {
                    let value = data
                        .get(&key)
                        .unwrap_or_else(|| panic!("Secret {name} has no key {key}"));
                    let file = target.join(path);
                    fs::write(&file, value).unwrap();
                    fs::set_permissions(&file, fs::Permissions::from_mode(mode)).unwrap();
                    // The kubelet gives Secret files to the pod's fsGroup.
                    chown(&file, Some(0), Some(u32::try_from(self.run_as.1).unwrap())).unwrap();
                }
                fs::set_permissions(&target, fs::Permissions::from_mode(0o555)).unwrap();
            } else if volume.empty_dir.is_some() {
                let host = self.empty_dir(&mount.name);
                self.empty_dirs.push((host, mount.mount_path.clone()));
            } else {
                panic!(
                    "volume {} has a kind this runner does not lay out",
                    mount.name
                );
            }
        }
        // A volume mounted inside a ConfigMap volume (a Secret at `/etc/screenlimit/secret`
        // under the config at `/etc/screenlimit`) needs its mount point in the ConfigMap's
        // directory, which the container runtime creates there on a node too.
        let mounts: Vec<String> = self
            .container
            .volume_mounts
            .iter()
            .flatten()
            .map(|m| m.mount_path.clone())
            .collect();
        for volume in &self.config_volumes {
            for path in &mounts {
                if let Some(inner) = path.strip_prefix(&format!("{}/", volume.mount_path)) {
                    fs::create_dir_all(volume.dir.join(inner)).unwrap();
                }
            }
        }
        // Mount point for the shared hosts file.
        fs::create_dir_all(layer.join("etc")).unwrap();
        fs::write(layer.join("etc/hosts"), "").unwrap();
        self
    }

    /// `args` run in this pod's sandbox: network, files and user as its container has them.
    fn sandboxed(&self, args: &[String]) -> Command {
        let mut binds: Vec<String> = vec![
            self.hosts.display().to_string(),
            "/etc/hosts".to_owned(),
            "rw".to_owned(),
        ];
        let mut mounts: Vec<[String; 3]> = Vec::new();
        for (host, path) in &self.empty_dirs {
            mounts.push([host.display().to_string(), path.clone(), "rw".to_owned()]);
        }
        for volume in &self.config_volumes {
            mounts.push([
                volume.dir.display().to_string(),
                volume.mount_path.clone(),
                "ro".to_owned(),
            ]);
        }
        // What the layer holds (Secret files) under a ConfigMap volume is hidden by its bind:
        // bound again from the layer, after it.
        for mount in self.container.volume_mounts.iter().flatten() {
            let path = &mount.mount_path;
            let nested = self
                .config_volumes
                .iter()
                .any(|v| path.starts_with(&format!("{}/", v.mount_path)));
            let bound = self.empty_dirs.iter().any(|(_, p)| p == path)
                || self.config_volumes.iter().any(|v| &v.mount_path == path);
            if nested && !bound {
                let source = self.dir.join("layer").join(path.trim_start_matches('/'));
                mounts.push([source.display().to_string(), path.clone(), "ro".to_owned()]);
            }
        }
        // Parents before what they hold.
        mounts.sort_by_key(|[_, path, _]| path.matches('/').count());
        binds.extend(mounts.into_iter().flatten());
        self.sandbox(&binds, &self.env, args)
    }

    /// `args` in a fresh mount namespace of this pod: `binds` (`src dst rw|ro`, flat) over the
    /// layer, `env` only, as the pod's user.
    fn sandbox(&self, binds: &[String], env: &[String], args: &[String]) -> Command {
        let mut command = self
            .netns
            .command("unshare", &["--mount", "--propagation", "private"]);
        command
            .args(["sh", "-c", SANDBOX, "sandbox"])
            .arg(&self.dir)
            .arg(self.run_as.0.to_string())
            .arg(self.run_as.1.to_string())
            .arg((binds.len() / 3).to_string())
            .args(binds)
            .args([
                "env",
                "-i",
                &format!("PATH={PATH}"),
                &format!("HOSTNAME={}", self.name),
            ])
            .args(env)
            .args(args);
        command
    }

    /// An emptyDir's directory on the node, made (world-writable, the pod's group) if it is new.
    fn empty_dir(&self, volume: &str) -> PathBuf {
        let host = self.dir.join("volumes").join(volume);
        if !host.exists() {
            fs::create_dir_all(&host).unwrap();
            fs::set_permissions(&host, fs::Permissions::from_mode(0o777)).unwrap();
            chown(&host, Some(0), Some(u32::try_from(self.run_as.1).unwrap())).unwrap();
        }
        host
    }

    /// Runs each init container to completion, in order, as the kubelet does before a pod's
    /// first start: its image's entrypoint (unless it has a command) and args, its emptyDir
    /// mounts, the image's files bound read-only, its plain env. Panics with the log when one
    /// fails or outlives [`INIT_TIMEOUT`].
    fn run_init_containers(&mut self) {
        let layer = self.dir.join("layer");
        for (init, image) in &self.init_containers {
            let mut binds: Vec<String> = vec![
                self.hosts.display().to_string(),
                "/etc/hosts".to_owned(),
                "rw".to_owned(),
            ];
            for mount in init.volume_mounts.iter().flatten() {
                fs::create_dir_all(layer.join(mount.mount_path.trim_start_matches('/'))).unwrap();
                let mode = if mount.read_only == Some(true) {
                    "ro"
                } else {
                    "rw"
                };
                binds.extend([
                    self.empty_dir(&mount.name).display().to_string(),
                    mount.mount_path.clone(),
                    mode.to_owned(),
                ]);
            }
            for (host, path) in &image.files {
                let point = layer.join(path.trim_start_matches('/'));
                fs::create_dir_all(point.parent().unwrap()).unwrap();
                fs::write(&point, b"").unwrap();
                binds.extend([host.display().to_string(), path.clone(), "ro".to_owned()]);
            }
            let env: Vec<String> = init
                .env
                .iter()
                .flatten()
                .map(|var| {
                    let value = var.value.as_deref().unwrap_or_else(|| {
                        panic!("{}: init env {} is not a plain value", self.name, var.name)
                    });
                    format!("{}={value}", var.name)
                })
                .collect();
            let mut argv = init.command.clone().unwrap_or(image.entrypoint.clone());
            argv.extend(init.args.clone().unwrap_or_default());
            let log = fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(self.log_path())
                .unwrap();
            let mut child = self
                .sandbox(&binds, &env, &argv)
                .stdin(Stdio::null())
                .stdout(log.try_clone().unwrap())
                .stderr(log)
                .spawn()
                .expect("start an init container");
            let deadline = Instant::now() + INIT_TIMEOUT;
            let status = loop {
                if let Some(status) = child.try_wait().expect("wait for the init container") {
                    break status;
                }
                if Instant::now() >= deadline {
                    let _ = child.kill();
                    let _ = child.wait();
                    panic!(
                        "{}: init container {} still running after {INIT_TIMEOUT:?}:\n{}",
                        self.name,
                        init.name,
                        self.log()
                    );
                }
                std::thread::sleep(Duration::from_millis(20));
            };
            assert!(
                status.success(),
                "{}: init container {} failed ({status}):\n{}",
                self.name,
                init.name,
                self.log()
            );
        }
        self.initialized = true;
    }

    /// The value of the container's env variable `name`, Secret references resolved.
    pub fn env_value(&self, name: &str) -> Option<&str> {
        self.env.iter().find_map(|kv| {
            kv.strip_prefix(name)
                .and_then(|rest| rest.strip_prefix('='))
        })
    }

    pub fn log_path(&self) -> PathBuf {
        self.dir.join("log")
    }

    /// Everything the container printed, over all its starts.
    pub fn log(&self) -> String {
        fs::read_to_string(self.log_path()).unwrap_or_default()
    }

    /// Starts the container's command (`command` + `args`), its output appended to the log;
    /// at the first start, the init containers before it.
    pub fn start(&mut self) {
        assert!(self.child.is_none(), "{} is already running", self.name);
        if !self.initialized {
            self.run_init_containers();
        }
        let mut argv = self.container.command.clone().unwrap_or_default();
        argv.extend(self.container.args.clone().unwrap_or_default());
        assert!(
            !argv.is_empty(),
            "{}: the runner needs an explicit command",
            self.name
        );
        let log = fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.log_path())
            .unwrap();
        let child = self
            .sandboxed(&argv)
            .stdin(Stdio::null())
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .spawn()
            .expect("start the pod's container");
        self.child = Some(child);
    }

    /// Kills the container (SIGKILL, a crash) and reaps it; the emptyDirs stay.
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// The container's exit, if it has exited.
    pub fn exited(&mut self) -> Option<std::process::ExitStatus> {
        self.child
            .as_mut()
            .and_then(|c| c.try_wait().ok().flatten())
    }

    /// `kubectl exec`: a command in the pod's sandbox, as the container's user.
    pub fn exec(&self, args: &[&str]) -> Output {
        let args: Vec<String> = args.iter().map(|s| (*s).to_owned()).collect();
        self.sandboxed(&args)
            .stdin(Stdio::null())
            .output()
            .expect("exec in the pod")
    }

    /// `exec` that must succeed; its standard output, trimmed.
    pub fn exec_ok(&self, args: &[&str]) -> String {
        let output = self.exec(args);
        assert!(
            output.status.success(),
            "{} exec {args:?}: {}{}",
            self.name,
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        );
        String::from_utf8_lossy(&output.stdout).trim().to_owned()
    }

    /// The container's readiness probe as a command in its sandbox: an exec probe as it is, an
    /// HTTP probe as `curl` of its path on the pod's loopback (a named port looked up in the
    /// container's ports).
    fn readiness_command(&self) -> Vec<String> {
        let probe = self
            .container
            .readiness_probe
            .as_ref()
            .expect("a readiness probe");
        if let Some(command) = probe.exec.as_ref().and_then(|e| e.command.clone()) {
            return command;
        }
        let http = probe.http_get.as_ref().expect("an exec or HTTP probe");
        let port = self.container_port(&http.port);
        let path = http.path.as_deref().unwrap_or("/");
        [
            "curl",
            "-sf",
            "-m",
            "2",
            &format!("http://127.0.0.1:{port}{path}"),
        ]
        .map(str::to_owned)
        .to_vec()
    }

    /// A probe's port: a number, or a container port's name.
    fn container_port(&self, port: &IntOrString) -> i32 {
        match port {
            IntOrString::Int(port) => *port,
            IntOrString::String(name) => {
                self.container
                    .ports
                    .iter()
                    .flatten()
                    .find(|p| p.name.as_deref() == Some(name))
                    .unwrap_or_else(|| panic!("{}: no container port {name}", self.name))
                    .container_port
            }
        }
    }

    /// The running container's process id (the command itself: every step of the sandbox
    /// `exec`s the next), `None` when it is not running.
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    /// `terminationGracePeriodSeconds`.
    pub fn grace_period(&self) -> Duration {
        self.grace
    }

    /// The kubelet's stop of a deleted pod: the container's preStop hook (an exec in its
    /// sandbox, or a sleep), then SIGTERM, then SIGKILL once `terminationGracePeriodSeconds`
    /// (counted from the start of the hook) has passed. Blocks until the container is gone.
    pub fn terminate(mut self) -> Terminated {
        let started = Instant::now();
        let deadline = started + self.grace;
        let hook = self
            .container
            .lifecycle
            .as_ref()
            .and_then(|l| l.pre_stop.clone());
        if let Some(hook) = hook {
            if let Some(command) = hook.exec.and_then(|e| e.command) {
                let mut child = self
                    .sandboxed(&command)
                    .stdin(Stdio::null())
                    .stdout(Stdio::null())
                    .stderr(Stdio::null())
                    .spawn()
                    .expect("run the preStop hook");
                while child.try_wait().ok().flatten().is_none() && Instant::now() < deadline {
                    std::thread::sleep(Duration::from_millis(50));
                }
                let _ = child.kill();
                let _ = child.wait();
            } else if let Some(sleep) = hook.sleep {
                std::thread::sleep(
                    Duration::from_secs(u64::try_from(sleep.seconds).unwrap())
                        .min(deadline.saturating_duration_since(Instant::now())),
                );
            } else {
                panic!("{}: a preStop hook this runner does not run", self.name);
            }
        }
        let mut child = self.child.take().expect("a running container to stop");
        // SAFETY: a signal to our own child, which has not been reaped (no pid reuse).
        unsafe { libc::kill(i32::try_from(child.id()).unwrap(), libc::SIGTERM) };
        let mut killed = false;
        let status = loop {
            if let Some(status) = child.try_wait().expect("wait for the container") {
                break status;
            }
            if Instant::now() >= deadline {
                killed = true;
                let _ = child.kill();
                break child.wait().expect("wait for the container");
            }
            std::thread::sleep(Duration::from_millis(20));
        };
        Terminated {
            took: started.elapsed(),
            status,
            killed,
            pod: self,
        }
    }

    /// Runs the container's readiness probe until it passes; panics with the log if the
    /// container exits or the probe keeps failing for `timeout`.
    pub fn wait_ready(&mut self, timeout: Duration) {
        let probe = self.readiness_command();
        let probe: Vec<&str> = probe.iter().map(String::as_str).collect();
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(status) = self.exited() {
                panic!(
                    "{} exited ({status}) before it was ready:\n{}",
                    self.name,
                    self.log()
                );
            }
            if self.exec(&probe).status.success() {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "{} not ready after {timeout:?}:\n{}",
                self.name,
                self.log()
            );
            std::thread::sleep(Duration::from_millis(200));
        }
    }
}

impl Drop for Pod {
    fn drop(&mut self) {
        self.kill();
    }
}

/// The container's env as `NAME=value`: plain values, and `secretKeyRef`s looked up in the
/// cluster's Secrets (a missing one fails, as `CreateContainerConfigError` would).
fn resolve_env(
    container: &Container,
    secrets: &BTreeMap<String, BTreeMap<String, String>>,
) -> Vec<String> {
    container
        .env
        .iter()
        .flatten()
        .map(|var| {
            let value = match (&var.value, &var.value_from) {
                (Some(value), _) => value.clone(),
                (None, Some(from)) => {
                    let r = from.secret_key_ref.as_ref().unwrap_or_else(|| {
                        panic!("env {}: only secretKeyRef is supported", var.name)
                    });
                    secrets
                        .get(&r.name)
                        .and_then(|data| data.get(&r.key))
                        .unwrap_or_else(|| {
                            panic!("env {}: no Secret key {}/{}", var.name, r.name, r.key)
                        })
                        .clone()
                }
                (None, None) => String::new(),
            };
            format!("{}={value}", var.name)
        })
        .collect()
}

/// Polls `check` every 100 ms until it holds; panics naming `what` after `timeout`.
pub fn wait_for(timeout: Duration, what: &str, mut check: impl FnMut() -> bool) {
    let deadline = Instant::now() + timeout;
    while !check() {
        assert!(Instant::now() < deadline, "no {what} after {timeout:?}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// A port forwarded into the cluster ([`Cluster::port_forward`]).
pub struct PortForward {
    local: SocketAddr,
    stop: Arc<AtomicBool>,
}

impl PortForward {
    /// `http://127.0.0.1:<port>`
    pub fn url(&self) -> String {
        format!("http://{}", self.local)
    }
}

impl Drop for PortForward {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        // Wakes the accept loop so that it sees the flag.
        let _ = TcpStream::connect_timeout(&self.local, Duration::from_secs(1));
    }
}

/// Copies bytes both ways between two connections until each side closes.
fn splice(client: TcpStream, upstream: TcpStream) {
    let (client_in, upstream_in) = match (client.try_clone(), upstream.try_clone()) {
        (Ok(c), Ok(u)) => (c, u),
        _ => return,
    };
    std::thread::spawn(move || copy_then_close(client_in, upstream));
    std::thread::spawn(move || copy_then_close(upstream_in, client));
}

fn copy_then_close(mut from: TcpStream, mut to: TcpStream) {
    let _ = io::copy(&mut from, &mut to);
    let _ = to.shutdown(Shutdown::Write);
}

/// One ConfigMap volume of one pod: where its versions are written on the node.
#[derive(Clone)]
struct ConfigVolume {
    config_map: String,
    /// On the node; bind-mounted read-only at `mount_path`.
    dir: PathBuf,
    mount_path: String,
    /// `(key, path, mode)` of the volume's `items`; every key, by its name, when it has none.
    items: Option<Vec<(String, String, Option<i32>)>>,
    default_mode: u32,
}

/// Tells the versions written apart (two in the same nanosecond).
static VERSION: AtomicU64 = AtomicU64::new(0);

impl ConfigVolume {
    /// Writes `data` as the kubelet's atomic writer does: the files in a new
    /// `..<timestamp>` directory, the `..data` symlink pointed at it by a rename (atomic: a
    /// reader sees the old version or the new one), a visible symlink `<file> -> ..data/<file>`
    /// for each file, then the old version's directory and the visible names it alone had
    /// removed.
    fn write(&self, data: &BTreeMap<String, String>) {
        let files: Vec<(String, &String, u32)> = match &self.items {
            Some(items) => items
                .iter()
                .map(|(key, path, mode)| {
                    let value = data.get(key).unwrap_or_else(|| {
                        panic!("ConfigMap {} has no key {key}", self.config_map)
                    });
                    let mode = mode.map_or(self.default_mode, |m| u32::try_from(m).unwrap());
                    (path.clone(), value, mode)
                })
                .collect(),
            None => data
                .iter()
                .map(|(key, value)| (key.clone(), value, self.default_mode))
                .collect(),
        };
        let now = SystemTime::now().duration_since(UNIX_EPOCH).unwrap();
        let version = format!(
            "..{}_{:09}.{}",
            now.as_secs(),
            now.subsec_nanos(),
            VERSION.fetch_add(1, Ordering::Relaxed)
        );
        let version_dir = self.dir.join(&version);
        fs::create_dir(&version_dir).unwrap();
        for (path, value, mode) in &files {
            let file = version_dir.join(path);
            fs::create_dir_all(file.parent().unwrap()).unwrap();
            fs::write(&file, value).unwrap();
            fs::set_permissions(&file, fs::Permissions::from_mode(*mode)).unwrap();
        }
        fs::set_permissions(&version_dir, fs::Permissions::from_mode(0o755)).unwrap();
        let data_link = self.dir.join("..data");
        let old = fs::read_link(&data_link).ok();
        let tmp = self.dir.join("..data_tmp");
        let _ = fs::remove_file(&tmp);
        symlink(&version, &tmp).unwrap();
        fs::rename(&tmp, &data_link).unwrap();
        let visible: Vec<String> = files
            .iter()
            .map(|(path, _, _)| path.split('/').next().unwrap().to_owned())
            .collect();
        for name in &visible {
            let link = self.dir.join(name);
            if fs::symlink_metadata(&link).is_err() {
                symlink(format!("..data/{name}"), &link).unwrap();
            }
        }
        // The visible names only the old version had (mount points of nested volumes are
        // directories, not the writer's: they stay).
        for entry in fs::read_dir(&self.dir).unwrap() {
            let entry = entry.unwrap();
            let name = entry.file_name().to_string_lossy().into_owned();
            if !name.starts_with("..")
                && !visible.contains(&name)
                && entry.file_type().unwrap().is_symlink()
            {
                fs::remove_file(entry.path()).unwrap();
            }
        }
        if let Some(old) = old {
            fs::remove_dir_all(self.dir.join(old)).unwrap();
        }
    }
}

/// A pod's stop ([`Pod::terminate`]).
pub struct Terminated {
    /// The stopped pod (its log).
    pub pod: Pod,
    pub status: std::process::ExitStatus,
    /// From the start of the preStop hook (or the SIGTERM) to the exit.
    pub took: Duration,
    /// The grace period ran out: SIGKILL.
    pub killed: bool,
}

/// The Deployment controller's rule: a Deployment rolls when its pod template changed (the
/// config hash annotation, the image, the env, …), and only then.
pub fn template_changed(before: &Deployment, after: &Deployment) -> bool {
    let template = |d: &Deployment| {
        serde_json::to_string(&d.spec.as_ref().expect("Deployment spec").template)
            .expect("a pod template serializes")
    };
    template(before) != template(after)
}

/// How long a change of a pod takes to reach kube-proxy: a pod deleted or turned unready stays
/// an endpoint this long (the endpoints controller, the API server's watch, kube-proxy's
/// resync), and a pod turned ready gets its first connection this long after.
pub const ENDPOINTS_LAG: Duration = Duration::from_secs(2);

impl Cluster {
    /// Service `name` over port `port` of the pods [`ServiceProxy::add`]ed to it.
    pub fn service_proxy(&self, name: &str, port: u16) -> ServiceProxy {
        ServiceProxy::start(name, port, self.node_netns())
    }

    /// A rolling update of `pods` to `deployment`'s new template, as the Deployment
    /// controller runs it with `maxUnavailable: 0` (the rendered strategy; asserted): for each
    /// old pod in turn, a new pod (`new_names`, in order) is laid out, started and added to
    /// `service`, and once the kubelet's probe has found it Ready, the old pod is deleted: out
    /// of the Service's endpoints (after [`ENDPOINTS_LAG`]) while its stop ([`Pod::terminate`])
    /// runs in the background, as the kubelet's does. The new pods, and the old pods' stops.
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

/// The container's readiness probe as the kubelet runs it from the node: an HTTP GET of the
/// pod's address.
#[derive(Clone)]
struct HttpProbe {
    port: u16,
    path: String,
    initial_delay: Duration,
    period: Duration,
    timeout: Duration,
    success_threshold: i32,
    failure_threshold: i32,
}

impl HttpProbe {
    fn of(pod: &Pod) -> HttpProbe {
        let probe: &Probe = pod
            .container
            .readiness_probe
            .as_ref()
            .unwrap_or_else(|| panic!("{}: no readiness probe", pod.name));
        let http = probe.http_get.as_ref().unwrap_or_else(|| {
            panic!("{}: a Service here needs an HTTP readiness probe", pod.name)
        });
        let seconds = |s: Option<i32>, default: i32| {
            Duration::from_secs(u64::try_from(s.unwrap_or(default)).unwrap())
        };
        HttpProbe {
            port: u16::try_from(pod.container_port(&http.port)).unwrap(),
            path: http.path.clone().unwrap_or_else(|| "/".to_owned()),
            initial_delay: seconds(probe.initial_delay_seconds, 0),
            period: seconds(probe.period_seconds, 10),
            timeout: seconds(probe.timeout_seconds, 1),
            success_threshold: probe.success_threshold.unwrap_or(1),
            failure_threshold: probe.failure_threshold.unwrap_or(3),
        }
    }

    /// One probe: a 2xx or 3xx status within the timeout.
    fn passes(&self, ip: Ipv4Addr) -> bool {
        let Ok(mut stream) =
            TcpStream::connect_timeout(&SocketAddr::from((ip, self.port)), self.timeout)
        else {
            return false;
        };
        let _ = stream.set_read_timeout(Some(self.timeout));
        let _ = stream.set_write_timeout(Some(self.timeout));
        let request = format!(
            "GET {} HTTP/1.1\r\nHost: {ip}:{}\r\nUser-Agent: kube-probe/1.31\r\nConnection: close\r\n\r\n",
            self.path, self.port
        );
        if stream.write_all(request.as_bytes()).is_err() {
            return false;
        }
        let mut head = [0u8; 12];
        if stream.read_exact(&mut head).is_err() {
            return false;
        }
        // `HTTP/1.1 200`
        std::str::from_utf8(&head[9..12])
            .ok()
            .and_then(|code| code.parse::<u16>().ok())
            .is_some_and(|code| (200..400).contains(&code))
    }
}

/// One pod behind a Service.
struct Endpoint {
    pod: String,
    ip: Ipv4Addr,
    /// The kubelet's readiness, from the probe.
    ready: bool,
    /// Deleted: out of the endpoints whatever its readiness.
    terminating: bool,
    /// In kube-proxy's rotation.
    published: bool,
    /// When `ready && !terminating` last stopped matching `published`.
    changed_at: Option<Instant>,
    connections: u64,
}

impl Endpoint {
    fn note_change(&mut self) {
        let wanted = self.ready && !self.terminating;
        if wanted == self.published {
            self.changed_at = None;
        } else if self.changed_at.is_none() {
            self.changed_at = Some(Instant::now());
        }
    }

    /// Whether kube-proxy sends new connections here now: the wanted state once it has held
    /// for the lag.
    fn in_rotation(&mut self) -> bool {
        if let Some(at) = self.changed_at
            && at.elapsed() >= ENDPOINTS_LAG
        {
            self.published = self.ready && !self.terminating;
            self.changed_at = None;
        }
        self.published
    }
}

struct ProxyState {
    name: String,
    port: u16,
    endpoints: Mutex<Vec<Endpoint>>,
    next: AtomicUsize,
    /// Connections that found no endpoint, or whose endpoint did not take them.
    dropped: AtomicU64,
    stop: AtomicBool,
}

impl ProxyState {
    fn endpoints(&self) -> std::sync::MutexGuard<'_, Vec<Endpoint>> {
        self.endpoints.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The endpoint the next connection goes to, round robin over those in rotation.
    fn pick(&self) -> Option<Ipv4Addr> {
        let mut endpoints = self.endpoints();
        let live: Vec<usize> = (0..endpoints.len())
            .filter(|&i| endpoints[i].in_rotation())
            .collect();
        if live.is_empty() {
            return None;
        }
        let chosen = &mut endpoints[live[self.next.fetch_add(1, Ordering::Relaxed) % live.len()]];
        chosen.connections += 1;
        Some(chosen.ip)
    }
}

/// A Service over several pods ([`Cluster::service_proxy`]): the kubelet's readiness probes,
/// the endpoints with their lag, kube-proxy's choice of a pod per connection. Reached on a
/// loopback port of the test's network ([`ServiceProxy::url`]), dialling the pods from the
/// node, as a LoadBalancer Service's node port is. Stops taking connections when dropped.
pub struct ServiceProxy {
    state: Arc<ProxyState>,
    local: SocketAddr,
    node: Arc<fs::File>,
}

impl ServiceProxy {
    fn start(name: &str, port: u16, node: fs::File) -> ServiceProxy {
        let listener = TcpListener::bind("127.0.0.1:0").expect("a loopback port");
        let local = listener.local_addr().unwrap();
        let state = Arc::new(ProxyState {
            name: name.to_owned(),
            port,
            endpoints: Mutex::new(Vec::new()),
            next: AtomicUsize::new(0),
            dropped: AtomicU64::new(0),
            stop: AtomicBool::new(false),
        });
        let node = Arc::new(node);
        let (accepting, netns) = (Arc::clone(&state), Arc::clone(&node));
        std::thread::spawn(move || {
            enter(&netns);
            for client in listener.incoming() {
                if accepting.stop.load(Ordering::SeqCst) {
                    break;
                }
                let Ok(client) = client else { continue };
                let Some(ip) = accepting.pick() else {
                    // No endpoint: the connection is refused (closed here, it was taken).
                    accepting.dropped.fetch_add(1, Ordering::Relaxed);
                    continue;
                };
                let target = SocketAddr::from((ip, accepting.port));
                match TcpStream::connect_timeout(&target, Duration::from_secs(2)) {
                    Ok(upstream) => splice(client, upstream),
                    Err(_) => {
                        accepting.dropped.fetch_add(1, Ordering::Relaxed);
                    }
                }
            }
        });
        ServiceProxy { state, local, node }
    }

    /// `http://127.0.0.1:<port>`
    pub fn url(&self) -> String {
        format!("http://{}", self.local)
    }

    /// A pod matching the Service's selector: the kubelet probes its readiness (the container's
    /// HTTP readiness probe, from the node, with its delay, period, timeout and thresholds); it
    /// enters the endpoints [`ENDPOINTS_LAG`] after it turns ready.
    pub fn add(&self, pod: &Pod) {
        let probe = HttpProbe::of(pod);
        self.state.endpoints().push(Endpoint {
            pod: pod.name.clone(),
            ip: pod.ip,
            ready: false,
            terminating: false,
            published: false,
            changed_at: None,
            connections: 0,
        });
        let (state, netns, name, ip) = (
            Arc::clone(&self.state),
            Arc::clone(&self.node),
            pod.name.clone(),
            pod.ip,
        );
        std::thread::spawn(move || {
            enter(&netns);
            std::thread::sleep(probe.initial_delay);
            let (mut successes, mut failures) = (0, 0);
            loop {
                let passed = probe.passes(ip);
                if passed {
                    (successes, failures) = (successes + 1, 0);
                } else {
                    (successes, failures) = (0, failures + 1);
                }
                {
                    let mut endpoints = state.endpoints();
                    let Some(endpoint) = endpoints.iter_mut().find(|e| e.pod == name) else {
                        return;
                    };
                    if state.stop.load(Ordering::SeqCst) || endpoint.terminating {
                        return;
                    }
                    if passed && successes >= probe.success_threshold {
                        endpoint.ready = true;
                    } else if !passed && failures >= probe.failure_threshold {
                        endpoint.ready = false;
                    }
                    endpoint.note_change();
                }
                std::thread::sleep(probe.period);
            }
        });
    }

    /// The kubelet has found `pod` Ready.
    pub fn is_ready(&self, pod: &str) -> bool {
        self.state
            .endpoints()
            .iter()
            .any(|e| e.pod == pod && e.ready)
    }

    /// `pod` takes the Service's new connections.
    pub fn in_rotation(&self, pod: &str) -> bool {
        self.state
            .endpoints()
            .iter_mut()
            .any(|e| e.pod == pod && e.in_rotation())
    }

    /// Until the kubelet finds `pod` Ready; panics with its log if it exits first or after
    /// `timeout`.
    pub fn wait_ready(&self, pod: &mut Pod, timeout: Duration) {
        let deadline = Instant::now() + timeout;
        while !self.is_ready(&pod.name) {
            if let Some(status) = pod.exited() {
                panic!(
                    "{} exited ({status}) before it was ready:\n{}",
                    pod.name,
                    pod.log()
                );
            }
            assert!(
                Instant::now() < deadline,
                "{} not ready after {timeout:?}:\n{}",
                pod.name,
                pod.log()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Until `pod` takes the Service's connections (ready, and the lag passed).
    pub fn wait_in_rotation(&self, pod: &mut Pod, timeout: Duration) {
        self.wait_ready(pod, timeout);
        wait_for(
            timeout,
            &format!("{} in {}'s endpoints", pod.name, self.state.name),
            || self.in_rotation(&pod.name),
        );
    }

    /// `kubectl delete pod`: out of the endpoints (after the lag: kube-proxy still sends it
    /// connections until then) while the kubelet stops it ([`Pod::terminate`]) in the
    /// background; the stop's outcome.
    pub fn delete(&self, pod: Pod) -> JoinHandle<Terminated> {
        if let Some(endpoint) = self
            .state
            .endpoints()
            .iter_mut()
            .find(|e| e.pod == pod.name)
        {
            endpoint.terminating = true;
            endpoint.note_change();
        }
        std::thread::spawn(move || pod.terminate())
    }

    /// The connections sent to each pod so far, and those that found no pod to take them.
    pub fn connections(&self) -> (BTreeMap<String, u64>, u64) {
        let per_pod = self
            .state
            .endpoints()
            .iter()
            .map(|e| (e.pod.clone(), e.connections))
            .collect();
        (per_pod, self.state.dropped.load(Ordering::Relaxed))
    }
}

impl Drop for ServiceProxy {
    fn drop(&mut self) {
        self.state.stop.store(true, Ordering::SeqCst);
        let _ = TcpStream::connect_timeout(&self.local, Duration::from_secs(1));
    }
}

/// Moves this thread (and those it starts) into the node's network namespace.
fn enter(netns: &fs::File) {
    // SAFETY: setns on an open namespace fd; it changes only this thread's namespace.
    let entered = unsafe { libc::setns(netns.as_raw_fd(), libc::CLONE_NEWNET) };
    assert_eq!(entered, 0, "setns: {}", io::Error::last_os_error());
}

#[cfg(test)]
mod tests {
    use super::*;

    fn read(dir: &std::path::Path, name: &str) -> String {
        fs::read_to_string(dir.join(name)).unwrap()
    }

    #[test]
    fn a_config_map_volume_is_swapped_whole_through_its_data_symlink() {
        let dir = tempfile::tempdir().unwrap();
        let volume = ConfigVolume {
            config_map: "limiter".to_owned(),
            dir: dir.path().to_owned(),
            mount_path: "/etc/screenlimit".to_owned(),
            items: None,
            default_mode: 0o644,
        };
        // A nested volume's mount point, as the layout makes it.
        fs::create_dir(dir.path().join("secret")).unwrap();
        let v1 = BTreeMap::from([
            ("limiter.yaml".to_owned(), "plans: {basic: 1}\n".to_owned()),
            ("old.txt".to_owned(), "gone next".to_owned()),
        ]);
        volume.write(&v1);
        let first = fs::read_link(dir.path().join("..data")).unwrap();
        assert_eq!(
            fs::read_link(dir.path().join("limiter.yaml")).unwrap(),
            PathBuf::from("..data/limiter.yaml")
        );
        assert_eq!(read(dir.path(), "limiter.yaml"), "plans: {basic: 1}\n");
        let mode = fs::metadata(dir.path().join("limiter.yaml"))
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o644);

        let v2 = BTreeMap::from([("limiter.yaml".to_owned(), "plans: {basic: 2}\n".to_owned())]);
        volume.write(&v2);
        let second = fs::read_link(dir.path().join("..data")).unwrap();
        assert_ne!(first, second);
        assert_eq!(read(dir.path(), "limiter.yaml"), "plans: {basic: 2}\n");
        assert!(
            !dir.path().join(&first).exists(),
            "the old version is removed"
        );
        assert!(fs::symlink_metadata(dir.path().join("old.txt")).is_err());
        assert!(dir.path().join("secret").is_dir(), "a mount point stays");
        let mut names: Vec<String> = fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        names.sort();
        assert_eq!(
            names,
            [second.to_str().unwrap(), "..data", "limiter.yaml", "secret"]
        );
    }

    #[test]
    fn a_volume_with_items_writes_only_those_keys_at_their_paths_and_modes() {
        let dir = tempfile::tempdir().unwrap();
        let volume = ConfigVolume {
            config_map: "scripts".to_owned(),
            dir: dir.path().to_owned(),
            mount_path: "/scripts".to_owned(),
            items: Some(vec![(
                "run".to_owned(),
                "bin/run.sh".to_owned(),
                Some(0o755),
            )]),
            default_mode: 0o644,
        };
        let data = BTreeMap::from([
            ("run".to_owned(), "#!/bin/sh\n".to_owned()),
            ("other".to_owned(), "not listed".to_owned()),
        ]);
        volume.write(&data);
        assert_eq!(read(dir.path(), "bin/run.sh"), "#!/bin/sh\n");
        let mode = fs::metadata(dir.path().join("bin/run.sh"))
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o755);
        assert!(fs::symlink_metadata(dir.path().join("other")).is_err());
    }
}
