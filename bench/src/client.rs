//! A small HTTP client for the load generator: a bounded set of connections per limiter,
//! reused request after request, so the load generator measures the limiter rather than TCP
//! set-up. HTTP/1.1 keep-alive by default (one request at a time per connection); with `--h2c`,
//! HTTP/2 with prior knowledge, as a gateway speaks upstream (many requests at once per
//! connection, each a stream).

use std::net::{SocketAddr, ToSocketAddrs};
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

use anyhow::{Context, bail};
use bytes::Bytes;
use http::{Method, Request, header};
use http_body_util::{BodyExt, Full};
use hyper::client::conn::{http1, http2};
use hyper_util::rt::{TokioExecutor, TokioIo};
use tokio::net::TcpStream;
use tokio::sync::Semaphore;

/// What [`HttpClient::new`] speaks: `--h2c` of the load scenarios sets it when the command line
/// is parsed (see `scenarios/common.rs`), before any client is made.
static H2C: AtomicBool = AtomicBool::new(false);

/// Makes the clients made from now on speak HTTP/2 with prior knowledge (`true`) or HTTP/1.1.
pub fn set_h2c(on: bool) {
    H2C.store(on, Ordering::Relaxed);
}

/// The connections to one limiter.
enum Pool {
    /// Kept-alive connections, each lent to one request at a time.
    Http1 {
        idle: Mutex<Vec<http1::SendRequest<Full<Bytes>>>>,
        permits: Semaphore,
    },
    /// Connections opened on first use, each carrying any number of requests at once (up to
    /// the limiter's `SETTINGS_MAX_CONCURRENT_STREAMS`; hyper queues the rest), taken in turn.
    Http2 {
        conns: Vec<tokio::sync::Mutex<Option<http2::SendRequest<Full<Bytes>>>>>,
        next: AtomicUsize,
    },
}

struct Target {
    authority: String,
    addr: SocketAddr,
    pool: Pool,
}

/// Requests are spread round-robin over the limiter URLs; each limiter gets at most
/// `connections / urls` connections, opened on demand and kept alive.
pub struct HttpClient {
    targets: Vec<Target>,
    next: AtomicUsize,
    per_target: usize,
    h2c: bool,
}

pub struct Reply {
    pub status: u16,
    pub body: Bytes,
}

async fn connect(addr: SocketAddr) -> anyhow::Result<http1::SendRequest<Full<Bytes>>> {
    let stream = TcpStream::connect(addr).await?;
    stream.set_nodelay(true)?;
    let (sender, conn) = http1::handshake(TokioIo::new(stream)).await?;
    tokio::spawn(async move {
        let _ = conn.await;
    });
    Ok(sender)
}

async fn connect_h2(addr: SocketAddr) -> anyhow::Result<http2::SendRequest<Full<Bytes>>> {
    let stream = TcpStream::connect(addr).await?;
    stream.set_nodelay(true)?;
    let (sender, conn) = http2::handshake(TokioExecutor::new(), TokioIo::new(stream)).await?;
    tokio::spawn(async move {
        let _ = conn.await;
    });
    Ok(sender)
}

impl HttpClient {
    /// A client over HTTP/1.1, or over HTTP/2 once [`set_h2c`] said so.
    pub fn new(urls: &[String], connections: usize) -> anyhow::Result<Self> {
        Self::with_protocol(urls, connections, H2C.load(Ordering::Relaxed))
    }

    /// A client over HTTP/2 with prior knowledge (`h2c`) or HTTP/1.1 keep-alive;
    /// `connections` in all, of that protocol.
    pub fn with_protocol(urls: &[String], connections: usize, h2c: bool) -> anyhow::Result<Self> {
        if urls.is_empty() {
            bail!("no limiter URL");
        }
        let per_target = connections.div_ceil(urls.len()).max(1);
        let targets = urls
            .iter()
            .map(|url| {
                let authority = url
                    .strip_prefix("http://")
                    .with_context(|| format!("{url}: only http:// URLs are supported"))?
                    .trim_end_matches('/')
                    .to_owned();
                let addr = authority
                    .to_socket_addrs()
                    .with_context(|| format!("resolve {authority}"))?
                    .next()
                    .with_context(|| format!("{authority} has no address"))?;
                let pool = if h2c {
                    Pool::Http2 {
                        conns: (0..per_target)
                            .map(|_| tokio::sync::Mutex::new(None))
                            .collect(),
                        next: AtomicUsize::new(0),
                    }
                } else {
                    Pool::Http1 {
                        idle: Mutex::new(Vec::new()),
                        permits: Semaphore::new(per_target),
                    }
                };
                Ok(Target {
                    authority,
                    addr,
                    pool,
                })
            })
            .collect::<anyhow::Result<Vec<_>>>()?;
        Ok(HttpClient {
            targets,
            next: AtomicUsize::new(0),
            per_target,
            h2c,
        })
    }

    /// Connections the client may hold in all.
    pub fn connections(&self) -> usize {
        self.per_target * self.targets.len()
    }

    /// Whether it speaks HTTP/2 with prior knowledge.
    pub fn is_h2c(&self) -> bool {
        self.h2c
    }

    pub async fn send(&self, method: Method, path: &str, body: String) -> anyhow::Result<Reply> {
        let target = &self.targets[self.next.fetch_add(1, Ordering::Relaxed) % self.targets.len()];
        let mut request = Request::builder().method(method);
        if !body.is_empty() {
            request = request.header(header::CONTENT_TYPE, "application/json");
        }
        let body = Full::new(Bytes::from(body));
        match &target.pool {
            Pool::Http1 { idle, permits } => {
                let _permit = permits.acquire().await?;
                let pooled = idle.lock().unwrap_or_else(|e| e.into_inner()).pop();
                let mut sender = match pooled {
                    Some(mut s) => {
                        if s.ready().await.is_ok() {
                            s
                        } else {
                            connect(target.addr).await?
                        }
                    }
                    None => connect(target.addr).await?,
                };
                sender.ready().await?;
                let request = request
                    .uri(path)
                    .header(header::HOST, &target.authority)
                    .body(body)?;
                let response = sender.send_request(request).await?;
                let status = response.status().as_u16();
                let body = response.into_body().collect().await?.to_bytes();
                idle.lock().unwrap_or_else(|e| e.into_inner()).push(sender);
                Ok(Reply { status, body })
            }
            Pool::Http2 { conns, next } => {
                let slot = &conns[next.fetch_add(1, Ordering::Relaxed) % conns.len()];
                let mut sender = {
                    let mut conn = slot.lock().await;
                    match conn.as_ref() {
                        Some(open) if !open.is_closed() => open.clone(),
                        // Opened here, once, while the others wait (or after the limiter
                        // closed it: a GOAWAY at its maximum age).
                        _ => conn.insert(connect_h2(target.addr).await?).clone(),
                    }
                };
                sender.ready().await?;
                // HTTP/2 takes the scheme and authority from the URI (`:scheme`, `:authority`).
                let request = request
                    .uri(format!("http://{}{path}", target.authority))
                    .body(body)?;
                let response = sender.send_request(request).await?;
                let status = response.status().as_u16();
                let body = response.into_body().collect().await?.to_bytes();
                Ok(Reply { status, body })
            }
        }
    }
}
