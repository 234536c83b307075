//! screenlimit's limiter: per-account concurrent-stream leases behind a small HTTP API.
//!
//! Map of the crate (see `docs/ARCHITECTURE.md` for the whole picture):
//! - [`config`]: the YAML config, environment overrides, validation.
//! - [`ids`]: id rules and self-verifying stream ids.
//! - [`model`]: the lease rules for one account (the embedded store runs them; the Lua mirrors them).
//! - [`store`]: the store interface, the embedded [`store::memory`] store and sharded [`store::redis`].
//! - [`plans`]: where an account's plan comes from (request or PostgreSQL, cached).
//! - [`service`]: the use cases and the failure policy.
//! - [`api`]: HTTP routes and bodies.
//! - [`metrics`]: Prometheus metrics.
//! - [`live`]: live streams per shard (counted, or estimated from heartbeats).
//! - [`overload`]: the bounds on connections and requests in flight, and load shedding.
//! - [`rules`]: the part of the config that may change live, one swappable snapshot.
//! - [`reload`]: the config file watched, checked and its live part put in force.
//! - [`server`]: wiring, connection deadlines and graceful shutdown (a drain on SIGTERM).

pub mod api;
pub mod config;
pub mod enforcement;
pub mod ids;
pub mod lifecycle;
pub mod live;
pub mod metrics;
pub mod model;
pub mod module_file;
pub mod overload;
pub mod plan_book;
pub mod plans;
pub mod player_tokens;
pub mod regions;
pub mod reload;
pub mod rules;
pub mod server;
pub mod service;
pub mod store;
