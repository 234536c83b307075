//! What the run measured (`measure.rs` fills it in order): the deltas of every phase and
//! window, the populations, the round trips and the recorders, for the attribution, the
//! projection and the report.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::AtomicU64;
use std::time::Duration;

use serde_json::Value;

use super::meter::Delta;
use super::traffic::Shared;
use crate::stats::{OpSummary, Recorder};

/// One closed-loop phase: (op, delta, count, latency summaries, Redis calls per command).
pub(super) type ClosedPhase = (
    &'static str,
    Delta,
    u64,
    Vec<OpSummary>,
    BTreeMap<String, u64>,
);

/// Everything the run measured, for the attribution, the projection and the report.
pub(super) struct Measured {
    pub(super) window: Duration,
    pub(super) limiters: usize,
    /// The model's rates per (limiter process, shard) pair.
    pub(super) hb_pair: f64,
    pub(super) play_pair: f64,
    pub(super) every: f64,
    pub(super) play_rate: f64,
    /// The SET baseline.
    pub(super) set_rps: f64,
    pub(super) sets: u64,
    pub(super) set_delta: Delta,
    /// The closed loop: (op, delta, count, latency summaries, Redis calls per command).
    pub(super) closed: Vec<ClosedPhase>,
    pub(super) shared: Arc<Shared>,
    pub(super) live: Arc<Vec<usize>>,
    pub(super) load_secs: f64,
    pub(super) bytes_per_stream: f64,
    pub(super) loaded: usize,
    pub(super) idle_before: Delta,
    pub(super) idle_after: Delta,
    pub(super) idle: Delta,
    pub(super) idle_redis: f64,
    pub(super) idle_limiter: f64,
    pub(super) bg_target: f64,
    pub(super) bg_calibration: Vec<Value>,
    /// (name, delta, background ops, limiter ops, round: 0 for the background alone).
    pub(super) bg_windows: Vec<(String, Delta, u64, u64, usize)>,
    /// The background-alone windows in order: before round 1, between rounds, after the last.
    pub(super) alone: Vec<Delta>,
    pub(super) bg_rate: f64,
    pub(super) bg_errors: u64,
    /// PING round trips, µs, sorted.
    pub(super) pings: Vec<u64>,
    pub(super) rss: Vec<u64>,
    pub(super) d_hb: Delta,
    pub(super) d_mixed: Delta,
    pub(super) cmds_hb: BTreeMap<String, u64>,
    pub(super) cmds_mixed: BTreeMap<String, u64>,
    pub(super) windows: Vec<Value>,
    pub(super) rounds: usize,
    pub(super) hb_rec: Arc<Recorder>,
    pub(super) mixed_rec: Arc<Recorder>,
    pub(super) skipped: Arc<AtomicU64>,
    pub(super) measured: Duration,
    pub(super) hb_ops: Vec<OpSummary>,
    pub(super) mixed_ops: Vec<OpSummary>,
    pub(super) ops_out: Vec<OpSummary>,
}
