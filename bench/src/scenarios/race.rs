//! `race`: accounts each hit by limit+N simultaneous plays; over-admissions must be 0.

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use clap::Args;
use tokio::sync::Barrier;

use super::common::{Common, kind, progress, run_tag, short};
use crate::api::{Api, Play, PlayArgs};
use crate::stats::Report;

#[derive(Args, Debug, Clone)]
pub struct RaceArgs {
    #[command(flatten)]
    pub common: Common,
    #[arg(long, default_value_t = 10_000)]
    pub accounts: usize,
    #[arg(long, default_value = "standard")]
    pub plan: String,
    /// Plays per account beyond its limit (the plan's limit is learned from the answers).
    #[arg(long, default_value_t = 3)]
    pub extra: usize,
    /// Accounts raced at once.
    #[arg(long, default_value_t = 200)]
    pub wave: usize,
}

pub async fn race(args: &RaceArgs, api: &Api, report: &mut Report) -> anyhow::Result<Duration> {
    let tag = run_tag();
    let start = Instant::now();
    // Learn the plan's limit from one throwaway play.
    let limit = match api
        .play(
            "probe",
            &PlayArgs::new(
                &format!("rc-{tag}-probe"),
                "probe",
                Some(&args.plan),
                ("tv", "probe"),
            ),
            Instant::now(),
        )
        .await
    {
        Play::Granted { limit, .. } => limit as usize,
        other => anyhow::bail!("race: cannot learn the plan's limit ({})", short(&other)),
    };
    let racers = limit + args.extra.max(1);
    report.figure("limit", limit);
    report.figure("plays_per_account", racers);
    let ticker = progress(api.rec.clone(), &args.common, "race", None);
    let accounts: Vec<usize> = (0..args.accounts).collect();
    let over = Arc::new(AtomicU64::new(0));
    let exact = Arc::new(AtomicU64::new(0));
    for wave in accounts.chunks(args.wave.max(1)) {
        let mut tasks = Vec::new();
        for &a in wave {
            let barrier = Arc::new(Barrier::new(racers));
            let granted = Arc::new(AtomicU32::new(0));
            for d in 0..racers {
                let (api, barrier, granted, plan) = (
                    api.clone(),
                    barrier.clone(),
                    granted.clone(),
                    args.plan.clone(),
                );
                let account = format!("rc-{tag}-{a}");
                tasks.push(tokio::spawn(async move {
                    barrier.wait().await;
                    let device = format!("racer-{d}");
                    let play = PlayArgs::new(&account, &device, Some(&plan), kind(d));
                    match api.play("play_start", &play, Instant::now()).await {
                        Play::Granted { .. } => {
                            granted.fetch_add(1, Ordering::AcqRel);
                        }
                        Play::Denied { .. } => {}
                        other => api.rec.fail(&format!("play_start: {}", short(&other))),
                    }
                    (account, granted)
                }));
            }
        }
        let mut seen = std::collections::BTreeMap::new();
        for t in tasks {
            if let Ok((account, granted)) = t.await {
                seen.insert(account, granted.load(Ordering::Acquire) as usize);
            }
        }
        let mut checks = Vec::new();
        for (account, granted) in seen {
            api.rec.checked("no_over_admission", 1);
            api.rec.checked("exactly_limit_winners", 1);
            if granted > limit {
                over.fetch_add(1, Ordering::Relaxed);
                api.rec.violated("no_over_admission");
                eprintln!("VIOLATION: {account} admitted {granted} of limit {limit}");
            }
            if granted == limit {
                exact.fetch_add(1, Ordering::Relaxed);
            } else {
                api.rec.violated("exactly_limit_winners");
            }
            let api = api.clone();
            checks.push(tokio::spawn(
                async move { api.check_cap(&account, None).await },
            ));
        }
        for c in checks {
            let _ = c.await;
        }
    }
    ticker.abort();
    report.figure("accounts", args.accounts);
    report.figure("accounts_over_admitted", over.load(Ordering::Relaxed));
    report.figure(
        "accounts_with_exactly_limit_winners",
        exact.load(Ordering::Relaxed),
    );
    Ok(start.elapsed())
}
