//! The background task each shard has ([`spawn_maintenance`]): it follows a Sentinel shard's
//! master, probes an open circuit, samples the shard's memory, learns its path again when that may
//! have changed, and logs when the shard starts and stops shedding.

use std::sync::Weak;
use std::time::Duration;

use super::Shard;
use crate::store::redis::batch::Episode;
use crate::store::redis::health::{self, watch};

/// One line when the shard starts shedding and one when it stops, with the counts: never a
/// line per shed command.
fn log_episode(shard: &Shard) {
    let Some(episode) = shard.queue.tick() else {
        return;
    };
    let now = shard.queue.admission(None);
    let shed: u64 = now.shed.iter().flatten().sum();
    let per_command_us = now.per_command.map(|d| d.as_micros() as u64);
    match episode {
        Episode::Started => tracing::warn!(
            shard = shard.index,
            endpoint = %shard.endpoint(),
            queued = now.queued,
            per_command_us,
            shed_total = shed,
            "store shard overloaded: calls it cannot answer within the store deadline are decided by the failure policy without it"
        ),
        Episode::Ended { lasted } => tracing::info!(
            shard = shard.index,
            endpoint = %shard.endpoint(),
            lasted_ms = lasted.as_millis() as u64,
            shed_total = shed,
            "store shard no longer overloaded"
        ),
    }
}

/// Follows the shard's master (Sentinel shards, every `sentinel_poll`) and closes an open
/// circuit once the shard answers (every `probe_interval`). Stops when the shard is dropped.
pub fn spawn_maintenance(
    shard: Weak<Shard>,
    probe_interval: Duration,
    sentinel_poll: Duration,
    deadline: Duration,
) {
    let tick = probe_interval.min(sentinel_poll);
    let deadline = deadline.max(Duration::from_millis(100));
    tokio::spawn(async move {
        let mut since_probe = Duration::ZERO;
        let mut since_poll = sentinel_poll; // ask Sentinel at once
        let mut since_sample = Duration::ZERO; // the first contact has just read it
        let mut first = true; // a cluster primary found in a new map learns its path at once
        loop {
            let Some(shard) = shard.upgrade() else { return };
            let mut learn = std::mem::take(&mut first) | shard.path.take_ask();
            if shard.is_sentinel() && since_poll >= sentinel_poll {
                since_poll = Duration::ZERO;
                learn |= shard.follow_master(deadline).await;
            }
            if shard.breaker.is_open() && since_probe >= probe_interval {
                since_probe = Duration::ZERO;
                // A read-only or replica-less shard's end is logged by the probe itself.
                let said = shard.state.read_only() || shard.state.no_replicas();
                // A Sentinel shard's answering primary may have been replaced while it was away
                // (paused, cut off): Sentinel is asked first, and a new master is followed
                // instead (its own circuit closed there). What an old primary still takes
                // before Sentinel says so, `min-replicas-to-write` refuses.
                let answers = watch::probe(&shard, deadline).await;
                let moved = answers && shard.is_sentinel() && shard.follow_master(deadline).await;
                learn |= moved;
                if answers && !moved {
                    shard.breaker.close();
                    learn = true; // the connection may be to a server restarted without it
                    if !said {
                        tracing::info!(shard = shard.index, endpoint = %shard.endpoint(), "store circuit closed: shard answers again");
                    }
                }
            }
            log_episode(&shard);
            if since_sample >= health::SAMPLE_INTERVAL {
                since_sample = Duration::ZERO;
                watch::sample(&shard, deadline, shard.access.allow_eviction).await;
                learn = true; // a restart with or without the module shows here
            }
            if learn {
                shard.learn_path(deadline).await;
            }
            drop(shard);
            tokio::time::sleep(tick).await;
            // Saturating: a cluster node has no Sentinel to poll (its poll interval is MAX).
            since_probe = since_probe.saturating_add(tick);
            since_poll = since_poll.saturating_add(tick);
            since_sample = since_sample.saturating_add(tick);
        }
    });
}
