//! `steady`: a live population heartbeating on its interval plus play-starts at a fixed rate.

use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use clap::Args;
use rand::random_range;

use super::common::{
    Common, CostWindow, beat_label, dur, kind, load, progress, round2, run_tag, short,
};
use crate::api::{Api, Beat, Play, PlayArgs};
use crate::procs::Stack;
use crate::stats::{Recorder, Report};

#[derive(Args, Debug, Clone)]
pub struct SteadyArgs {
    #[command(flatten)]
    pub common: Common,
    /// Live leases held (streams per account of a standard plan, see --per-account).
    #[arg(long, default_value_t = 100_000)]
    pub leases: usize,
    #[arg(long, default_value_t = 2)]
    pub per_account: usize,
    /// Measured window after the leases are loaded.
    #[arg(long, default_value = "60s", value_parser = dur)]
    pub duration: Duration,
    /// New plays per second (each: graceful stop of a random stream, then a play from a new
    /// device of the same full account).
    #[arg(long, default_value_t = 5000.0)]
    pub play_rate: f64,
    /// Accounts listed per second to check the cap.
    #[arg(long, default_value_t = 50)]
    pub checks_per_sec: usize,
}

struct Session {
    stream: Mutex<String>,
    generation: AtomicU32,
    busy: AtomicBool,
}

pub async fn steady(
    args: &SteadyArgs,
    api: &Api,
    stack: &Stack,
    report: &mut Report,
) -> anyhow::Result<Duration> {
    let tag = run_tag();
    let per = args.per_account.max(1);
    let account = {
        let tag = tag.clone();
        move |s: usize| format!("st-{tag}-{}", s / per)
    };
    let mut stats = stack.stats();
    let mem_before = stats.as_mut().and_then(|s| s.used_memory().ok());

    // Load the population (recorded apart from the measured window).
    let load_rec = Arc::new(Recorder::new());
    let load_api = Api {
        http: api.http.clone(),
        rec: load_rec.clone(),
    };
    let ticker = progress(load_rec.clone(), &args.common, "steady: loading", None);
    let t_load = Instant::now();
    let names = {
        let account = account.clone();
        Arc::new(move |i: usize| (account(i), format!("d{}-g0", i % per), "standard"))
    };
    let ids = load(&load_api, args.leases, args.common.load_workers(), names).await;
    ticker.abort();
    let load_secs = t_load.elapsed().as_secs_f64();
    let loaded = ids.iter().filter(|id| !id.is_empty()).count();
    report.figure("leases_loaded", loaded);
    report.figure("load_secs", round2(load_secs));
    report.figure("load_rate_per_sec", (loaded as f64 / load_secs).round());
    for (k, v) in load_rec.failures_snapshot() {
        api.rec.fail(&format!("loading: {k}"));
        eprintln!("steady: loading: {k} x{v}");
    }
    if let (Some(before), Some(after)) = (
        mem_before,
        stats.as_mut().and_then(|s| s.used_memory().ok()),
    ) {
        report.figure("redis_used_memory_bytes", after);
        report.figure(
            "redis_bytes_per_live_stream",
            round2((after.saturating_sub(before)) as f64 / loaded.max(1) as f64),
        );
    }
    let interval = load_rec.heartbeat_interval().unwrap_or(30.0);
    let sessions: Arc<Vec<Session>> = Arc::new(
        ids.into_iter()
            .map(|id| Session {
                stream: Mutex::new(id),
                generation: AtomicU32::new(0),
                busy: AtomicBool::new(false),
            })
            .collect(),
    );
    let n = sessions.len();
    let mut order: Vec<usize> = (0..n).collect();
    for i in (1..n).rev() {
        order.swap(i, random_range(0..=i));
    }

    let hb_rate = n as f64 / interval;
    report.figure("heartbeat_interval_sec", interval);
    report.figure("heartbeat_rate_target", hb_rate.round());
    report.figure("play_rate_target", args.play_rate);
    let ticker = progress(api.rec.clone(), &args.common, "steady", Some(args.duration));
    let window = CostWindow::start(stack);
    let start = Instant::now();
    let end = start + args.duration;
    let stop = Arc::new(AtomicBool::new(false));
    let checker = {
        let (api, stop, account) = (api.clone(), stop.clone(), account.clone());
        let per_sec = args.checks_per_sec;
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(Duration::from_millis(100));
            while !stop.load(Ordering::Relaxed) {
                tick.tick().await;
                for _ in 0..per_sec.div_ceil(10) {
                    if n > 0 {
                        api.check_cap(&account(random_range(0..n)), None).await;
                    }
                }
            }
        })
    };
    let skipped = Arc::new(AtomicU64::new(0));
    let (mut hb_issued, mut play_issued, mut cursor) = (0u64, 0u64, 0usize);
    let mut tick = tokio::time::interval(Duration::from_millis(5));
    while !sessions.is_empty() {
        tick.tick().await;
        let now = Instant::now();
        if now >= end {
            break;
        }
        let elapsed = (now - start).as_secs_f64();
        while (hb_issued as f64) < hb_rate * elapsed {
            let intended = start + Duration::from_secs_f64(hb_issued as f64 / hb_rate);
            hb_issued += 1;
            let idx = order[cursor];
            cursor = (cursor + 1) % n;
            let s = &sessions[idx];
            if s.busy.load(Ordering::Acquire) {
                skipped.fetch_add(1, Ordering::Relaxed);
                continue;
            }
            let generation = s.generation.load(Ordering::Acquire);
            let id = s.stream.lock().unwrap_or_else(|e| e.into_inner()).clone();
            let (api, sessions, acct) = (api.clone(), sessions.clone(), account(idx));
            tokio::spawn(async move {
                let beat = api.heartbeat(&acct, &id, intended).await;
                if beat != Beat::Ok && !matches!(beat, Beat::Other(0, _)) {
                    let s = &sessions[idx];
                    let raced = s.busy.load(Ordering::Acquire)
                        || s.generation.load(Ordering::Acquire) != generation;
                    if !raced {
                        api.rec.fail(&format!("heartbeat: {}", beat_label(&beat)));
                    }
                }
            });
        }
        while (play_issued as f64) < args.play_rate * elapsed {
            let intended = start + Duration::from_secs_f64(play_issued as f64 / args.play_rate);
            play_issued += 1;
            let idx = random_range(0..n);
            if sessions[idx].busy.swap(true, Ordering::AcqRel) {
                skipped.fetch_add(1, Ordering::Relaxed);
                continue;
            }
            let (api, sessions, acct) = (api.clone(), sessions.clone(), account(idx));
            tokio::spawn(async move {
                let s = &sessions[idx];
                let old = s.stream.lock().unwrap_or_else(|e| e.into_inner()).clone();
                if !api.release(&acct, &old, intended).await {
                    api.rec.fail("release: not 200");
                }
                let generation = s.generation.fetch_add(1, Ordering::AcqRel) + 1;
                let (device_type, meta) = kind(idx + generation as usize);
                let device = format!("d{}-g{generation}", idx % per);
                let play = PlayArgs::new(&acct, &device, Some("standard"), (device_type, meta));
                match api.play("play_start", &play, Instant::now()).await {
                    Play::Granted { stream_id, .. } => {
                        *s.stream.lock().unwrap_or_else(|e| e.into_inner()) = stream_id
                    }
                    other => api.rec.fail(&format!("play_start: {}", short(&other))),
                }
                s.busy.store(false, Ordering::Release);
            });
        }
    }
    // Let the calls in flight finish before the window closes.
    while sessions.iter().any(|s| s.busy.load(Ordering::Acquire)) {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    tokio::time::sleep(Duration::from_millis(200)).await;
    let measured = start.elapsed();
    stop.store(true, Ordering::Relaxed);
    let _ = checker.await;
    ticker.abort();
    let requests =
        api.rec.count("heartbeat") + api.rec.count("play_start") + api.rec.count("release");
    report.figure("costs", window.end(stack, requests));
    report.figure("skipped_busy", skipped.load(Ordering::Relaxed));
    if let Some(s) = stats.as_mut() {
        report.figure("redis_keys_at_end", s.dbsize().ok());
    }
    Ok(measured)
}
