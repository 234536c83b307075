//! Operational endpoints: liveness, readiness, metrics and the OpenAPI document.

use axum::Json;
use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::IntoResponse;
use serde::Serialize;
use utoipa::{OpenApi, ToSchema};

use super::streams::AppState;
use crate::store::ShardHealth;

/// The process is alive.
#[utoipa::path(get, path = "/healthz", tag = "ops", responses((status = 200, description = "Alive")))]
pub async fn healthz() -> impl IntoResponse {
    Json(serde_json::json!({ "status": "ok" }))
}

#[derive(Debug, Serialize, ToSchema)]
pub struct Readiness {
    pub ready: bool,
    /// The failure policy: when it is `open` or `local_cap` the instance stays ready while a
    /// shard is down, because it can still answer every play-start.
    pub failure_policy: String,
    pub shards: Vec<ShardHealth>,
}

/// Ready to take traffic, with each store shard's reachability and circuit.
#[utoipa::path(
    get, path = "/readyz", tag = "ops",
    responses((status = 200, body = Readiness), (status = 503, body = Readiness))
)]
pub async fn readyz(State(service): State<AppState>) -> impl IntoResponse {
    let shards = service.health().await;
    let ready = service.ready(&shards);
    let body = Readiness {
        ready,
        failure_policy: service.policy().label().into(),
        shards,
    };
    let status = if ready {
        StatusCode::OK
    } else {
        StatusCode::SERVICE_UNAVAILABLE
    };
    (status, Json(body))
}

/// Prometheus text: decisions, latencies, store errors, circuit state.
#[utoipa::path(get, path = "/metrics", tag = "ops", responses((status = 200, description = "Prometheus text format")))]
pub async fn metrics(State(service): State<AppState>) -> impl IntoResponse {
    (
        [(header::CONTENT_TYPE, "text/plain; version=0.0.4")],
        service.render_metrics(),
    )
}

#[derive(OpenApi)]
#[openapi(
    info(
        title = "screenlimit limiter",
        description = "Per-account concurrent-stream leases."
    ),
    paths(
        super::streams::play_start,
        super::streams::heartbeat,
        super::streams::release,
        super::streams::list,
        super::streams::force_stop,
        super::streams::set_override,
        super::streams::clear_override,
        super::streams::audit,
        super::streams::fleet,
        healthz,
        readyz,
        metrics,
    )
)]
pub struct ApiDoc;

pub async fn openapi() -> impl IntoResponse {
    Json(ApiDoc::openapi())
}
