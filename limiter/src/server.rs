//! Wires config, service and router together and serves until SIGTERM or Ctrl-C.
//!
//! The limiter runs one single-threaded Tokio runtime per thread ("lane", `threads` in the
//! config). One listener accepts connections and deals them out to the lanes in turn; a lane
//! serves each of its connections to the end, on its own thread: no work stealing. Store calls
//! of all lanes for one shard share that shard's queue and connection, so that they share round
//! trips to Redis (see `store/redis/batch.rs`). Lane 0 is the thread that called [`run`]; it also accepts, runs the background tasks (shard
//! maintenance, plan listener, sweeper) and handles the shutdown signal: a drain of
//! `http.drain_period` (`lifecycle.rs`), then no more accepting, in-flight requests finished
//! within `http.shutdown_timeout`, exit.

mod connection;

use std::sync::Arc;
use std::time::Duration;

use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{mpsc, watch};

use crate::config::{Config, HttpConfig};
use crate::overload::{ConnectionSlot, Overload};
use crate::service::StreamService;

/// Serves the API until a shutdown signal; blocks the calling thread, which becomes lane 0.
pub fn run(config: Config) -> anyhow::Result<()> {
    let lanes = config.threads();
    let runtime = lane_runtime()?;
    runtime.block_on(serve(config, lanes))
}

/// The credentials the API checks, read from their files.
pub fn api_auth(config: &Config) -> Result<crate::api::auth::ApiAuth, crate::config::ConfigError> {
    Ok(crate::api::auth::ApiAuth {
        credentials: config.resolve_credentials()?,
        players: config
            .auth
            .players
            .as_ref()
            .map(crate::player_tokens::PlayerTokens::from_config)
            .transpose()?,
        region: match &config.regions {
            Some(regions) => Some(regions.read_tokens()?.inbound),
            None => None,
        },
    })
}

fn lane_runtime() -> anyhow::Result<tokio::runtime::Runtime> {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| anyhow::anyhow!("cannot start the Tokio runtime: {e}"))
}

/// An accepted connection, counted against `http.max_connections` until its slot drops.
type Incoming = (std::net::TcpStream, ConnectionSlot);

async fn serve(config: Config, lanes: usize) -> anyhow::Result<()> {
    let auth = api_auth(&config)?;
    let service = Arc::new(StreamService::from_config(&config)?);
    service.check_store_access().await?;
    crate::reload::spawn(service.clone(), config.clone());
    // Key rotation: the player tokens' key file is read again when it changes.
    let key_reload = auth.players.as_ref().map(|players| players.spawn_reload());
    let authentication = auth.enabled();
    let router = crate::api::router(
        service.clone(),
        crate::api::ApiOptions {
            max_body_bytes: config.max_body_bytes,
            auth,
            cors: crate::api::cors::CorsPolicy::from_config(&config.http.cors),
        },
    );
    let listener = listen(config.listen, config.http.listen_backlog)
        .map_err(|e| anyhow::anyhow!("cannot listen on {} (`listen`): {e}", config.listen))?;
    let local = listener.local_addr()?;
    tracing::info!(
        listen = %local,
        backend = ?config.store.backend,
        shards = config.store.redis_shards.len(),
        failure_policy = ?config.failure_policy,
        authentication,
        threads = lanes,
        "screenlimit limiter serving"
    );
    let (stop, stopping) = watch::channel(false);
    let mut to_lanes = Vec::with_capacity(lanes);
    let (to_own, own) = mpsc::unbounded_channel();
    to_lanes.push(to_own);
    let mut others = Vec::with_capacity(lanes.saturating_sub(1));
    for lane in 1..lanes {
        let (to_lane, incoming) = mpsc::unbounded_channel();
        to_lanes.push(to_lane);
        let (service, router, stopping) = (service.clone(), router.clone(), stopping.clone());
        let (http, max_body) = (config.http.clone(), config.max_body_bytes);
        let thread = std::thread::Builder::new()
            .name(format!("screenlimit-lane-{lane}"))
            .spawn(move || -> anyhow::Result<usize> {
                lane_runtime()?.block_on(async move {
                    warm_up(service.clone());
                    Ok(serve_lane(incoming, service, router, &http, max_body, stopping).await)
                })
            })
            .map_err(|e| anyhow::anyhow!("cannot start lane thread {lane}: {e}"))?;
        others.push(thread);
    }
    let accepting = tokio::spawn(accept(
        listener,
        to_lanes,
        service.overload.clone(),
        stopping.clone(),
    ));
    let overload = service.overload.clone();
    let ticking = tokio::spawn(async move {
        let mut every_second = tokio::time::interval(Duration::from_secs(1));
        every_second.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            every_second.tick().await;
            overload.tick();
        }
    });
    let (draining, drain_period) = (service.draining.clone(), config.http.drain_period);
    let signal = tokio::spawn(async move {
        crate::lifecycle::drain_on_signal(&draining, drain_period, "screenlimit limiter").await;
        let _ = stop.send(true);
    });
    let draining = service.draining.clone();
    warm_up(service.clone());
    let cut = serve_lane(
        own,
        service,
        router,
        &config.http,
        config.max_body_bytes,
        stopping,
    )
    .await;
    accepting.abort();
    signal.abort();
    if let Some(task) = key_reload {
        task.abort();
    }
    ticking.abort();
    // The other lanes may still finish requests that need lane 0's tasks: wait here for them.
    let joined = tokio::task::spawn_blocking(move || {
        others
            .into_iter()
            .map(|t| {
                t.join()
                    .unwrap_or_else(|_| Err(anyhow::anyhow!("a lane thread panicked")))
            })
            .collect::<anyhow::Result<Vec<usize>>>()
    })
    .await?;
    let cut = cut + joined?.into_iter().sum::<usize>();
    tracing::info!(
        drained_ms = draining.elapsed().map(|d| d.as_millis() as u64),
        connections_cut = cut,
        "screenlimit limiter stopped (drain over)"
    );
    Ok(())
}

/// Binds the API's socket with `http.listen_backlog` (Tokio's `bind` would use 1,024: a burst of
/// new connections beyond the queue loses SYNs, and each client so dropped waits a second).
fn listen(addr: std::net::SocketAddr, backlog: u32) -> std::io::Result<TcpListener> {
    let socket = match addr {
        std::net::SocketAddr::V4(_) => tokio::net::TcpSocket::new_v4()?,
        std::net::SocketAddr::V6(_) => tokio::net::TcpSocket::new_v6()?,
    };
    socket.set_reuseaddr(true)?;
    socket.bind(addr)?;
    socket.listen(backlog)
}

/// Opens this lane's store connections in the background (a health check makes each shard
/// connect), so that the lane's first requests do not pay for it.
fn warm_up(service: Arc<StreamService>) {
    tokio::spawn(async move {
        service.health().await;
    });
}

/// Accepts connections and deals them out to the lanes in turn, until the stop signal.
///
/// Beyond `http.max_connections` open connections, a new one is accepted and closed at once
/// (after a best-effort `503 overloaded` written without reading the request), rather than
/// left unaccepted: a client in the kernel's backlog waits for its own timeout, one that is
/// closed can try another instance at once, and the listen queue cannot fill up behind it.
async fn accept(
    listener: TcpListener,
    lanes: Vec<mpsc::UnboundedSender<Incoming>>,
    overload: Arc<Overload>,
    mut stopping: watch::Receiver<bool>,
) {
    let mut next = 0;
    loop {
        let accepted = tokio::select! {
            accepted = listener.accept() => accepted,
            _ = stopping.wait_for(|stop| *stop) => return,
        };
        match accepted {
            Ok((stream, _peer)) => {
                let Some(slot) = overload.connect() else {
                    connection::refuse(stream);
                    continue;
                };
                // Deregister from this lane's reactor; the receiving lane registers it with its own.
                let mut handed = match stream.into_std() {
                    Ok(stream) => (stream, slot),
                    Err(error) => {
                        tracing::debug!(%error, "dropping an accepted connection");
                        continue;
                    }
                };
                // A lane that is gone (it could not start) is skipped; lane 0 is always there.
                for _ in 0..lanes.len() {
                    let lane = next;
                    next = (next + 1) % lanes.len();
                    match lanes[lane].send(handed) {
                        Ok(()) => break,
                        Err(mpsc::error::SendError(back)) => handed = back,
                    }
                }
            }
            // The peer gave up before we accepted it: nothing to do.
            Err(error) if is_connection_error(&error) => {}
            // Out of file descriptors and the like: wait instead of spinning.
            Err(error) => {
                tracing::error!(%error, "accept failed; retrying in 1 s");
                tokio::time::sleep(Duration::from_secs(1)).await;
            }
        }
    }
}

fn is_connection_error(error: &std::io::Error) -> bool {
    use std::io::ErrorKind::{ConnectionAborted, ConnectionRefused, ConnectionReset};
    matches!(
        error.kind(),
        ConnectionRefused | ConnectionAborted | ConnectionReset
    )
}

/// Serves the connections handed to this lane until the stop signal, then finishes in-flight
/// requests (idle connections are closed at once) and returns when every connection is done,
/// or at `http.shutdown_timeout`; returns how many were still open then (and are cut).
async fn serve_lane(
    mut incoming: mpsc::UnboundedReceiver<Incoming>,
    service: Arc<StreamService>,
    router: axum::Router,
    http: &HttpConfig,
    max_body_bytes: usize,
    mut stopping: watch::Receiver<bool>,
) -> usize {
    let lane = connection::Lane::new(service, router, http, max_body_bytes);
    // The probe wakes the lane every 5 ms: only when the queue delay is used.
    let probe = (!http.max_queue_delay.is_zero()).then(|| tokio::spawn(lane.probe()));
    // Every connection task holds a sender; when all are dropped, `recv` answers `None`.
    let (open, mut all_closed) = mpsc::channel::<()>(1);
    loop {
        let handed = tokio::select! {
            handed = incoming.recv() => handed,
            _ = stopping.wait_for(|stop| *stop) => break,
        };
        let Some((stream, slot)) = handed else {
            // Lane 0 stopped accepting: shutdown is under way.
            let _ = stopping.wait_for(|stop| *stop).await;
            break;
        };
        let stream = match TcpStream::from_std(stream) {
            Ok(stream) => stream,
            Err(error) => {
                tracing::debug!(%error, "dropping a handed-over connection");
                continue;
            }
        };
        let (lane, stopping, open) = (lane.clone(), stopping.clone(), open.clone());
        tokio::spawn(async move {
            lane.serve(stream, stopping).await;
            drop((slot, open));
        });
    }
    let still_open = open.downgrade();
    drop(open);
    // What is still in flight after `http.shutdown_timeout` is cut when the lane's runtime drops.
    let _ = tokio::time::timeout(http.shutdown_timeout, all_closed.recv()).await;
    if let Some(probe) = probe {
        probe.abort();
    }
    still_open.strong_count()
}
