//! How many streams are live, per shard, without scanning anything on the request path.
//!
//! The embedded store holds every lease, so it counts them exactly (on read). On Redis, counting
//! lease keys would mean scanning millions of keys, and `INFO keyspace` cannot tell lease keys
//! from account, audit and session keys; instead each instance applies Little's law to what it
//! serves: a playing stream sends one heartbeat per interval, so the heartbeats per second this
//! instance answered "keep playing" for a shard, times the heartbeat interval, is the number of
//! streams whose heartbeats reach this instance. Summed over instances it is the shard's count.
//! The hot path pays one relaxed atomic add per heartbeat.

use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// How a live-stream figure was obtained (the `method` label and the `/v1/fleet` field).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, utoipa::ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum LiveMethod {
    /// Leases alive now, counted in the embedded store.
    Exact,
    /// Heartbeats per second answered for the shard × the heartbeat interval (Little's law),
    /// averaged over the last window; this instance's share of the shard.
    HeartbeatRate,
}

impl LiveMethod {
    pub fn label(self) -> &'static str {
        match self {
            LiveMethod::Exact => "exact",
            LiveMethod::HeartbeatRate => "heartbeat_rate",
        }
    }
}

/// Live streams per shard, as `/metrics` and `/v1/fleet` give them.
#[derive(Debug, Clone, PartialEq, serde::Serialize, utoipa::ToSchema)]
pub struct LiveStreams {
    pub method: LiveMethod,
    /// For `heartbeat_rate`: the span the rate was averaged over, in seconds (0 until a first
    /// window has passed); 0 for `exact`.
    pub window_sec: f64,
    /// Live streams by shard index (`shards[i]` is shard `i`); estimates are rounded.
    pub shards: Vec<u64>,
}

/// Counts the heartbeats answered "keep playing" per shard and turns them into an estimate.
pub struct HeartbeatRate {
    counts: Vec<AtomicU64>,
    interval: Duration,
    window: Duration,
    last: Mutex<Snapshot>,
}

struct Snapshot {
    at: Instant,
    counts: Vec<u64>,
    /// The estimate of the last completed window.
    estimate: Vec<u64>,
    span: Duration,
}

impl HeartbeatRate {
    /// A counter per shard; estimates are averaged over at least two heartbeat intervals, so
    /// that every stream heartbeats in each window whatever its phase.
    pub fn new(shards: usize, interval: Duration, now: Instant) -> Self {
        HeartbeatRate {
            counts: (0..shards).map(|_| AtomicU64::new(0)).collect(),
            interval,
            window: (interval * 2).max(Duration::from_secs(1)),
            last: Mutex::new(Snapshot {
                at: now,
                counts: vec![0; shards],
                estimate: vec![0; shards],
                span: Duration::ZERO,
            }),
        }
    }

    /// One heartbeat answered "keep playing" for an account on `shard`.
    pub fn heartbeat(&self, shard: usize) {
        if let Some(count) = self.counts.get(shard) {
            count.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// The estimate of the last completed window; a read after the window has passed closes it
    /// and starts the next. Readers (scrapes, the dashboard) do not change the figure's span.
    pub fn estimate(&self, now: Instant) -> LiveStreams {
        let mut last = self.last.lock().unwrap_or_else(|e| e.into_inner());
        let span = now.saturating_duration_since(last.at);
        if span >= self.window {
            let counts: Vec<u64> = self
                .counts
                .iter()
                .map(|c| c.load(Ordering::Relaxed))
                .collect();
            let factor = self.interval.as_secs_f64() / span.as_secs_f64();
            last.estimate = counts
                .iter()
                .zip(&last.counts)
                .map(|(now, before)| (now.saturating_sub(*before) as f64 * factor).round() as u64)
                .collect();
            last.counts = counts;
            last.at = now;
            last.span = span;
        }
        LiveStreams {
            method: LiveMethod::HeartbeatRate,
            window_sec: last.span.as_secs_f64(),
            shards: last.estimate.clone(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_estimate_is_heartbeats_per_second_times_the_interval() {
        let t0 = Instant::now();
        let rate = HeartbeatRate::new(2, Duration::from_secs(10), t0);
        // 300 streams on shard 0, 30 on shard 1, each heartbeating every 10 s, for 20 s.
        for _ in 0..600 {
            rate.heartbeat(0);
        }
        for _ in 0..60 {
            rate.heartbeat(1);
        }
        rate.heartbeat(7); // an unknown shard is ignored
        let before = rate.estimate(t0 + Duration::from_secs(19));
        assert_eq!(before.shards, [0, 0], "no window has passed yet");
        assert_eq!(before.window_sec, 0.0);
        let first = rate.estimate(t0 + Duration::from_secs(20));
        assert_eq!(first.shards, [300, 30]);
        assert_eq!(first.window_sec, 20.0);
        assert_eq!(first.method, LiveMethod::HeartbeatRate);
        // Reads within the next window keep the figure; the window closes at its end.
        for _ in 0..150 {
            rate.heartbeat(0);
        }
        assert_eq!(
            rate.estimate(t0 + Duration::from_secs(30)).shards,
            [300, 30]
        );
        let second = rate.estimate(t0 + Duration::from_secs(50));
        assert_eq!(
            second.shards,
            [50, 0],
            "150 heartbeats in 30 s, interval 10 s"
        );
        assert_eq!(second.window_sec, 30.0);
    }

    #[test]
    fn the_window_is_at_least_a_second() {
        let t0 = Instant::now();
        let rate = HeartbeatRate::new(1, Duration::from_millis(100), t0);
        rate.heartbeat(0);
        assert_eq!(rate.estimate(t0 + Duration::from_millis(500)).shards, [0]);
        for _ in 0..19 {
            rate.heartbeat(0);
        }
        // 20 heartbeats in 1 s at a 100 ms interval: 2 streams.
        assert_eq!(rate.estimate(t0 + Duration::from_secs(1)).shards, [2]);
    }
}
