//! Static files, embedded in the binary: htmx (pinned), the stylesheet and the local-time script.
//! Never a CDN.

use axum::Router;
use axum::http::header;
use axum::response::IntoResponse;
use axum::routing::get;

use super::state::AppState;

/// The htmx release the dashboard ships, from the npm package `htmx.org` (`dist/htmx.min.js`).
pub const HTMX_VERSION: &str = "2.0.11";
/// SHA-256 of that file as published; a test checks the served bytes against it.
pub const HTMX_SHA256: &str = "d6fdc75f204e6bdefa99b69bf1e6d4ac69b8a364f77929f45c13476b4000f717";
/// Where pages load it from (the version is in the name, so it may be cached forever).
pub const HTMX_PATH: &str = "/static/htmx-2.0.11.min.js";

pub static HTMX_JS: &[u8] = include_bytes!("../../static/htmx-2.0.11.min.js");
static APP_CSS: &str = include_str!("../../static/app.css");
/// Shows times in the agent's own time zone (the pages write them in UTC).
static LOCAL_TIME_JS: &str = include_str!("../../static/local-time.js");

pub fn router() -> Router<AppState> {
    Router::new()
        .route(HTMX_PATH, get(htmx))
        .route("/static/app.css", get(css))
        .route("/static/local-time.js", get(local_time))
}

async fn htmx() -> impl IntoResponse {
    (
        [
            (header::CONTENT_TYPE, "text/javascript; charset=utf-8"),
            (header::CACHE_CONTROL, "public, max-age=31536000, immutable"),
        ],
        HTMX_JS,
    )
}

async fn local_time() -> impl IntoResponse {
    (
        [
            (header::CONTENT_TYPE, "text/javascript; charset=utf-8"),
            (header::CACHE_CONTROL, "public, max-age=300"),
        ],
        LOCAL_TIME_JS,
    )
}

async fn css() -> impl IntoResponse {
    (
        [
            (header::CONTENT_TYPE, "text/css; charset=utf-8"),
            (header::CACHE_CONTROL, "public, max-age=300"),
        ],
        APP_CSS,
    )
}
