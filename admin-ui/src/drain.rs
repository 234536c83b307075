//! The dashboard's stop in a rollout (the limiter's `lifecycle.rs` explains why): on SIGTERM,
//! `/readyz` answers 503 and every answer carries `Connection: close` for the drain period,
//! then the server stops accepting and finishes what is in flight, within the shutdown timeout.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::extract::{Request, State};
use axum::http::{HeaderValue, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use screenlimit_limiter::lifecycle::{Draining, drain_on_signal};
use tokio::net::TcpListener;

/// How the dashboard stops (flags `--drain-period`, `--shutdown-timeout`).
#[derive(Debug, Clone, Copy)]
pub struct DrainSettings {
    /// How long it keeps accepting and answering after SIGTERM, unready.
    pub period: Duration,
    /// After the drain period, how long requests in flight get to finish.
    pub shutdown_timeout: Duration,
}

/// `app` with `/readyz` (503 while draining) and `Connection: close` on answers while draining.
pub fn with_drain(app: Router, draining: Draining) -> Router {
    Router::new()
        .route("/readyz", get(readyz))
        .with_state(draining.clone())
        .merge(app)
        .layer(axum::middleware::from_fn_with_state(
            draining,
            close_when_draining,
        ))
}

async fn readyz(State(draining): State<Draining>) -> Response {
    let draining = draining.is_draining();
    let status = if draining {
        StatusCode::SERVICE_UNAVAILABLE
    } else {
        StatusCode::OK
    };
    let body = serde_json::json!({ "ready": !draining, "draining": draining });
    (status, axum::Json(body)).into_response()
}

async fn close_when_draining(
    State(draining): State<Draining>,
    request: Request,
    next: Next,
) -> Response {
    let mut response = next.run(request).await;
    if draining.is_draining() {
        // hyper closes the connection once this answer is written: the client reconnects,
        // through the Service, to a replica that is not stopping.
        response
            .headers_mut()
            .insert(header::CONNECTION, HeaderValue::from_static("close"));
    }
    response
}

/// Serves `app` on `listener` until SIGTERM or Ctrl-C and the drain after it.
pub async fn serve(
    listener: TcpListener,
    app: Router,
    settings: DrainSettings,
) -> anyhow::Result<()> {
    let draining = Draining::default();
    let app = with_drain(app, draining.clone());
    let stopped = Arc::new(tokio::sync::Notify::new());
    let shutdown = {
        let (draining, stopped) = (draining.clone(), stopped.clone());
        async move {
            drain_on_signal(&draining, settings.period, "screenlimit dashboard").await;
            stopped.notify_one();
        }
    };
    let serving = axum::serve(
        listener,
        app.into_make_service_with_connect_info::<SocketAddr>(),
    )
    .with_graceful_shutdown(shutdown);
    let cut_off = async {
        stopped.notified().await;
        tokio::time::sleep(settings.shutdown_timeout).await;
    };
    let cut = tokio::select! {
        served = serving => {
            served?;
            false
        }
        _ = cut_off => true,
    };
    tracing::info!(
        drained_ms = draining.elapsed().map(|d| d.as_millis() as u64),
        requests_cut = cut,
        "screenlimit dashboard stopped (drain over)"
    );
    Ok(())
}
