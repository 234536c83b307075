//! The dashboard's HTTP side: one module per feature, each exposing `router()`.

pub mod accounts;
pub mod assets;
pub mod audit;
pub mod client;
pub mod ctx;
pub mod error;
pub mod fallback;
pub mod fleet;
pub mod guard;
pub mod nav;
pub mod oidc;
pub mod signin;
pub mod state;

use axum::Router;
use axum::response::Redirect;
use axum::routing::get;

pub use state::{AppState, Shared};

/// The whole dashboard.
pub fn app(state: AppState) -> Router {
    Router::new()
        .route("/", get(|| async { Redirect::to("/accounts") }))
        .route("/healthz", get(|| async { "ok" }))
        .merge(signin::router())
        .merge(oidc::router())
        .merge(accounts::router())
        .merge(audit::router())
        .merge(fleet::router())
        .merge(assets::router())
        .fallback(fallback::not_found)
        .layer(axum::middleware::from_fn_with_state(
            state.clone(),
            guard::guard,
        ))
        // A 5xx page (the limiter down, sign-in busy) is logged where it is decided, once per state
        // change; tower-http's default would add an ERROR line per request.
        .layer(
            tower_http::trace::TraceLayer::new_for_http().on_failure(
                tower_http::trace::DefaultOnFailure::new().level(tracing::Level::DEBUG),
            ),
        )
        .with_state(state)
}
