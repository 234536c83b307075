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
//! Needs root (namespaces, mounts, `setpriv`), as the CI machine has.

use std::collections::BTreeMap;
use std::fs;
use std::io::{self, Write};
use std::net::{Ipv4Addr, Shutdown, SocketAddr, TcpListener, TcpStream};
use std::os::fd::AsRawFd;
use std::os::unix::fs::{PermissionsExt, chown};
use std::path::PathBuf;
use std::process::{Child, Command, Output, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use k8s_openapi::api::apps::v1::{Deployment, StatefulSet};
use k8s_openapi::api::core::v1::{ConfigMap, Container, PodSpec, Secret, Volume};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;

/// The image's `PATH` (the official Redis image's), so the scripts find the same tools.
const PATH: &str = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";

/// Sets up one container start inside a fresh mount namespace, then execs the command as the
/// pod's user. `$1` pod dir, `$2` uid, `$3` gid, `$4` number of `src dst` bind pairs, then
/// the pairs, then the command. The layer is copied onto a tmpfs first: overlayfs refuses a
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
  shift 2
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
    next_ip: u8,
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
            next_ip: 10,
        };
        cluster.write_hosts();
        cluster
    }

    /// A Secret of the namespace (as the operator or a person created it), for the pods'
    /// Secret volumes and `secretKeyRef` env. Pods laid out afterwards see it.
    pub fn add_secret(&mut self, name: &str, data: BTreeMap<String, String>) {
        self.secrets.insert(name.to_owned(), data);
    }

    /// The operator applied new ConfigMaps: pods laid out from now on (a rolled pod, a new
    /// StatefulSet's) see them; running ones keep what they were started with.
    pub fn set_config_maps(&mut self, config_maps: &[ConfigMap]) {
        for cm in config_maps {
            let name = cm.metadata.name.clone().expect("ConfigMap name");
            self.config_maps
                .insert(name, cm.data.clone().unwrap_or_default());
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
        let netns = fs::File::open(format!("/proc/{}/ns/net", self.bridge.pid()))
            .expect("the bridge's network namespace");
        let stop = Arc::new(AtomicBool::new(false));
        let stopped = Arc::clone(&stop);
        std::thread::spawn(move || {
            // This thread, and those it starts, dial from the bridge's namespace; the listener
            // was bound before, in the test's.
            // SAFETY: setns on an open namespace fd; it changes only this thread's namespace.
            let entered = unsafe { libc::setns(netns.as_raw_fd(), libc::CLONE_NEWNET) };
            assert_eq!(entered, 0, "setns: {}", io::Error::last_os_error());
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
        let pod = Pod {
            name,
            dns,
            ip,
            netns,
            dir,
            container,
            run_as: run_as(&spec),
            hosts: self.hosts_path(),
            empty_dirs: Vec::new(),
            env: Vec::new(),
            child: None,
        };
        pod.lay_out(&spec, &self.config_maps, &self.secrets)
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
    run_as: (i64, i64),
    hosts: PathBuf,
    /// `(host dir, mount path)` of each emptyDir.
    empty_dirs: Vec<(PathBuf, String)>,
    /// The container's env as `NAME=value`, Secret references resolved.
    env: Vec<String>,
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
                let mode = u32::try_from(source.default_mode.unwrap_or(0o644)).unwrap();
                for (key, value) in data {
                    let file = target.join(key);
                    fs::write(&file, value).unwrap();
                    fs::set_permissions(&file, fs::Permissions::from_mode(mode)).unwrap();
                }
                // The kubelet's ConfigMap directory is read-only too.
                fs::set_permissions(&target, fs::Permissions::from_mode(0o555)).unwrap();
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
                let host = self.dir.join("volumes").join(&mount.name);
                fs::create_dir_all(&host).unwrap();
                fs::set_permissions(&host, fs::Permissions::from_mode(0o777)).unwrap();
                chown(&host, Some(0), Some(u32::try_from(self.run_as.1).unwrap())).unwrap();
                self.empty_dirs.push((host, mount.mount_path.clone()));
            } else {
                panic!(
                    "volume {} has a kind this runner does not lay out",
                    mount.name
                );
            }
        }
        // Mount point for the shared hosts file.
        fs::create_dir_all(layer.join("etc")).unwrap();
        fs::write(layer.join("etc/hosts"), "").unwrap();
        self
    }

    /// `args` run in this pod's sandbox: network, files and user as its container has them.
    fn sandboxed(&self, args: &[String]) -> Command {
        let mut binds: Vec<String> =
            vec![self.hosts.display().to_string(), "/etc/hosts".to_owned()];
        for (host, path) in &self.empty_dirs {
            binds.push(host.display().to_string());
            binds.push(path.clone());
        }
        let mut command = self
            .netns
            .command("unshare", &["--mount", "--propagation", "private"]);
        command
            .args(["sh", "-c", SANDBOX, "sandbox"])
            .arg(&self.dir)
            .arg(self.run_as.0.to_string())
            .arg(self.run_as.1.to_string())
            .arg((binds.len() / 2).to_string())
            .args(&binds)
            .args([
                "env",
                "-i",
                &format!("PATH={PATH}"),
                &format!("HOSTNAME={}", self.name),
            ])
            .args(&self.env)
            .args(args);
        command
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

    /// Starts the container's command (`command` + `args`), its output appended to the log.
    pub fn start(&mut self) {
        assert!(self.child.is_none(), "{} is already running", self.name);
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
        let port = match &http.port {
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
        };
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
