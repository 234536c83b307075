//! `screenlimit-operator`: reconciles `StreamLimiter` resources.

use std::net::SocketAddr;
use std::process::ExitCode;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use clap::Parser;
use kube::Client;
use screenlimit_operator::controller::{self, check_crd};
use screenlimit_operator::http::{HttpState, router};
use screenlimit_operator::leader;
use screenlimit_operator::metrics::Metrics;
use screenlimit_operator::reconcile::Context;
use tracing::{error, info, warn};

/// screenlimit's Kubernetes operator: turns StreamLimiter resources into Redis shards, the
/// limiter and the admin UI.
#[derive(Parser)]
#[command(version)]
struct Cli {
    /// Address of /metrics, /healthz and /readyz.
    #[arg(
        long,
        env = "SCREENLIMIT_OPERATOR_HTTP",
        default_value = "0.0.0.0:8080"
    )]
    http: SocketAddr,
    /// Watch only this namespace (default: all namespaces).
    #[arg(long, env = "SCREENLIMIT_WATCH_NAMESPACE")]
    watch_namespace: Option<String>,
    /// Run without leader election (a single replica, or local development).
    #[arg(long)]
    no_leader_election: bool,
    /// Namespace of the leader-election Lease (the operator's own namespace).
    #[arg(long, env = "POD_NAMESPACE", default_value = "default")]
    lease_namespace: String,
    /// This replica's identity in the Lease (its pod name).
    #[arg(long, env = "POD_NAME")]
    identity: Option<String>,
    /// Log format.
    #[arg(long, env = "SCREENLIMIT_LOG_FORMAT", default_value = "text", value_parser = ["text", "json"])]
    log_format: String,
}

fn init_tracing(format: &str) {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    let builder = tracing_subscriber::fmt().with_env_filter(filter);
    if format == "json" {
        builder.json().init();
    } else {
        builder.init();
    }
}

#[tokio::main]
async fn main() -> ExitCode {
    let cli = Cli::parse();
    init_tracing(&cli.log_format);
    match run(cli).await {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            error!("{e:#}");
            eprintln!("screenlimit-operator: {e:#}");
            ExitCode::FAILURE
        }
    }
}

async fn run(cli: Cli) -> anyhow::Result<()> {
    let client = Client::try_default().await?;
    check_crd(&client, cli.watch_namespace.as_deref()).await?;

    let metrics = Arc::new(Metrics::default());
    let ready = Arc::new(AtomicBool::new(false));
    let listener = tokio::net::TcpListener::bind(cli.http).await?;
    let app = router(HttpState {
        metrics: metrics.clone(),
        ready: ready.clone(),
    });
    tokio::spawn(async move {
        if let Err(e) = axum::serve(listener, app).await {
            error!(error = %e, "HTTP server stopped");
        }
    });
    info!(addr = %cli.http, "serving /metrics, /healthz and /readyz");
    ready.store(true, Ordering::Relaxed);

    let identity = cli
        .identity
        .clone()
        .unwrap_or_else(|| format!("screenlimit-operator-{}", std::process::id()));
    let ctx = Arc::new(Context::new(
        client.clone(),
        metrics.clone(),
        Some(identity.clone()),
    ));
    // Bounded: without an answer the operator starts anyway and asks again when a
    // StreamLimiter wants monitoring.
    let discovery = tokio::time::timeout(
        std::time::Duration::from_secs(10),
        ctx.monitoring_api.discover(&client),
    )
    .await
    .map_err(|_| "no answer within 10 s".to_owned())
    .and_then(|r| r.map_err(|e| e.to_string()));
    match discovery {
        Ok(served) => info!(
            served = ?served.iter().map(|k| k.kind()).collect::<Vec<_>>(),
            "Prometheus Operator kinds served (monitoring.coreos.com/v1)"
        ),
        Err(error) => warn!(
            %error,
            "could not ask which Prometheus Operator kinds are served; asked again when a StreamLimiter wants them"
        ),
    }

    if cli.no_leader_election {
        metrics.leader.set(1);
        controller::run(client, cli.watch_namespace, ctx).await;
        return Ok(());
    }

    let mut leading = leader::elect(client.clone(), &cli.lease_namespace, &identity).await?;
    info!(lease = leader::LEASE_NAME, %identity, "waiting to become the leader");
    while !*leading.borrow_and_update() {
        leading.changed().await?;
    }
    info!("became the leader; reconciling");
    metrics.leader.set(1);
    tokio::select! {
        () = controller::run(client, cli.watch_namespace, ctx) => Ok(()),
        lost = async {
            loop {
                if leading.changed().await.is_err() || !*leading.borrow() {
                    break;
                }
            }
        } => {
            let () = lost;
            metrics.leader.set(0);
            warn!("lost the leader Lease; exiting so that only one replica reconciles");
            anyhow::bail!("lost leadership")
        }
    }
}
