//! What the dashboard knows of each connection: the peer's address (sign-in throttling, the
//! audit log) and when the connection must end by its maximum age, so that browsers and the
//! ingress's kept-alive connections spread over the replicas a roll or a scale-up added.

use std::net::SocketAddr;
use std::time::Duration;

use axum::extract::connect_info::Connected;
use axum::serve::IncomingStream;
use tokio::net::TcpListener;
use tokio::time::Instant;

/// One connection, as every request on it sees it (`ConnectInfo<Connection>`).
#[derive(Debug, Clone, Copy)]
pub struct Connection {
    /// The peer's address.
    pub peer: SocketAddr,
    opened: Instant,
    /// Where this connection's age falls within ±10 % of the maximum (uniform in 0..1).
    jitter: f64,
}

impl Connected<IncomingStream<'_, TcpListener>> for Connection {
    fn connect_info(stream: IncomingStream<'_, TcpListener>) -> Self {
        Connection {
            peer: *stream.remote_addr(),
            opened: Instant::now(),
            jitter: rand::random(),
        }
    }
}

impl Connection {
    /// Whether this connection has outlived `max_age` (its own, jittered; `0s`: never).
    pub fn too_old(&self, max_age: Duration) -> bool {
        screenlimit_limiter::config::connection_age(max_age, self.jitter)
            .is_some_and(|age| self.opened.elapsed() >= age)
    }
}
