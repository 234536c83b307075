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

use std::convert::Infallible;
use std::future::Future;
use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::task::{Context, Poll, ready};
use std::time::Duration;

use axum::Router;
use axum::body::{Body, Bytes, HttpBody};
use axum::http::{HeaderValue, Request, Response, header};
use axum::response::IntoResponse;
use bytes::BytesMut;
use http_body_util::BodyExt;
use hyper::body::{Frame, Incoming, SizeHint};
use hyper::server::conn::http1;
use hyper_util::rt::TokioIo;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;
use tokio::sync::watch;
use tokio::time::{Instant, Sleep};
use tower::ServiceExt;

use crate::api::error::ApiError;
use crate::config::HttpConfig;
use crate::overload::{Admission, Deadline, LaneLag, Overload, Route};
use crate::service::StreamService;

/// What every connection of one lane shares.
#[derive(Clone)]
pub struct Lane(Arc<LaneShared>);

struct LaneShared {
    router: Router,
    overload: Arc<Overload>,
    draining: crate::lifecycle::Draining,
    /// How far behind this lane is (its probe runs on the lane: see [`Lane::probe`]).
    lag: Arc<LaneLag>,
    builder: http1::Builder,
    idle: Duration,
    header: Duration,
    body: Duration,
    write: Duration,
    max_age: Duration,
    max_body_bytes: usize,
}

/// What the socket wrapper and the request handling of one connection tell each other.
#[derive(Default)]
struct ConnState {
    /// A request is being served (its headers are in): the idle and header deadlines pause.
    busy: AtomicBool,
    /// Requests finished; each one starts a new wait for the next request.
    finished: AtomicU64,
    /// The current request's body missed its deadline.
    body_timed_out: AtomicBool,
    /// From when this connection's answers say `Connection: close` (its maximum age).
    close_after: Option<Instant>,
}

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

    /// Serves one connection to its end; on the stop signal, finishes the request in flight
    /// and closes.
    pub async fn serve(self, stream: TcpStream, mut stopping: watch::Receiver<bool>) {
        let state = Arc::new(ConnState {
            close_after: crate::config::connection_age(self.0.max_age, rand::random::<f64>())
                .map(|age| Instant::now() + age),
            ..ConnState::default()
        });
        let io = TokioIo::new(DeadlineIo::new(
            stream,
            state.clone(),
            self.0.overload.clone(),
            Deadlines {
                idle: self.0.idle,
                header: self.0.header,
                write: self.0.write,
            },
        ));
        let lane = self.0.clone();
        let service =
            hyper::service::service_fn(move |request| handle(lane.clone(), state.clone(), request));
        let conn = self.0.builder.serve_connection(io, service);
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

/// One request: the in-flight bound, the body deadline, the router.
async fn handle(
    lane: Arc<LaneShared>,
    state: Arc<ConnState>,
    request: Request<Incoming>,
) -> Result<Response<Body>, Infallible> {
    state.busy.store(true, Ordering::Relaxed);
    let route = Route::of(request.method(), request.uri().path());
    let deadline = Instant::now() + lane.body;
    let mut request = request.map(|body| {
        Body::new(DeadlineBody {
            inner: body,
            deadline,
            timer: None,
            state: state.clone(),
        })
    });
    let routed = |request| lane.router.clone().oneshot(request);
    let mut response = match route {
        Route::Ops => routed(request).await,
        _ if route.policy_answers() => {
            request.extensions_mut().insert(Admission::new(
                lane.overload.clone(),
                route,
                lane.lag.clone(),
            ));
            routed(request).await
        }
        _ => {
            if !request.body().is_end_stream() {
                request = buffered(request, lane.max_body_bytes).await;
            }
            if state.body_timed_out.load(Ordering::Relaxed) {
                // Answered 408 below.
                Ok(ApiError::request_timeout().into_response())
            } else if let Some(slot) = lane.overload.admit_on(route, &lane.lag) {
                let response = routed(request).await;
                drop(slot);
                response
            } else {
                Ok(ApiError::overloaded().into_response())
            }
        }
    }
    .unwrap_or_else(|never| match never {});
    if state.body_timed_out.swap(false, Ordering::Relaxed) {
        lane.overload.timed_out(Deadline::Body);
        response = ApiError::request_timeout().into_response();
        response
            .headers_mut()
            .insert(header::CONNECTION, HeaderValue::from_static("close"));
    }
    let too_old = state.close_after.is_some_and(|at| Instant::now() >= at);
    if lane.draining.is_draining() || too_old {
        // hyper closes the connection once this answer is written.
        response
            .headers_mut()
            .insert(header::CONNECTION, HeaderValue::from_static("close"));
    }
    state.busy.store(false, Ordering::Relaxed);
    state.finished.fetch_add(1, Ordering::Relaxed);
    Ok(response)
}

/// The request with its whole body read (within the body deadline), so that it takes a place
/// in flight only once it holds it. At most `limit` + 1 bytes are read: an oversized body still
/// reaches the router, which answers 413. A body that breaks off is passed on as it is (the
/// router answers 400, or 408 if its deadline passed).
async fn buffered(request: Request<Body>, limit: usize) -> Request<Body> {
    let (parts, mut body) = request.into_parts();
    let mut bytes = BytesMut::new();
    while bytes.len() <= limit {
        match body.frame().await {
            Some(Ok(frame)) => {
                if let Ok(data) = frame.into_data() {
                    bytes.extend_from_slice(&data);
                }
            }
            Some(Err(_)) | None => break,
        }
    }
    Request::from_parts(parts, Body::from(bytes.freeze()))
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

/// The deadlines the socket wrapper keeps.
struct Deadlines {
    idle: Duration,
    header: Duration,
    write: Duration,
}

/// The socket, with the idle and header deadlines on its reads while no request is served, and
/// the write deadline on its writes.
struct DeadlineIo {
    io: TcpStream,
    state: Arc<ConnState>,
    overload: Arc<Overload>,
    deadlines: Deadlines,
    /// Since when writes have made no progress.
    write_stalled: Option<Instant>,
    write_timer: Option<Pin<Box<Sleep>>>,
    /// `state.finished` when the current wait began.
    wait_of: u64,
    wait_started: Instant,
    first_byte: Option<Instant>,
    timer: Option<Pin<Box<Sleep>>>,
    armed: Option<Instant>,
}

impl DeadlineIo {
    fn new(
        io: TcpStream,
        state: Arc<ConnState>,
        overload: Arc<Overload>,
        deadlines: Deadlines,
    ) -> Self {
        DeadlineIo {
            io,
            state,
            overload,
            deadlines,
            write_stalled: None,
            write_timer: None,
            wait_of: 0,
            wait_started: Instant::now(),
            first_byte: None,
            timer: None,
            armed: None,
        }
    }
}

impl AsyncRead for DeadlineIo {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        let waiting = !this.state.busy.load(Ordering::Relaxed);
        if waiting {
            let finished = this.state.finished.load(Ordering::Relaxed);
            if finished != this.wait_of {
                this.wait_of = finished;
                this.wait_started = Instant::now();
                this.first_byte = None;
            }
        }
        let before = buf.filled().len();
        match Pin::new(&mut this.io).poll_read(cx, buf) {
            Poll::Ready(read) => {
                if waiting && this.first_byte.is_none() && buf.filled().len() > before {
                    this.first_byte = Some(Instant::now());
                }
                Poll::Ready(read)
            }
            Poll::Pending if !waiting => Poll::Pending,
            Poll::Pending => {
                let (deadline, kind) = match this.first_byte {
                    Some(first) => (first + this.deadlines.header, Deadline::Header),
                    None => (this.wait_started + this.deadlines.idle, Deadline::Idle),
                };
                let timer = this
                    .timer
                    .get_or_insert_with(|| Box::pin(tokio::time::sleep_until(deadline)));
                if this.armed != Some(deadline) {
                    timer.as_mut().reset(deadline);
                    this.armed = Some(deadline);
                }
                ready!(timer.as_mut().poll(cx));
                this.overload.timed_out(kind);
                Poll::Ready(Err(io::Error::new(
                    io::ErrorKind::TimedOut,
                    format!("{} deadline passed", kind.label()),
                )))
            }
        }
    }
}

impl DeadlineIo {
    /// Passes a write's outcome on; a write that stays pending past `http.write_timeout` from
    /// the first time it could not proceed fails instead.
    fn write_deadline<T>(
        &mut self,
        cx: &mut Context<'_>,
        written: Poll<io::Result<T>>,
    ) -> Poll<io::Result<T>> {
        if written.is_ready() {
            self.write_stalled = None;
            return written;
        }
        let deadline = *self.write_stalled.get_or_insert_with(Instant::now) + self.deadlines.write;
        let timer = self
            .write_timer
            .get_or_insert_with(|| Box::pin(tokio::time::sleep_until(deadline)));
        if timer.deadline() != deadline {
            timer.as_mut().reset(deadline);
        }
        ready!(timer.as_mut().poll(cx));
        self.overload.timed_out(Deadline::Write);
        Poll::Ready(Err(io::Error::new(
            io::ErrorKind::TimedOut,
            "write deadline passed",
        )))
    }
}

impl AsyncWrite for DeadlineIo {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        let written = Pin::new(&mut this.io).poll_write(cx, buf);
        this.write_deadline(cx, written)
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        let written = Pin::new(&mut this.io).poll_write_vectored(cx, bufs);
        this.write_deadline(cx, written)
    }

    fn is_write_vectored(&self) -> bool {
        self.io.is_write_vectored()
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().io).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().io).poll_shutdown(cx)
    }
}

/// A request body that fails once its deadline passes before its end arrives.
struct DeadlineBody {
    inner: Incoming,
    deadline: Instant,
    timer: Option<Pin<Box<Sleep>>>,
    state: Arc<ConnState>,
}

#[derive(Debug, thiserror::Error)]
#[error("the request body did not arrive within http.body_read_timeout")]
struct BodyDeadline;

impl HttpBody for DeadlineBody {
    type Data = Bytes;
    type Error = axum::BoxError;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Self::Error>>> {
        let this = self.get_mut();
        if let Poll::Ready(frame) = Pin::new(&mut this.inner).poll_frame(cx) {
            return Poll::Ready(frame.map(|f| f.map_err(Into::into)));
        }
        let deadline = this.deadline;
        let timer = this
            .timer
            .get_or_insert_with(|| Box::pin(tokio::time::sleep_until(deadline)));
        ready!(timer.as_mut().poll(cx));
        this.state.body_timed_out.store(true, Ordering::Relaxed);
        Poll::Ready(Some(Err(BodyDeadline.into())))
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}
