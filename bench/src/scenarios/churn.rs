//! `churn`: crash-heavy traffic; the time from a client's death to its slot being reusable.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use clap::Args;
use rand::random_range;

use super::common::{Common, beat_label, dur, kind, progress, round2, run_tag, short};
use crate::api::{Api, Beat, Play, PlayArgs};
use crate::stats::{Report, summarize};

#[derive(Args, Debug, Clone)]
pub struct ChurnArgs {
    #[command(flatten)]
    pub common: Common,
    /// Concurrent clients, each on its own basic (1-stream) account.
    #[arg(long, default_value_t = 200)]
    pub clients: usize,
    #[arg(long, default_value = "60s", value_parser = dur)]
    pub duration: Duration,
    /// Share of lifecycles ending in a crash (silence); the rest stop gracefully or are
    /// taken over.
    #[arg(long, default_value_t = 50)]
    pub crash_pct: u32,
    #[arg(long, default_value_t = 30)]
    pub stop_pct: u32,
    /// How often a new device retries the crashed client's slot.
    #[arg(long, default_value = "50ms", value_parser = dur)]
    pub probe_every: Duration,
    /// Tolerance on top of TTL + probe period before a slot counts as held past its TTL.
    #[arg(long, default_value = "250ms", value_parser = dur)]
    pub slack: Duration,
}

pub async fn churn(args: &ChurnArgs, api: &Api, report: &mut Report) -> anyhow::Result<Duration> {
    let tag = run_tag();
    let start = Instant::now();
    let end = start + args.duration;
    let ticker = progress(api.rec.clone(), &args.common, "churn", Some(args.duration));
    let reuse = Arc::new(Mutex::new(crate::stats::histogram()));
    let ttl_seen = Arc::new(Mutex::new(0.0f64));
    let clients: Vec<_> = (0..args.clients)
        .map(|c| {
            let (api, reuse, ttl_seen, args) =
                (api.clone(), reuse.clone(), ttl_seen.clone(), args.clone());
            let account = format!("ch-{tag}-{c}");
            tokio::spawn(async move {
                churn_client(&api, &account, c, end, &args, &reuse, &ttl_seen).await
            })
        })
        .collect();
    for c in clients {
        let _ = c.await;
    }
    ticker.abort();
    let measured = start.elapsed();
    let hist = reuse.lock().unwrap_or_else(|e| e.into_inner()).clone();
    let ttl = *ttl_seen.lock().unwrap_or_else(|e| e.into_inner());
    report.figure("lease_ttl_sec", ttl);
    let mut s = summarize("crash_to_reusable", &hist, measured.as_secs_f64());
    s.outcomes.insert("measured".into(), hist.len());
    report.figure("crash_to_reusable", &s);
    report.figure(
        "crash_to_reusable_minus_ttl_p99_ms",
        round2(s.p99_ms - ttl * 1000.0),
    );
    Ok(measured)
}

pub async fn churn_client(
    api: &Api,
    account: &str,
    c: usize,
    end: Instant,
    args: &ChurnArgs,
    reuse: &Mutex<hdrhistogram::Histogram<u64>>,
    ttl_seen: &Mutex<f64>,
) {
    let mut generation = 0u32;
    let mut held: Option<String> = None;
    let (mut ttl, mut interval) = (Duration::ZERO, Duration::ZERO);
    let (device_type, meta) = kind(c);
    while Instant::now() < end {
        // 1. Hold a stream (a fresh device) unless the last lifecycle handed one over.
        let stream = match held.take() {
            Some(s) => s,
            None => {
                generation += 1;
                let device = format!("c{c}-g{generation}");
                let play = PlayArgs::new(account, &device, Some("basic"), (device_type, meta));
                match api.play("play_start", &play, Instant::now()).await {
                    Play::Granted {
                        stream_id,
                        lease_ttl_sec,
                        heartbeat_interval_sec,
                        ..
                    } => {
                        ttl = Duration::from_secs_f64(lease_ttl_sec);
                        interval = Duration::from_secs_f64(heartbeat_interval_sec);
                        *ttl_seen.lock().unwrap_or_else(|e| e.into_inner()) = lease_ttl_sec;
                        stream_id
                    }
                    other => {
                        api.rec
                            .fail(&format!("play_start on a free account: {}", short(&other)));
                        tokio::time::sleep(Duration::from_millis(100)).await;
                        continue;
                    }
                }
            }
        };
        // 2. Play for 1-3 heartbeats, each on the interval with ±10% jitter.
        let mut last_sent = Instant::now();
        let mut last_acked = last_sent;
        for _ in 0..random_range(1..=3u32) {
            let jitter = random_range(0.9..1.1f64);
            tokio::time::sleep(interval.mul_f64(jitter)).await;
            let sent = Instant::now();
            match api.heartbeat(account, &stream, sent).await {
                Beat::Ok => {
                    last_sent = sent;
                    last_acked = Instant::now();
                }
                Beat::Other(0, _) => {}
                other => api.rec.fail(&format!("heartbeat: {}", beat_label(&other))),
            }
        }
        // 3. End the lifecycle: crash, graceful stop, or be taken over.
        let fate = random_range(0..100u32);
        generation += 1;
        let device = format!("c{c}-g{generation}");
        if fate < args.crash_pct {
            // The player goes silent. A new device retries until the slot is free.
            let give_up = last_acked + ttl * 3 + Duration::from_secs(2);
            loop {
                tokio::time::sleep(args.probe_every).await;
                let play = PlayArgs::new(account, &device, Some("basic"), (device_type, meta));
                match api.play("probe", &play, Instant::now()).await {
                    Play::Granted { stream_id, .. } => {
                        let now = Instant::now();
                        let delay = now - last_acked;
                        let _ = reuse
                            .lock()
                            .unwrap_or_else(|e| e.into_inner())
                            .record((delay.as_micros() as u64).max(1));
                        api.rec.checked("slot_not_freed_before_ttl", 1);
                        // Lease ends are whole milliseconds of the store's clock, truncated:
                        // a lease may end up to 1 ms before `sent + TTL` by this clock.
                        if now - last_sent + Duration::from_millis(1) < ttl {
                            api.rec.violated("slot_not_freed_before_ttl");
                            eprintln!(
                                "VIOLATION: {account}: slot reusable {:?} before the TTL from the last renewal sent",
                                ttl - (now - last_sent)
                            );
                        }
                        api.rec.checked("crashed_slot_reusable_within_ttl", 1);
                        if delay > ttl + args.probe_every + args.slack {
                            api.rec.violated("crashed_slot_reusable_within_ttl");
                            eprintln!("VIOLATION: {account}: slot reusable after {delay:?}");
                        }
                        held = Some(stream_id);
                        break;
                    }
                    Play::Denied { .. } if Instant::now() < give_up => {}
                    Play::Denied { .. } => {
                        api.rec.checked("crashed_slot_reusable_within_ttl", 1);
                        api.rec.violated("crashed_slot_reusable_within_ttl");
                        break;
                    }
                    other => {
                        api.rec.fail(&format!("probe: {}", short(&other)));
                        break;
                    }
                }
            }
        } else if fate < args.crash_pct + args.stop_pct {
            if !api.release(account, &stream, Instant::now()).await {
                api.rec.fail("release: not 200");
            }
            let play = PlayArgs::new(account, &device, Some("basic"), (device_type, meta));
            api.rec.checked("slot_free_right_after_stop", 1);
            match api.play("play_start", &play, Instant::now()).await {
                Play::Granted { stream_id, .. } => held = Some(stream_id),
                Play::Denied { .. } => api.rec.violated("slot_free_right_after_stop"),
                other => api.rec.fail(&format!("play_start: {}", short(&other))),
            }
        } else {
            let play = PlayArgs::new(account, &device, Some("basic"), (device_type, meta))
                .replacing(&stream);
            api.rec.checked("takeover_granted", 1);
            match api.play("takeover", &play, Instant::now()).await {
                Play::Granted { stream_id, .. } => {
                    held = Some(stream_id);
                    api.rec.checked("replaced_stream_told_to_stop", 1);
                    if api.heartbeat(account, &stream, Instant::now()).await != Beat::Revoked {
                        api.rec.violated("replaced_stream_told_to_stop");
                    }
                }
                Play::Denied { .. } => api.rec.violated("takeover_granted"),
                other => api.rec.fail(&format!("takeover: {}", short(&other))),
            }
        }
        if random_range(0..10u32) == 0 {
            api.check_cap(account, None).await;
        }
    }
    if let Some(stream) = held {
        let _ = api.release(account, &stream, Instant::now()).await;
    }
}
