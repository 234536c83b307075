//! The run, in order: the closed loop and its SET baseline, the open loop's population and
//! idle windows, the open loop's rounds (with the background load when asked), the store
//! round trip, the account check, into `Measured`; nothing here is attributed.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use rand::random_range;
use serde_json::json;
use tokio::sync::watch;

use super::super::common::{load, progress, round2, run_tag};
use super::args::{DEFAULT_BATCH_WINDOW, FleetArgs};
use super::background::{Background, calibrate};
use super::measured::Measured;
use super::meter::{Delta, Meter, add_calls, idle_window};
use super::numbers::{ratio, round3, summaries};
use super::probes::{host_port, ping_probe, redis_benchmark};
use super::traffic::{Shared, closed_loop, households, player, verify_account};
use crate::api::Api;
use crate::client::HttpClient;
use crate::procs::{RedisStats, Stack, process_rss_bytes};
use crate::stats::{OpSummary, Recorder};

pub(super) async fn measure(
    args: &FleetArgs,
    api: &Api,
    stack: &Stack,
) -> anyhow::Result<Measured> {
    let common = &args.common;
    let spawned = stack.redis.is_some();
    let window = common.batch_window.unwrap_or(DEFAULT_BATCH_WINDOW);
    let Some(redis_url) = stack.redis_url.clone() else {
        bail!(
            "fleet measures Redis's INFO cpu: use --spawn, or --redis URL (the one shard the --url limiters use)"
        );
    };
    let (host, port) = host_port(&redis_url)?;
    let limiters = stack.urls.len();
    let mut meter = Meter {
        stack,
        stats: RedisStats::connect(&redis_url)?,
        metrics: stack
            .urls
            .iter()
            .map(|u| HttpClient::new(std::slice::from_ref(u), 1))
            .collect::<anyhow::Result<_>>()?,
    };
    meter
        .stats
        .main_thread_cpu_seconds()
        .context("fleet needs Redis 7.0 or newer (INFO cpu of the main thread)")?;
    let path = meter.store_path(common.redis_module.is_some()).await?;
    println!("store path of every limiter's shard: {path}");

    // The model's rates per (limiter process, shard) pair, and the open loop's at that pair
    // rate for each limiter of this run.
    let pairs = (args.fleet_processes.max(1) * args.fleet_shards.max(1)) as f64;
    let hb_pair = args.peak_heartbeats / pairs;
    let play_pair = args.peak_play_starts / pairs;
    let every = args.heartbeat_every.as_secs_f64();
    let players = args
        .players
        .unwrap_or((hb_pair * limiters as f64 * every).round() as usize)
        .max(1);
    let play_rate = args.play_rate.unwrap_or(play_pair * limiters as f64);
    if spawned && common.ttl < args.heartbeat_every.mul_f64(1.1) + Duration::from_secs(1) {
        bail!(
            "--ttl {:?} must outlast --heartbeat-every {:?} + 10 % jitter",
            common.ttl,
            args.heartbeat_every
        );
    }
    let tag = run_tag();
    let main = api.rec.clone();
    let phase_api = |rec: &Arc<Recorder>| Api {
        http: api.http.clone(),
        rec: rec.clone(),
    };
    let mut measured = Duration::ZERO;
    let mut ops_out: Vec<OpSummary> = Vec::new();

    // ---- 1. closed loop: heartbeats, the SET baseline, play-starts.
    eprintln!("fleet: loading {} closed-loop leases", args.closed_leases);
    let load_rec = Arc::new(Recorder::new());
    let t = tag.clone();
    let ids = load(
        &phase_api(&load_rec),
        args.closed_leases,
        common.load_workers(),
        Arc::new(move |i: usize| (format!("fh-{t}-{i}"), "dev-0".to_owned(), "premium")),
    )
    .await;
    main.absorb(&load_rec, "closed-loop load");
    let pool: Arc<Vec<(String, String)>> = Arc::new(
        ids.into_iter()
            .enumerate()
            .filter(|(_, id)| !id.is_empty())
            .map(|(i, id)| (format!("fh-{tag}-{i}"), id))
            .collect(),
    );
    if pool.is_empty() {
        bail!("fleet: no closed-loop lease was granted");
    }

    eprintln!(
        "fleet: baseline redis-benchmark -c {} -n {} -t set",
        args.clients, args.baseline_requests
    );
    let s0 = meter.snap().await?;
    meter.stats.reset()?;
    let (h, c, n) = (host.clone(), args.clients, args.baseline_requests);
    let (set_rps, _) =
        tokio::task::spawn_blocking(move || redis_benchmark(&h, port, c, n)).await??;
    let s1 = meter.snap().await?;
    let sets = meter.take_commandstats()?.get("set").copied().unwrap_or(0);
    let set_delta = Delta::between(&s0, &s1);

    let mut closed = Vec::new();
    for (name, heartbeat) in [("heartbeat", true), ("play_start", false)] {
        eprintln!(
            "fleet: closed loop, {} clients, {name}, {:?}",
            args.clients, args.closed_step
        );
        let rec = Arc::new(Recorder::new());
        let ticker = progress(rec.clone(), common, "fleet closed", Some(args.closed_step));
        let a = meter.snap().await?;
        closed_loop(
            &phase_api(&rec),
            args.clients,
            args.closed_step,
            heartbeat.then(|| pool.clone()),
            &tag,
            args.closed_accounts,
        )
        .await;
        let b = meter.snap().await?;
        ticker.abort();
        let cmds = meter.take_commandstats()?;
        let d = Delta::between(&a, &b);
        measured += Duration::from_secs_f64(d.secs);
        let ops = summaries(&rec, d.secs, "closed");
        main.absorb(&rec, &format!("closed {name}"));
        closed.push((name, d, rec.count(name), ops.clone(), cmds));
        ops_out.extend(ops);
    }

    // ---- 2. the open loop's population, its memory, and the idle window.
    if spawned {
        meter.stats.flushall()?;
    }
    let (hs, ps) = households(&tag, players);
    let mem_before = meter.stats.used_memory()?;
    eprintln!(
        "fleet: loading {players} players in {} households",
        hs.len()
    );
    let load_rec = Arc::new(Recorder::new());
    let who: Arc<Vec<(String, String, &'static str)>> = Arc::new(
        ps.iter()
            .map(|p| {
                let h = &hs[p.household];
                (h.name.clone(), format!("p{}-g0", p.slot), h.plan)
            })
            .collect(),
    );
    let t_load = Instant::now();
    let ids = load(
        &phase_api(&load_rec),
        players,
        common.load_workers(),
        Arc::new(move |i: usize| who[i].clone()),
    )
    .await;
    let load_secs = t_load.elapsed().as_secs_f64();
    main.absorb(&load_rec, "open-loop load");
    let loaded = ids.iter().filter(|id| !id.is_empty()).count();
    let mem_after = meter.stats.used_memory()?;
    let bytes_per_stream = mem_after.saturating_sub(mem_before) as f64 / loaded.max(1) as f64;
    for (p, id) in ps.iter().zip(ids) {
        *p.stream.lock().unwrap_or_else(|e| e.into_inner()) = id;
    }

    eprintln!("fleet: idle {:?}", args.idle);
    let idle_before = idle_window(&mut meter, args.idle).await?;
    // The background load (if asked for): calibrated, then a window of it alone.
    let bg_target = args.background_busy.clamp(0.0, 0.95);
    let (bg, bg_calibration, bg_before) = if bg_target > 0.0 {
        eprintln!(
            "fleet: background load on {} connections, target {:.0} % busy",
            args.background_connections,
            bg_target * 100.0
        );
        let bg = Background::start(&redis_url, args.background_connections).await?;
        let steps = calibrate(&mut meter, &bg, bg_target, args.background_calibrate).await?;
        tokio::time::sleep(args.background_calibrate / 4).await;
        eprintln!("fleet: background alone {:?}", args.background_alone);
        let o0 = bg.ops();
        let d = idle_window(&mut meter, args.background_alone).await?;
        let n = bg.ops() - o0;
        (Some(bg), steps, Some((d, n)))
    } else {
        (None, Vec::new(), None)
    };
    let bg_ops = || bg.as_ref().map_or(0, Background::ops);
    // (name, delta, background ops, limiter ops, round: 0 for the background alone).
    let mut bg_windows: Vec<(String, Delta, u64, u64, usize)> = Vec::new();
    // The background-alone windows in order: before round 1, between rounds, after the last.
    let mut alone: Vec<Delta> = Vec::new();
    if let Some((d, n)) = bg_before {
        bg_windows.push(("background alone, before".into(), d, n, 0, 0));
        alone.push(d);
    }

    // ---- 3. the open loop: rounds of heartbeats alone, then heartbeats and play-starts.
    let live: Arc<Vec<usize>> = Arc::new(
        (0..ps.len())
            .filter(|&i| {
                !ps[i]
                    .stream
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .is_empty()
            })
            .collect(),
    );
    let warmup = Arc::new(Recorder::new());
    let shared = Arc::new(Shared {
        households: hs,
        players: ps,
        api: Mutex::new(phase_api(&warmup)),
        interval: args.heartbeat_every,
        pause: watch::channel(false).0,
        shift_us: AtomicU64::new(0),
    });
    let (stop_tx, stop_rx) = watch::channel(false);
    let t_open = Instant::now() + Duration::from_millis(200);
    let tasks: Vec<_> = live
        .iter()
        .map(|&i| {
            let first = t_open + args.heartbeat_every.mul_f64(random_range(0.0..1.0f64));
            tokio::spawn(player(shared.clone(), i, first, stop_rx.clone()))
        })
        .collect();
    tokio::time::sleep_until(t_open.into()).await;
    meter.stats.reset()?;

    let hb_rec = Arc::new(Recorder::new());
    let mixed_rec = Arc::new(Recorder::new());
    let tail_rec = Arc::new(Recorder::new());
    let skipped = Arc::new(AtomicU64::new(0));
    let rounds = args.rounds.max(1);
    let (mut d_hb, mut d_mixed) = (Delta::default(), Delta::default());
    let (mut cmds_hb, mut cmds_mixed) = (BTreeMap::new(), BTreeMap::new());
    let mut windows = Vec::new();
    for round in 1..=rounds {
        if round > 1
            && let Some(bg) = &bg
        {
            // The background alone between rounds: the players hold their heartbeats and
            // resume on a schedule moved by the pause.
            eprintln!(
                "fleet: background alone {:?} (players paused)",
                args.background_alone
            );
            let t0 = Instant::now();
            shared.pause.send_replace(true);
            tokio::time::sleep(Duration::from_millis(100)).await; // in-flight calls return
            let o0 = bg.ops();
            let d = idle_window(&mut meter, args.background_alone).await?;
            let n = bg.ops() - o0;
            shared
                .shift_us
                .fetch_add(t0.elapsed().as_micros() as u64, Ordering::AcqRel);
            shared.pause.send_replace(false);
            tokio::time::sleep(Duration::from_millis(100)).await;
            bg_windows.push((
                format!("background alone, after round {}", round - 1),
                d,
                n,
                0,
                0,
            ));
            alone.push(d);
        }
        eprintln!(
            "fleet: open loop round {round}/{rounds}, {} players every {:?}: heartbeats alone {:?}, then + {play_rate:.0} play-starts/s {:?}",
            live.len(),
            args.heartbeat_every,
            args.heartbeat_only,
            args.duration
        );
        // Heartbeats alone.
        shared.phase(&hb_rec);
        let ticker = progress(
            hb_rec.clone(),
            common,
            "fleet heartbeats",
            Some(args.heartbeat_only),
        );
        let hb0 = hb_rec.count("heartbeat");
        let a = meter.snap().await?;
        let bg_a = bg_ops();
        tokio::time::sleep(args.heartbeat_only).await;
        shared.phase(&mixed_rec);
        let b = meter.snap().await?;
        let bg_b = bg_ops();
        ticker.abort();
        let hb_n = hb_rec.count("heartbeat") - hb0;
        add_calls(&mut cmds_hb, meter.take_commandstats()?);
        let d = Delta::between(&a, &b);
        d_hb.add(&d);
        windows.push(
            json!({"round": round, "phase": "heartbeats", "secs": round2(d.secs),
            "heartbeats": hb_n, "redis_main_cpu_ms": round2(d.redis_main * 1e3),
            "redis_main_thread_busy": round3(ratio(d.redis_main, d.secs)),
            "background_ops": bg_b - bg_a,
            "batches": d.batches, "commands": d.commands}),
        );
        if bg.is_some() {
            bg_windows.push((
                format!("heartbeats alone, round {round}"),
                d,
                bg_b - bg_a,
                hb_n,
                round,
            ));
        }

        // Heartbeats and play-starts.
        let ticker = progress(
            mixed_rec.clone(),
            common,
            "fleet mixed",
            Some(args.duration),
        );
        let (m_hb0, m_pl0) = (mixed_rec.count("heartbeat"), mixed_rec.count("play_start"));
        let gen_stop = Arc::new(AtomicBool::new(false));
        let generator = {
            let (shared, live, gen_stop, skipped) = (
                shared.clone(),
                live.clone(),
                gen_stop.clone(),
                skipped.clone(),
            );
            tokio::spawn(async move {
                let start = Instant::now();
                let mut issued = 0u64;
                let mut tick = tokio::time::interval(Duration::from_millis(5));
                while !gen_stop.load(Ordering::Relaxed) && !live.is_empty() {
                    tick.tick().await;
                    let elapsed = start.elapsed().as_secs_f64();
                    while (issued as f64) < play_rate * elapsed {
                        issued += 1;
                        let p = &shared.players[live[random_range(0..live.len())]];
                        if p.pending.swap(true, Ordering::AcqRel) {
                            skipped.fetch_add(1, Ordering::Relaxed);
                        } else {
                            p.restart.notify_one();
                        }
                    }
                }
            })
        };
        tokio::time::sleep(args.duration).await;
        gen_stop.store(true, Ordering::Relaxed);
        let _ = generator.await;
        // The plays already asked for finish in this window.
        let drain = Instant::now() + Duration::from_secs(5);
        while Instant::now() < drain
            && shared
                .players
                .iter()
                .any(|p| p.pending.load(Ordering::Acquire))
        {
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
        shared.phase(&tail_rec);
        let c = meter.snap().await?;
        let bg_c = bg_ops();
        ticker.abort();
        add_calls(&mut cmds_mixed, meter.take_commandstats()?);
        let (m_hb, m_pl) = (
            mixed_rec.count("heartbeat") - m_hb0,
            mixed_rec.count("play_start") - m_pl0,
        );
        let d = Delta::between(&b, &c);
        d_mixed.add(&d);
        windows.push(
            json!({"round": round, "phase": "mixed", "secs": round2(d.secs),
            "heartbeats": m_hb, "play_starts": m_pl,
            "redis_main_cpu_ms": round2(d.redis_main * 1e3),
            "redis_main_thread_busy": round3(ratio(d.redis_main, d.secs)),
            "background_ops": bg_c - bg_b,
            "batches": d.batches, "commands": d.commands}),
        );
        if bg.is_some() {
            bg_windows.push((
                format!("mixed, round {round}"),
                d,
                bg_c - bg_b,
                m_hb + m_pl,
                round,
            ));
        }
    }

    // ---- 4. the store round trip under the same traffic (heartbeats), then stop.
    shared.phase(&tail_rec);
    let url = redis_url.clone();
    let span = args.probe;
    let mut pings = tokio::task::spawn_blocking(move || ping_probe(&url, span)).await??;
    pings.sort_unstable();
    let rss: Vec<u64> = stack
        .limiter_pids()
        .into_iter()
        .filter_map(process_rss_bytes)
        .collect();
    let _ = stop_tx.send(true);
    for t in tasks {
        let _ = t.await;
    }
    let mut bg_errors = 0;
    let bg_rate = bg.as_ref().map_or(0.0, Background::rate);
    if let Some(bg) = bg {
        eprintln!("fleet: background alone again {:?}", args.background_alone);
        let o0 = bg.ops();
        let d = idle_window(&mut meter, args.background_alone).await?;
        let n = bg.ops() - o0;
        bg_windows.push(("background alone, after".into(), d, n, 0, 0));
        alone.push(d);
        bg_errors = bg.stop().await;
        if bg_errors > 0 {
            main.fail_n("background: command failed", bg_errors);
        }
    }
    eprintln!("fleet: idle again {:?}", args.idle);
    let idle_after = idle_window(&mut meter, args.idle).await?;
    let mut idle = idle_before;
    idle.add(&idle_after);
    let idle_redis = ratio(idle.redis_main, idle.secs);
    let idle_limiter = ratio(idle.limiter, idle.secs);

    // ---- verification: sampled accounts hold exactly their players' leases, within the cap.
    let verify_rec = Arc::new(Recorder::new());
    let verify = phase_api(&verify_rec);
    let mut sample: Vec<usize> = (0..shared.households.len()).collect();
    for i in (1..sample.len()).rev() {
        sample.swap(i, random_range(0..=i));
    }
    sample.truncate(args.verify_accounts);
    for chunk in sample.chunks(16) {
        let checks: Vec<_> = chunk
            .iter()
            .map(|&h| tokio::spawn(verify_account(verify.clone(), shared.clone(), h)))
            .collect();
        for c in checks {
            let _ = c.await;
        }
    }
    for (rec, what) in [
        (&warmup, "open loop (before the first window)"),
        (&hb_rec, "open heartbeats"),
        (&mixed_rec, "open mixed"),
        (&tail_rec, "open loop (probe)"),
        (&verify_rec, "verify"),
    ] {
        main.absorb(rec, what);
    }

    // ---- figures.
    measured += Duration::from_secs_f64(d_hb.secs + d_mixed.secs);
    let hb_ops = summaries(&hb_rec, d_hb.secs, "open");
    let mixed_ops = summaries(&mixed_rec, d_mixed.secs, "mixed");
    ops_out.extend(hb_ops.iter().cloned());
    ops_out.extend(mixed_ops.iter().cloned());
    Ok(Measured {
        window,
        limiters,
        hb_pair,
        play_pair,
        every,
        play_rate,
        set_rps,
        sets,
        set_delta,
        closed,
        shared,
        live,
        load_secs,
        bytes_per_stream,
        loaded,
        idle_before,
        idle_after,
        idle,
        idle_redis,
        idle_limiter,
        bg_target,
        bg_calibration,
        bg_windows,
        alone,
        bg_rate,
        bg_errors,
        pings,
        rss,
        d_hb,
        d_mixed,
        cmds_hb,
        cmds_mixed,
        windows,
        rounds,
        hb_rec,
        mixed_rec,
        skipped,
        measured,
        hb_ops,
        mixed_ops,
        ops_out,
    })
}
