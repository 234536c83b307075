//! screenlimit's Kubernetes operator: reconciles `StreamLimiter` resources into Redis shards,
//! the limiter and the admin UI.
//!
//! Map: [`crd`] (the resource), [`validate`] and [`build`] (pure steps), [`status`] (conditions),
//! [`reconcile`] (IO: apply, prune, status) over [`context`] (what every reconcile shares),
//! [`monitoring_apply`] (the Prometheus Operator's objects: apply and prune) over
//! [`monitoring_api`] (discovery of their kinds), [`controller`] (watches, leader election
//! wiring), [`http`] (metrics and health), [`metrics`].

pub mod build;
pub mod config_rollout;
pub mod context;
pub mod controller;
pub mod crd;
pub mod error;
pub mod http;
pub mod leader;
pub mod metrics;
pub mod monitoring_api;
pub mod monitoring_apply;
pub mod names;
pub mod reconcile;
pub mod region_peers;
pub mod status;
pub mod validate;
