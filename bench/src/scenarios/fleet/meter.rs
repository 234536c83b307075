//! What a phase costs: snaps of Redis's main-thread CPU, the limiters' CPU and their batch
//! counters at its boundaries, and the deltas between them.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use http::Method;

use crate::client::HttpClient;
use crate::procs::{RedisStats, Stack};

/// What the run reads at a phase boundary.
#[derive(Debug, Clone, Copy)]
pub(super) struct Snap {
    pub(super) at: Instant,
    pub(super) redis_main: f64,
    pub(super) limiter: f64,
    pub(super) batches: u64,
    pub(super) commands: u64,
}

/// What changed between two snaps.
#[derive(Debug, Clone, Copy, Default)]
pub(super) struct Delta {
    pub(super) secs: f64,
    pub(super) redis_main: f64,
    pub(super) limiter: f64,
    pub(super) batches: u64,
    pub(super) commands: u64,
}

impl Delta {
    pub(super) fn add(&mut self, other: &Delta) {
        self.secs += other.secs;
        self.redis_main += other.redis_main;
        self.limiter += other.limiter;
        self.batches += other.batches;
        self.commands += other.commands;
    }

    pub(super) fn between(a: &Snap, b: &Snap) -> Self {
        Delta {
            secs: (b.at - a.at).as_secs_f64(),
            redis_main: b.redis_main - a.redis_main,
            limiter: b.limiter - a.limiter,
            batches: b.batches.saturating_sub(a.batches),
            commands: b.commands.saturating_sub(a.commands),
        }
    }
}

/// Reads Redis's `INFO`, the spawned limiters' CPU and every limiter's batch counters.
pub(super) struct Meter<'a> {
    pub(super) stack: &'a Stack,
    pub(super) stats: RedisStats,
    pub(super) metrics: Vec<HttpClient>,
}

impl Meter<'_> {
    pub(super) async fn snap(&mut self) -> anyhow::Result<Snap> {
        let (mut batches, mut commands) = (0, 0);
        for client in &self.metrics {
            let reply = client
                .send(Method::GET, "/metrics", String::new())
                .await
                .context("GET /metrics")?;
            let text = String::from_utf8_lossy(&reply.body);
            batches += counter_sum(&text, "screenlimit_store_batches_total");
            commands += counter_sum(&text, "screenlimit_store_batched_commands_total");
        }
        Ok(Snap {
            at: Instant::now(),
            redis_main: self.stats.main_thread_cpu_seconds()?,
            limiter: self.stack.limiter_cpu(),
            batches,
            commands,
        })
    }

    /// The path every limiter takes to its shard (`screenlimit_store_path`): `native` or `lua`,
    /// waited for (a shard learns it at first contact) until it is the one `native` asks for,
    /// for up to 15 s.
    pub(super) async fn store_path(&self, native: bool) -> anyhow::Result<&'static str> {
        let wanted = if native { "native" } else { "lua" };
        let line = format!("screenlimit_store_path{{path=\"{wanted}\",shard=\"0\"}} 1");
        let deadline = Instant::now() + Duration::from_secs(15);
        'wait: loop {
            for client in &self.metrics {
                let reply = client
                    .send(Method::GET, "/metrics", String::new())
                    .await
                    .context("GET /metrics")?;
                if !String::from_utf8_lossy(&reply.body).contains(&line) {
                    if Instant::now() > deadline {
                        bail!("a limiter's shard is not on the {wanted} path after 15 s");
                    }
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    continue 'wait;
                }
            }
            return Ok(wanted);
        }
    }

    /// Calls per command since the last reset, then resets.
    pub(super) fn take_commandstats(&mut self) -> anyhow::Result<BTreeMap<String, u64>> {
        let out = self
            .stats
            .commandstats()?
            .into_iter()
            .map(|(name, s)| (name, s.calls))
            .collect();
        self.stats.reset()?;
        Ok(out)
    }
}

pub(super) fn add_calls(total: &mut BTreeMap<String, u64>, calls: BTreeMap<String, u64>) {
    for (name, n) in calls {
        *total.entry(name).or_default() += n;
    }
}

/// No traffic for `span`: what Redis's main thread and the limiters burn anyway.
pub(super) async fn idle_window(meter: &mut Meter<'_>, span: Duration) -> anyhow::Result<Delta> {
    let a = meter.snap().await?;
    tokio::time::sleep(span).await;
    let b = meter.snap().await?;
    Ok(Delta::between(&a, &b))
}

/// The sum of a Prometheus counter over its label sets.
pub(super) fn counter_sum(text: &str, name: &str) -> u64 {
    text.lines()
        .filter(|l| {
            l.strip_prefix(name)
                .is_some_and(|r| r.starts_with('{') || r.starts_with(' '))
        })
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .map(|v| v as u64)
        .sum()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counters_are_summed_over_shards() {
        let text = "# HELP x\nscreenlimit_store_batches_total{shard=\"0\"} 7\n\
                    screenlimit_store_batches_total{shard=\"1\"} 3\n\
                    screenlimit_store_batches_totally 100\n\
                    screenlimit_store_batched_commands_total{shard=\"0\"} 30\n";
        assert_eq!(counter_sum(text, "screenlimit_store_batches_total"), 10);
        assert_eq!(
            counter_sum(text, "screenlimit_store_batched_commands_total"),
            30
        );
    }
}
