//! The HTTP API: routes, extractors, error bodies, authentication.

pub mod auth;
pub mod cors;
pub mod error;
pub mod extract;
pub mod history;
pub mod home_hint;
pub mod limits;
pub mod openapi;
pub mod ops;
pub mod regions;
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

/// What the router is built with beside the service.
#[derive(Debug, Clone)]
pub struct ApiOptions {
    /// Largest request body accepted, in bytes.
    pub max_body_bytes: usize,
    /// The credentials each route needs (none configured: every call is open).
    pub auth: auth::ApiAuth,
    /// The origins whose pages may call the player routes (`http.cors`).
    pub cors: Option<Arc<cors::CorsPolicy>>,
}

impl ApiOptions {
    /// No credentials, no CORS.
    pub fn open(max_body_bytes: usize) -> ApiOptions {
        ApiOptions {
            max_body_bytes,
            auth: auth::ApiAuth::default(),
            cors: None,
        }
    }
}

/// What other regions call, with room for a full batch of renewals.
fn region_routes() -> Router<AppState> {
    use crate::regions::wire::{MAX_BODY_BYTES, Op};
    let path = Op::path;
    Router::new()
        .route(&path(Op::Acquire), post(regions::acquire))
        .route(&path(Op::Heartbeats), post(regions::heartbeats))
        .route(&path(Op::Release), post(regions::release))
        .route(&path(Op::ForceStop), post(regions::force_stop))
        .route(&path(Op::List), post(regions::list))
        .route(&path(Op::History), post(regions::history))
        .route(&path(Op::Override), post(regions::set_override))
        .route(&path(Op::Audit), post(regions::audit))
        .route(&path(Op::Ping), post(regions::ping))
        .route(&path(Op::Report), post(regions::report))
        .layer(DefaultBodyLimit::max(MAX_BODY_BYTES))
}

/// The whole API: each route behind the credential of its audience (`auth.rs`), the player
/// routes open to the configured origins (`cors.rs`).
pub fn router(service: AppState, options: ApiOptions) -> Router {
    let ApiOptions {
        max_body_bytes,
        auth,
        cors,
    } = options;
    let document = openapi::document(&openapi::Instance {
        plans: service.requestable_plans(),
        security: openapi::Security::of(&auth),
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
        .route("/v1/accounts/{account_id}/history", get(history::history))
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
        .layer(DefaultBodyLimit::max(max_body_bytes));
    // Only behind their own token: a router built without it (in process) takes no region call.
    if service.regions().is_some() && auth.region.is_some() {
        router = router.merge(region_routes());
    }
    let mut router = router.with_state(service);
    if auth.enabled() {
        router = router.layer(axum::middleware::from_fn_with_state(
            Arc::new(auth),
            auth::require_credential,
        ));
    }
    // Outside the credential check: a preflight carries no credential.
    if let Some(policy) = cors {
        router = router.layer(axum::middleware::from_fn_with_state(policy, cors::cors));
    }
    // A 5xx is an answer the service chose (the `closed` policy, shedding) and is counted in the
    // metrics; tower-http's default would log each one at ERROR: a line per request in an outage.
    router.layer(
        tower_http::trace::TraceLayer::new_for_http()
            .on_failure(tower_http::trace::DefaultOnFailure::new().level(tracing::Level::DEBUG)),
    )
}
