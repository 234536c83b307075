//! What one instance takes on: open connections and requests in flight, each under its bound
//! (`http.max_connections`, `http.max_in_flight`), and what happened beyond them.
//!
//! Beyond `max_in_flight`, or when its lane is more than `http.max_queue_delay` behind (its
//! CPU cannot keep up: each request would wait that long anyway, and a store call made that late
//! would likely miss its deadline after Redis did the work), a request is shed at once, never
//! queued (`server.rs` decides, the service answers by the failure policy). Beyond `max_connections` a connection is accepted
//! and closed at once. Everything here is a few atomics on the hot path; `tick`, once a second
//! on lane 0, turns the counts into the "sustained shedding" signal of `/readyz` and into log
//! lines that say when shedding starts and stops (never a line per request).

use std::sync::Arc;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use axum::http::Method;

use crate::config::HttpConfig;

/// Shedding is "sustained", and `/readyz` says to scale out, when requests were shed in each of
/// this many consecutive one-second ticks.
pub const SUSTAINED_SECONDS: u32 = 5;

/// The routes a shed request is counted under (the `route` label of `screenlimit_shed_total`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Route {
    PlayStart,
    Heartbeat,
    Release,
    /// Lists, force-stops, overrides, audit, fleet, unknown paths.
    Other,
    /// `/healthz`, `/readyz`, `/metrics`, `/openapi.json`: never bounded, never shed.
    Ops,
}

impl Route {
    pub const SHEDDABLE: [Route; 4] = [
        Route::PlayStart,
        Route::Heartbeat,
        Route::Release,
        Route::Other,
    ];

    /// Which route a request is, from its method and path alone (no routing table needed).
    pub fn of(method: &Method, path: &str) -> Route {
        match (method, path) {
            (_, "/healthz" | "/readyz" | "/metrics" | "/openapi.json") => Route::Ops,
            (&Method::POST, "/v1/streams") => Route::PlayStart,
            (&Method::PUT, p) if is_stream_path(p, Some("/heartbeat")) => Route::Heartbeat,
            (&Method::DELETE, p) if is_stream_path(p, None) => Route::Release,
            _ => Route::Other,
        }
    }

    /// Whether the failure policy answers this route when it is shed (play-start, heartbeat,
    /// stop, like a store failure); other routes get 503 `overloaded`.
    pub fn policy_answers(self) -> bool {
        matches!(self, Route::PlayStart | Route::Heartbeat | Route::Release)
    }

    pub fn label(self) -> &'static str {
        match self {
            Route::PlayStart => "play_start",
            Route::Heartbeat => "heartbeat",
            Route::Release => "release",
            Route::Other => "other",
            Route::Ops => "ops",
        }
    }

    fn index(self) -> usize {
        match self {
            Route::PlayStart => 0,
            Route::Heartbeat => 1,
            Route::Release => 2,
            Route::Other | Route::Ops => 3,
        }
    }
}

/// `/v1/streams/{id}` followed by `suffix`, with one non-empty segment for the id.
fn is_stream_path(path: &str, suffix: Option<&str>) -> bool {
    let Some(rest) = path.strip_prefix("/v1/streams/") else {
        return false;
    };
    let id = match suffix {
        Some(suffix) => match rest.strip_suffix(suffix) {
            Some(id) => id,
            None => return false,
        },
        None => rest,
    };
    !id.is_empty() && !id.contains('/')
}

/// Put in the extensions of a play-start, heartbeat or stop by the server. The handler asks for
/// the request's place in flight only once it holds the body, so that a slow sender never
/// holds a place (nor sheds others); no place: the failure policy answers, without the store.
#[derive(Clone)]
pub struct Admission {
    overload: Arc<Overload>,
    route: Route,
    lane: Arc<LaneLag>,
}

impl Admission {
    pub fn new(overload: Arc<Overload>, route: Route, lane: Arc<LaneLag>) -> Self {
        Admission {
            overload,
            route,
            lane,
        }
    }

    /// The request's place in flight (held until dropped), or `None`: shed it.
    pub fn admit(&self) -> Option<RequestSlot> {
        self.overload.admit_on(self.route, &self.lane)
    }
}

/// How often a lane's probe asks to be woken.
const PROBE_EVERY: Duration = Duration::from_millis(5);

/// How far behind one lane's event loop is. Its probe asks to be woken every 5 ms; a lane busier
/// than its CPU allows wakes it late. A request admitted while the probe is overdue sees the lane
/// behind by that much at once, before the probe itself runs again.
pub struct LaneLag {
    origin: Instant,
    /// When the probe is due next, in µs since `origin`.
    next_due_us: AtomicU64,
    /// How late the probe woke last time, in µs.
    last_late_us: AtomicU64,
}

impl LaneLag {
    pub fn new() -> Arc<Self> {
        Arc::new(LaneLag {
            origin: Instant::now(),
            next_due_us: AtomicU64::new(PROBE_EVERY.as_micros() as u64),
            last_late_us: AtomicU64::new(0),
        })
    }

    fn now_us(&self) -> u64 {
        self.origin.elapsed().as_micros() as u64
    }

    /// How far behind the lane is now.
    pub fn behind(&self) -> Duration {
        let overdue = self
            .now_us()
            .saturating_sub(self.next_due_us.load(Ordering::Relaxed));
        Duration::from_micros(overdue.max(self.last_late_us.load(Ordering::Relaxed)))
    }

    /// Runs on the lane it measures, until the lane's runtime stops.
    pub async fn probe(self: Arc<Self>) {
        loop {
            let due = self.now_us() + PROBE_EVERY.as_micros() as u64;
            self.next_due_us.store(due, Ordering::Relaxed);
            tokio::time::sleep_until((self.origin + Duration::from_micros(due)).into()).await;
            let late = self.now_us().saturating_sub(due);
            self.last_late_us.store(late, Ordering::Relaxed);
        }
    }
}

/// Why a connection was closed by a deadline (the `kind` label of
/// `screenlimit_connection_timeouts_total`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Deadline {
    /// No request began within `http.idle_timeout`.
    Idle,
    /// A request's headers did not arrive within `http.header_read_timeout` of its first byte.
    Header,
    /// A body did not arrive within `http.body_read_timeout` (answered 408).
    Body,
    /// An answer could not be written for `http.write_timeout` (the client does not read).
    Write,
}

impl Deadline {
    pub const ALL: [Deadline; 4] = [
        Deadline::Idle,
        Deadline::Header,
        Deadline::Body,
        Deadline::Write,
    ];

    pub fn label(self) -> &'static str {
        match self {
            Deadline::Idle => "idle",
            Deadline::Header => "header",
            Deadline::Body => "body",
            Deadline::Write => "write",
        }
    }
}

/// What `/readyz` and the metrics show of the bounds.
#[derive(Debug, Clone, Copy, serde::Serialize, utoipa::ToSchema)]
pub struct LoadView {
    pub connections: usize,
    pub max_connections: usize,
    pub in_flight: usize,
    pub max_in_flight: usize,
    /// Requests were shed during the last second.
    pub shedding: bool,
    /// Requests were shed in each of the last 5 seconds: add instances (or raise
    /// `http.max_in_flight` if CPU and store have room).
    pub scale_out: bool,
}

pub struct Overload {
    max_connections: usize,
    max_in_flight: usize,
    /// `http.max_queue_delay`; `None`: off.
    max_queue_delay: Option<Duration>,
    /// Of the requests shed, those shed because their lane was behind.
    shed_behind: AtomicU64,
    connections: AtomicUsize,
    in_flight: AtomicUsize,
    shed: [AtomicU64; 4],
    refused_connections: AtomicU64,
    timeouts: [AtomicU64; Deadline::ALL.len()],
    ticks: Mutex<Ticks>,
}

/// What the last ticks saw, for the sustained rule and the log lines.
#[derive(Default)]
struct Ticks {
    shed_seen: u64,
    refused_seen: u64,
    /// Consecutive ticks with sheds (0 = not shedding).
    shedding_for: u32,
    /// Requests shed since shedding started.
    shed_in_episode: u64,
}

impl Overload {
    pub fn new(http: &HttpConfig) -> Self {
        Overload {
            max_connections: http.max_connections,
            max_in_flight: http.max_in_flight,
            max_queue_delay: (!http.max_queue_delay.is_zero()).then_some(http.max_queue_delay),
            shed_behind: AtomicU64::new(0),
            connections: AtomicUsize::new(0),
            in_flight: AtomicUsize::new(0),
            shed: Default::default(),
            refused_connections: AtomicU64::new(0),
            timeouts: Default::default(),
            ticks: Mutex::new(Ticks::default()),
        }
    }

    /// Counts an accepted connection, or refuses it (and counts that) when `max_connections`
    /// are open.
    pub fn connect(self: &Arc<Self>) -> Option<ConnectionSlot> {
        if self.connections.fetch_add(1, Ordering::Relaxed) >= self.max_connections {
            self.connections.fetch_sub(1, Ordering::Relaxed);
            self.refused_connections.fetch_add(1, Ordering::Relaxed);
            return None;
        }
        Some(ConnectionSlot(self.clone()))
    }

    /// Admits a request, or says it must be shed (and counts it under `route`).
    pub fn admit(self: &Arc<Self>, route: Route) -> Option<RequestSlot> {
        if self.in_flight.fetch_add(1, Ordering::Relaxed) >= self.max_in_flight {
            self.in_flight.fetch_sub(1, Ordering::Relaxed);
            self.shed[route.index()].fetch_add(1, Ordering::Relaxed);
            return None;
        }
        Some(RequestSlot(self.clone()))
    }

    /// Admits a request on a lane, or says it must be shed: the lane is more than
    /// `http.max_queue_delay` behind, or `max_in_flight` are in flight.
    pub fn admit_on(self: &Arc<Self>, route: Route, lane: &LaneLag) -> Option<RequestSlot> {
        if self
            .max_queue_delay
            .is_some_and(|most| lane.behind() > most)
        {
            self.shed[route.index()].fetch_add(1, Ordering::Relaxed);
            self.shed_behind.fetch_add(1, Ordering::Relaxed);
            return None;
        }
        self.admit(route)
    }

    /// Requests shed because their lane was behind (also counted in [`Overload::shed_total`]).
    pub fn shed_behind(&self) -> u64 {
        self.shed_behind.load(Ordering::Relaxed)
    }

    pub fn timed_out(&self, deadline: Deadline) {
        self.timeouts[deadline as usize].fetch_add(1, Ordering::Relaxed);
    }

    pub fn shed_total(&self, route: Route) -> u64 {
        self.shed[route.index()].load(Ordering::Relaxed)
    }

    pub fn refused_connections(&self) -> u64 {
        self.refused_connections.load(Ordering::Relaxed)
    }

    pub fn timeouts(&self, deadline: Deadline) -> u64 {
        self.timeouts[deadline as usize].load(Ordering::Relaxed)
    }

    pub fn view(&self) -> LoadView {
        let shedding_for = self.ticks.lock().map_or(0, |t| t.shedding_for);
        LoadView {
            connections: self.connections.load(Ordering::Relaxed),
            max_connections: self.max_connections,
            in_flight: self.in_flight.load(Ordering::Relaxed),
            max_in_flight: self.max_in_flight,
            shedding: shedding_for > 0,
            scale_out: shedding_for >= SUSTAINED_SECONDS,
        }
    }

    /// Once a second: updates the sustained-shedding state and logs its changes.
    pub fn tick(&self) {
        let shed: u64 = self.shed.iter().map(|c| c.load(Ordering::Relaxed)).sum();
        let refused = self.refused_connections();
        let Ok(mut ticks) = self.ticks.lock() else {
            return;
        };
        let new_shed = shed - ticks.shed_seen;
        let new_refused = refused - ticks.refused_seen;
        ticks.shed_seen = shed;
        ticks.refused_seen = refused;
        if new_shed > 0 {
            if ticks.shedding_for == 0 {
                tracing::warn!(
                    max_in_flight = self.max_in_flight,
                    max_queue_delay = ?self.max_queue_delay,
                    shed = new_shed,
                    shed_behind = self.shed_behind(),
                    "shedding load: requests beyond http.max_in_flight, or on a lane behind by more than http.max_queue_delay, are answered by the failure policy"
                );
                ticks.shed_in_episode = 0;
            }
            ticks.shedding_for += 1;
            ticks.shed_in_episode += new_shed;
            if ticks.shedding_for == SUSTAINED_SECONDS {
                tracing::warn!(
                    seconds = SUSTAINED_SECONDS,
                    shed = ticks.shed_in_episode,
                    "shedding is sustained; /readyz reports scale_out"
                );
            }
        } else if ticks.shedding_for > 0 {
            tracing::info!(
                seconds = ticks.shedding_for,
                shed = ticks.shed_in_episode,
                "stopped shedding load"
            );
            ticks.shedding_for = 0;
        }
        if new_refused > 0 {
            tracing::warn!(
                refused = new_refused,
                max_connections = self.max_connections,
                "connections refused in the last second: http.max_connections are open"
            );
        }
    }
}

/// One open connection; frees its place when dropped.
pub struct ConnectionSlot(Arc<Overload>);

impl Drop for ConnectionSlot {
    fn drop(&mut self) {
        self.0.connections.fetch_sub(1, Ordering::Relaxed);
    }
}

/// One request in flight; frees its place when dropped.
pub struct RequestSlot(Arc<Overload>);

impl Drop for RequestSlot {
    fn drop(&mut self) {
        self.0.in_flight.fetch_sub(1, Ordering::Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn routes_are_told_by_method_and_path() {
        assert_eq!(Route::of(&Method::POST, "/v1/streams"), Route::PlayStart);
        assert_eq!(
            Route::of(&Method::PUT, "/v1/streams/abc/heartbeat"),
            Route::Heartbeat
        );
        assert_eq!(
            Route::of(&Method::DELETE, "/v1/streams/abc"),
            Route::Release
        );
        assert_eq!(Route::of(&Method::DELETE, "/v1/streams/"), Route::Other);
        assert_eq!(Route::of(&Method::GET, "/v1/streams/abc"), Route::Other);
        assert_eq!(
            Route::of(&Method::GET, "/v1/accounts/a/streams"),
            Route::Other
        );
        assert_eq!(Route::of(&Method::GET, "/readyz"), Route::Ops);
    }

    #[test]
    fn bounds_admit_up_to_the_max_and_count_the_rest() {
        let http = HttpConfig {
            max_in_flight: 2,
            max_connections: 1,
            ..HttpConfig::default()
        };
        let overload = Arc::new(Overload::new(&http));
        let a = overload.admit(Route::PlayStart).unwrap();
        let _b = overload.admit(Route::Heartbeat).unwrap();
        assert!(overload.admit(Route::Heartbeat).is_none());
        assert_eq!(overload.shed_total(Route::Heartbeat), 1);
        drop(a);
        assert!(overload.admit(Route::PlayStart).is_some());
        let c = overload.connect().unwrap();
        assert!(overload.connect().is_none());
        assert_eq!(overload.refused_connections(), 1);
        drop(c);
        assert!(overload.connect().is_some());
    }

    #[tokio::test]
    async fn a_lane_behind_by_more_than_the_queue_delay_sheds() {
        let http = HttpConfig {
            max_queue_delay: Duration::from_millis(200),
            ..HttpConfig::default()
        };
        let overload = Arc::new(Overload::new(&http));
        let lane = LaneLag::new();
        tokio::spawn(lane.clone().probe());
        tokio::time::sleep(Duration::from_millis(20)).await;
        assert!(overload.admit_on(Route::PlayStart, &lane).is_some());
        // The lane's thread is busy (blocked) for 300 ms: the probe is overdue.
        std::thread::sleep(Duration::from_millis(300));
        assert!(
            lane.behind() >= Duration::from_millis(250),
            "{:?}",
            lane.behind()
        );
        assert!(overload.admit_on(Route::PlayStart, &lane).is_none());
        assert_eq!(overload.shed_total(Route::PlayStart), 1);
        assert_eq!(overload.shed_behind(), 1);
        // Off when the delay is zero.
        let off = Arc::new(Overload::new(&HttpConfig {
            max_queue_delay: Duration::ZERO,
            ..HttpConfig::default()
        }));
        assert!(off.admit_on(Route::PlayStart, &lane).is_some());
    }

    #[test]
    fn scale_out_only_after_sustained_shedding() {
        let http = HttpConfig {
            max_in_flight: 1,
            ..HttpConfig::default()
        };
        let overload = Arc::new(Overload::new(&http));
        let _held = overload.admit(Route::PlayStart).unwrap();
        for second in 1..=SUSTAINED_SECONDS {
            assert!(overload.admit(Route::PlayStart).is_none());
            overload.tick();
            let view = overload.view();
            assert!(view.shedding);
            assert_eq!(view.scale_out, second == SUSTAINED_SECONDS, "{second}");
        }
        overload.tick();
        let view = overload.view();
        assert!(!view.shedding && !view.scale_out);
    }
}
