//! `max`: the highest sustained play-start and heartbeat rates (closed loop, rising concurrency).

use std::sync::Arc;
use std::time::{Duration, Instant};

use clap::Args;
use rand::random_range;
use serde_json::json;

use super::common::{Common, CostWindow, beat_label, dur, kind, load, progress, run_tag, short};
use crate::api::{Api, Beat, Play, PlayArgs};
use crate::procs::Stack;
use crate::stats::{Recorder, Report};

#[derive(Args, Debug, Clone)]
pub struct MaxArgs {
    #[command(flatten)]
    pub common: Common,
    /// Operations to drive, one after the other: play-start, heartbeat.
    #[arg(long, value_delimiter = ',', default_value = "play-start,heartbeat")]
    pub ops: Vec<String>,
    /// Concurrency levels (requests in flight).
    #[arg(long, value_delimiter = ',', default_value = "4,8,16,32,64")]
    pub levels: Vec<usize>,
    /// Time at each level.
    #[arg(long, default_value = "10s", value_parser = dur)]
    pub step: Duration,
    /// Accounts play-starts are spread over (premium plan, 4 devices each: always granted).
    #[arg(long, default_value_t = 100_000)]
    pub accounts: usize,
    /// Leases loaded before the heartbeat steps.
    #[arg(long, default_value_t = 20_000)]
    pub leases: usize,
    #[arg(long, default_value_t = 5.0)]
    pub p99_target_ms: f64,
}

pub async fn max(
    args: &MaxArgs,
    api: &Api,
    stack: &Stack,
    report: &mut Report,
) -> anyhow::Result<Duration> {
    let tag = run_tag();
    let mut measured = Duration::ZERO;
    for op in &args.ops {
        let heartbeat = match op.as_str() {
            "play-start" => false,
            "heartbeat" => true,
            other => anyhow::bail!("max: unknown op {other} (play-start, heartbeat)"),
        };
        let pool: Arc<Vec<(String, String)>> = if heartbeat {
            let t = tag.clone();
            let names =
                Arc::new(move |i: usize| (format!("mh-{t}-{i}"), "dev-0".to_owned(), "premium"));
            let ids = load(
                api,
                args.leases,
                args.levels.iter().copied().max().unwrap_or(1),
                names,
            )
            .await;
            Arc::new(
                ids.into_iter()
                    .enumerate()
                    .map(|(i, id)| (format!("mh-{tag}-{i}"), id))
                    .filter(|(_, id)| !id.is_empty())
                    .collect(),
            )
        } else {
            Arc::new(Vec::new())
        };
        let mut best: Option<serde_json::Value> = None;
        for &level in &args.levels {
            let rec = Arc::new(Recorder::new());
            let level_api = Api {
                http: api.http.clone(),
                rec: rec.clone(),
            };
            let ticker = progress(rec.clone(), &args.common, "max", Some(args.step));
            let window = CostWindow::start(stack);
            let t0 = Instant::now();
            let end = t0 + args.step;
            let workers: Vec<_> = (0..level)
                .map(|_| {
                    let (api, pool, tag) = (level_api.clone(), pool.clone(), tag.clone());
                    let accounts = args.accounts;
                    tokio::spawn(async move {
                        while Instant::now() < end {
                            if heartbeat {
                                let (account, id) = &pool[random_range(0..pool.len())];
                                let beat = api.heartbeat(account, id, Instant::now()).await;
                                if beat != Beat::Ok {
                                    api.rec.fail(&format!("heartbeat: {}", beat_label(&beat)));
                                }
                            } else {
                                let a = random_range(0..accounts);
                                let d = random_range(0..4usize);
                                let account = format!("mp-{tag}-{a}");
                                let device = format!("dev-{d}");
                                let play =
                                    PlayArgs::new(&account, &device, Some("premium"), kind(a + d));
                                let out = api.play("play_start", &play, Instant::now()).await;
                                if !matches!(out, Play::Granted { .. }) {
                                    api.rec.fail(&format!("play_start: {}", short(&out)));
                                }
                            }
                        }
                    })
                })
                .collect();
            for w in workers {
                let _ = w.await;
            }
            ticker.abort();
            let secs = t0.elapsed().as_secs_f64();
            measured += t0.elapsed();
            let name = if heartbeat { "heartbeat" } else { "play_start" };
            let mut step = Report::default();
            rec.fill(&mut step, secs);
            let Some(summary) = step.ops.iter().find(|o| o.op == name) else {
                continue;
            };
            let failures: u64 = step.failures.values().sum();
            let mut row = json!({
                "op": name, "level": level, "rate_per_sec": summary.rate_per_sec.round(),
                "p50_ms": summary.p50_ms, "p99_ms": summary.p99_ms, "p999_ms": summary.p999_ms,
                "max_ms": summary.max_ms, "failures": failures,
            });
            if let serde_json::Value::Object(costs) = window.end(stack, summary.count) {
                for (k, v) in costs {
                    row[k] = v;
                }
            }
            for (k, v) in &step.failures {
                api.rec.fail(&format!("level {level}: {k}"));
                eprintln!("max: level {level}: {k} x{v}");
            }
            eprintln!("max: {row}");
            let fits = summary.p99_ms <= args.p99_target_ms && failures == 0;
            if fits
                && best.as_ref().is_none_or(|b| {
                    b["rate_per_sec"].as_f64().unwrap_or(0.0) < summary.rate_per_sec
                })
            {
                best = Some(row.clone());
            }
            report.rows.push(row);
        }
        let name = if heartbeat { "heartbeat" } else { "play_start" };
        report.figure(
            &format!("{name}_best_under_p99_target"),
            best.unwrap_or(json!(null)),
        );
    }
    report.figure("p99_target_ms", args.p99_target_ms);
    Ok(measured)
}
