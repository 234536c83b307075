//! A region's Service, for the suites that run several limiters behind one address: a TCP proxy
//! of the test's own inside a network namespace that sends each new connection to the next of
//! its backends in turn (per connection, as kube-proxy does; a kept-alive client stays where its
//! connection went). A backend that does not take the connection closes it, as a Service whose
//! endpoints are down does: no retry on the other. It counts the connections each backend took.

use std::io::Write;
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, mpsc};
use std::time::Duration;

use super::netns::{Netns, enter};

/// A running balancer; stops taking connections when dropped (those it carries end with their
/// backends).
pub struct Balancer {
    addr: SocketAddr,
    shared: Arc<Shared>,
}

struct Shared {
    backends: Vec<SocketAddr>,
    next: AtomicUsize,
    taken: Vec<AtomicU64>,
    stopped: AtomicBool,
}

impl Balancer {
    /// Listens on `addr` inside `netns`, for `backends` reached from inside it.
    pub fn start_in(netns: &Netns, addr: SocketAddr, backends: Vec<SocketAddr>) -> Balancer {
        let shared = Arc::new(Shared {
            taken: backends.iter().map(|_| AtomicU64::new(0)).collect(),
            backends,
            next: AtomicUsize::new(0),
            stopped: AtomicBool::new(false),
        });
        let (bound, listening) = mpsc::channel();
        let accepting = Arc::clone(&shared);
        let file = netns.file();
        // The accepting thread, and the threads it starts, live in the namespace.
        std::thread::spawn(move || {
            enter(&file);
            serve(addr, accepting, bound);
        });
        listening
            .recv()
            .expect("the balancer's thread")
            .unwrap_or_else(|e| panic!("balancer on {addr}: {e}"));
        Balancer { addr, shared }
    }

    /// `http://<addr>`
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Connections each backend took so far, in the backends' order.
    pub fn connections(&self) -> Vec<u64> {
        self.shared
            .taken
            .iter()
            .map(|n| n.load(Ordering::SeqCst))
            .collect()
    }
}

impl Drop for Balancer {
    fn drop(&mut self) {
        self.shared.stopped.store(true, Ordering::SeqCst);
        // Wakes the accept loop so that it sees the flag (the host reaches the address).
        let _ = TcpStream::connect_timeout(&self.addr, Duration::from_secs(1));
    }
}

fn serve(addr: SocketAddr, shared: Arc<Shared>, bound: mpsc::Sender<std::io::Result<()>>) {
    let listener = match TcpListener::bind(addr) {
        Ok(listener) => listener,
        Err(e) => return drop(bound.send(Err(e))),
    };
    let _ = bound.send(Ok(()));
    for client in listener.incoming() {
        if shared.stopped.load(Ordering::SeqCst) {
            break;
        }
        let Ok(client) = client else { continue };
        let turn = shared.next.fetch_add(1, Ordering::SeqCst) % shared.backends.len();
        shared.taken[turn].fetch_add(1, Ordering::SeqCst);
        let target = shared.backends[turn];
        std::thread::spawn(move || {
            // Not taken: dropping `client` closes it.
            let Ok(upstream) = TcpStream::connect_timeout(&target, Duration::from_secs(2)) else {
                return;
            };
            let _ = client.set_nodelay(true);
            let _ = upstream.set_nodelay(true);
            let (Ok(client_in), Ok(upstream_in)) = (client.try_clone(), upstream.try_clone())
            else {
                return;
            };
            std::thread::spawn(move || pipe(client_in, upstream));
            pipe(upstream_in, client);
        });
    }
}

/// Bytes from `from` to `to` until `from` ends: its end passed on (a half close), or, when it
/// fails (a reset), both connections ended.
fn pipe(mut from: TcpStream, mut to: TcpStream) {
    let copied = std::io::copy(&mut from, &mut to);
    let _ = to.flush();
    match copied {
        Ok(_) => {
            let _ = to.shutdown(Shutdown::Write);
        }
        Err(_) => {
            let _ = to.shutdown(Shutdown::Both);
            let _ = from.shutdown(Shutdown::Both);
        }
    }
}
