//! The HTTP API: routes, extractors, error bodies, authentication.

pub mod auth;
pub mod error;
pub mod extract;
pub mod openapi;
pub mod ops;
pub mod responses;
pub mod schema;
pub mod sessions;
pub mod streams;
pub mod types;

use std::sync::Arc;

use axum::Router;
use axum::extract::DefaultBodyLimit;
use axum::http::header;
use axum::routing::{get, post, put};

use self::error::ApiError;
pub use self::streams::AppState;

/// The whole API. `auth_token`, when set, is required on every call but the health endpoints.
pub fn router(service: AppState, max_body_bytes: usize, auth_token: Option<String>) -> Router {
    let document = openapi::document(&openapi::Instance {
        plans: service.requestable_plans(),
        token: auth_token.is_some(),
    })
    .to_string();
    let mut router = Router::new()
        .route("/v1/streams", post(streams::play_start))
        .route("/v1/streams/{stream_id}/heartbeat", put(streams::heartbeat))
        .route(
            "/v1/streams/{stream_id}",
            axum::routing::delete(streams::release),
        )
        .route("/v1/accounts/{account_id}/streams", get(streams::list))
        .route(
            "/v1/accounts/{account_id}/streams/{stream_id}/force-stop",
            post(streams::force_stop),
        )
        .route(
            "/v1/accounts/{account_id}/limit-override",
            put(streams::set_override).delete(streams::clear_override),
        )
        .route("/v1/audit", get(streams::audit))
        .route("/v1/fleet", get(streams::fleet))
        .route("/v1/dashboard-sessions/{user}", get(sessions::session))
        .route(
            "/v1/dashboard-sessions/{user}/events",
            post(sessions::event),
        )
        .route("/healthz", get(ops::healthz))
        .route("/readyz", get(ops::readyz))
        .route("/metrics", get(ops::metrics))
        .route(
            "/openapi.json",
            get(move || async move { ([(header::CONTENT_TYPE, "application/json")], document) }),
        )
        .fallback(|| async { ApiError::not_found() })
        .method_not_allowed_fallback(|| async { ApiError::method_not_allowed() })
        .layer(DefaultBodyLimit::max(max_body_bytes))
        .with_state(service);
    if let Some(token) = auth_token {
        router = router.layer(axum::middleware::from_fn_with_state(
            Arc::new(token),
            auth::require_token,
        ));
    }
    // A 5xx is an answer the service chose (the `closed` policy, shedding) and is counted in the
    // metrics; tower-http's default would log each one at ERROR: a line per request in an outage.
    router.layer(
        tower_http::trace::TraceLayer::new_for_http()
            .on_failure(tower_http::trace::DefaultOnFailure::new().level(tracing::Level::DEBUG)),
    )
}
