//! What each operation costs: the phases' CPU per operation (as measured and with the idle CPU
//! subtracted), the play-start's share of the mixed windows by subtraction, the marginal costs
//! over a background load, and the store round trip.

use super::measured::Measured;
use super::meter::Delta;
use super::numbers::{find, per_op_us, quantile, ratio};
use crate::stats::OpSummary;

/// One measured phase of the report.
#[derive(Debug, Clone, Copy)]
pub(super) struct Phase {
    pub(super) name: &'static str,
    /// Operations the Redis CPU is divided by.
    pub(super) ops: u64,
    pub(super) delta: Delta,
    /// Redis main-thread µs per op: as measured, and with the idle CPU subtracted.
    pub(super) redis_raw_us: f64,
    pub(super) redis_us: f64,
    pub(super) limiter_us: f64,
    pub(super) p50_ms: f64,
    pub(super) p99_ms: f64,
}

/// The attributed costs the projection and the report use.
pub(super) struct Costs {
    pub(super) set: Phase,
    pub(super) closed_phases: Vec<Phase>,
    pub(super) hb_only: Phase,
    pub(super) mixed_hb: Phase,
    pub(super) mixed_play: Phase,
    pub(super) hb_count: u64,
    pub(super) m_hb: u64,
    pub(super) m_play: u64,
    pub(super) m_release: u64,
    pub(super) marginal: Option<(f64, f64)>,
    pub(super) hb_cost: f64,
    pub(super) play_cost: f64,
    pub(super) cmds_per_hb: f64,
    pub(super) cmds_per_cycle: f64,
    pub(super) mixed_cmd_rate: f64,
    pub(super) hb_cmd_rate: f64,
    pub(super) ping_rtt_us: f64,
    pub(super) batch_cycle_us: f64,
    pub(super) queue_never_idle: bool,
    pub(super) limiter_rtt_us: f64,
    pub(super) rtt_us: f64,
    pub(super) rtt_source: &'static str,
    pub(super) alone_rates: Vec<f64>,
    pub(super) bg_alone: Option<(f64, f64)>,
    pub(super) bg_rows: Vec<(String, f64, f64, u64, f64, f64)>,
    pub(super) hb_noise_us: Option<f64>,
}

impl Costs {
    pub(super) fn of(m: &Measured) -> Self {
        let &Measured {
            window,
            limiters,
            sets,
            set_delta,
            ref closed,
            idle_redis,
            idle_limiter,
            bg_target,
            ref bg_windows,
            ref alone,
            ref pings,
            d_hb,
            d_mixed,
            ref hb_rec,
            ref mixed_rec,
            ref hb_ops,
            ref mixed_ops,
            ..
        } = m;
        // With a background load, what it alone costs per second: each window of it alone, and
        // for round r the mean of the two around it (before it and after it).
        let alone_rates: Vec<f64> = alone.iter().map(|d| ratio(d.redis_main, d.secs)).collect();
        let bg_alone = (bg_target > 0.0 && alone.len() >= 2).then(|| {
            let mut d = Delta::default();
            alone.iter().for_each(|a| d.add(a));
            let max = alone_rates.iter().copied().fold(f64::MIN, f64::max);
            let min = alone_rates.iter().copied().fold(f64::MAX, f64::min);
            (ratio(d.redis_main, d.secs), max - min)
        });
        // What one background operation costs the main thread (seconds, the idle's share taken
        // out), from the alone windows around round r (all of them for r = 0). Per operation, not
        // per second: the load generator shares the cores, so the background's achieved rate
        // drops while the open loop runs (by a tenth here), and a per-second subtraction would
        // charge the open loop with background work that was never done.
        let alone_ops: Vec<u64> = bg_windows
            .iter()
            .filter(|w| w.4 == 0)
            .map(|w| w.2)
            .collect();
        let per_bg_op = |windows: &mut dyn Iterator<Item = usize>| -> f64 {
            let (mut cpu, mut ops) = (0.0, 0u64);
            for i in windows {
                if let (Some(d), Some(&n)) = (alone.get(i), alone_ops.get(i)) {
                    cpu += d.redis_main - idle_redis * d.secs;
                    ops += n;
                }
            }
            ratio(cpu, ops as f64)
        };
        let base_of = |round: usize| -> f64 {
            match round {
                0 => per_bg_op(&mut (0..alone.len())),
                r => per_bg_op(&mut [r - 1, r].into_iter()),
            }
        };
        // Each background window's marginal CPU (seconds): its CPU less the idle's and its
        // background operations at the cost its round's neighbours show (the whole background
        // alone's for the alone windows).
        let marginal_cpu = |d: &Delta, bg_ops: u64, round: usize| {
            d.redis_main - idle_redis * d.secs - base_of(round) * bg_ops as f64
        };
        let idle_sub = |d: &Delta| d.redis_main - idle_redis * d.secs;
        let idle_sub_lim = |d: &Delta| d.limiter - idle_limiter * d.secs;
        let phase = |name: &'static str, d: &Delta, ops: u64, lat: Option<&OpSummary>| Phase {
            name,
            ops,
            delta: *d,
            redis_raw_us: per_op_us(d.redis_main, ops),
            redis_us: per_op_us(idle_sub(d), ops),
            limiter_us: per_op_us(idle_sub_lim(d), ops),
            p50_ms: lat.map_or(0.0, |o| o.p50_ms),
            p99_ms: lat.map_or(0.0, |o| o.p99_ms),
        };
        let set = Phase {
            // redis-benchmark's own percentiles are not read; its rate is in the JSON.
            limiter_us: 0.0,
            ..phase("baseline SET", &set_delta, sets, None)
        };
        let mut closed_phases = Vec::new();
        for (name, d, count, ops, _) in closed {
            let lat = find(ops, &format!("closed.{name}"));
            let p = phase(
                if *name == "heartbeat" {
                    "closed heartbeat"
                } else {
                    "closed play-start"
                },
                d,
                *count,
                lat,
            );
            closed_phases.push(p);
        }
        let hb_count = hb_rec.count("heartbeat");
        let hb_only = phase(
            "open heartbeats alone",
            &d_hb,
            hb_count,
            find(hb_ops, "open.heartbeat"),
        );
        // The mixed phase: heartbeats at the heartbeat-only phase's cost, the rest is the plays'.
        let m_hb = mixed_rec.count("heartbeat");
        let m_play = mixed_rec.count("play_start");
        let m_release = mixed_rec.count("release");
        let play_cycle = |total: f64, per_hb: f64| {
            if m_play == 0 {
                0.0
            } else {
                (total * 1e6 - m_hb as f64 * per_hb) / m_play as f64
            }
        };
        let mixed_hb = Phase {
            p50_ms: find(mixed_ops, "mixed.heartbeat").map_or(0.0, |o| o.p50_ms),
            p99_ms: find(mixed_ops, "mixed.heartbeat").map_or(0.0, |o| o.p99_ms),
            ops: m_hb,
            delta: Delta::default(),
            name: "mixed: heartbeat",
            ..hb_only
        };
        let mixed_play = Phase {
            name: "mixed: play-start (+stop)",
            ops: m_play,
            delta: d_mixed,
            redis_raw_us: play_cycle(d_mixed.redis_main, hb_only.redis_raw_us),
            redis_us: play_cycle(idle_sub(&d_mixed), hb_only.redis_us),
            limiter_us: play_cycle(idle_sub_lim(&d_mixed), hb_only.limiter_us),
            p50_ms: find(mixed_ops, "mixed.play_start").map_or(0.0, |o| o.p50_ms),
            p99_ms: find(mixed_ops, "mixed.play_start").map_or(0.0, |o| o.p99_ms),
        };
        // Marginal costs over the background: the window's CPU minus the idle's and its
        // background operations' at the background-alone cost per operation.
        let marginal = bg_alone.map(|_| {
            let sum = |phase: &str| -> f64 {
                bg_windows
                    .iter()
                    .filter(|w| w.4 > 0 && w.0.starts_with(phase))
                    .map(|w| marginal_cpu(&w.1, w.2, w.4))
                    .sum()
            };
            let hb = per_op_us(sum("heartbeats"), hb_count);
            (hb, play_cycle(sum("mixed"), hb))
        });
        // The costs the projection uses: marginal with a background, else idle-subtracted.
        let (hb_cost, play_cost) = marginal.unwrap_or((hb_only.redis_us, mixed_play.redis_us));
        let cmds_per_hb = ratio(d_hb.commands as f64, hb_count as f64);
        let cmds_per_cycle = if m_play == 0 {
            0.0
        } else {
            (d_mixed.commands as f64 - m_hb as f64 * cmds_per_hb) / m_play as f64
        };
        let per_proc = |x: f64, secs: f64| ratio(x, secs * limiters as f64);
        let mixed_cmd_rate = per_proc(d_mixed.commands as f64, d_mixed.secs);
        let hb_cmd_rate = per_proc(d_hb.commands as f64, d_hb.secs);
        // Two measures of the round trip: PING on a connection of the run's own (network and
        // Redis), and the limiter's own: while its queue never idles (many commands arrive per
        // batch), one batch follows another, so the mean time between a limiter's batches is
        // W + its round trip, timer rounding and task wake-ups included.
        let ping_rtt_us = quantile(pings, 0.5);
        let batch_cycle_us = ratio(d_hb.secs * limiters as f64, d_hb.batches as f64) * 1e6;
        let queue_never_idle = ratio(d_hb.commands as f64, d_hb.batches as f64) >= 8.0;
        let limiter_rtt_us = (batch_cycle_us - window.as_secs_f64() * 1e6).max(0.0);
        let (rtt_us, rtt_source) = if queue_never_idle {
            (
                limiter_rtt_us,
                "limiter: mean time between batches in the heartbeat windows - W",
            )
        } else {
            (
                ping_rtt_us,
                "PING p50 (the limiter's queue idled, its batch cycle is not a round trip)",
            )
        };
        let bg_rows: Vec<(String, f64, f64, u64, f64, f64)> = bg_windows
            .iter()
            .map(|(name, d, n, ops, round)| {
                (
                    name.clone(),
                    d.secs,
                    ratio(d.redis_main, d.secs),
                    *ops,
                    ratio(*n as f64, d.secs),
                    marginal_cpu(d, *n, *round),
                )
            })
            .collect();
        // The spread (max - min) of the background-alone windows' cost per background
        // operation, and what half of it moves a heartbeat's marginal cost by.
        let hb_noise_us = bg_alone.map(|_| {
            let costs: Vec<f64> = (0..alone.len())
                .map(|i| per_bg_op(&mut std::iter::once(i)))
                .collect();
            let spread = costs.iter().copied().fold(f64::MIN, f64::max)
                - costs.iter().copied().fold(f64::MAX, f64::min);
            let bg_ops_hb: u64 = bg_windows
                .iter()
                .filter(|w| w.4 > 0 && w.0.starts_with("heartbeats"))
                .map(|w| w.2)
                .sum();
            per_op_us(spread / 2.0 * bg_ops_hb as f64, hb_count)
        });
        Costs {
            set,
            closed_phases,
            hb_only,
            mixed_hb,
            mixed_play,
            hb_count,
            m_hb,
            m_play,
            m_release,
            marginal,
            hb_cost,
            play_cost,
            cmds_per_hb,
            cmds_per_cycle,
            mixed_cmd_rate,
            hb_cmd_rate,
            ping_rtt_us,
            batch_cycle_us,
            queue_never_idle,
            limiter_rtt_us,
            rtt_us,
            rtt_source,
            alone_rates,
            bg_alone,
            bg_rows,
            hb_noise_us,
        }
    }
}
