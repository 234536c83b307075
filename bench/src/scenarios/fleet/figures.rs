//! The report's figures: the baseline, the closed and open loops, the background load and the
//! projection as JSON.

use std::sync::atomic::Ordering;

use serde_json::{Value, json};

use super::super::common::round2;
use super::args::FleetArgs;
use super::attribution::Costs;
use super::measured::Measured;
use super::numbers::{latency, per_op_us, quantile, ratio, round3};
use super::projection::{Projection, expected_depth};
use crate::stats::Report;

pub(super) fn record(
    report: &mut Report,
    args: &FleetArgs,
    m: &Measured,
    c: &Costs,
    p: &Projection,
) {
    let &Measured {
        window,
        limiters,
        hb_pair,
        play_pair,
        every,
        play_rate,
        set_rps,
        sets,
        set_delta,
        ref closed,
        ref shared,
        ref live,
        load_secs,
        bytes_per_stream,
        idle_before,
        idle_after,
        idle,
        idle_redis,
        idle_limiter,
        bg_target,
        ref bg_calibration,
        bg_rate,
        bg_errors,
        ref pings,
        ref rss,
        d_hb,
        d_mixed,
        ref cmds_hb,
        ref cmds_mixed,
        ref windows,
        rounds,
        ref skipped,
        ref hb_ops,
        ref mixed_ops,
        ..
    } = m;
    let &Costs {
        set,
        ref closed_phases,
        hb_only,
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
        rtt_us,
        rtt_source,
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
        ref cost_basis,
        ..
    } = p;
    let mut closed_json = json!({});
    for ((name, d, count, ops, cmds), p) in closed.iter().zip(closed_phases) {
        closed_json[*name] = json!({
            "ops": count, "secs": round2(d.secs),
            "redis_main_us_per_op": round2(p.redis_raw_us),
            "redis_main_us_per_op_idle_subtracted": round2(p.redis_us),
            "ratio_to_set": round3(ratio(p.redis_us, set.redis_us)),
            "limiter_cpu_us_per_op": round2(p.limiter_us),
            "batches": d.batches, "commands": d.commands,
            "commands_per_batch": round2(ratio(d.commands as f64, d.batches as f64)),
            "ops_per_batch": round2(ratio(*count as f64, d.batches as f64)),
            "commands_per_op": round2(ratio(d.commands as f64, *count as f64)),
            "redis_commands": cmds,
            "latency": latency(ops, &format!("closed.{name}")),
        });
    }
    let per_proc = |x: f64, secs: f64| ratio(x, secs * limiters as f64);
    let background_json = bg_alone.map_or(Value::Null, |(mean, spread)| {
        json!({
            "target_busy": bg_target,
            "connections": args.background_connections,
            "traffic": "GET bg:<n> (one in ten SET), n < 10,000, one command at a time per connection",
            "calibration": bg_calibration,
            "rate_per_sec": bg_rate.round(),
            "errors": bg_errors,
            "alone_redis_main_ms_per_sec": round3(mean * 1e3),
            "alone_redis_main_ms_per_sec_windows": alone_rates.iter().map(|r| round3(r * 1e3)).collect::<Vec<_>>(),
            "alone_spread_ms_per_sec": round3(spread * 1e3),
            "marginal_base": "each round's windows minus the mean of the background-alone windows before and after that round (players paused between rounds)",
            "heartbeat_marginal_us_moved_by_half_the_spread": hb_noise_us.map(round2),
            "windows": bg_rows.iter().map(|(name, secs, busy, ops, rate, marg)| json!({
                "window": name, "secs": round2(*secs), "redis_main_thread_busy": round3(*busy),
                "background_ops_per_sec": rate.round(), "limiter_ops": ops,
                "marginal_redis_main_ms": round2(marg * 1e3),
            })).collect::<Vec<_>>(),
        })
    });

    // JSON.
    let open_json = json!({
        "limiters": limiters,
        "players": live.len(),
        "households": shared.households.len(),
        "heartbeat_every_sec": every,
        "play_rate_target": play_rate,
        "load_secs": round2(load_secs),
        "redis_bytes_per_live_stream": round2(bytes_per_stream),
        "idle": {"secs": round2(idle.secs),
                 "redis_main_thread_ms_per_sec": round3(idle_redis * 1e3),
                 "redis_main_thread_ms_per_sec_before": round3(ratio(idle_before.redis_main, idle_before.secs) * 1e3),
                 "redis_main_thread_ms_per_sec_after": round3(ratio(idle_after.redis_main, idle_after.secs) * 1e3),
                 "limiter_cpu_ms_per_sec": round3(idle_limiter * 1e3)},
        "rounds": rounds,
        "windows": windows,
        "heartbeat_only": {
            "ops": hb_count, "secs": round2(d_hb.secs),
            "heartbeats_per_sec_per_limiter": round2(per_proc(hb_count as f64, d_hb.secs)),
            "redis_main_us_per_heartbeat": round2(hb_only.redis_raw_us),
            "redis_main_us_per_heartbeat_idle_subtracted": round2(hb_only.redis_us),
            "redis_main_us_per_heartbeat_marginal": marginal.map(|m| round2(m.0)),
            "ratio_to_set": round3(open_hb_ratio),
            "limiter_cpu_us_per_heartbeat": round2(hb_only.limiter_us),
            "redis_main_thread_busy": round3(ratio(d_hb.redis_main, d_hb.secs)),
            "batches": d_hb.batches, "commands": d_hb.commands,
            "commands_per_batch": round2(ratio(d_hb.commands as f64, d_hb.batches as f64)),
            "heartbeats_per_batch": round2(ratio(hb_count as f64, d_hb.batches as f64)),
            "commands_per_heartbeat": round2(cmds_per_hb),
            "commands_per_sec_per_limiter": round2(hb_cmd_rate),
            "expected_commands_per_batch": round2(expected_depth(window, hb_cmd_rate, rtt_us)),
            "redis_commands": cmds_hb,
            "latency": latency(hb_ops, "open.heartbeat"),
        },
        "mixed": {
            "secs": round2(d_mixed.secs),
            "heartbeats": m_hb, "play_starts": m_play, "releases": m_release,
            "restarts_skipped_busy": skipped.load(Ordering::Relaxed),
            "heartbeats_per_sec_per_limiter": round2(hb_rate_proc),
            "play_starts_per_sec_per_limiter": round2(play_rate_proc),
            "attribution": "subtraction: mixed-phase CPU minus its heartbeats at the heartbeat-only phase's cost per heartbeat; the rest over its play-starts (each with its graceful stop)",
            "redis_main_us_per_op_all": round2(per_op_us(d_mixed.redis_main, m_hb + m_play + m_release)),
            "redis_main_us_per_play_start_cycle": round2(mixed_play.redis_raw_us),
            "redis_main_us_per_play_start_cycle_idle_subtracted": round2(mixed_play.redis_us),
            "redis_main_us_per_play_start_cycle_marginal": marginal.map(|m| round2(m.1)),
            "ratio_to_set": round3(open_play_ratio),
            "limiter_cpu_us_per_play_start_cycle": round2(mixed_play.limiter_us),
            "redis_main_thread_busy": round3(ratio(d_mixed.redis_main, d_mixed.secs)),
            "batches": d_mixed.batches, "commands": d_mixed.commands,
            "commands_per_batch": round2(mixed_depth),
            "heartbeats_per_batch": round2(ratio(m_hb as f64, d_mixed.batches as f64)),
            "play_starts_per_batch": round2(ratio(m_play as f64, d_mixed.batches as f64)),
            "commands_per_play_start_cycle": round2(cmds_per_cycle),
            "commands_per_sec_per_limiter": round2(mixed_cmd_rate),
            "expected_commands_per_batch": round2(expected_depth(window, mixed_cmd_rate, rtt_us)),
            "redis_commands": cmds_mixed,
            "latency": {"heartbeat": latency(mixed_ops, "mixed.heartbeat"),
                        "play_start": latency(mixed_ops, "mixed.play_start"),
                        "release": latency(mixed_ops, "mixed.release")},
        },
        "store_round_trip": {"method": "PING on a connection of its own every 10 ms, after the mixed window, same traffic",
                             "count": pings.len(), "p50_us": ping_rtt_us,
                             "p99_us": quantile(pings, 0.99)},
        "limiter_rss_bytes": rss,
        "background": background_json,
    });
    let projection = json!({
        "inputs": {
            "peak_heartbeats_per_sec": args.peak_heartbeats,
            "peak_play_starts_per_sec": args.peak_play_starts,
            "peak_stops_per_sec": args.peak_stops,
            "peak_streams": args.peak_streams,
            "shards": args.fleet_shards, "limiter_processes": args.fleet_processes,
            "lanes_per_process": args.fleet_lanes,
            "batch_window_us": window.as_micros() as u64,
            "shard_cpu_budget": args.shard_cpu_budget,
        },
        "per_pair": {
            "heartbeats_per_sec": round2(hb_pair), "play_starts_per_sec": round2(play_pair),
            "commands_per_sec": round2(cmd_pair),
            "round_trip_us": round2(rtt_us),
            "round_trip_source": rtt_source,
            "ping_round_trip_us": ping_rtt_us,
            "limiter_batch_cycle_us": round2(batch_cycle_us),
            "expected_commands_per_batch": round2(depth_model),
            "expected_commands_per_batch_with_ping_round_trip": round2(depth_model_ping),
            "expected_depth_formula": "max(1 + rate x W, rate x (W + round trip)), rate in commands/s",
            "measured_commands_per_batch": round2(mixed_depth),
            "open_loop_rates_match_model": rates_match,
        },
        "redis_main_us_per_heartbeat": round2(hb_cost),
        "redis_main_us_per_play_start_cycle": round2(play_cost),
        "cost_basis": cost_basis,
        "redis_main_cores": round2(redis_cores),
        "redis_main_cores_without_idle_subtraction": round2(redis_cores_raw),
        "shards_needed": shards_needed,
        "shards_needed_without_idle_subtraction": shards_needed_raw,
        "shard_utilisation_at_inputs": round3(redis_cores / shards),
        "fits": shards_needed <= shards,
        "limiter_cpu_us_per_heartbeat": round2(hb_only.limiter_us),
        "limiter_cpu_us_per_play_start_cycle": round2(mixed_play.limiter_us),
        "limiter_cores": round2(limiter_cores),
        "limiter_lane_utilisation": round3(limiter_cores / (procs * lanes)),
        "model": "conservative: a stop for every play-start",
        "seed_model": {
            "stops_per_sec": args.peak_stops,
            "assumption": "a play-start and a stop each cost half their measured sum",
            "redis_main_cores": round2(seed.redis_cores),
            "shards_needed": seed.shards_needed,
            "fits": seed.shards_needed <= shards,
            "limiter_cores": round2(seed.limiter_cores),
        },
        "redis_bytes_per_stream": round2(bytes_per_stream),
        "redis_ram_bytes": redis_ram.round(),
        "redis_ram_bytes_per_shard": (redis_ram / shards).round(),
        "limiter_rss_bytes_per_process": rss_mean.round(),
        "limiter_ram_bytes": (rss_mean * procs).round(),
    });
    report.figure(
        "baseline",
        json!({"tool": format!("redis-benchmark -c {} -n {} -t set", args.clients, args.baseline_requests),
               "sets": sets, "rate_per_sec": set_rps.round(), "secs": round2(set_delta.secs),
               "redis_main_us_per_set": round2(set.redis_raw_us),
               "redis_main_us_per_set_idle_subtracted": round2(set.redis_us)}),
    );
    report.figure("closed", closed_json);
    report.figure("open", open_json);
    report.figure("projection", projection);
    report.figure("heartbeat_vs_set", round3(hb_ratio));
    report.figure("play_start_vs_set", round3(play_ratio));
    report.figure("shards_needed", shards_needed);
    report.figure("limiter_cores_needed", round2(limiter_cores));
    report.figure("batch_window_ms", window.as_secs_f64() * 1e3);
}
