//! The scenarios, one file each (see `BENCHMARKS.md` for what each proves): the command line
//! and the dispatch. What they share is in `common.rs`; no scenario imports another or this file.

pub mod churn;
pub mod common;
pub mod fleet;
pub mod max;
pub mod overhead;
pub mod overload;
pub mod plan_cache;
pub mod race;
pub mod regions;
pub mod slow_clients;
pub mod steady;
pub mod store_cycle;

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Instant;

use anyhow::Context;
use clap::{Parser, Subcommand};

pub use common::Common;

use crate::api::Api;
use crate::client::HttpClient;
use crate::procs::{LimiterSetup, Stack};
use crate::stats::{Recorder, Report, loadavg};
use churn::ChurnArgs;
use max::MaxArgs;
use race::RaceArgs;
use steady::SteadyArgs;

#[derive(Parser, Debug)]
#[command(
    name = "screenlimit-loadgen",
    about = "Load scenarios against screenlimit-limiter over HTTP/1.1 keep-alive, with HDR latency histograms and invariant checks"
)]
pub struct Cli {
    #[command(subcommand)]
    pub scenario: Scenario,
}

#[derive(Subcommand, Debug)]
pub enum Scenario {
    /// Highest sustained play-start and heartbeat rates (closed loop, rising concurrency).
    Max(MaxArgs),
    /// A live population heartbeating on its interval plus play-starts at a fixed rate.
    Steady(SteadyArgs),
    /// Accounts each hit by limit+N simultaneous plays: over-admissions must be 0.
    Race(RaceArgs),
    /// Crash-heavy traffic: time from a client's death to its slot being reusable.
    Churn(ChurnArgs),
    /// HTTP play-start throughput vs redis-benchmark running the acquire script, same server.
    Overhead(overhead::OverheadArgs),
    /// Our acquire + release cycle straight against a Redis (the peer comparison's half).
    StoreCycle(store_cycle::StoreCycleArgs),
    /// Play-start with plans from a warm PostgreSQL cache vs plans named in the request.
    PlanCache(plan_cache::PlanCacheArgs),
    /// One shard's slice of the fleet: Redis main-thread CPU per heartbeat and per play-start
    /// against a SET baseline, batch depth, and the projection to the seed's peak.
    Fleet(fleet::FleetArgs),
    /// Thousands of half-sent requests against one limiter while real traffic goes on: each
    /// must be answered 408 and closed within the body deadline; fds and latency are reported.
    SlowClients(slow_clients::SlowClientsArgs),
    /// Play-starts offered open loop at multiples of one instance's measured capacity: answered
    /// p99, the share shed, errors and the store's load at each multiple.
    Overload(overload::OverloadArgs),
    /// Two regions through a delayed link: home and roaming plays, the calls between regions
    /// per roaming play and per heartbeat window, the bytes, projected to the reference peak.
    Regions(regions::RegionsArgs),
}

impl Scenario {
    fn common(&self) -> Option<&Common> {
        match self {
            Scenario::Max(a) => Some(&a.common),
            Scenario::Steady(a) => Some(&a.common),
            Scenario::Race(a) => Some(&a.common),
            Scenario::Churn(a) => Some(&a.common),
            Scenario::Fleet(a) => Some(&a.common),
            _ => None,
        }
    }
    fn name(&self) -> &'static str {
        match self {
            Scenario::Max(_) => "max",
            Scenario::Steady(_) => "steady",
            Scenario::Race(_) => "race",
            Scenario::Churn(_) => "churn",
            Scenario::Overhead(_) => "overhead",
            Scenario::StoreCycle(_) => "store-cycle",
            Scenario::PlanCache(_) => "plan-cache",
            Scenario::Fleet(_) => "fleet",
            Scenario::SlowClients(_) => "slow-clients",
            Scenario::Overload(_) => "overload",
            Scenario::Regions(_) => "regions",
        }
    }
}

fn finish(mut report: Report, json: Option<&PathBuf>, quiet: bool) -> anyhow::Result<Report> {
    report.machine.loadavg_end = loadavg();
    if !quiet {
        print!("{}", report.table());
    }
    if let Some(path) = json {
        std::fs::write(path, serde_json::to_string_pretty(&report)?)
            .with_context(|| format!("write {}", path.display()))?;
    }
    Ok(report)
}

/// Runs one scenario and returns its report (already printed unless `--quiet`, and written to
/// `--json`).
pub async fn run(cli: Cli) -> anyhow::Result<Report> {
    let scenario = cli.scenario;
    let started = Instant::now();
    let common = match &scenario {
        Scenario::Overhead(a) => {
            let mut r = overhead::overhead(a).await?;
            r.duration_sec = started.elapsed().as_secs_f64();
            return finish(r, a.json.as_ref(), false);
        }
        Scenario::StoreCycle(a) => {
            let r = store_cycle::store_cycle(a).await?;
            return finish(r, a.json.as_ref(), false);
        }
        Scenario::PlanCache(a) => {
            let mut r = plan_cache::plan_cache(a).await?;
            r.duration_sec = started.elapsed().as_secs_f64();
            return finish(r, a.json.as_ref(), false);
        }
        Scenario::SlowClients(a) => {
            let r = slow_clients::slow_clients(a).await?;
            return finish(r, a.common.json.as_ref(), a.common.quiet);
        }
        Scenario::Overload(a) => {
            let r = overload::overload(a).await?;
            return finish(r, a.common.json.as_ref(), a.common.quiet);
        }
        Scenario::Regions(a) => {
            let r = regions::regions(a).await?;
            return finish(r, a.json.as_ref(), false);
        }
        other => other
            .common()
            .expect("load scenarios have common flags")
            .clone(),
    };
    let stack = if common.spawn {
        let mut setup =
            LimiterSetup::new(common.heartbeat_interval, common.ttl, common.store_timeout);
        setup.threads = common.limiter_threads;
        setup.redis_module = common.redis_module.clone();
        setup.renewal_window = common.renewal_window;
        setup.redis_args = common.redis_args.clone();
        setup.batch_window = match &scenario {
            Scenario::Fleet(_) => Some(common.batch_window.unwrap_or(fleet::DEFAULT_BATCH_WINDOW)),
            _ => common.batch_window,
        };
        let limiters = common.limiters;
        tokio::task::spawn_blocking(move || Stack::spawn(limiters, &setup)).await??
    } else {
        Stack::external(common.urls.clone(), common.redis.clone())
    };
    let connections = match &scenario {
        Scenario::Max(a) => a.levels.iter().copied().max().unwrap_or(1),
        Scenario::Fleet(a) => common.connections.max(a.clients),
        _ => common.connections,
    };
    let rec = Arc::new(Recorder::new());
    let api = Api::new(HttpClient::new(&stack.urls, connections)?, rec.clone());
    let mut report = Report::new(scenario.name());
    report.figure("limiters", stack.urls.len());
    report.figure("connections", connections);
    let measured = match &scenario {
        Scenario::Max(a) => max::max(a, &api, &stack, &mut report).await?,
        Scenario::Steady(a) => steady::steady(a, &api, &stack, &mut report).await?,
        Scenario::Race(a) => race::race(a, &api, &mut report).await?,
        Scenario::Churn(a) => churn::churn(a, &api, &mut report).await?,
        Scenario::Fleet(a) => fleet::fleet(a, &api, &stack, &mut report).await?,
        _ => unreachable!("handled above"),
    };
    report.duration_sec = started.elapsed().as_secs_f64();
    rec.fill(&mut report, measured.as_secs_f64());
    drop(stack);
    finish(report, common.json.as_ref(), common.quiet)
}
