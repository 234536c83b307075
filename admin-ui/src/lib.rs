//! screenlimit's support dashboard: find an account, see its live devices, force-stop one,
//! read the audit log and the fleet's health. It talks to the limiter over HTTP only.
//!
//! Map of the crate:
//! - [`config`]: what the web layer needs (limiter URL and token, sign-in mode, secrets).
//! - [`limiter`]: the limiter HTTP client, a deadline on every call, URLs built from encoded
//!   path segments.
//! - [`prometheus`]: the Prometheus HTTP API client (`query_range`) of the fleet charts'
//!   longer ranges.
//! - [`ids`]: ids taken from an address, checked by the limiter's own rules before use.
//! - [`auth`]: roles, password users (argon2), signed session cookies, CSRF tokens.
//! - [`web`]: the router; one module per page (`accounts`, `audit`, `fleet`, `signin`),
//!   the guard middleware, embedded static assets (htmx pinned).
//! - [`view`]: times and labels as people read them.
//! - [`dev`]: `--dev`, an in-process limiter on the embedded store beside the dashboard.
//! - [`drain`]: the stop in a rollout: unready, `Connection: close`, then no more accepting.
//! - [`connection`]: each connection's peer and maximum age.

pub mod auth;
pub mod config;
pub mod connection;
pub mod dev;
pub mod drain;
pub mod ids;
pub mod limiter;
pub mod prometheus;
pub mod view;
pub mod web;

use std::net::SocketAddr;

use tokio::net::TcpListener;

use crate::connection::Connection;

/// Serves the dashboard on `listener` until `shutdown` completes.
pub async fn serve(
    listener: TcpListener,
    settings: config::Settings,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> anyhow::Result<()> {
    let state = web::AppState::new(settings)?;
    let _sampler = web::fleet::sampler::spawn(state.clone());
    axum::serve(
        listener,
        web::app(state).into_make_service_with_connect_info::<Connection>(),
    )
    .with_graceful_shutdown(shutdown)
    .await?;
    Ok(())
}

/// Serves the dashboard on `listener` until SIGTERM or Ctrl-C, then drains (see [`drain`]).
pub async fn serve_until_drained(
    listener: TcpListener,
    settings: config::Settings,
    drain: drain::DrainSettings,
) -> anyhow::Result<()> {
    let state = web::AppState::new(settings)?;
    let _sampler = web::fleet::sampler::spawn(state.clone());
    drain::serve(listener, web::app(state), drain).await
}

/// Binds `addr` with a message that names the flag when it fails.
pub async fn bind(addr: SocketAddr, what: &str) -> anyhow::Result<TcpListener> {
    TcpListener::bind(addr)
        .await
        .map_err(|e| anyhow::anyhow!("cannot listen on {addr} ({what}): {e}"))
}
