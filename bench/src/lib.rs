//! screenlimit's load generator (`screenlimit-loadgen`): client populations that drive the
//! limiter's HTTP API, record latency per operation in HDR histograms, check the lease
//! invariants while they run, and report a table and JSON. See `BENCHMARKS.md`.

pub mod api;
pub mod client;
pub mod procs;
pub mod progress;
pub mod scenarios;
pub mod stats;

pub use scenarios::{Cli, run};
