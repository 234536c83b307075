//! `slow-clients`: thousands of half-sent requests against one limiter while real traffic goes
//! on. Each slow client opens its own connection and sends a play-start's headers and one byte
//! of a 100-byte body, then nothing. Measured: how long each slow connection lives (it must be
//! answered 408 and closed within `http.body_read_timeout`), the limiter's open file
//! descriptors, and the latency of play-starts and `/healthz` before and while the slow clients
//! hold their connections.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use clap::Args;
use http::Method;
use rand::random_range;
use serde_json::json;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use super::common::{Common, dur, kind, round2, run_tag};
use crate::api::{Api, Play, PlayArgs};
use crate::client::HttpClient;
use crate::procs::{LimiterSetup, Stack};
use crate::stats::{Recorder, Report, histogram};

#[derive(Args, Debug, Clone)]
pub struct SlowClientsArgs {
    #[command(flatten)]
    pub common: Common,
    /// Half-sent requests, each on its own connection.
    #[arg(long, default_value_t = 5000)]
    pub slow: usize,
    /// Real traffic meanwhile, open loop: play-starts per second (and as many `/healthz`).
    #[arg(long, default_value_t = 200)]
    pub rate: u64,
    /// Length of the baseline window (before the slow clients) and of the window with them.
    #[arg(long, default_value = "10s", value_parser = dur)]
    pub window: Duration,
    /// `http.body_read_timeout` of the spawned limiter: the deadline of each slow connection.
    #[arg(long, default_value = "10s", value_parser = dur)]
    pub body_timeout: Duration,
    /// `http.listen_backlog` of the spawned limiter (1024 was Tokio's, before it was a setting).
    #[arg(long, default_value_t = 8192)]
    pub listen_backlog: u32,
}

/// Open files of a process, from `/proc`.
fn open_fds(pid: u32) -> Option<usize> {
    std::fs::read_dir(format!("/proc/{pid}/fd"))
        .ok()
        .map(|d| d.count())
}

/// The kernel's count of connections dropped because a listen queue was full
/// (`TcpExt: ListenOverflows` in `/proc/net/netstat`, for this network namespace). Each such
/// client retries its SYN after a second.
fn listen_overflows() -> Option<u64> {
    let text = std::fs::read_to_string("/proc/net/netstat").ok()?;
    let mut lines = text.lines().filter(|l| l.starts_with("TcpExt:"));
    let (names, values) = (lines.next()?, lines.next()?);
    let at = names
        .split_whitespace()
        .position(|n| n == "ListenOverflows")?;
    values.split_whitespace().nth(at)?.parse().ok()
}

/// Play-starts and `/healthz` at `rate` per second each for `window`, latency measured from the
/// moment each was due (no coordinated omission); ops are named with `phase`.
async fn paced_traffic(
    api: &Api,
    rate: u64,
    window: Duration,
    plays: &'static str,
    health: &'static str,
) {
    let tag = run_tag();
    let every = Duration::from_secs_f64(1.0 / rate.max(1) as f64);
    let mut tick = tokio::time::interval(every);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Burst);
    let end = Instant::now() + window;
    let mut tasks = Vec::new();
    let mut i = 0usize;
    while Instant::now() < end {
        let due = tick.tick().await.into_std();
        i += 1;
        let api = api.clone();
        let tag = tag.clone();
        tasks.push(tokio::spawn(async move {
            let account = format!("sc-{tag}-{}", random_range(0..100_000usize));
            let play = PlayArgs::new(&account, "dev-0", Some("premium"), kind(i));
            if let Play::Other(status, error) = api.play(plays, &play, due).await {
                api.rec.fail(&format!("{plays}: {status} {error}"));
            }
            match api.http.send(Method::GET, "/healthz", String::new()).await {
                Ok(reply) => api
                    .rec
                    .record(health, due.elapsed(), &reply.status.to_string()),
                Err(_) => {
                    api.rec.record(health, due.elapsed(), "transport error");
                    api.rec.fail(&format!("{health}: transport error"));
                }
            }
        }));
    }
    for t in tasks {
        let _ = t.await;
    }
}

/// What became of one slow connection.
struct SlowEnd {
    /// When its head was sent.
    sent: Instant,
    lifetime: Duration,
    answered_408: bool,
}

async fn slow_client(addr: std::net::SocketAddr) -> Option<SlowEnd> {
    const HEAD: &[u8] = b"POST /v1/streams HTTP/1.1\r\nHost: limiter\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n{";
    let mut stream = TcpStream::connect(addr).await.ok()?;
    stream.write_all(HEAD).await.ok()?;
    let sent = Instant::now();
    let mut answer = Vec::new();
    let mut buf = [0u8; 1024];
    // Bounded: a connection the limiter never closes is reported as living this long.
    let limit = Duration::from_secs(120);
    loop {
        match tokio::time::timeout_at((sent + limit).into(), stream.read(&mut buf)).await {
            Ok(Ok(0)) | Ok(Err(_)) | Err(_) => break,
            Ok(Ok(n)) => answer.extend_from_slice(&buf[..n]),
        }
    }
    Some(SlowEnd {
        sent,
        lifetime: sent.elapsed(),
        answered_408: answer.starts_with(b"HTTP/1.1 408"),
    })
}

pub async fn slow_clients(args: &SlowClientsArgs) -> anyhow::Result<Report> {
    let common = &args.common;
    let stack = if common.spawn {
        let mut setup =
            LimiterSetup::new(common.heartbeat_interval, common.ttl, common.store_timeout);
        setup.threads = common.limiter_threads;
        setup.batch_window = common.batch_window;
        setup.renewal_window = common.renewal_window;
        setup.extra_yaml = format!(
            "http: {{ body_read_timeout: {}ms, listen_backlog: {} }}\n",
            args.body_timeout.as_millis(),
            args.listen_backlog
        );
        tokio::task::spawn_blocking(move || Stack::spawn(1, &setup)).await??
    } else {
        Stack::external(common.urls.clone(), common.redis.clone())
    };
    let url = stack.urls[0].clone();
    let addr: std::net::SocketAddr = url.trim_start_matches("http://").parse()?;
    let pid = stack.limiters.first().map(|l| l.proc.pid());
    let fds = move || pid.and_then(open_fds);
    let rec = Arc::new(Recorder::new());
    let api = Api::new(
        HttpClient::new(&stack.urls, common.connections)?,
        rec.clone(),
    );
    let mut report = Report::new("slow-clients");
    report.figure("slow_clients", args.slow);
    report.figure("rate_per_sec", args.rate);
    report.figure("body_read_timeout_sec", args.body_timeout.as_secs_f64());
    report.figure("listen_backlog", args.listen_backlog);
    report.figure("limiter_fds_before", fds());
    let started = Instant::now();
    let cpu_at_start = stack.limiter_cpu();

    paced_traffic(
        &api,
        args.rate,
        args.window,
        "play_start (baseline)",
        "healthz (baseline)",
    )
    .await;

    let cpu_baseline = stack.limiter_cpu() - cpu_at_start;
    let overflows_before = listen_overflows();
    let opening = Instant::now();
    // The slow clients run on a thread and runtime of their own, as another machine would:
    // the real traffic's latency then shows what the limiter does, not the loadgen's queue.
    let count = args.slow;
    let slow = std::thread::spawn(move || {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map(|rt| {
                rt.block_on(async {
                    let clients: Vec<_> = (0..count)
                        .map(|_| tokio::spawn(slow_client(addr)))
                        .collect();
                    let mut ends = Vec::with_capacity(count);
                    for client in clients {
                        ends.push(client.await);
                    }
                    ends
                })
            })
    });
    let most_fds = Arc::new(AtomicUsize::new(0));
    let sampler = tokio::spawn({
        let most_fds = most_fds.clone();
        async move {
            while opening.elapsed() < Duration::from_secs(300) {
                most_fds.fetch_max(fds().unwrap_or(0), Ordering::Relaxed);
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
    });
    paced_traffic(
        &api,
        args.rate,
        args.window,
        "play_start (with slow)",
        "healthz (with slow)",
    )
    .await;
    let cpu_with_slow = stack.limiter_cpu() - cpu_at_start - cpu_baseline;
    let mut lifetimes = histogram();
    let mut last_sent = opening;
    let (mut ended, mut answered_408, mut late) = (0usize, 0usize, 0usize);
    let allowed = args.body_timeout + Duration::from_secs(1);
    let slow = tokio::task::spawn_blocking(move || slow.join())
        .await?
        .map_err(|_| anyhow::anyhow!("the slow clients' thread panicked"))??;
    for end in slow {
        if let Ok(Some(end)) = end {
            ended += 1;
            last_sent = last_sent.max(end.sent);
            answered_408 += usize::from(end.answered_408);
            late += usize::from(end.lifetime > allowed);
            let _ = lifetimes.record((end.lifetime.as_micros() as u64).max(1));
        }
    }
    sampler.abort();
    tokio::time::sleep(Duration::from_millis(500)).await;
    let ms = |us: u64| round2(us as f64 / 1000.0);
    report.figure("slow_connected", ended);
    report.figure("slow_answered_408", answered_408);
    report.figure("slow_closed_later_than_deadline_plus_1s", late);
    report.figure(
        "slow_lifetime_ms",
        json!({
            "min": ms(lifetimes.min()),
            "p50": ms(lifetimes.value_at_quantile(0.5)),
            "p99": ms(lifetimes.value_at_quantile(0.99)),
            "max": ms(lifetimes.max()),
        }),
    );
    report.figure(
        "slow_heads_all_sent_after_ms",
        ms(last_sent.duration_since(opening).as_micros() as u64),
    );
    report.figure(
        "limiter_cpu_sec",
        json!({"baseline": round2(cpu_baseline), "with_slow": round2(cpu_with_slow)}),
    );
    report.figure("limiter_fds_max", most_fds.load(Ordering::Relaxed));
    report.figure(
        "listen_queue_overflows",
        overflows_before
            .zip(listen_overflows())
            .map(|(before, after)| after - before),
    );
    report.figure("limiter_fds_after", fds());
    rec.checked(
        "slow connection closed within its deadline + 1 s",
        ended as u64,
    );
    if late > 0 {
        rec.violated_n(
            "slow connection closed within its deadline + 1 s",
            late as u64,
        );
    }
    if ended < args.slow {
        rec.fail_n("slow client could not connect", (args.slow - ended) as u64);
    }
    report.duration_sec = started.elapsed().as_secs_f64();
    // Each op runs in one window.
    rec.fill(&mut report, args.window.as_secs_f64());
    drop(stack);
    Ok(report)
}
