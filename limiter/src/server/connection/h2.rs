//! One HTTP/2 connection (h2c, prior knowledge), served by hyper's HTTP/2 under the same bounds
//! as an HTTP/1 one. A gateway multiplexes many players' requests on it, each a stream.
//!
//! - **Requests**: every stream goes through [`respond`], as an HTTP/1 request does: the
//!   in-flight bound and queue delay of the lane, the body deadline (408 `request_timeout`; on
//!   HTTP/2 only that stream ends, the connection stays), the router with its auth and input
//!   checks.
//! - **Streams**: at most `http.max_concurrent_streams` open at once (`SETTINGS_MAX_CONCURRENT_
//!   STREAMS`; one more is refused with `REFUSED_STREAM`); header blocks up to
//!   `http.max_header_bytes` (`SETTINGS_MAX_HEADER_LIST_SIZE`; a larger one is answered 431).
//! - **Idle**: a connection with no open stream for `http.idle_timeout` is sent a GOAWAY.
//! - **Dead peer**: a peer silent for `http.write_timeout` is sent a PING; one that does not
//!   answer it within `http.write_timeout` is cut off (counted as a write timeout).
//! - **Write deadline**: a socket write that makes no progress for `http.write_timeout` fails,
//!   as on HTTP/1 ([`DeadlineIo`]). HTTP/2 adds flow control: a peer can hold answers back by
//!   granting no window, without the socket ever filling. An answer that hyper has not taken
//!   whole within `http.write_timeout` to 1.5 × it of being ready cuts the connection off.
//! - **Age**: past its `http.max_connection_age` (jittered as on HTTP/1), the connection is sent
//!   a GOAWAY: the streams in flight finish, the gateway opens its next connection, which the
//!   Service may send to another pod.
//! - **Drain**: while the process drains, the first answer on a connection is followed by a
//!   GOAWAY (HTTP/2 has no `Connection: close`).
//! - **Stop**: a GOAWAY, the streams in flight finish (within `http.shutdown_timeout`, as on
//!   HTTP/1).
//!
//! After a GOAWAY for idleness, age or drain, a connection still open after
//! `http.body_read_timeout` + `http.write_timeout` (a peer that does not acknowledge the
//! GOAWAY's PING, or keeps streams open) is cut off.

use std::convert::Infallible;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::task::{Context, Poll};
use std::time::Duration;

use axum::body::{Body, Bytes, HttpBody};
use axum::http::{Request, Response, StatusCode};
use axum::response::IntoResponse;
use hyper::body::{Frame, Incoming, SizeHint};
use hyper::server::conn::http2;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use tokio::sync::{Notify, watch};
use tokio::time::Instant;

use super::deadline_io::DeadlineIo;
use super::request::{ConnState, LaneShared, respond};
use crate::api::error::ApiError;
use crate::config::HttpConfig;
use crate::overload::Deadline;

/// Stream and connection flow-control windows: what a peer may send before the limiter reads
/// it (request bodies are at most `max_body_bytes`, 8 KiB by default). The connection's window
/// bounds what one connection's unread bodies hold in memory.
const STREAM_WINDOW: u32 = 64 * 1024;
const CONNECTION_WINDOW: u32 = 1024 * 1024;

/// The HTTP/2 side of a lane, from the `http` config.
pub(super) fn builder(http: &HttpConfig) -> http2::Builder<TokioExecutor> {
    let mut builder = http2::Builder::new(TokioExecutor::new());
    builder
        .timer(TokioTimer::new())
        .max_concurrent_streams(http.max_concurrent_streams)
        .max_header_list_size(u32::try_from(http.max_header_bytes).unwrap_or(u32::MAX))
        .initial_stream_window_size(STREAM_WINDOW)
        .initial_connection_window_size(CONNECTION_WINDOW)
        .keep_alive_interval(http.write_timeout)
        .keep_alive_timeout(http.write_timeout);
    builder
}

/// Serves one HTTP/2 connection to its end (its preface is in `io`'s unread bytes).
pub(super) async fn serve(
    lane: Arc<LaneShared>,
    io: DeadlineIo,
    state: Arc<ConnState>,
    mut stopping: watch::Receiver<bool>,
) {
    // The idle and header deadlines of the socket wrapper are HTTP/1's (one request at a time):
    // off. Its write deadline stays.
    state.busy.store(true, Ordering::Relaxed);
    let Some(builder) = lane.h2.as_ref() else {
        return;
    };
    let streams = Arc::new(Streams::new());
    let service = {
        let (lane, streams) = (lane.clone(), streams.clone());
        hyper::service::service_fn(move |request| handle(lane.clone(), streams.clone(), request))
    };
    let conn = builder.serve_connection(TokioIo::new(io), service);
    tokio::pin!(conn);
    let stop = async move {
        let _ = stopping.wait_for(|stop| *stop).await;
    };
    tokio::pin!(stop);
    let idle = tokio::time::sleep(lane.idle);
    tokio::pin!(idle);
    let aged = async move {
        match state.close_after {
            Some(at) => tokio::time::sleep_until(at).await,
            None => std::future::pending().await,
        }
    };
    tokio::pin!(aged);
    // Half the write deadline: a stalled answer is seen after 2 to 3 ticks.
    let mut stall_check = tokio::time::interval(lane.write / 2);
    stall_check.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let cut_off = tokio::time::sleep(Duration::MAX / 4);
    tokio::pin!(cut_off);
    // Whether a GOAWAY was sent, and whether for the stop (then `serve_lane` bounds the rest).
    let (mut going_away, mut stopped) = (false, false);
    let grace = lane.body + lane.write;
    loop {
        // Why to send a GOAWAY now, if so.
        let go_away: &str = tokio::select! {
            served = conn.as_mut() => {
                if let Err(error) = served {
                    if error.is_timeout() {
                        // An unanswered PING: the peer is gone or does not read.
                        lane.overload.timed_out(Deadline::Write);
                    }
                    tracing::trace!(%error, "HTTP/2 connection ended with an error");
                }
                return;
            }
            _ = &mut stop, if !stopped => {
                stopped = true;
                if going_away {
                    continue;
                }
                "stop"
            }
            _ = &mut idle, if !going_away => {
                match streams.idle_until(lane.idle) {
                    Some(at) if at <= Instant::now() => {
                        lane.overload.timed_out(Deadline::Idle);
                        "idle"
                    }
                    Some(at) => {
                        idle.as_mut().reset(at);
                        continue;
                    }
                    None => {
                        idle.as_mut().reset(Instant::now() + lane.idle);
                        continue;
                    }
                }
            }
            _ = &mut aged, if !going_away => "age",
            _ = streams.drained.notified(), if !going_away => "drain",
            _ = stall_check.tick() => {
                if streams.stalled() {
                    lane.overload.timed_out(Deadline::Write);
                    tracing::trace!("HTTP/2 connection cut off: its answers were not taken");
                    return;
                }
                continue;
            }
            _ = &mut cut_off, if going_away && !stopped => {
                tracing::trace!("HTTP/2 connection cut off: still open after its GOAWAY");
                return;
            }
        };
        tracing::trace!(why = go_away, "HTTP/2 GOAWAY");
        going_away = true;
        conn.as_mut().graceful_shutdown();
        cut_off.as_mut().reset(Instant::now() + grace);
    }
}

/// One stream: [`respond`], its answer tracked until hyper has taken it whole.
async fn handle(
    lane: Arc<LaneShared>,
    streams: Arc<Streams>,
    request: Request<Incoming>,
) -> Result<Response<Tracked>, Infallible> {
    let mut open = OpenStream::new(streams);
    // Streams of one connection are served at once: each has its own flag.
    let body_timed_out = Arc::new(AtomicBool::new(false));
    let (mut response, body_late) = respond(&lane, request, &body_timed_out).await;
    if body_late {
        // The HTTP/1 answer says the connection closes; here only the stream ends.
        response = ApiError::new(
            StatusCode::REQUEST_TIMEOUT,
            "request_timeout",
            "the request body did not arrive in time; the stream is closed",
        )
        .into_response();
    }
    if lane.draining.is_draining() && !open.streams.drain_noted.swap(true, Ordering::Relaxed) {
        open.streams.drained.notify_one();
    }
    open.answered();
    Ok(response.map(|inner| Tracked { inner, _open: open }))
}

/// Number of tick generations [`Streams::pending`] keeps apart.
const GENERATIONS: usize = 4;

/// What the streams of one connection tell the connection's loop.
struct Streams {
    /// Streams whose request is being answered or whose answer hyper has not taken whole.
    open: AtomicUsize,
    /// When `open` last fell to 0, in µs since `epoch`.
    last_closed_us: AtomicU64,
    epoch: Instant,
    /// The stall check's tick count.
    generation: AtomicU64,
    /// Answers ready but not yet taken by hyper, by the generation they became ready in.
    pending: [AtomicUsize; GENERATIONS],
    /// A GOAWAY is asked for: the process drains.
    drained: Notify,
    drain_noted: AtomicBool,
}

impl Streams {
    fn new() -> Self {
        Streams {
            open: AtomicUsize::new(0),
            last_closed_us: AtomicU64::new(0),
            epoch: Instant::now(),
            generation: AtomicU64::new(0),
            pending: Default::default(),
            drained: Notify::new(),
            drain_noted: AtomicBool::new(false),
        }
    }

    /// When the connection is idle for `idle` if no stream opens meanwhile; `None` while a
    /// stream is open.
    fn idle_until(&self, idle: Duration) -> Option<Instant> {
        if self.open.load(Ordering::Relaxed) > 0 {
            return None;
        }
        let since = Duration::from_micros(self.last_closed_us.load(Ordering::Relaxed));
        Some(self.epoch + since + idle)
    }

    /// One tick of the stall check (every half write deadline): whether an answer became ready
    /// two generations before the last one or earlier (at least a whole write deadline ago)
    /// and is still not taken. The connection is cut off then, so that a generation's counter
    /// is empty before it is used again.
    fn stalled(&self) -> bool {
        let now = self.generation.fetch_add(1, Ordering::Relaxed) + 1;
        let Some(old) = now.checked_sub(3) else {
            return false;
        };
        self.pending[generation_slot(old)].load(Ordering::Relaxed) > 0
    }
}

fn generation_slot(generation: u64) -> usize {
    (generation % GENERATIONS as u64) as usize
}

/// A stream from its request's headers until its answer is taken whole (or the stream is
/// reset): dropped then.
struct OpenStream {
    streams: Arc<Streams>,
    /// The generation the answer became ready in.
    answered: Option<u64>,
}

impl OpenStream {
    fn new(streams: Arc<Streams>) -> Self {
        streams.open.fetch_add(1, Ordering::Relaxed);
        OpenStream {
            streams,
            answered: None,
        }
    }

    fn answered(&mut self) {
        let generation = self.streams.generation.load(Ordering::Relaxed);
        self.streams.pending[generation_slot(generation)].fetch_add(1, Ordering::Relaxed);
        self.answered = Some(generation);
    }
}

impl Drop for OpenStream {
    fn drop(&mut self) {
        let streams = &self.streams;
        if let Some(generation) = self.answered {
            streams.pending[generation_slot(generation)].fetch_sub(1, Ordering::Relaxed);
        }
        if streams.open.fetch_sub(1, Ordering::Relaxed) == 1 {
            let us = streams.epoch.elapsed().as_micros() as u64;
            streams.last_closed_us.store(us, Ordering::Relaxed);
        }
    }
}

/// An answer's body, holding its stream open until hyper drops it (taken whole, or reset).
struct Tracked {
    inner: Body,
    _open: OpenStream,
}

impl HttpBody for Tracked {
    type Data = Bytes;
    type Error = axum::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Self::Error>>> {
        Pin::new(&mut self.get_mut().inner).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}
