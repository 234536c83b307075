//! Wires config, service and router together and serves until SIGTERM or Ctrl-C.

use std::sync::Arc;

use tokio::net::TcpListener;

use crate::config::Config;
use crate::service::StreamService;

/// Binds the configured address and serves the API until a shutdown signal.
pub async fn run(config: Config) -> anyhow::Result<()> {
    let auth_token = config.resolve_auth_token()?;
    let service = Arc::new(StreamService::from_config(&config)?);
    let router = crate::api::router(service, config.max_body_bytes, auth_token.clone());
    let listener = TcpListener::bind(config.listen)
        .await
        .map_err(|e| anyhow::anyhow!("cannot listen on {} (`listen`): {e}", config.listen))?;
    tracing::info!(
        listen = %listener.local_addr()?,
        backend = ?config.store.backend,
        shards = config.store.redis_shards.len(),
        failure_policy = ?config.failure_policy,
        authentication = auth_token.is_some(),
        "screenlimit limiter serving"
    );
    axum::serve(listener, router)
        .with_graceful_shutdown(shutdown_signal())
        .await?;
    tracing::info!("screenlimit limiter stopped");
    Ok(())
}

async fn shutdown_signal() {
    let ctrl_c = tokio::signal::ctrl_c();
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
        .expect("installing the SIGTERM handler");
    tokio::select! {
        _ = ctrl_c => {}
        _ = term.recv() => {}
    }
    tracing::info!("shutdown signal received; finishing in-flight requests");
}
