//! A link between two regions, for the suites that run several on one machine: a TCP proxy of the
//! test's own (this kernel has no `netem`) that delays each direction by a one-way delay with
//! jitter, keeping the byte order as TCP does, and that a test can cut (a partition: bytes and
//! new connections are held, not lost, until it heals, as TCP retransmits across a short one),
//! heal, or reset (a region lost: every connection through it is closed). It counts the
//! connections and bytes it carried, for the suites that measure cross-region traffic.

use std::collections::HashMap;
use std::io::{Read, Write};
use std::net::{IpAddr, Ipv4Addr, Shutdown, SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc;
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

/// How a link delays: each direction `delay`, plus up to `jitter` more, drawn per chunk.
#[derive(Debug, Clone, Copy)]
pub struct LinkSpec {
    pub delay: Duration,
    pub jitter: Duration,
}

/// A running link: connections to [`Link::addr`] reach the target through it. Stops taking
/// connections, and closes those it carries, when dropped.
pub struct Link {
    addr: SocketAddr,
    shared: Arc<Shared>,
}

struct Shared {
    spec: LinkSpec,
    target: SocketAddr,
    /// Cut (true) or through (false); writers and new connections wait on it.
    cut: Mutex<bool>,
    healed: Condvar,
    stopped: AtomicBool,
    /// Both ends of every connection carried, by number, to close them on a reset; a connection
    /// leaves once its answers' direction has ended.
    open: Mutex<HashMap<u64, (TcpStream, TcpStream)>>,
    connections: AtomicU64,
    bytes: AtomicU64,
    /// The jitter's pseudo-random state (xorshift).
    noise: Mutex<u64>,
}

impl Link {
    /// A link on a free loopback port to `target`.
    pub fn start(target: SocketAddr, spec: LinkSpec) -> Link {
        Link::start_on(Ipv4Addr::LOCALHOST.into(), target, spec)
    }

    /// A link on a free port of `ip` (one of this machine's: the host's end of a namespace's
    /// veth, for the regions in a namespace each) to `target`.
    pub fn start_on(ip: IpAddr, target: SocketAddr, spec: LinkSpec) -> Link {
        let listener = TcpListener::bind((ip, 0)).expect("a free port");
        let addr = listener.local_addr().unwrap();
        let clock = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH);
        let seed = clock.map_or(0, |d| d.as_nanos() as u64) ^ u64::from(addr.port());
        let shared = Arc::new(Shared {
            spec,
            target,
            cut: Mutex::new(false),
            healed: Condvar::new(),
            stopped: AtomicBool::new(false),
            open: Mutex::new(HashMap::new()),
            connections: AtomicU64::new(0),
            bytes: AtomicU64::new(0),
            noise: Mutex::new(seed | 1),
        });
        let accepting = Arc::clone(&shared);
        std::thread::spawn(move || {
            for client in listener.incoming() {
                if accepting.stopped.load(Ordering::SeqCst) {
                    break;
                }
                let Ok(client) = client else { continue };
                let shared = Arc::clone(&accepting);
                std::thread::spawn(move || carry(shared, client));
            }
        });
        Link { addr, shared }
    }

    /// Where to connect to cross the link.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// `http://<addr>`
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// A partition: from now on no byte crosses and no new connection reaches the target until
    /// [`Link::heal`].
    pub fn cut(&self) {
        *self.shared.cut.lock().unwrap() = true;
    }

    /// Lets everything through again, what was held first.
    pub fn heal(&self) {
        *self.shared.cut.lock().unwrap() = false;
        self.shared.healed.notify_all();
    }

    /// A region lost: closes every connection the link carries (both ends); new ones go on.
    pub fn reset(&self) {
        for (_, (client, upstream)) in self.shared.open.lock().unwrap().drain() {
            let _ = client.shutdown(Shutdown::Both);
            let _ = upstream.shutdown(Shutdown::Both);
        }
    }

    /// Connections carried so far.
    pub fn connections(&self) -> u64 {
        self.shared.connections.load(Ordering::SeqCst)
    }

    /// Connections open through the link now.
    pub fn open(&self) -> usize {
        self.shared.open.lock().unwrap().len()
    }

    /// Bytes carried so far, both directions.
    pub fn bytes(&self) -> u64 {
        self.shared.bytes.load(Ordering::SeqCst)
    }
}

impl Drop for Link {
    fn drop(&mut self) {
        self.shared.stopped.store(true, Ordering::SeqCst);
        self.heal();
        self.reset();
        // Wakes the accept loop so that it sees the flag.
        let _ = TcpStream::connect_timeout(&self.addr, Duration::from_secs(1));
    }
}

impl Shared {
    /// Blocks while the link is cut.
    fn wait_through(&self) {
        let mut cut = self.cut.lock().unwrap();
        while *cut && !self.stopped.load(Ordering::SeqCst) {
            cut = self.healed.wait(cut).unwrap();
        }
    }

    /// This chunk's one-way delay.
    fn delay(&self) -> Duration {
        let jitter = self.spec.jitter.as_micros() as u64;
        if jitter == 0 {
            return self.spec.delay;
        }
        let mut x = self.noise.lock().unwrap();
        *x ^= *x << 13;
        *x ^= *x >> 7;
        *x ^= *x << 17;
        self.spec.delay + Duration::from_micros(*x % (jitter + 1))
    }
}

/// One connection: the upstream dialled once the link lets it through, then one direction each
/// way.
fn carry(shared: Arc<Shared>, client: TcpStream) {
    shared.wait_through();
    if shared.stopped.load(Ordering::SeqCst) {
        return;
    }
    let Ok(upstream) = TcpStream::connect_timeout(&shared.target, Duration::from_secs(5)) else {
        return; // Not reachable: the client's connection closes, as a refused one would.
    };
    let number = shared.connections.fetch_add(1, Ordering::SeqCst);
    let _ = client.set_nodelay(true);
    let _ = upstream.set_nodelay(true);
    let ends = (client.try_clone(), upstream.try_clone());
    let (Ok(client_end), Ok(upstream_end)) = ends else {
        return;
    };
    shared
        .open
        .lock()
        .unwrap()
        .insert(number, (client_end, upstream_end));
    let (Ok(client_in), Ok(upstream_in)) = (client.try_clone(), upstream.try_clone()) else {
        return;
    };
    direction(Arc::clone(&shared), client_in, upstream, None);
    direction(shared, upstream_in, client, Some(number));
}

/// Bytes read from `from` are written to `to` a delay later, in order: a reader thread stamps
/// each chunk with when it may arrive (never before the chunk ahead of it), a writer thread
/// waits for that moment, and while the link is cut, for it to heal. The direction of the
/// answers ends its connection's entry (`ends`).
fn direction(shared: Arc<Shared>, mut from: TcpStream, mut to: TcpStream, ends: Option<u64>) {
    let (chunks, arriving) = mpsc::channel::<(Instant, Vec<u8>)>();
    let reading = Arc::clone(&shared);
    std::thread::spawn(move || {
        let mut buf = vec![0u8; 16 * 1024];
        let mut last = Instant::now();
        loop {
            match from.read(&mut buf) {
                Ok(0) | Err(_) => break,
                Ok(n) => {
                    last = last.max(Instant::now() + reading.delay());
                    if chunks.send((last, buf[..n].to_vec())).is_err() {
                        break;
                    }
                }
            }
        }
        // Dropping the sender ends the writer once it has written what was read.
    });
    std::thread::spawn(move || {
        for (due, chunk) in arriving {
            std::thread::sleep(due.saturating_duration_since(Instant::now()));
            shared.wait_through();
            if to.write_all(&chunk).is_err() {
                break;
            }
            shared.bytes.fetch_add(chunk.len() as u64, Ordering::SeqCst);
        }
        let _ = to.shutdown(Shutdown::Write);
        if let Some(number) = ends {
            shared.open.lock().unwrap().remove(&number);
        }
    });
}
