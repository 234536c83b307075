//! Readiness probes: from inside the pod's sandbox, and the kubelet's HTTP probe from the node.

use std::io::{Read, Write};
use std::net::{Ipv4Addr, SocketAddr, TcpStream};
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::Probe;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;

use super::pod::Pod;

impl Pod {
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
    pub(super) fn container_port(&self, port: &IntOrString) -> i32 {
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

/// The container's readiness probe as the kubelet runs it from the node: an HTTP GET of the
/// pod's address.
#[derive(Clone)]
pub(super) struct HttpProbe {
    pub(super) port: u16,
    pub(super) path: String,
    pub(super) initial_delay: Duration,
    pub(super) period: Duration,
    pub(super) timeout: Duration,
    pub(super) success_threshold: i32,
    pub(super) failure_threshold: i32,
}

impl HttpProbe {
    pub(super) fn of(pod: &Pod) -> HttpProbe {
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
    pub(super) fn passes(&self, ip: Ipv4Addr) -> bool {
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
