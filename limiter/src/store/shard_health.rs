//! A shard's health as the store reports it: for `/readyz` and the dashboard ([`ShardHealth`]),
//! and its last-seen flags and memory for the metrics ([`ShardStateView`]).

/// Health of one shard as `/readyz` and the dashboard show it.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, utoipa::ToSchema)]
pub struct ShardHealth {
    pub shard: usize,
    /// Where the shard lives, without credentials.
    pub endpoint: String,
    pub reachable: bool,
    /// `closed` (healthy) or `open` (failing fast while a probe waits for the shard).
    pub circuit: &'static str,
    /// Keys the shard holds (about one per account with leases or recent tombstones), when
    /// reachable.
    pub keys: Option<u64>,
    /// Whether this instance is shedding the shard's calls now: the shard answers all it can,
    /// and what it could not answer within the store deadline is decided by the failure policy.
    pub overloaded: bool,
    /// The shard answered `READONLY` (a replica): its circuit stays open until it is a primary.
    pub read_only: bool,
    /// The shard answered `NOREPLICAS` (fewer replicas in sync than its `min-replicas-to-write`):
    /// its circuit stays open until one is in sync again.
    pub no_replicas: bool,
    /// The shard answers `OOM`: what adds state goes to the failure policy.
    pub out_of_memory: bool,
    /// Its memory as last sampled (every 5 s), when it lets `INFO memory` be read.
    pub memory: Option<ShardMemory>,
    /// Which path its lease operations take: `native` (the screenlimit module's commands) or
    /// `lua` (the scripts); absent for the embedded store.
    pub path: Option<&'static str>,
}

/// A shard's memory against its limit (`INFO memory`).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, utoipa::ToSchema)]
pub struct ShardMemory {
    pub used_bytes: u64,
    /// `maxmemory`; 0: no limit (the shard grows until its host runs out).
    pub max_bytes: u64,
    /// `maxmemory-policy`, when the server shows it.
    pub policy: Option<String>,
}

/// A shard's flags and memory as last seen, for the metrics (no network).
#[derive(Debug, Clone, Default)]
pub struct ShardStateView {
    pub read_only: bool,
    pub no_replicas: bool,
    pub out_of_memory: bool,
    pub memory: Option<ShardMemory>,
    /// `native` or `lua` (Redis shards).
    pub path: Option<&'static str>,
}
