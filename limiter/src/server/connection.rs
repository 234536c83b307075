//! One connection, served by hyper's HTTP/1 under the limiter's deadlines and bounds.
//!
//! - **Idle and header deadlines** are kept by [`DeadlineIo`] around the socket: while the
//!   connection waits for a request, a read that does not come within `http.idle_timeout` (no
//!   byte yet) or `http.header_read_timeout` (from the first byte) fails, and hyper closes the
//!   connection. hyper's own `header_read_timeout` is not used: its timer starts when the
//!   connection begins to wait, so it would also be the keep-alive idle limit, and a limiter
//!   behind a load balancer needs a long idle limit (above the balancer's own) with a short
//!   header limit.
//! - **Write deadline**: a write of an answer that makes no progress for `http.write_timeout`
//!   (a client that sends but never reads, once the socket's buffer is full) fails, and hyper
//!   closes the connection.
//! - **Body deadline**: [`DeadlineBody`] fails a body that has not arrived within
//!   `http.body_read_timeout` of its headers; the answer is then replaced by 408
//!   `request_timeout` with `Connection: close`.
//! - **Header size**: hyper's `max_header_size` answers 431 (no body) and closes.
//! - **In flight**: a play-start, heartbeat or stop gets an [`Admission`]: its handler takes a
//!   place once it holds the body (a slow body holds no place) or, beyond the bound, is shed at
//!   once by the failure policy (so is one taken in while the lane is more than
//!   `http.max_queue_delay` behind). Other calls take their place here, once their body is in
//!   (read here, within its deadline and `max_body_bytes`), before the router; beyond the bound
//!   they are answered 503 `overloaded`.
//! - **Drain**: while the process drains before a stop (`lifecycle.rs`), every answer carries
//!   `Connection: close`, so that a kept-alive client opens its next connection elsewhere.
//! - **Age**: past `http.max_connection_age` (each connection's own, jittered), the next answer
//!   carries `Connection: close`, so kept-alive clients spread over the pods a roll added.
//!
//! With `http.h2c` on, the first bytes of a connection are read first (under the idle and header
//! deadlines above, and given back to hyper afterwards): a connection that opens with the
//! HTTP/2 preface is served by hyper's HTTP/2 under the same bounds ([`h2`]), any other as
//! above.

use std::convert::Infallible;
use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::Ordering;

use axum::Router;
use axum::body::{Body, Bytes};
use axum::http::{HeaderValue, Request, Response, header};
use hyper::body::Incoming;
use hyper::server::conn::http1;
use hyper_util::rt::TokioIo;
use tokio::io::AsyncReadExt;
use tokio::net::TcpStream;
use tokio::sync::watch;
use tokio::time::Instant;

use crate::config::HttpConfig;
use crate::overload::LaneLag;
use crate::service::StreamService;

mod deadline_io;
mod h2;
mod request;

use deadline_io::{DeadlineIo, Deadlines};
use request::{ConnState, LaneShared, respond};

/// What every connection of one lane shares.
#[derive(Clone)]
pub struct Lane(Arc<LaneShared>);

impl Lane {
    pub fn new(
        service: Arc<StreamService>,
        router: Router,
        http: &HttpConfig,
        max_body_bytes: usize,
    ) -> Self {
        let mut builder = http1::Builder::new();
        builder
            .timer(hyper_util::rt::TokioTimer::new())
            .header_read_timeout(None)
            .max_header_size(http.max_header_bytes);
        Lane(Arc::new(LaneShared {
            router,
            overload: service.overload.clone(),
            draining: service.draining.clone(),
            lag: LaneLag::new(),
            builder,
            h2: http.h2c.then(|| h2::builder(http)),
            idle: http.idle_timeout,
            header: http.header_read_timeout,
            body: http.body_read_timeout,
            write: http.write_timeout,
            max_age: http.max_connection_age,
            max_body_bytes,
        }))
    }

    /// Measures how far behind this lane is; spawn it on the lane's own runtime.
    pub fn probe(&self) -> impl Future<Output = ()> + 'static {
        self.0.lag.clone().probe()
    }

    /// Serves one connection to its end; on the stop signal, finishes the requests in flight
    /// and closes.
    pub async fn serve(self, stream: TcpStream, stopping: watch::Receiver<bool>) {
        let state = Arc::new(ConnState {
            close_after: crate::config::connection_age(self.0.max_age, rand::random::<f64>())
                .map(|age| Instant::now() + age),
            ..ConnState::default()
        });
        let mut io = DeadlineIo::new(
            stream,
            state.clone(),
            self.0.overload.clone(),
            Deadlines {
                idle: self.0.idle,
                header: self.0.header,
                write: self.0.write,
            },
        );
        if self.0.h2.is_some() {
            match sniff(&mut io).await {
                Some(Protocol::Http2) => return h2::serve(self.0, io, state, stopping).await,
                Some(Protocol::Http1) => {}
                // Closed, or a deadline passed (counted), before a protocol could be told.
                None => return,
            }
        }
        self.serve_http1(io, state, stopping).await;
    }

    async fn serve_http1(
        self,
        io: DeadlineIo,
        state: Arc<ConnState>,
        mut stopping: watch::Receiver<bool>,
    ) {
        let lane = self.0.clone();
        let service =
            hyper::service::service_fn(move |request| handle(lane.clone(), state.clone(), request));
        let conn = self.0.builder.serve_connection(TokioIo::new(io), service);
        tokio::pin!(conn);
        let stop = async move {
            let _ = stopping.wait_for(|stop| *stop).await;
        };
        tokio::pin!(stop);
        let mut stopped = false;
        loop {
            tokio::select! {
                served = conn.as_mut() => {
                    if let Err(error) = served {
                        tracing::trace!(%error, "connection ended with an error");
                    }
                    return;
                }
                _ = &mut stop, if !stopped => {
                    stopped = true;
                    conn.as_mut().graceful_shutdown();
                }
            }
        }
    }
}

/// What a connection speaks, told from its first bytes.
enum Protocol {
    Http1,
    /// It opened with the HTTP/2 preface (prior knowledge, RFC 9113 §3.3).
    Http2,
}

/// The client connection preface of HTTP/2.
const PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";

/// Reads the connection's first bytes, until they can only be the HTTP/2 preface or cannot be
/// it (an HTTP/1 request line differs within its first two bytes), and gives them back to the
/// socket wrapper for hyper to read again. The reads are under the idle deadline (no byte yet)
/// and the header deadline (from the first byte), as hyper's own would be. `None`: the
/// connection closed or failed first.
async fn sniff(io: &mut DeadlineIo) -> Option<Protocol> {
    // A request head usually comes whole in the first read, and is then handed over whole.
    let mut buf = vec![0u8; 1024];
    let mut len = 0;
    let protocol = loop {
        match io.read(&mut buf[len..]).await {
            Ok(0) | Err(_) => return None,
            Ok(n) => len += n,
        }
        let seen = len.min(PREFACE.len());
        if buf[..seen] != PREFACE[..seen] {
            break Protocol::Http1;
        }
        if seen == PREFACE.len() {
            break Protocol::Http2;
        }
    };
    buf.truncate(len);
    io.unread(Bytes::from(buf));
    Some(protocol)
}

/// One HTTP/1 request: [`respond`], then `Connection: close` where the connection must end.
async fn handle(
    lane: Arc<LaneShared>,
    state: Arc<ConnState>,
    request: Request<Incoming>,
) -> Result<Response<Body>, Infallible> {
    state.busy.store(true, Ordering::Relaxed);
    let (mut response, body_late) = respond(&lane, request, &state.body_timed_out).await;
    let too_old = state.close_after.is_some_and(|at| Instant::now() >= at);
    if body_late || lane.draining.is_draining() || too_old {
        // hyper closes the connection once this answer is written (after a late body, the
        // rest of it would be read as the next request).
        response
            .headers_mut()
            .insert(header::CONNECTION, HeaderValue::from_static("close"));
    }
    state.busy.store(false, Ordering::Relaxed);
    state.finished.fetch_add(1, Ordering::Relaxed);
    Ok(response)
}

/// A connection beyond `http.max_connections`: a `503 overloaded` written if the socket takes it
/// at once (the request is never read), then closed.
pub fn refuse(stream: TcpStream) {
    const BODY: &str = r#"{"error":"overloaded","message":"this limiter instance is at its bound of open connections; retry in a second"}"#;
    let answer = format!(
        "HTTP/1.1 503 Service Unavailable\r\ncontent-type: application/json\r\nretry-after: 1\r\nconnection: close\r\ncontent-length: {}\r\n\r\n{BODY}",
        BODY.len()
    );
    let _ = stream.try_write(answer.as_bytes());
}
