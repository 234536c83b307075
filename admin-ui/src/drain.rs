//! The dashboard's stop in a rollout (the limiter's `lifecycle.rs` explains why): on SIGTERM,
//! `/readyz` answers 503 and every answer carries `Connection: close` for the drain period,
//! then the server stops accepting and finishes what is in flight, within the shutdown timeout.
//! So does every answer on a connection past its maximum age, at any time, so that kept-alive
//! clients spread over the replicas a roll added.

use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::extract::{ConnectInfo, Request, State};
use axum::http::{HeaderValue, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use screenlimit_limiter::lifecycle::{Draining, drain_on_signal};
use tokio::net::TcpListener;

use crate::connection::Connection;

/// How the dashboard stops, and how long one connection lasts (flags `--drain-period`,
/// `--shutdown-timeout`, `--max-connection-age`).
#[derive(Debug, Clone, Copy)]
pub struct DrainSettings {
    /// How long it keeps accepting and answering after SIGTERM, unready.
    pub period: Duration,
    /// After the drain period, how long requests in flight get to finish.
    pub shutdown_timeout: Duration,
    /// After this (each connection's own, within ±10 %), answers carry `Connection: close`;
    /// zero: never.
    pub max_connection_age: Duration,
}

/// What decides that an answer closes its connection.
#[derive(Clone)]
struct Closing {
    draining: Draining,
    max_connection_age: Duration,
}

/// `app` with `/readyz` (503 while draining) and `Connection: close` on answers while draining
/// or on a connection past `max_connection_age`.
pub fn with_drain(app: Router, draining: Draining, max_connection_age: Duration) -> Router {
    Router::new()
        .route("/readyz", get(readyz))
        .with_state(draining.clone())
        .merge(app)
        .layer(axum::middleware::from_fn_with_state(
            Closing {
                draining,
                max_connection_age,
            },
            close_when_draining_or_old,
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

async fn close_when_draining_or_old(
    State(closing): State<Closing>,
    request: Request,
    next: Next,
) -> Response {
    let too_old = request
        .extensions()
        .get::<ConnectInfo<Connection>>()
        .is_some_and(|info| info.0.too_old(closing.max_connection_age));
    let mut response = next.run(request).await;
    if closing.draining.is_draining() || too_old {
        // hyper closes the connection once this answer is written: the client reconnects,
        // through the Service, to a replica that is not stopping (or one a roll added).
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
    let app = with_drain(app, draining.clone(), settings.max_connection_age);
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
        app.into_make_service_with_connect_info::<Connection>(),
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
