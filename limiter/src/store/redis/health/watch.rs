//! Keeps a shard's [`ShardState`](super::ShardState) current at run time, from what the shard
//! says: each reply ([`classify`]), the probe of an open circuit ([`probe`]) and the memory sample
//! ([`sample`]).

use std::sync::atomic::Ordering;
use std::time::Duration;

use redis::Value;

use super::{MemorySample, Role, info_memory, replication, role};
use crate::store::error::StoreError;
use crate::store::redis::path;
use crate::store::redis::shard::{self, Shard};

/// A shard's reply to one command: an `OOM` or `READONLY` refusal becomes its own error (the
/// second opens the shard's circuit); anything else is passed on.
pub fn classify(shard: &Shard, reply: Value) -> Result<Value, StoreError> {
    let Value::ServerError(error) = &reply else {
        return Ok(reply);
    };
    let state = &shard.state;
    match error.code() {
        "OOM" => {
            state.oom_replies.fetch_add(1, Ordering::Relaxed);
            if !state.out_of_memory.swap(true, Ordering::Relaxed) {
                tracing::warn!(shard = shard.index, endpoint = %shard.endpoint(), "store shard is full (OOM, used memory above maxmemory): new plays, re-registrations, limit overrides and sign-in events are decided by the failure policy; stops and force-stops still free slots");
            }
            Err(StoreError::Oom { shard: shard.index })
        }
        "NOREPLICAS" => {
            shard.breaker.trip();
            if !state.no_replicas.swap(true, Ordering::Relaxed) {
                tracing::warn!(shard = shard.index, endpoint = %shard.endpoint(), "store shard refuses writes (NOREPLICAS: fewer replicas in sync than its min-replicas-to-write; a failover may have replaced it, or its replicas are down): its circuit is open, its accounts are decided by the failure policy until a replica is in sync again");
            }
            Err(StoreError::NoReplicas { shard: shard.index })
        }
        "READONLY" => {
            shard.breaker.trip();
            if !state.read_only.swap(true, Ordering::Relaxed) {
                tracing::warn!(shard = shard.index, endpoint = %shard.endpoint(), "store shard is a read-only replica (READONLY): its circuit is open, its accounts are decided by the failure policy until it is a primary again");
            }
            Err(StoreError::ReadOnly { shard: shard.index })
        }
        _ => Ok(reply),
    }
}

/// Whether an open circuit may close: the shard answers, one found read-only is a primary
/// again (`ROLE`), and one that refused writes for want of replicas has one in sync again
/// (`INFO replication`); each end is logged once.
pub async fn probe(shard: &Shard, deadline: Duration) -> bool {
    if shard::key_count(shard, deadline).await.is_none() {
        return false;
    }
    if shard.state.no_replicas() {
        let Some(connection) = shard.connection() else {
            return false;
        };
        if !replication(connection, deadline)
            .await
            .is_ok_and(|r| r.writable())
        {
            return false;
        }
        shard.state.no_replicas.store(false, Ordering::Relaxed);
        tracing::warn!(shard = shard.index, endpoint = %shard.endpoint(), "store shard has a replica in sync again: circuit closed");
    }
    if !shard.state.read_only() {
        return true;
    }
    let Some(connection) = shard.connection() else {
        return false;
    };
    if role(connection, deadline).await.ok().flatten() != Some(Role::Primary) {
        return false;
    }
    shard.state.read_only.store(false, Ordering::Relaxed);
    tracing::warn!(shard = shard.index, endpoint = %shard.endpoint(), "store shard is a primary again: circuit closed");
    true
}

/// Reads the shard's memory and policy (every [`SAMPLE_INTERVAL`](super::SAMPLE_INTERVAL)); ends
/// an out-of-memory episode that saw no refusal since the last sample; says once when the policy
/// turns evicting.
pub async fn sample(shard: &Shard, deadline: Duration, allow_eviction: bool) {
    let state = &shard.state;
    let replies = state.oom_replies.load(Ordering::Relaxed);
    let refused_since = state.oom_replies_sampled.swap(replies, Ordering::Relaxed) != replies;
    let mut full = false;
    if let Some(connection) = shard.connection() {
        match info_memory(connection, deadline).await {
            Ok(Some(sample)) => {
                full = sample.max > 0 && sample.used >= sample.max;
                note_policy(shard, &sample, allow_eviction);
                state.record(sample);
            }
            Ok(None) => say_unreadable(shard, "INFO memory has no used_memory"),
            Err(error) if error.code() == Some("NOPERM") => {
                say_unreadable(shard, "INFO is not granted (+info)");
            }
            Err(error) => {
                // Out of reach: the breaker and the probe deal with that; a broken connection
                // may come back to another server (`path.rs`).
                if path::broken(&error) {
                    shard.path.forget();
                }
            }
        }
    }
    if !refused_since && !full && state.out_of_memory.swap(false, Ordering::Relaxed) {
        tracing::warn!(shard = shard.index, endpoint = %shard.endpoint(), "store shard takes new state again (below maxmemory, no OOM refusal since the last sample)");
    }
}

/// Says once when a shard's policy turns evicting (at start
/// [`first_look`](super::first_look) judged it).
fn note_policy(shard: &Shard, sample: &MemorySample, allow_eviction: bool) {
    let evicting = sample.evicting();
    if evicting != shard.state.evicting.swap(evicting, Ordering::Relaxed) && evicting {
        let policy = sample.policy.clone().unwrap_or_default();
        match allow_eviction {
            true => {
                tracing::warn!(shard = shard.index, endpoint = %shard.endpoint(), policy, "store shard evicts keys under memory pressure (accepted by store.allow_eviction): plays may be admitted past the cap when it is full")
            }
            false => {
                tracing::error!(shard = shard.index, endpoint = %shard.endpoint(), policy, "store shard now evicts keys under memory pressure: plays may be admitted past the cap when it is full; set its maxmemory-policy to noeviction (README, \"Sizing Redis\")")
            }
        }
    }
    if sample.policy.is_none() {
        say_unreadable(shard, "INFO memory shows no maxmemory_policy");
    }
}

fn say_unreadable(shard: &Shard, why: &str) {
    if !shard.state.unreadable_said.swap(true, Ordering::Relaxed) {
        tracing::warn!(shard = shard.index, endpoint = %shard.endpoint(), why, "cannot read the store shard's memory and maxmemory-policy: eviction is not checked and memory not shown");
    }
}
