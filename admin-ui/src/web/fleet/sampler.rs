//! Samples every limiter instance's decision counters in the background, whether anyone watches
//! the fleet page or not, so that the charts show the last minutes as soon as the page opens.
//!
//! One `/v1/fleet` call per instance per tick, all at once, each bounded by the limiter client's
//! deadline and by the tick itself; memory stays within [`history`](super::history)'s bounds. An
//! instance that stops answering is logged once as it starts failing and once as it answers
//! again, never per sample; meanwhile its lines have a gap.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use crate::web::state::AppState;

/// The background sampling task; it stops when this is dropped (the server stopped).
pub struct Sampler(tokio::task::JoinHandle<()>);

impl Drop for Sampler {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// Starts sampling every instance of the fleet each `settings.fleet_sample_interval`.
pub fn spawn(state: AppState) -> Sampler {
    Sampler(tokio::spawn(run(state)))
}

async fn run(state: AppState) {
    let every = state
        .settings
        .fleet_sample_interval
        .max(Duration::from_millis(100));
    let mut ticks = tokio::time::interval(every);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    // Which instances failed at their last sample (logged when that changes).
    let mut failing: HashMap<String, bool> = HashMap::new();
    loop {
        ticks.tick().await;
        let mut calls = tokio::task::JoinSet::new();
        for url in super::fleet_urls(&state) {
            let client = state.limiter.at(&url);
            calls.spawn(async move {
                let answer = tokio::time::timeout(every, client.fleet()).await;
                (url, answer)
            });
        }
        for (url, answer) in calls.join_all().await {
            let error = match answer {
                Ok(Ok(fleet)) => {
                    state
                        .fleet_samples
                        .rates(&url, Instant::now(), &fleet.decisions);
                    None
                }
                Ok(Err(error)) => Some(error.to_string()),
                Err(_) => Some(format!("no answer within {every:?}")),
            };
            let was_failing = failing.insert(url.clone(), error.is_some());
            match (&error, was_failing) {
                (Some(error), None | Some(false)) => tracing::warn!(
                    limiter = %url,
                    %error,
                    "the fleet charts cannot sample this limiter; its lines have a gap until it answers"
                ),
                (None, Some(true)) => {
                    tracing::info!(limiter = %url, "the fleet charts sample this limiter again")
                }
                _ => {}
            }
        }
    }
}
