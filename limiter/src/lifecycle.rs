//! Process setup the binaries share (the limiter's and the admin UI's): logging and the
//! shutdown signal.

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
