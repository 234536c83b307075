//! One request on a connection of either protocol: what a lane's connections share, what a
//! connection's socket wrapper and its requests tell each other, and a request's way through the
//! in-flight bound, the body deadline and the router.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::task::{Context, Poll, ready};
use std::time::Duration;

use axum::Router;
use axum::body::{Body, Bytes, HttpBody};
use axum::http::{Request, Response};
use axum::response::IntoResponse;
use bytes::BytesMut;
use http_body_util::BodyExt;
use hyper::body::{Frame, Incoming, SizeHint};
use hyper::server::conn::{http1, http2};
use hyper_util::rt::TokioExecutor;
use tokio::time::{Instant, Sleep};
use tower::ServiceExt;

use crate::api::error::ApiError;
use crate::overload::{Admission, Deadline, LaneLag, Overload, Route};

pub(super) struct LaneShared {
    pub(super) router: Router,
    pub(super) overload: Arc<Overload>,
    pub(super) draining: crate::lifecycle::Draining,
    /// How far behind this lane is (its probe runs on the lane: see [`Lane::probe`]).
    pub(super) lag: Arc<LaneLag>,
    pub(super) builder: http1::Builder,
    /// `None`: `http.h2c` is off, every connection is HTTP/1.
    pub(super) h2: Option<http2::Builder<TokioExecutor>>,
    pub(super) idle: Duration,
    pub(super) header: Duration,
    pub(super) body: Duration,
    pub(super) write: Duration,
    pub(super) max_age: Duration,
    pub(super) max_body_bytes: usize,
}

/// What the socket wrapper and the request handling of one connection tell each other.
#[derive(Default)]
pub(super) struct ConnState {
    /// A request is being served (its headers are in): the idle and header deadlines pause.
    pub(super) busy: AtomicBool,
    /// Requests finished; each one starts a new wait for the next request.
    pub(super) finished: AtomicU64,
    /// The current request's body missed its deadline.
    pub(super) body_timed_out: Arc<AtomicBool>,
    /// From when this connection's answers say `Connection: close` (its maximum age).
    pub(super) close_after: Option<Instant>,
}

/// One request, whatever the protocol: the in-flight bound, the body deadline, the router.
/// Also says whether the body missed its deadline (then the answer is 408 `request_timeout`);
/// `body_timed_out` is the flag the request's [`DeadlineBody`] raises, cleared here.
pub(super) async fn respond(
    lane: &LaneShared,
    request: Request<Incoming>,
    body_timed_out: &Arc<AtomicBool>,
) -> (Response<Body>, bool) {
    let route = Route::of(request.method(), request.uri().path());
    let deadline = Instant::now() + lane.body;
    let mut request = request.map(|body| {
        Body::new(DeadlineBody {
            inner: body,
            deadline,
            timer: None,
            timed_out: body_timed_out.clone(),
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
                // Another region's call may carry a window's renewals.
                let limit = if request
                    .uri()
                    .path()
                    .starts_with(crate::regions::wire::PATH_PREFIX)
                {
                    crate::regions::wire::MAX_BODY_BYTES
                } else {
                    lane.max_body_bytes
                };
                request = buffered(request, limit).await;
            }
            if body_timed_out.load(Ordering::Relaxed) {
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
    let body_late = body_timed_out.swap(false, Ordering::Relaxed);
    if body_late {
        lane.overload.timed_out(Deadline::Body);
        response = ApiError::request_timeout().into_response();
    }
    (response, body_late)
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

/// A request body that fails once its deadline passes before its end arrives.
struct DeadlineBody {
    inner: Incoming,
    deadline: Instant,
    timer: Option<Pin<Box<Sleep>>>,
    /// Raised when the deadline passes.
    timed_out: Arc<AtomicBool>,
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
        this.timed_out.store(true, Ordering::Relaxed);
        Poll::Ready(Some(Err(BodyDeadline.into())))
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}
