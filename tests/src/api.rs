//! The limiter's API as a player and the suites call it (through a port-forward), and the ring
//! that says which shard holds an account.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use reqwest::StatusCode;
use screenlimit_limiter::store::redis::ring::shard_for;
use serde_json::{Value, json};

fn http() -> reqwest::Client {
    reqwest::Client::builder()
        .timeout(Duration::from_secs(5))
        .build()
        .unwrap()
}

/// A play-start on plan `basic` (a cap of 1 in the examples): status and body; `None` when the
/// limiter did not answer (its pod down or restarting).
pub async fn try_play(limiter: &str, account: &str, device: &str) -> Option<(StatusCode, Value)> {
    play_or_why(limiter, account, device).await.ok()
}

/// [`try_play`], with why the limiter did not answer.
async fn play_or_why(
    limiter: &str,
    account: &str,
    device: &str,
) -> Result<(StatusCode, Value), reqwest::Error> {
    let response = http()
        .post(format!("{limiter}/v1/streams"))
        .json(&json!({"account_id": account, "device_id": device, "plan": "basic"}))
        .send()
        .await?;
    let status = response.status();
    Ok((status, response.json().await.unwrap_or_default()))
}

/// [`try_play`] that must be answered.
pub async fn play(limiter: &str, account: &str, device: &str) -> (StatusCode, Value) {
    try_play(limiter, account, device)
        .await
        .expect("the limiter answers a play-start")
}

/// A heartbeat: status and error code (empty when renewed or re-registered).
pub async fn heartbeat(limiter: &str, account: &str, stream_id: &str) -> (StatusCode, String) {
    let response = http()
        .put(format!("{limiter}/v1/streams/{stream_id}/heartbeat"))
        .json(&json!({"account_id": account}))
        .send()
        .await
        .expect("the limiter answers a heartbeat");
    let status = response.status();
    let body: Value = response.json().await.unwrap_or_default();
    (status, body["error"].as_str().unwrap_or("").to_owned())
}

/// Account ids (`<prefix>-<n>`) that the limiter's ring puts on shard `shard` of `shards`,
/// without end.
pub fn accounts_on(prefix: &str, shard: usize, shards: usize) -> impl Iterator<Item = String> {
    let prefix = prefix.to_owned();
    (0..)
        .map(move |i| format!("{prefix}-{i}"))
        .filter(move |a| shard_for(a, shards) == shard)
}

/// Until every one of `shards` decides a play through Redis (not degraded), fresh accounts
/// (`<round>-<n>`) each time so that nothing is denied: the time it took. Panics after `timeout`.
pub async fn wait_decided(
    limiter: &str,
    shards: usize,
    round: &str,
    timeout: Duration,
) -> Duration {
    let start = Instant::now();
    for shard in 0..shards {
        wait_decided_on(limiter, shard, shards, round, timeout).await;
    }
    start.elapsed()
}

/// Until shard `shard` of `shards` decides a play through Redis: the time it took.
pub async fn wait_decided_on(
    limiter: &str,
    shard: usize,
    shards: usize,
    round: &str,
    timeout: Duration,
) -> Duration {
    let start = Instant::now();
    for account in accounts_on(round, shard, shards) {
        if let Some((StatusCode::OK, body)) = try_play(limiter, &account, "tv").await
            && body["degraded"] != true
        {
            break;
        }
        assert!(
            start.elapsed() < timeout,
            "no play decided by shard {shard} after {timeout:?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    start.elapsed()
}

/// Plays for fresh accounts every 20 ms in the background, each answer checked: never a 5xx
/// (the suites run under policy `open`). With accounts at their cap, each round also plays a
/// second device on one of them: the store must never admit it (409, or 200 degraded when the
/// store did not answer, never a 200 it decided).
pub struct Prober {
    stop: Arc<AtomicBool>,
    task: tokio::task::JoinHandle<(u32, u32)>,
}

impl Prober {
    pub fn start(limiter: &str, prefix: &str) -> Prober {
        Self::start_with_capped(limiter, prefix, Vec::new())
    }

    /// [`Prober::start`], also checking that `capped` accounts (each at its cap, streams
    /// heartbeated or well within their TTL) admit no second device.
    pub fn start_with_capped(limiter: &str, prefix: &str, capped: Vec<String>) -> Prober {
        let stop = Arc::new(AtomicBool::new(false));
        let task = tokio::spawn({
            let (limiter, prefix, stop) =
                (limiter.to_owned(), prefix.to_owned(), Arc::clone(&stop));
            async move {
                let (mut answered, mut unanswered) = (0, 0);
                for i in 0.. {
                    if stop.load(Ordering::SeqCst) {
                        break;
                    }
                    let sent = Instant::now();
                    match play_or_why(&limiter, &format!("{prefix}-{i}"), "tv").await {
                        Ok((status, body)) => {
                            assert!(!status.is_server_error(), "{status}: {body}");
                            answered += 1;
                        }
                        Err(error) => {
                            // Said, so that a suite that counts them shows why when it fails.
                            eprintln!("play {i} unanswered after {:?}: {error:?}", sent.elapsed());
                            unanswered += 1;
                        }
                    }
                    if let Some(account) = capped.get(i % capped.len().max(1))
                        && let Some((status, body)) = try_play(&limiter, account, "phone").await
                    {
                        assert!(!status.is_server_error(), "{status}: {body}");
                        assert!(
                            status != StatusCode::OK || body["degraded"] == true,
                            "the cap of {account} broken: a second device admitted by the store: {body}"
                        );
                    }
                    tokio::time::sleep(Duration::from_millis(20)).await;
                }
                (answered, unanswered)
            }
        });
        Prober { stop, task }
    }

    /// Stops; how many plays were answered (none a 5xx) and how many were not answered at all.
    /// Panics with the 5xx if one was seen.
    pub async fn stop(self) -> (u32, u32) {
        self.stop.store(true, Ordering::SeqCst);
        self.task.await.expect("no 5xx under policy `open`")
    }
}
