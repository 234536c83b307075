//! The background load: cheap traffic unrelated to the limiter that keeps Redis's main thread
//! about as busy as asked, and its calibration.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use anyhow::Context;
use rand::random_range;
use serde_json::{Value, json};
use tokio::sync::watch;

use super::super::common::round2;
use super::meter::{Delta, Meter};
use super::numbers::{per_op_us, ratio, round3};

/// Cheap traffic unrelated to the limiter (`GET bg:<n>`, one in ten a `SET`) from many
/// connections, each its own task sending one command at a time, paced to a shared rate.
pub(super) struct Background {
    pub(super) rate: Arc<AtomicU64>,
    pub(super) ops: Arc<AtomicU64>,
    pub(super) errors: Arc<AtomicU64>,
    pub(super) stop: watch::Sender<bool>,
    pub(super) tasks: Vec<tokio::task::JoinHandle<()>>,
}

impl Background {
    pub(super) async fn start(url: &str, connections: usize) -> anyhow::Result<Self> {
        let client = redis::Client::open(url)?;
        let connections = connections.max(1);
        let rate = Arc::new(AtomicU64::new(0f64.to_bits()));
        let ops = Arc::new(AtomicU64::new(0));
        let errors = Arc::new(AtomicU64::new(0));
        let (stop, stop_rx) = watch::channel(false);
        let mut tasks = Vec::new();
        for _ in 0..connections {
            let mut conn = client
                .get_multiplexed_async_connection()
                .await
                .context("background connection")?;
            let (rate, ops, errors, mut stop_rx) =
                (rate.clone(), ops.clone(), errors.clone(), stop_rx.clone());
            tasks.push(tokio::spawn(async move {
                let mut tick = tokio::time::interval(Duration::from_millis(1));
                tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
                let (mut last, mut credit) = (Instant::now(), random_range(0.0..1.0f64));
                loop {
                    tokio::select! {
                        _ = tick.tick() => {}
                        _ = stop_rx.changed() => break,
                    }
                    let now = Instant::now();
                    let per_conn =
                        f64::from_bits(rate.load(Ordering::Relaxed)) / connections as f64;
                    // At most 50 ms of backlog: a task held up does not burst afterwards.
                    credit =
                        (credit + per_conn * (now - last).as_secs_f64()).min(1.0 + per_conn * 0.05);
                    last = now;
                    while credit >= 1.0 && !*stop_rx.borrow() {
                        credit -= 1.0;
                        let key = format!("bg:{}", random_range(0..10_000u32));
                        let res = if random_range(0..10u32) == 0 {
                            redis::cmd("SET")
                                .arg(&key)
                                .arg("x")
                                .exec_async(&mut conn)
                                .await
                        } else {
                            redis::cmd("GET").arg(&key).exec_async(&mut conn).await
                        };
                        match res {
                            Ok(()) => ops.fetch_add(1, Ordering::Relaxed),
                            Err(_) => errors.fetch_add(1, Ordering::Relaxed),
                        };
                    }
                }
            }));
        }
        Ok(Background {
            rate,
            ops,
            errors,
            stop,
            tasks,
        })
    }

    pub(super) fn set_rate(&self, per_sec: f64) {
        self.rate
            .store(per_sec.max(0.0).to_bits(), Ordering::Relaxed);
    }

    pub(super) fn rate(&self) -> f64 {
        f64::from_bits(self.rate.load(Ordering::Relaxed))
    }

    pub(super) fn ops(&self) -> u64 {
        self.ops.load(Ordering::Relaxed)
    }

    pub(super) async fn stop(self) -> u64 {
        let _ = self.stop.send(true);
        for t in self.tasks {
            let _ = t.await;
        }
        self.errors.load(Ordering::Relaxed)
    }
}

/// The background's rate for a main thread `target` busy: four steps of `step`, each at the
/// last step's rate scaled by target ÷ the busy fraction it reached (a busier loop costs less
/// per command, so one step from a light load would undershoot).
pub(super) async fn calibrate(
    meter: &mut Meter<'_>,
    bg: &Background,
    target: f64,
    step: Duration,
) -> anyhow::Result<Vec<Value>> {
    let mut rate = 5_000.0;
    let mut steps = Vec::new();
    for _ in 0..4 {
        bg.set_rate(rate);
        tokio::time::sleep(step / 4).await;
        let (a, oa) = (meter.snap().await?, bg.ops());
        tokio::time::sleep(step).await;
        let (b, ob) = (meter.snap().await?, bg.ops());
        let d = Delta::between(&a, &b);
        let busy = ratio(d.redis_main, d.secs);
        let achieved = ratio((ob - oa) as f64, d.secs);
        steps.push(
            json!({"rate_per_sec": rate.round(), "achieved_per_sec": achieved.round(),
                          "busy": round3(busy),
                          "redis_main_us_per_op": round2(per_op_us(d.redis_main, ob - oa))}),
        );
        eprintln!(
            "fleet: background at {rate:.0}/s: {achieved:.0}/s achieved, Redis main thread {:.1} % busy",
            busy * 100.0
        );
        if busy > 0.0 {
            rate *= (target / busy).clamp(0.25, 8.0);
        }
    }
    bg.set_rate(rate);
    Ok(steps)
}
