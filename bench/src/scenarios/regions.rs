//! `regions`: what a second region costs a play. Two regions on this machine, each a limiter on
//! its own Redis, each calling the other through a link that delays each direction (`link.rs`,
//! the test suites' proxy), and beside them a limiter without regions on region a's Redis.
//! Measured in one run: the link's own round trip, plays at the limiter without regions, plays
//! homed in the region they are made in, roaming plays (homed in the other region), the roaming streams'
//! heartbeats and stops; the calls each made to the other region and the bytes the link carried
//! for them, projected to the reference peak with a stated roaming share.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use clap::Args;
use hdrhistogram::Histogram;
use http::Method;
use serde_json::json;

use super::common::{dur, round2};
use crate::client::HttpClient;
use crate::procs::{LimiterProc, LimiterSetup, RedisProc, free_port};
use crate::stats::{Report, histogram, summarize};

#[path = "../../../limiter/tests/support/link.rs"]
#[allow(dead_code)] // the suites use more of the link than this scenario
mod link;

use link::{Link, LinkSpec};

/// The reference peak (BENCHMARKS.md, "The reference peak").
const PEAK_PLAYS_PER_SEC: f64 = 500_000.0;
const PEAK_HEARTBEATS_PER_SEC: f64 = 3_330_000.0;

#[derive(Args, Debug, Clone)]
pub struct RegionsArgs {
    /// One way, each direction of the link.
    #[arg(long, default_value = "40ms", value_parser = dur)]
    pub delay: Duration,
    /// Up to this much more, drawn per chunk.
    #[arg(long, default_value = "5ms", value_parser = dur)]
    pub jitter: Duration,
    /// Plays of each kind (home, roaming).
    #[arg(long, default_value_t = 400)]
    pub plays: usize,
    /// Plays in flight at once.
    #[arg(long, default_value_t = 8)]
    pub concurrency: usize,
    /// `regions.heartbeat_window` of the limiters.
    #[arg(long, default_value = "200ms", value_parser = dur)]
    pub heartbeat_window: Duration,
    /// The roaming heartbeats are sent over this long, evenly.
    #[arg(long, default_value = "4s", value_parser = dur)]
    pub heartbeat_spread: Duration,
    /// Share of plays and streams roaming, in percent, for the projection.
    #[arg(long, default_value_t = 2.0)]
    pub roaming_percent: f64,
    #[arg(long)]
    pub json: Option<PathBuf>,
}

struct Region {
    redis: RedisProc,
    limiter: LimiterProc,
}

/// Which of the two regions is an account's home (every region weighs 1).
fn home_of(account: &str) -> String {
    use screenlimit_limiter::regions::home::{Region as Weighted, home_of};
    let table = ["a", "b"].map(|name| Weighted {
        name: name.into(),
        weight: 1,
        ..Weighted::default()
    });
    home_of(account, &table).expect("a home").name.clone()
}

fn accounts_homed_at(home: &str, tag: &str, count: usize) -> Vec<String> {
    (0..)
        .map(|i| format!("rg-{tag}-{i}"))
        .filter(|a| home_of(a) == home)
        .take(count)
        .collect()
}

/// Regions `a` and `b`, the links a → b and b → a.
fn start(args: &RegionsArgs, dir: &std::path::Path) -> anyhow::Result<(Vec<Region>, Vec<Link>)> {
    let ports = [free_port(), free_port()];
    let names = ["a", "b"];
    let spec = LinkSpec {
        delay: args.delay,
        jitter: args.jitter,
    };
    let links: Vec<Link> = [1, 0]
        .iter()
        .map(|&to| Link::start(([127, 0, 0, 1], ports[to]).into(), spec))
        .collect();
    for name in names {
        std::fs::write(
            dir.join(name),
            format!("bench-region-token-{name}-0123456789"),
        )?;
    }
    let mut regions = Vec::new();
    for (i, name) in names.iter().enumerate() {
        let peer = names[1 - i];
        let mut setup = LimiterSetup::new(
            Duration::from_secs(30),
            Duration::from_secs(90),
            Duration::from_millis(25),
        );
        setup.extra_yaml = format!(
            "regions:\n  name: {name}\n  token_file: {}\n  heartbeat_window: {}ms\n  peers:\n    - {{ name: {peer}, url: \"{}\", token_file: {} }}\n",
            dir.join(name).display(),
            args.heartbeat_window.as_millis(),
            links[i].url(),
            dir.join(peer).display(),
        );
        let redis = RedisProc::start()?;
        let limiter = LimiterProc::start_on(ports[i], &redis.url(), &setup)?;
        regions.push(Region { redis, limiter });
    }
    Ok((regions, links))
}

/// The value of the metric line that starts with `line_start` at `url`, 0 if absent.
async fn metric(http: &HttpClient, line_start: &str) -> anyhow::Result<f64> {
    let reply = http.send(Method::GET, "/metrics", String::new()).await?;
    let text = String::from_utf8_lossy(&reply.body);
    Ok(text
        .lines()
        .find(|l| l.starts_with(line_start))
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|v| v.parse().ok())
        .unwrap_or(0.0))
}

async fn calls(http: &HttpClient, op: &str) -> anyhow::Result<f64> {
    metric(
        http,
        &format!("screenlimit_region_calls_total{{op=\"{op}\",outcome=\"answered\",peer=\"b\"}}"),
    )
    .await
}

/// Plays `accounts` (one device each) at `http`, `concurrency` at a time: their latencies and
/// stream ids.
async fn plays(
    http: &Arc<HttpClient>,
    accounts: &[String],
    concurrency: usize,
) -> anyhow::Result<(Histogram<u64>, Vec<(String, String)>)> {
    let mut hist = histogram();
    let mut streams = Vec::new();
    for wave in accounts.chunks(concurrency.max(1)) {
        let calls: Vec<_> = wave
            .iter()
            .map(|account| {
                let (http, account) = (http.clone(), account.clone());
                let body = json!({"account_id": account, "device_id": "tv"}).to_string();
                tokio::spawn(async move {
                    let started = Instant::now();
                    let reply = http.send(Method::POST, "/v1/streams", body).await?;
                    let elapsed = started.elapsed();
                    let answer: serde_json::Value = serde_json::from_slice(&reply.body)?;
                    if reply.status != 200 || answer["degraded"] != false {
                        bail!("play {account}: {} {answer}", reply.status);
                    }
                    let stream_id = answer["stream_id"]
                        .as_str()
                        .context("stream_id")?
                        .to_owned();
                    anyhow::Ok((elapsed, (account, stream_id)))
                })
            })
            .collect();
        for call in calls {
            let (elapsed, stream) = call.await??;
            hist.record(elapsed.as_micros() as u64)?;
            streams.push(stream);
        }
    }
    Ok((hist, streams))
}

pub async fn regions(args: &RegionsArgs) -> anyhow::Result<Report> {
    let mut report = Report::new("regions");
    let started = Instant::now();
    let dir = tempfile::tempdir()?;
    let (regions, links) = start(args, dir.path())?;
    let a = Arc::new(HttpClient::with_protocol(
        std::slice::from_ref(&regions[0].limiter.url),
        args.concurrency,
        false,
    )?);

    // The link alone: b's /healthz through it, one at a time on one connection.
    let through = HttpClient::with_protocol(&[links[0].url()], 1, false)?;
    let mut link_hist = histogram();
    for _ in 0..100 {
        let t = Instant::now();
        through.send(Method::GET, "/healthz", String::new()).await?;
        link_hist.record(t.elapsed().as_micros() as u64)?;
    }

    // The same plays at a limiter without regions, on region a's Redis.
    let plain = LimiterProc::start(
        &regions[0].redis.url(),
        &LimiterSetup::new(
            Duration::from_secs(30),
            Duration::from_secs(90),
            Duration::from_millis(25),
        ),
    )?;
    let plain_http = Arc::new(HttpClient::with_protocol(
        std::slice::from_ref(&plain.url),
        args.concurrency,
        false,
    )?);
    let (plain_hist, _) = plays(
        &plain_http,
        &accounts_homed_at("a", "plain", args.plays),
        args.concurrency,
    )
    .await?;

    let home_accounts = accounts_homed_at("a", "home", args.plays);
    let roaming_accounts = accounts_homed_at("b", "roam", args.plays);
    // Warm the peer connection, so the roaming plays measure calls, not a handshake.
    plays(&a, &accounts_homed_at("b", "warm", 4), 4).await?;
    let (home_hist, _) = plays(&a, &home_accounts, args.concurrency).await?;
    let (calls_0, bytes_0) = (calls(&a, "acquire").await?, links[0].bytes());
    let roam_started = Instant::now();
    let (roam_hist, streams) = plays(&a, &roaming_accounts, args.concurrency).await?;
    let roam_secs = roam_started.elapsed().as_secs_f64();
    let acquire_calls = calls(&a, "acquire").await? - calls_0;
    let play_bytes = (links[0].bytes() - bytes_0) as f64 / streams.len() as f64;

    // The roaming streams' heartbeats, evenly over the spread, each on a connection of its own
    // as players' are (a heartbeat waits its window and a round trip).
    let players = Arc::new(HttpClient::with_protocol(
        std::slice::from_ref(&regions[0].limiter.url),
        streams.len().max(1),
        false,
    )?);
    let (hb_calls_0, bytes_0) = (calls(&a, "heartbeats").await?, links[0].bytes());
    let gap = args.heartbeat_spread / streams.len().max(1) as u32;
    let hb_started = Instant::now();
    let mut beats = Vec::new();
    for (i, (account, stream_id)) in streams.iter().enumerate() {
        tokio::time::sleep_until((hb_started + gap * i as u32).into()).await;
        let (http, account, path) = (
            players.clone(),
            account.clone(),
            format!("/v1/streams/{stream_id}/heartbeat"),
        );
        beats.push(tokio::spawn(async move {
            let body = json!({ "account_id": account }).to_string();
            http.send(Method::PUT, &path, body).await
        }));
    }
    for beat in beats {
        let reply = beat.await??;
        if reply.status != 200 {
            bail!("a roaming heartbeat: {}", reply.status);
        }
    }
    let hb_secs = hb_started.elapsed().as_secs_f64();
    let heartbeat_calls = calls(&a, "heartbeats").await? - hb_calls_0;
    let heartbeat_bytes = (links[0].bytes() - bytes_0) as f64 / streams.len() as f64;

    // And their stops.
    let bytes_0 = links[0].bytes();
    let stops: Vec<_> = (streams.iter())
        .map(|(account, stream_id)| {
            let body = json!({ "account_id": account }).to_string();
            let (http, path) = (players.clone(), format!("/v1/streams/{stream_id}"));
            tokio::spawn(async move { http.send(Method::DELETE, &path, body).await })
        })
        .collect();
    for stop in stops {
        if stop.await??.status != 200 {
            bail!("a roaming stop failed");
        }
    }
    let stop_bytes = (links[0].bytes() - bytes_0) as f64 / streams.len() as f64;

    let link = summarize("link_round_trip", &link_hist, 0.0);
    let plain = summarize("play_without_regions", &plain_hist, 0.0);
    let home = summarize("home_play", &home_hist, 0.0);
    let roaming = summarize("roaming_play", &roam_hist, roam_secs);
    let windows = hb_secs / args.heartbeat_window.as_secs_f64();
    let share = args.roaming_percent / 100.0;
    let bytes_per_sec = share
        * (PEAK_PLAYS_PER_SEC * (play_bytes + stop_bytes)
            + PEAK_HEARTBEATS_PER_SEC * heartbeat_bytes);
    report.figure("link_delay_ms_each_way", args.delay.as_millis() as u64);
    report.figure("link_jitter_ms", args.jitter.as_millis() as u64);
    report.figure("link_round_trip_p50_ms", round2(link.p50_ms));
    report.figure("link_round_trip_p99_ms", round2(link.p99_ms));
    report.figure("play_without_regions_p99_ms", round2(plain.p99_ms));
    report.figure("home_play_p99_added_ms", round2(home.p99_ms - plain.p99_ms));
    report.figure("home_play_p50_ms", round2(home.p50_ms));
    report.figure("home_play_p99_ms", round2(home.p99_ms));
    report.figure("roaming_play_p50_ms", round2(roaming.p50_ms));
    report.figure("roaming_play_p99_ms", round2(roaming.p99_ms));
    report.figure(
        "roaming_p99_over_link_p99_ms",
        round2(roaming.p99_ms - link.p99_ms),
    );
    report.figure(
        "calls_per_roaming_play",
        round2(acquire_calls / streams.len() as f64),
    );
    report.figure("roaming_heartbeats", streams.len());
    report.figure("heartbeat_calls", heartbeat_calls);
    report.figure(
        "heartbeat_calls_per_window",
        round2(heartbeat_calls / windows),
    );
    report.figure("link_bytes_per_roaming_play", round2(play_bytes));
    report.figure("link_bytes_per_roaming_heartbeat", round2(heartbeat_bytes));
    report.figure("link_bytes_per_roaming_stop", round2(stop_bytes));
    report.figure("roaming_percent", args.roaming_percent);
    report.figure(
        "projected_cross_region_mbytes_per_sec_at_peak",
        round2(bytes_per_sec / 1e6),
    );
    for summary in [link, plain, home, roaming] {
        report.ops.push(summary);
    }
    report.duration_sec = started.elapsed().as_secs_f64();
    drop(regions);
    Ok(report)
}
