//! A spike on a store that is the bottleneck: one Redis held to a small CPU quota (as a busy
//! shard is), one limiter, play-starts offered open loop at twice what the store can decide.
//! Without per-shard admission every command queues, passes the store deadline and is answered
//! degraded after Redis did its work (congestion collapse: almost no real decisions). With it,
//! the shard's capacity still turns into decisions, and the rest is decided by the failure policy
//! at once.
//!
//! What this test holds is functional, so that a busy machine (another build on the other core)
//! cannot break it: no play fails, what is admitted is decided, what is shed is answered by the
//! policy, the store still decides (a floor far below its capacity, which only a collapse
//! breaks), sheds are counted and logged per episode. How much of the capacity becomes
//! decisions is a throughput figure, measured by the benchmark (BENCHMARKS.md, "Under a
//! spike"), not asserted here.

mod support;

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use serde_json::json;
use support::cpu_quota::CpuQuota;
use support::{Api, LimiterProcess, RedisServer, redis_config};

/// What the held Redis may use (1 ms of CPU in every 20 ms: a CPU limit of 0.05): little enough
/// that a debug-build limiter and this test's client on the same two cores can offer it twice
/// what it serves, with stalls shorter than the store deadline.
const REDIS_QUOTA: (Duration, Duration) = (Duration::from_millis(1), Duration::from_millis(20));

/// Play-starts by what answered them.
#[derive(Default)]
struct Tally {
    /// Decided by the store: granted (not degraded) or denied.
    decided: AtomicU64,
    /// Answered by the failure policy.
    degraded: AtomicU64,
    /// 5xx, transport errors, anything else.
    failed: AtomicU64,
}

impl Tally {
    fn count(&self, status: u16, degraded: bool) {
        let counter = match (status, degraded) {
            (200, false) | (409, _) => &self.decided,
            (200, true) => &self.degraded,
            _ => &self.failed,
        };
        counter.fetch_add(1, Ordering::Relaxed);
    }

    fn get(&self) -> (u64, u64, u64) {
        (
            self.decided.load(Ordering::Relaxed),
            self.degraded.load(Ordering::Relaxed),
            self.failed.load(Ordering::Relaxed),
        )
    }
}

/// One play on a new account of the premium plan: granted unless shed.
async fn play(api: &Api, n: u64, tally: &Tally) {
    let body = json!({ "account_id": format!("spike-{n}"), "device_id": "tv", "plan": "premium" });
    let request = api
        .http
        .post(format!("{}/v1/streams", api.base))
        .json(&body);
    match request.send().await {
        Ok(response) => {
            let status = response.status().as_u16();
            let body: serde_json::Value = response.json().await.unwrap_or_default();
            tally.count(status, body["degraded"].as_bool().unwrap_or(false));
        }
        Err(_) => {
            tally.failed.fetch_add(1, Ordering::Relaxed);
        }
    }
}

/// Store decisions per second in a closed loop of `clients`, each waiting for its answer.
async fn capacity(api: &Api, clients: u64, for_: Duration) -> f64 {
    let tally = Arc::new(Tally::default());
    let until = Instant::now() + for_;
    let loops = (0..clients).map(|c| {
        let (api, tally) = (api.clone(), tally.clone());
        tokio::spawn(async move {
            let mut n = c * 10_000_000;
            while Instant::now() < until {
                play(&api, n, &tally).await;
                n += 1;
            }
        })
    });
    futures::future::join_all(loops).await;
    tally.get().0 as f64 / for_.as_secs_f64()
}

/// `rate` plays a second for `for_`, each sent when it is due (open loop), at most `bound` in
/// flight. Returns the tally and how many could not be sent because `bound` were in flight.
async fn offer(api: &Api, rate: f64, for_: Duration, bound: usize) -> (Tally, u64) {
    let tally = Arc::new(Tally::default());
    let in_flight = Arc::new(tokio::sync::Semaphore::new(bound));
    let mut not_sent = 0;
    let started = tokio::time::Instant::now();
    let total = (rate * for_.as_secs_f64()) as u64;
    let mut tasks = Vec::with_capacity(total as usize);
    for n in 0..total {
        tokio::time::sleep_until(started + Duration::from_secs_f64(n as f64 / rate)).await;
        let Ok(permit) = in_flight.clone().try_acquire_owned() else {
            not_sent += 1;
            continue;
        };
        let (api, tally) = (api.clone(), tally.clone());
        tasks.push(tokio::spawn(async move {
            play(&api, 1_000_000_000 + n, &tally).await;
            drop(permit);
        }));
    }
    futures::future::join_all(tasks).await;
    let tally = Arc::try_unwrap(tally).unwrap_or_else(|_| panic!("every play is done"));
    (tally, not_sent)
}

/// Heartbeats of `streams` every `interval` until `until`, tallied like plays (a renewal is
/// "decided" when the store renewed it).
async fn heartbeats(
    api: &Api,
    streams: &[(String, String)],
    interval: Duration,
    until: Instant,
) -> Tally {
    let tally = Tally::default();
    while Instant::now() < until {
        let round = streams.iter().map(|(account, stream)| async {
            let reply = api.heartbeat(account, stream).await;
            tally.count(
                reply.status.as_u16(),
                reply.body["degraded"].as_bool().unwrap_or(false),
            );
        });
        futures::future::join_all(round).await;
        tokio::time::sleep(interval).await;
    }
    tally
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn at_twice_the_stores_capacity_most_of_it_still_becomes_decisions() {
    let redis = RedisServer::start();
    let limiter = LimiterProcess::start(&redis_config(&[redis.url()], "failure_policy: open\n"));
    let api = limiter.client();
    // Warm up on a free store: connections, scripts loaded; and streams that will renew.
    capacity(&api, 8, Duration::from_millis(500)).await;
    let mut streams = Vec::new();
    for n in 0..50 {
        let account = format!("watching-{n}");
        let stream = api.play_on(&account, "tv").await.stream_id();
        streams.push((account, stream));
    }
    let _quota = CpuQuota::hold(redis.pid(), REDIS_QUOTA.0, REDIS_QUOTA.1);
    let capacity = capacity(&api, 32, Duration::from_secs(3)).await;
    assert!(
        capacity > 50.0,
        "the held store decided only {capacity:.0} plays/s"
    );

    let step = Duration::from_secs(4);
    let renewing = heartbeats(
        &api,
        &streams,
        Duration::from_millis(200),
        Instant::now() + step,
    );
    let ((tally, not_sent), renewals) =
        tokio::join!(offer(&api, 2.0 * capacity, step, 2_000), renewing);
    let (decided, degraded, failed) = tally.get();
    // What the shard's admission learnt by the end of the spike: its pace and queue bound.
    let gauges = api.get("/metrics").await.text().await.unwrap();
    let gauge = |name: &str| {
        gauges
            .lines()
            .find(|l| l.starts_with(name))
            .and_then(|l| l.rsplit(' ').next())
            .unwrap_or("-")
            .to_owned()
    };
    let (pace, bound) = (
        gauge("screenlimit_store_per_command_seconds{"),
        gauge("screenlimit_store_queue_bound{"),
    );
    let (renewed, renewals_degraded, renewals_failed) = renewals.get();
    let decided_rate = decided as f64 / step.as_secs_f64();
    let report = format!(
        "1× capacity {capacity:.0} decisions/s; at 2×: {decided_rate:.0} decisions/s \
         ({decided} decided, {degraded} degraded, {failed} failed, {not_sent} not sent); \
         heartbeats: {renewed} renewed, {renewals_degraded} degraded, {renewals_failed} failed; \
         the shard's pace {pace} s a command, queue bound {bound}"
    );
    println!("{report}");
    assert_eq!(failed, 0, "a spike must not fail a play: {report}");
    assert!(
        decided_rate >= 0.1 * capacity,
        "the store must still decide under the spike (a collapse decides almost nothing): {report}"
    );
    assert!(
        degraded > 0,
        "twice the capacity cannot all be decided: {report}"
    );
    assert_eq!(renewals_failed, 0, "{report}");
    // Which of renewals and plays a full shard sheds first is not asserted here: in a run whose
    // admission settled low (BENCHMARKS.md, "Overload and spikes") renewals were shed less than
    // plays (0.79 against 0.88), so the order is the benchmark's to measure, not this test's.

    let metrics = api.get("/metrics").await.text().await.unwrap();
    let shed: f64 = metrics
        .lines()
        .filter(|l| l.starts_with("screenlimit_store_shed_total{"))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum();
    assert!(shed > 0.0, "the sheds are counted: {metrics}");
    let log = limiter.log();
    let lines = log.matches("store shard overloaded").count();
    assert!(
        (1..=4).contains(&lines),
        "one log line per overload episode, never per request ({lines}):\n{log}"
    );
}
