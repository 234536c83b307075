//! Operational endpoints: liveness, readiness and metrics (`openapi.rs` builds the document).

use axum::Json;
use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::IntoResponse;
use serde::Serialize;
use utoipa::ToSchema;

use super::streams::AppState;
use crate::overload::LoadView;
use crate::store::ShardHealth;

/// The process is alive.
#[utoipa::path(get, path = "/healthz", tag = "ops", responses((status = 200, description = "Alive: `{\"status\": \"ok\"}`")))]
pub async fn healthz() -> impl IntoResponse {
    Json(serde_json::json!({ "status": "ok" }))
}

#[derive(Debug, Serialize, ToSchema)]
pub struct Readiness {
    pub ready: bool,
    /// The instance received its shutdown signal and drains (`http.drain_period`): it still
    /// answers, but must leave the load balancers' rotation.
    pub draining: bool,
    /// The failure policy: when it is `open` or `local_cap` the instance stays ready while a
    /// shard is down, because it can still answer every play-start.
    pub failure_policy: String,
    pub shards: Vec<ShardHealth>,
    /// Connections and requests in flight against their bounds. `scale_out` turns true when
    /// requests were shed in each of the last 5 seconds; it never makes the instance unready
    /// (taking a loaded instance out of rotation would only move its load onto the others).
    pub load: LoadView,
}

/// Ready to take traffic, with each store shard's reachability and circuit.
#[utoipa::path(
    get, path = "/readyz", tag = "ops",
    responses(
        (status = 200, description = "Ready", body = Readiness),
        (status = 503, description = "Not ready: draining before a stop, or the policy is `closed` and a shard is unreachable", body = Readiness),
    )
)]
pub async fn readyz(State(service): State<AppState>) -> impl IntoResponse {
    let shards = service.health().await;
    let ready = service.ready(&shards);
    let body = Readiness {
        ready,
        draining: service.draining.is_draining(),
        failure_policy: service.policy().label().into(),
        shards,
        load: service.overload.view(),
    };
    let status = if ready {
        StatusCode::OK
    } else {
        StatusCode::SERVICE_UNAVAILABLE
    };
    (status, Json(body))
}

/// Prometheus text: decisions, latencies, store errors, circuit state.
#[utoipa::path(
    get, path = "/metrics", tag = "ops",
    responses((status = 200, description = "Prometheus text format", body = String, content_type = "text/plain"))
)]
pub async fn metrics(State(service): State<AppState>) -> impl IntoResponse {
    (
        [(header::CONTENT_TYPE, "text/plain; version=0.0.4")],
        service.render_metrics(),
    )
}
