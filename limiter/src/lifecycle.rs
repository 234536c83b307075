//! Process setup the binaries share (the limiter's and the admin UI's): logging, the shutdown
//! signal, and the drain that comes before a stop.
//!
//! A rollout stops a pod with SIGTERM while its address is still in the Service's endpoints
//! (kube-proxy, ingress controllers and gateways learn of the stop a few seconds later), so a
//! process that stopped listening at once would have its clients refused. Instead, on the first
//! signal it **drains**: `/readyz` answers 503 (the endpoints drop it), every answer carries
//! `Connection: close` (kept-alive clients move to another pod), new connections are still
//! taken, for `http.drain_period`; then it stops accepting, finishes what is in flight (bounded)
//! and exits. A second signal ends the drain period at once.

use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

/// Installs the global tracing subscriber: the filter from `RUST_LOG` (default `info`), lines
/// as JSON when `format` is `"json"` and as text otherwise.
pub fn init_tracing(format: &str) {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    let builder = tracing_subscriber::fmt().with_env_filter(filter);
    if format == "json" {
        builder.json().init();
    } else {
        builder.init();
    }
}

/// Resolves on Ctrl-C or SIGTERM. Logs nothing: each caller says what shutting down means.
pub async fn shutdown_signal() {
    let ctrl_c = tokio::signal::ctrl_c();
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
        .expect("installing the SIGTERM handler");
    tokio::select! {
        _ = ctrl_c => {}
        _ = term.recv() => {}
    }
}

/// Whether the process is draining, shared by whatever answers requests (a few loads of one
/// atomic cell on the hot path).
#[derive(Clone, Default, Debug)]
pub struct Draining(Arc<OnceLock<Instant>>);

impl Draining {
    /// Marks the drain as begun (the first call counts).
    pub fn start(&self) {
        let _ = self.0.set(Instant::now());
    }

    pub fn is_draining(&self) -> bool {
        self.0.get().is_some()
    }

    /// How long ago the drain began.
    pub fn elapsed(&self) -> Option<Duration> {
        self.0.get().map(Instant::elapsed)
    }
}

/// Waits for the shutdown signal, then drains for `period` (cut short by a second signal) and
/// returns: the caller then stops accepting and finishes what is in flight. `what` names the
/// process in the one line logged when the drain begins.
pub async fn drain_on_signal(draining: &Draining, period: Duration, what: &str) {
    shutdown_signal().await;
    draining.start();
    tracing::info!(
        drain_period = %humantime::format_duration(period),
        "{what}: shutdown signal received; draining (readiness 503, answers carry Connection: close, \
         new connections still taken) before it stops accepting"
    );
    tokio::select! {
        _ = tokio::time::sleep(period) => {}
        _ = shutdown_signal() => {}
    }
}
