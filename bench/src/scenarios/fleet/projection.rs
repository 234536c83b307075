//! The projection to the seed's peak: the per-pair rates and the batch depth they give, the
//! Redis main-thread cores and shards, the limiter cores, and the RAM, as a model from the
//! attributed costs.

use super::args::FleetArgs;
use super::attribution::Costs;
use super::measured::Measured;
use super::numbers::ratio;

/// The expected batch depth: max(1 + rate × W, rate × (W + round trip)), rate in commands/s.
pub(super) fn expected_depth(window: std::time::Duration, cmds_per_sec: f64, rtt_us: f64) -> f64 {
    let w = window.as_secs_f64();
    (1.0 + cmds_per_sec * w).max(cmds_per_sec * (w + rtt_us / 1e6))
}

/// The seed's own load model: play-starts and stops at their own rates. The open loop measures
/// a play-start and its stop together, so each is counted at half their sum (a stop costs a
/// shard about what a play-start does: one script or native command on the account key).
pub(super) struct SeedModel {
    pub(super) redis_cores: f64,
    pub(super) shards_needed: f64,
    pub(super) limiter_cores: f64,
}

/// The model's outputs (and the ratios to the SET baseline).
pub(super) struct Projection {
    pub(super) shards: f64,
    pub(super) procs: f64,
    pub(super) lanes: f64,
    pub(super) cmd_pair: f64,
    pub(super) depth_model: f64,
    pub(super) depth_model_ping: f64,
    pub(super) mixed_depth: f64,
    pub(super) hb_rate_proc: f64,
    pub(super) play_rate_proc: f64,
    pub(super) rates_match: bool,
    pub(super) redis_cores: f64,
    pub(super) redis_cores_raw: f64,
    pub(super) shards_needed: f64,
    pub(super) shards_needed_raw: f64,
    pub(super) limiter_cores: f64,
    /// The seed's own model: stops at `--peak-stops`, not one per play-start.
    pub(super) seed: SeedModel,
    pub(super) rss_mean: f64,
    pub(super) redis_ram: f64,
    pub(super) hb_ratio: f64,
    pub(super) play_ratio: f64,
    pub(super) open_hb_ratio: f64,
    pub(super) open_play_ratio: f64,
    pub(super) cost_basis: String,
}

impl Projection {
    pub(super) fn of(args: &FleetArgs, m: &Measured, c: &Costs) -> Self {
        let &Measured {
            window,
            limiters,
            hb_pair,
            play_pair,
            bytes_per_stream,
            bg_target,
            ref rss,
            d_mixed,
            ..
        } = m;
        let &Costs {
            set,
            ref closed_phases,
            hb_only,
            mixed_play,
            m_hb,
            m_play,
            marginal,
            hb_cost,
            play_cost,
            cmds_per_hb,
            cmds_per_cycle,
            ping_rtt_us,
            rtt_us,
            ..
        } = c;
        let per_proc = |x: f64, secs: f64| ratio(x, secs * limiters as f64);
        // ---- the projection.
        let shards = args.fleet_shards.max(1) as f64;
        let procs = args.fleet_processes.max(1) as f64;
        let lanes = args.fleet_lanes.max(1) as f64;
        let cmd_pair = hb_pair * cmds_per_hb + play_pair * cmds_per_cycle;
        let depth_model = expected_depth(window, cmd_pair, rtt_us);
        let depth_model_ping = expected_depth(window, cmd_pair, ping_rtt_us);
        let mixed_depth = ratio(d_mixed.commands as f64, d_mixed.batches as f64);
        let hb_rate_proc = per_proc(m_hb as f64, d_mixed.secs);
        let play_rate_proc = per_proc(m_play as f64, d_mixed.secs);
        let near = |measured: f64, model: f64| model > 0.0 && (measured / model - 1.0).abs() <= 0.1;
        let rates_match = near(hb_rate_proc, hb_pair) && near(play_rate_proc, play_pair);
        let redis_cores =
            (args.peak_heartbeats * hb_cost + args.peak_play_starts * play_cost) / 1e6;
        let redis_cores_raw = (args.peak_heartbeats * hb_only.redis_raw_us
            + args.peak_play_starts * mixed_play.redis_raw_us)
            / 1e6;
        let shards_needed = (redis_cores / args.shard_cpu_budget).ceil();
        let shards_needed_raw = (redis_cores_raw / args.shard_cpu_budget).ceil();
        let limiter_cores = (args.peak_heartbeats * hb_only.limiter_us
            + args.peak_play_starts * mixed_play.limiter_us)
            / 1e6;
        let plays_and_stops = (args.peak_play_starts + args.peak_stops) / 2.0;
        let seed_redis_cores = (args.peak_heartbeats * hb_cost + plays_and_stops * play_cost) / 1e6;
        let seed = SeedModel {
            redis_cores: seed_redis_cores,
            shards_needed: (seed_redis_cores / args.shard_cpu_budget).ceil(),
            limiter_cores: (args.peak_heartbeats * hb_only.limiter_us
                + plays_and_stops * mixed_play.limiter_us)
                / 1e6,
        };
        let rss_mean = if rss.is_empty() {
            0.0
        } else {
            rss.iter().sum::<u64>() as f64 / rss.len() as f64
        };
        let redis_ram = bytes_per_stream * args.peak_streams;

        let hb_ratio = ratio(closed_phases[0].redis_us, set.redis_us);
        let play_ratio = ratio(closed_phases[1].redis_us, set.redis_us);
        let open_hb_ratio = ratio(hb_only.redis_us, set.redis_us);
        let open_play_ratio = ratio(mixed_play.redis_us, set.redis_us);

        let cost_basis = if marginal.is_some() {
            format!(
                "marginal: open-loop window CPU minus the background-alone CPU per second over the same duration, Redis main thread kept about {:.0} % busy by background traffic",
                bg_target * 100.0
            )
        } else {
            "open loop on an otherwise idle shard, idle CPU subtracted".to_owned()
        };
        // The background's windows: busy fraction, its rate, and the limiter traffic's marginal CPU.
        Projection {
            shards,
            procs,
            lanes,
            cmd_pair,
            depth_model,
            depth_model_ping,
            mixed_depth,
            hb_rate_proc,
            play_rate_proc,
            rates_match,
            redis_cores,
            redis_cores_raw,
            shards_needed,
            shards_needed_raw,
            limiter_cores,
            seed,
            rss_mean,
            redis_ram,
            hb_ratio,
            play_ratio,
            open_hb_ratio,
            open_play_ratio,
            cost_basis,
        }
    }
}
