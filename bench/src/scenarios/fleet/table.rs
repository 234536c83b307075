//! The report's table: CPU per operation by phase against the SET baseline, the targets, the
//! store round trip, the background load's windows, and the projection with its inputs.

use std::fmt::Write as _;

use super::args::FleetArgs;
use super::attribution::{Costs, Phase};
use super::measured::Measured;
use super::meter::Delta;
use super::numbers::{per_op_us, quantile, ratio};
use super::projection::Projection;

pub(super) fn text(args: &FleetArgs, m: &Measured, c: &Costs, p: &Projection) -> String {
    let &Measured {
        window,
        hb_pair,
        play_pair,
        set_rps,
        set_delta,
        bytes_per_stream,
        loaded,
        idle,
        idle_redis,
        idle_limiter,
        bg_target,
        ref bg_calibration,
        bg_rate,
        bg_errors,
        ref pings,
        d_hb,
        d_mixed,
        ..
    } = m;
    let &Costs {
        set,
        ref closed_phases,
        hb_only,
        mixed_hb,
        mixed_play,
        m_hb,
        m_play,
        marginal,
        hb_cost,
        play_cost,
        cmds_per_hb,
        cmds_per_cycle,
        ping_rtt_us,
        batch_cycle_us,
        queue_never_idle,
        limiter_rtt_us,
        rtt_us,
        ref alone_rates,
        bg_alone,
        ref bg_rows,
        hb_noise_us,
        ..
    } = c;
    let &Projection {
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
        ref seed,
        rss_mean,
        redis_ram,
        hb_ratio,
        play_ratio,
        open_hb_ratio,
        open_play_ratio,
        ..
    } = p;
    let mut t = String::new();
    let _ = writeln!(
        t,
        "\nRedis main-thread CPU per operation (INFO cpu deltas, network I/O included); idle {:.2} ms/s of Redis main thread and {:.2} ms/s of limiter CPU subtracted ({:.1} s idle window, {} leases)",
        idle_redis * 1e3,
        idle_limiter * 1e3,
        idle.secs,
        loaded
    );
    let _ = writeln!(
        t,
        "{:<27} {:>8} {:>8} {:>7} {:>7} {:>8} {:>8} {:>6} {:>7} {:>7} {:>7} {:>8}",
        "phase",
        "ops",
        "ops/s",
        "p50 ms",
        "p99 ms",
        "µs raw",
        "µs -idle",
        "× SET",
        "cmd/bat",
        "ops/bat",
        "cmd/op",
        "lim µs"
    );
    let row = |t: &mut String, p: &Phase, d: Option<&Delta>, secs: f64| {
        let (cpb, opb, cpo) = d.map_or(("-".into(), "-".into(), "-".into()), |d| {
            (
                format!("{:.2}", ratio(d.commands as f64, d.batches as f64)),
                format!("{:.2}", ratio(p.ops as f64, d.batches as f64)),
                format!("{:.2}", ratio(d.commands as f64, p.ops as f64)),
            )
        });
        let _ = writeln!(
            t,
            "{:<27} {:>8} {:>8.0} {:>7.2} {:>7.2} {:>8.2} {:>8.2} {:>6.2} {:>7} {:>7} {:>7} {:>8.1}",
            p.name,
            p.ops,
            ratio(p.ops as f64, secs),
            p.p50_ms,
            p.p99_ms,
            p.redis_raw_us,
            p.redis_us,
            ratio(p.redis_us, set.redis_us),
            cpb,
            opb,
            cpo,
            p.limiter_us
        );
    };
    row(&mut t, &set, None, set_delta.secs);
    for p in closed_phases {
        row(&mut t, p, Some(&p.delta), p.delta.secs);
    }
    row(&mut t, &hb_only, Some(&d_hb), d_hb.secs);
    row(&mut t, &mixed_hb, None, d_mixed.secs);
    let _ = writeln!(
        t,
        "{:<27} {:>8} {:>8.0} {:>7.2} {:>7.2} {:>8.2} {:>8.2} {:>6.2} {:>7.2} {:>7} {:>7.2} {:>8.1}",
        mixed_play.name,
        m_play,
        ratio(m_play as f64, d_mixed.secs),
        mixed_play.p50_ms,
        mixed_play.p99_ms,
        mixed_play.redis_raw_us,
        mixed_play.redis_us,
        open_play_ratio,
        mixed_depth,
        format!(
            "{:.2}+{:.2}",
            ratio(m_hb as f64, d_mixed.batches as f64),
            ratio(m_play as f64, d_mixed.batches as f64)
        ),
        cmds_per_cycle,
        mixed_play.limiter_us
    );
    let _ = writeln!(
        t,
        "  (mixed: heartbeats charged at the heartbeat-only cost, the rest of the phase's CPU over its play-starts, each with its graceful stop; ops/bat = heartbeats+play-starts per batch; Redis main thread {:.1} % busy heartbeats alone, {:.1} % mixed)",
        100.0 * ratio(d_hb.redis_main, d_hb.secs),
        100.0 * ratio(d_mixed.redis_main, d_mixed.secs)
    );
    let met = |ok: bool| if ok { "met" } else { "NOT met" };
    let _ = writeln!(
        t,
        "targets, closed loop of {} against redis-benchmark -c {} SET ({:.2} µs, {:.0}/s): heartbeat {:.2}× (≤ 0.5×: {}), play-start {:.2}× (≤ 2×: {}); open loop: heartbeat {:.2}×, play-start+stop {:.2}×",
        args.clients,
        args.clients,
        set.redis_us,
        set_rps,
        hb_ratio,
        met(hb_ratio <= 0.5),
        play_ratio,
        met(play_ratio <= 2.0),
        open_hb_ratio,
        open_play_ratio
    );
    let _ = writeln!(
        t,
        "store round trip: PING (own connection, under the heartbeat traffic) p50 {:.0} µs, p99 {:.0} µs ({} probes); limiter's batch cycle {:.0} µs = W + {:.0} µs; Redis {:.0} B per live stream ({} streams)",
        ping_rtt_us,
        quantile(pings, 0.99),
        pings.len(),
        batch_cycle_us,
        limiter_rtt_us,
        bytes_per_stream,
        loaded
    );
    if let Some((mean, spread)) = bg_alone {
        let _ = writeln!(
            t,
            "\nBackground load (--background-busy {:.2}): {} connections, GET/SET bg:<n> one at a time, paced at {:.0}/s (calibrated: {}); {} errors",
            bg_target,
            args.background_connections,
            bg_rate,
            bg_calibration
                .iter()
                .map(|c| format!(
                    "{}/s → {:.1} %",
                    c["achieved_per_sec"],
                    c["busy"].as_f64().unwrap_or(0.0) * 100.0
                ))
                .collect::<Vec<_>>()
                .join(", "),
            bg_errors
        );
        let _ = writeln!(
            t,
            "{:<33} {:>6} {:>7} {:>9} {:>8} {:>11} {:>10}",
            "window", "secs", "busy %", "bg ops/s", "lim ops", "marginal ms", "µs/op marg"
        );
        for (name, secs, busy, ops, rate, marg) in bg_rows {
            let _ = writeln!(
                t,
                "{:<33} {:>6.2} {:>7.1} {:>9.0} {:>8} {:>11.2} {:>10}",
                name,
                secs,
                busy * 100.0,
                rate,
                ops,
                marg * 1e3,
                if *ops > 0 {
                    format!("{:.2}", per_op_us(*marg, *ops))
                } else {
                    "-".into()
                }
            );
        }
        let (m_hb_us, m_play_us) = marginal.unwrap_or_default();
        let _ = writeln!(
            t,
            "marginal Redis µs per heartbeat {m_hb_us:.2} ({:.2}× SET; plain {:.2} with the background in, {:.2} on the idle shard's subtraction), per play-start+stop {m_play_us:.2} ({:.2}× SET); background alone {:.1} ms/s ({}: spread {:.1} ms/s; its cost per background operation moves a heartbeat's by ± {:.2} µs; each round's windows net of the idle and of their background operations at the cost per operation of the background-alone windows either side)",
            ratio(m_hb_us, set.redis_us),
            hb_only.redis_raw_us,
            hb_only.redis_us,
            ratio(m_play_us, set.redis_us),
            mean * 1e3,
            alone_rates
                .iter()
                .map(|r| format!("{:.1}", r * 1e3))
                .collect::<Vec<_>>()
                .join(", "),
            spread * 1e3,
            hb_noise_us.unwrap_or(0.0)
        );
    }
    let _ = writeln!(
        t,
        "\nFleet projection to the seed's peak (model; inputs, then outputs)"
    );
    fn kv(t: &mut String, k: impl std::fmt::Display, v: String) {
        let _ = writeln!(t, "  {k:<62} {v}");
    }
    let alt = if marginal.is_some() {
        "plain, background included"
    } else {
        "without idle subtraction"
    };
    kv(
        &mut t,
        "peak heartbeats/s, play-starts/s, stops/s, streams (seed)",
        format!(
            "{:.0}, {:.0}, {:.0}, {:.0}",
            args.peak_heartbeats, args.peak_play_starts, args.peak_stops, args.peak_streams
        ),
    );
    kv(
        &mut t,
        "shards S, limiter processes P × lanes L, batch window W",
        format!(
            "{}, {} × {}, {:?}",
            args.fleet_shards, args.fleet_processes, args.fleet_lanes, window
        ),
    );
    kv(
        &mut t,
        "shard CPU budget (main thread)",
        format!("{:.0} %", args.shard_cpu_budget * 100.0),
    );
    kv(
        &mut t,
        "per (process, shard) pair: heartbeats/s, play-starts/s",
        format!("{hb_pair:.0}, {play_pair:.0}"),
    );
    kv(
        &mut t,
        format!(
            "  commands/s (×{cmds_per_hb:.2} per heartbeat, ×{cmds_per_cycle:.2} per start+stop)"
        ),
        format!("{cmd_pair:.0}"),
    );
    kv(
        &mut t,
        "  round trip RTT (limiter's batch cycle - W; PING p50)",
        format!(
            "{rtt_us:.0} µs{}; {ping_rtt_us:.0} µs",
            if queue_never_idle {
                ""
            } else {
                " (PING: queue idled)"
            }
        ),
    );
    kv(
        &mut t,
        "  expected depth max(1 + rate·W, rate·(W + RTT)) (with PING)",
        format!("{depth_model:.2} commands/batch ({depth_model_ping:.2})"),
    );
    kv(
        &mut t,
        format!(
            "  measured depth (open loop at {:.0} hb/s, {:.0} plays/s per limiter)",
            hb_rate_proc, play_rate_proc
        ),
        format!(
            "{mixed_depth:.2} commands/batch{}",
            if rates_match {
                ""
            } else {
                " (open loop NOT at the model's rates: cost is at this depth)"
            }
        ),
    );
    kv(
        &mut t,
        if marginal.is_some() {
            format!(
                "Redis µs per heartbeat, per play-start+stop: MARGINAL at {:.0} % busy",
                bg_target * 100.0
            )
        } else {
            "Redis µs per heartbeat, per play-start+stop at that depth".to_owned()
        },
        format!("{hb_cost:.2}, {play_cost:.2}"),
    );
    kv(
        &mut t,
        format!("Redis main-thread cores at peak ({alt})"),
        format!("{redis_cores:.1} ({redis_cores_raw:.1})"),
    );
    kv(
        &mut t,
        format!(
            "shards needed at {:.0} % ({alt})",
            args.shard_cpu_budget * 100.0
        ),
        format!(
            "{shards_needed:.0} ({shards_needed_raw:.0}) — {} S = {}; {:.1} % busy each at S",
            if shards_needed <= shards {
                "fits"
            } else {
                "does NOT fit"
            },
            args.fleet_shards,
            100.0 * redis_cores / shards
        ),
    );
    kv(
        &mut t,
        "limiter CPU µs per heartbeat, per play-start+stop",
        format!("{:.1}, {:.1}", hb_only.limiter_us, mixed_play.limiter_us),
    );
    kv(
        &mut t,
        format!(
            "limiter cores at peak, at this run's {:.0} requests/s a process (P × L available)",
            hb_rate_proc + 2.0 * play_rate_proc
        ),
        format!(
            "{limiter_cores:.0} ({:.0}; {:.0} % busy)",
            procs * lanes,
            100.0 * limiter_cores / (procs * lanes)
        ),
    );
    kv(
        &mut t,
        "  (conservative model above: a stop for every play-start)",
        String::new(),
    );
    kv(
        &mut t,
        format!(
            "seed's model, {:.0} stops/s: Redis cores, shards at {:.0} %, limiter cores",
            args.peak_stops,
            args.shard_cpu_budget * 100.0
        ),
        format!(
            "{:.1}, {:.0} ({}), {:.0}  (a play-start and a stop each at half their measured sum)",
            seed.redis_cores,
            seed.shards_needed,
            if seed.shards_needed <= shards {
                "fits S"
            } else {
                "does NOT fit S"
            },
            seed.limiter_cores
        ),
    );
    kv(
        &mut t,
        "Redis RAM at peak streams (per shard)",
        format!(
            "{:.1} GB ({:.2} GB) at {bytes_per_stream:.0} B/stream",
            redis_ram / 1e9,
            redis_ram / shards / 1e9
        ),
    );
    kv(
        &mut t,
        "limiter RAM (RSS per process here × P)",
        format!(
            "{:.1} GB ({:.0} MB per process)",
            rss_mean * procs / 1e9,
            rss_mean / 1e6
        ),
    );
    t
}
