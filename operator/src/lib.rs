//! screenlimit's Kubernetes operator: reconciles `StreamLimiter` resources into Redis shards,
//! the limiter and the admin UI.
//!
//! Map: [`crd`] (the resource), [`validate`] and [`build`] (pure steps), [`status`] (conditions),
//! [`reconcile`] (IO: apply, prune, status), [`monitoring_api`] (discovery of the Prometheus
//! Operator's kinds, their apply and prune), [`controller`] (watches, leader election wiring),
//! [`http`] (metrics and health), [`metrics`].

pub mod build;
pub mod config_rollout;
pub mod controller;
pub mod crd;
pub mod error;
pub mod http;
pub mod leader;
pub mod metrics;
pub mod monitoring_api;
pub mod names;
pub mod reconcile;
pub mod status;
pub mod validate;
