//! A Service over several pods: readiness, endpoints with their lag, kube-proxy's rotation.

use std::collections::BTreeMap;
use std::fs;
use std::net::{Ipv4Addr, SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use super::cluster::Cluster;
use super::forward::splice;
use super::netns::enter;
use super::pod::Pod;
use super::probe::HttpProbe;
use super::terminate::Terminated;
use super::wait::wait_for;

/// How long a change of a pod takes to reach kube-proxy: a pod deleted or turned unready stays
/// an endpoint this long (the endpoints controller, the API server's watch, kube-proxy's
/// resync), and a pod turned ready gets its first connection this long after.
pub const ENDPOINTS_LAG: Duration = Duration::from_secs(2);

impl Cluster {
    /// Service `name` over port `port` of the pods [`ServiceProxy::add`]ed to it.
    pub fn service_proxy(&self, name: &str, port: u16) -> ServiceProxy {
        ServiceProxy::start(name, port, self.node_netns())
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
    pub(super) fn start(name: &str, port: u16, node: fs::File) -> ServiceProxy {
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
