//! `--dev`: a limiter on the embedded store, in this process, beside the dashboard, so that one
//! command gives a newcomer both. Tests use it too.

use std::net::SocketAddr;
use std::sync::Arc;

use screenlimit_limiter::config::Config;
use screenlimit_limiter::service::StreamService;
use tokio::net::TcpListener;

/// A limiter running inside this process.
pub struct DevLimiter {
    pub addr: SocketAddr,
    pub task: tokio::task::JoinHandle<()>,
}

impl DevLimiter {
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }
}

/// Starts the limiter with its default config (embedded store, plans basic 1, standard 2,
/// premium 4) on `listener`, optionally requiring `auth_token`.
pub fn start_limiter(
    listener: TcpListener,
    auth_token: Option<String>,
) -> anyhow::Result<DevLimiter> {
    start_limiter_with(listener, Config::default(), auth_token)
}

/// Starts the limiter with `config` (its `listen` replaced by the listener's address) on
/// `listener`, optionally requiring `auth_token`. Tests use it for a limiter on Redis.
pub fn start_limiter_with(
    listener: TcpListener,
    config: Config,
    auth_token: Option<String>,
) -> anyhow::Result<DevLimiter> {
    let addr = listener.local_addr()?;
    let config = Config {
        listen: addr,
        ..config
    };
    let service = Arc::new(StreamService::from_config(&config)?);
    let router = screenlimit_limiter::api::router(
        service,
        screenlimit_limiter::api::ApiOptions {
            auth: screenlimit_limiter::api::auth::ApiAuth::single_token(auth_token),
            ..screenlimit_limiter::api::ApiOptions::open(config.max_body_bytes)
        },
    );
    let task = tokio::spawn(async move {
        if let Err(error) = axum::serve(listener, router).await {
            tracing::error!(%error, "the in-process limiter stopped");
        }
    });
    Ok(DevLimiter { addr, task })
}

/// A random password of `len` letters and digits.
pub fn random_password(len: usize) -> String {
    use rand::Rng;
    rand::rng()
        .sample_iter(rand::distr::Alphanumeric)
        .take(len)
        .map(char::from)
        .collect()
}
