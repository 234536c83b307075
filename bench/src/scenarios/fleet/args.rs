//! `fleet`'s flags: the run's phases, the fleet model and the background load.

use std::time::Duration;

use clap::Args;

use super::super::common::{Common, dur};

/// The coalescing window `fleet` gives spawned limiters (and its model) unless told otherwise.
pub const DEFAULT_BATCH_WINDOW: Duration = Duration::from_millis(2);

#[derive(Args, Debug, Clone)]
pub struct FleetArgs {
    #[command(flatten)]
    pub common: Common,
    /// Closed-loop clients, each waiting for its answer (also redis-benchmark's -c).
    #[arg(long, default_value_t = 8)]
    pub clients: usize,
    /// Length of each closed-loop phase (heartbeats, then play-starts).
    #[arg(long, default_value = "6s", value_parser = dur)]
    pub closed_step: Duration,
    /// Leases the closed-loop heartbeats renew (premium accounts, one stream each).
    #[arg(long, default_value_t = 20_000)]
    pub closed_leases: usize,
    /// Premium accounts the closed-loop play-starts go to (4 devices each: always granted).
    #[arg(long, default_value_t = 100_000)]
    pub closed_accounts: usize,
    /// SETs of the redis-benchmark baseline.
    #[arg(long, default_value_t = 100_000)]
    pub baseline_requests: u64,
    /// Idle windows before and after the open loop (population loaded, no traffic): their mean
    /// CPU per second is subtracted.
    #[arg(long, default_value = "3s", value_parser = dur)]
    pub idle: Duration,
    /// Live leases of the open loop (default: the model's heartbeat rate per pair × limiters ×
    /// --heartbeat-every).
    #[arg(long)]
    pub players: Option<usize>,
    /// Play-starts per second in the mixed phase (default: the model's rate per pair ×
    /// limiters).
    #[arg(long)]
    pub play_rate: Option<f64>,
    /// Each player's heartbeat period (±10 % jitter, random phase).
    #[arg(long, default_value = "30s", value_parser = dur)]
    pub heartbeat_every: Duration,
    /// Open loop, each round: heartbeats alone, measured before the mixed window.
    #[arg(long, default_value = "6s", value_parser = dur)]
    pub heartbeat_only: Duration,
    /// Open loop, each round: the mixed window (heartbeats and play-starts), measured.
    #[arg(long, default_value = "10s", value_parser = dur)]
    pub duration: Duration,
    /// Open-loop rounds (heartbeats alone, then mixed), so that a drift in the shared
    /// machine's load falls on both kinds of window; their sums are what is reported.
    #[arg(long, default_value_t = 2)]
    pub rounds: usize,
    /// Store round trips (PING) measured after the mixed window, under the same traffic.
    #[arg(long, default_value = "2s", value_parser = dur)]
    pub probe: Duration,
    /// Accounts listed at the end to check the cap and that no lease was lost or leaked.
    #[arg(long, default_value_t = 500)]
    pub verify_accounts: usize,
    /// Model: Redis shards in the fleet.
    #[arg(long, default_value_t = 20)]
    pub fleet_shards: usize,
    /// Model: limiter processes in the fleet (each has one queue per shard).
    #[arg(long, default_value_t = 100)]
    pub fleet_processes: usize,
    /// Model: serving lanes (cores) per limiter process.
    #[arg(long, default_value_t = 4)]
    pub fleet_lanes: usize,
    /// The seed's peak heartbeats per second.
    #[arg(long, default_value_t = 3_330_000.0)]
    pub peak_heartbeats: f64,
    /// The seed's peak play-starts per second.
    #[arg(long, default_value_t = 500_000.0)]
    pub peak_play_starts: f64,
    /// The seed's stops per second at its peak: the steady churn (streams / average session),
    /// not one per play-start, since the seed's play-starts are a spike and its sizing counts
    /// no stops. The conservative model beside it counts a stop for every play-start.
    #[arg(long, default_value_t = 28_000.0)]
    pub peak_stops: f64,
    /// The seed's concurrent streams.
    #[arg(long, default_value_t = 100_000_000.0)]
    pub peak_streams: f64,
    /// Share of its core a shard's main thread may use in the model.
    #[arg(long, default_value_t = 0.5)]
    pub shard_cpu_budget: f64,
    /// Keep the Redis main thread about this busy (0..1) with unrelated background traffic
    /// (`GET`/`SET bg:<n>` from many connections) through the open loop and windows of that
    /// background alone before, between the rounds of and after it; the open loop's costs are then also reported as
    /// marginal (window CPU minus the background-alone CPU per second × the window), and the
    /// projection uses those. 0: no background.
    #[arg(long, default_value_t = 0.0)]
    pub background_busy: f64,
    /// Connections (one task each) of the background load.
    #[arg(long, default_value_t = 64)]
    pub background_connections: usize,
    /// Each window of the background load alone (before the open loop, between rounds with
    /// the players paused, and after).
    #[arg(long, default_value = "6s", value_parser = dur)]
    pub background_alone: Duration,
    /// Length of each of the background load's calibration steps (4 of them).
    #[arg(long, default_value = "1s", value_parser = dur)]
    pub background_calibrate: Duration,
}
