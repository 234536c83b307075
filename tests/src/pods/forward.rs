//! `kubectl port-forward`, and the byte copying every forwarded connection does.

use std::io;
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use super::cluster::Cluster;
use super::netns::enter;
use super::pod::Pod;

impl Cluster {
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
pub(super) fn splice(client: TcpStream, upstream: TcpStream) {
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
