//! A small HTTP/1.1 keep-alive client: a bounded set of connections per limiter, reused
//! request after request, so the load generator measures the limiter rather than TCP set-up.

use std::net::{SocketAddr, ToSocketAddrs};
use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};

use anyhow::{Context, bail};
use bytes::Bytes;
use http::{Method, Request, header};
use http_body_util::{BodyExt, Full};
use hyper::client::conn::http1::{self, SendRequest};
use hyper_util::rt::TokioIo;
use tokio::net::TcpStream;
use tokio::sync::Semaphore;

struct Target {
    authority: String,
    addr: SocketAddr,
    idle: Mutex<Vec<SendRequest<Full<Bytes>>>>,
    permits: Semaphore,
}

/// Requests are spread round-robin over the limiter URLs; each limiter gets at most
/// `connections / urls` connections, opened on demand and kept alive.
pub struct HttpClient {
    targets: Vec<Target>,
    next: AtomicUsize,
    per_target: usize,
}

pub struct Reply {
    pub status: u16,
    pub body: Bytes,
}

async fn connect(addr: SocketAddr) -> anyhow::Result<SendRequest<Full<Bytes>>> {
    let stream = TcpStream::connect(addr).await?;
    stream.set_nodelay(true)?;
    let (sender, conn) = http1::handshake(TokioIo::new(stream)).await?;
    tokio::spawn(async move {
        let _ = conn.await;
    });
    Ok(sender)
}

impl HttpClient {
    pub fn new(urls: &[String], connections: usize) -> anyhow::Result<Self> {
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
                Ok(Target {
                    authority,
                    addr,
                    idle: Mutex::new(Vec::new()),
                    permits: Semaphore::new(per_target),
                })
            })
            .collect::<anyhow::Result<Vec<_>>>()?;
        Ok(HttpClient {
            targets,
            next: AtomicUsize::new(0),
            per_target,
        })
    }

    /// Connections the client may hold in all.
    pub fn connections(&self) -> usize {
        self.per_target * self.targets.len()
    }

    pub async fn send(&self, method: Method, path: &str, body: String) -> anyhow::Result<Reply> {
        let target = &self.targets[self.next.fetch_add(1, Ordering::Relaxed) % self.targets.len()];
        let _permit = target.permits.acquire().await?;
        let pooled = target.idle.lock().unwrap_or_else(|e| e.into_inner()).pop();
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
        let mut request = Request::builder()
            .method(method)
            .uri(path)
            .header(header::HOST, &target.authority);
        if !body.is_empty() {
            request = request.header(header::CONTENT_TYPE, "application/json");
        }
        let response = sender
            .send_request(request.body(Full::new(Bytes::from(body)))?)
            .await?;
        let status = response.status().as_u16();
        let body = response.into_body().collect().await?.to_bytes();
        target
            .idle
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(sender);
        Ok(Reply { status, body })
    }
}
