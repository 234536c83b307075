//! `http`: the deadlines and bounds of the API's connections and requests.

use std::time::Duration;

use serde::Deserialize;

use super::api_access::CorsConfig;
use super::error::{ConfigError, invalid};

/// What one instance takes on: deadlines on every connection, and bounds on connections and on
/// requests in flight. The defaults fit a limiter behind a load balancer that pools connections.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct HttpConfig {
    /// From the first byte of a request to the end of its headers; a slower client's
    /// connection is closed.
    #[serde(with = "humantime_serde")]
    pub header_read_timeout: Duration,
    /// From the end of the headers to the end of the body; a slower client is answered
    /// 408 `request_timeout` and its connection closed.
    #[serde(with = "humantime_serde")]
    pub body_read_timeout: Duration,
    /// How long a connection may wait for its next request (and a new connection for its first
    /// byte) before it is closed; an HTTP/2 connection, how long it may have no stream open
    /// (then it is sent a GOAWAY). Keep it above the load balancer's own idle timeout.
    #[serde(with = "humantime_serde")]
    pub idle_timeout: Duration,
    /// How long a write of an answer may make no progress (a client that sends but does not
    /// read) before the connection is closed. On HTTP/2 also: how long an answer may wait for
    /// flow-control window, how long the peer may be silent before it is sent a PING, and how
    /// long it has to answer that PING.
    #[serde(with = "humantime_serde")]
    pub write_timeout: Duration,
    /// How long a client may keep one connection: the first answer after this age (each
    /// connection's own, within ±10 % so that a roll's connections do not all close at once)
    /// carries `Connection: close`, and the client's next request opens a new connection, which
    /// the Service may send to another pod (an HTTP/2 connection is sent a GOAWAY at that age,
    /// and its streams in flight finish). Without it, kept-alive gateways stay on the pods they
    /// first reached, and a pod added by a roll or the autoscaler gets no share. `0s`: never.
    #[serde(with = "humantime_serde")]
    pub max_connection_age: Duration,
    /// Connections the kernel queues for `accept` (capped by `net.core.somaxconn`). A burst of
    /// new connections beyond it loses SYNs, and each client so dropped waits a full second
    /// before its retry: keep it above the largest burst of connections expected.
    pub listen_backlog: u32,
    /// Largest request line + headers, in bytes; beyond it the answer is 431 and the connection
    /// is closed. On HTTP/2 it is `SETTINGS_MAX_HEADER_LIST_SIZE` (a header block larger than
    /// that, decoded, is answered 431 on its stream; the connection stays).
    pub max_header_bytes: usize,
    /// Serve HTTP/2 over cleartext with prior knowledge (h2c) on the same listener as HTTP/1.1:
    /// a connection that opens with the HTTP/2 preface is served as HTTP/2. Gateways (Envoy,
    /// ingress controllers) multiplex many players' requests on one such connection. `false`:
    /// HTTP/1.1 only (a connection that opens with the preface is closed).
    pub h2c: bool,
    /// Streams one HTTP/2 connection may have open at once (`SETTINGS_MAX_CONCURRENT_STREAMS`);
    /// one more is refused (`REFUSED_STREAM`) before it reaches the API.
    pub max_concurrent_streams: u32,
    /// Open connections this instance keeps; one more is accepted and closed at once.
    pub max_connections: usize,
    /// Requests this instance serves at once; beyond it a request is shed at once by the
    /// failure policy (never queued).
    pub max_in_flight: usize,
    /// A serving lane (thread) further behind than this, because its CPU cannot keep up, sheds
    /// the requests it takes in by the failure policy until it has caught up; `0s` (the
    /// default): never. Off by default because under `open` a shed play is allowed without the
    /// store: a burst a slow instance takes a while to work through must not admit past the cap.
    #[serde(with = "humantime_serde")]
    pub max_queue_delay: Duration,
    /// After SIGTERM, how long the instance keeps accepting and answering (with `/readyz` 503
    /// and `Connection: close` on every answer) before it stops accepting: the time the load
    /// balancers and the Service's endpoints take to stop sending it new requests. `0s`: stop
    /// accepting at once.
    #[serde(with = "humantime_serde")]
    pub drain_period: Duration,
    /// After the drain period, how long requests in flight get to finish before the process
    /// exits anyway.
    #[serde(with = "humantime_serde")]
    pub shutdown_timeout: Duration,
    /// The web players (origins) whose pages may call the player routes from a browser.
    pub cors: CorsConfig,
}

impl Default for HttpConfig {
    fn default() -> Self {
        HttpConfig {
            header_read_timeout: Duration::from_secs(5),
            body_read_timeout: Duration::from_secs(10),
            idle_timeout: Duration::from_secs(75),
            write_timeout: Duration::from_secs(10),
            max_connection_age: Duration::from_secs(300),
            listen_backlog: 8_192,
            max_header_bytes: 16 * 1024,
            h2c: true,
            max_concurrent_streams: 256,
            max_connections: 10_000,
            max_in_flight: 4_096,
            max_queue_delay: Duration::ZERO,
            drain_period: Duration::from_secs(5),
            shutdown_timeout: Duration::from_secs(10),
            cors: CorsConfig::default(),
        }
    }
}

/// Bounds of `http.max_header_bytes`.
pub const HEADER_BYTES_RANGE: std::ops::RangeInclusive<usize> = 1024..=(1 << 20);

/// Bounds of `http.max_concurrent_streams`.
pub const CONCURRENT_STREAMS_RANGE: std::ops::RangeInclusive<u32> = 1..=65_535;

/// Bounds of `http.listen_backlog` (the kernel caps it at `net.core.somaxconn` anyway).
pub const LISTEN_BACKLOG_RANGE: std::ops::RangeInclusive<u32> = 16..=65_535;

/// Longest `http.drain_period`: a pod's grace period must cover it.
pub const MAX_DRAIN_PERIOD: Duration = Duration::from_secs(300);

/// Bounds of `http.max_connection_age` when set: short enough ages turn every request into a
/// new connection (a TLS handshake at the balancer each time).
pub const MAX_CONNECTION_AGE_RANGE: std::ops::RangeInclusive<Duration> =
    Duration::from_secs(1)..=Duration::from_secs(86_400);

/// A connection's own maximum age: `max_age` within ±10 % by `unit` (uniform in 0..1), so
/// that the connections a roll opened together do not all close together. `None`: never.
pub fn connection_age(max_age: Duration, unit: f64) -> Option<Duration> {
    (!max_age.is_zero()).then(|| max_age.mul_f64(0.9 + 0.2 * unit.clamp(0.0, 1.0)))
}

/// Bounds of `http.shutdown_timeout`.
pub const SHUTDOWN_TIMEOUT_RANGE: std::ops::RangeInclusive<Duration> =
    Duration::from_millis(100)..=Duration::from_secs(600);

impl HttpConfig {
    /// Checks every bound, naming the field.
    pub fn validate(&self) -> Result<(), ConfigError> {
        let http = self;
        for (field, value) in [
            ("http.header_read_timeout", http.header_read_timeout),
            ("http.body_read_timeout", http.body_read_timeout),
            ("http.idle_timeout", http.idle_timeout),
            ("http.write_timeout", http.write_timeout),
        ] {
            if value < Duration::from_millis(10) || value > Duration::from_secs(3600) {
                return Err(invalid(
                    field,
                    format!(
                        "{} must be between 10ms and 1h",
                        humantime::format_duration(value)
                    ),
                ));
            }
        }
        if !HEADER_BYTES_RANGE.contains(&http.max_header_bytes) {
            return Err(invalid(
                "http.max_header_bytes",
                format!(
                    "{} must be between {} and {}",
                    http.max_header_bytes,
                    HEADER_BYTES_RANGE.start(),
                    HEADER_BYTES_RANGE.end()
                ),
            ));
        }
        if !CONCURRENT_STREAMS_RANGE.contains(&http.max_concurrent_streams) {
            return Err(invalid(
                "http.max_concurrent_streams",
                format!(
                    "{} must be between {} and {}",
                    http.max_concurrent_streams,
                    CONCURRENT_STREAMS_RANGE.start(),
                    CONCURRENT_STREAMS_RANGE.end()
                ),
            ));
        }
        if http.max_connections == 0 {
            return Err(invalid("http.max_connections", "must be at least 1"));
        }
        if http.max_in_flight == 0 {
            return Err(invalid("http.max_in_flight", "must be at least 1"));
        }
        if !http.max_queue_delay.is_zero()
            && !(Duration::from_millis(1)..=Duration::from_secs(10)).contains(&http.max_queue_delay)
        {
            return Err(invalid(
                "http.max_queue_delay",
                format!(
                    "{} must be 0s (off) or between 1ms and 10s",
                    humantime::format_duration(http.max_queue_delay)
                ),
            ));
        }
        if !http.max_connection_age.is_zero()
            && !MAX_CONNECTION_AGE_RANGE.contains(&http.max_connection_age)
        {
            return Err(invalid(
                "http.max_connection_age",
                format!(
                    "{} must be 0s (never) or between 1s and 24h",
                    humantime::format_duration(http.max_connection_age)
                ),
            ));
        }
        if http.drain_period > MAX_DRAIN_PERIOD {
            return Err(invalid(
                "http.drain_period",
                format!(
                    "{} must be at most {} (0s: stop accepting at once)",
                    humantime::format_duration(http.drain_period),
                    humantime::format_duration(MAX_DRAIN_PERIOD)
                ),
            ));
        }
        if !SHUTDOWN_TIMEOUT_RANGE.contains(&http.shutdown_timeout) {
            return Err(invalid(
                "http.shutdown_timeout",
                format!(
                    "{} must be between 100ms and 10m",
                    humantime::format_duration(http.shutdown_timeout)
                ),
            ));
        }
        if !LISTEN_BACKLOG_RANGE.contains(&http.listen_backlog) {
            return Err(invalid(
                "http.listen_backlog",
                format!(
                    "{} must be between {} and {}",
                    http.listen_backlog,
                    LISTEN_BACKLOG_RANGE.start(),
                    LISTEN_BACKLOG_RANGE.end()
                ),
            ));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::connection_age;
    use std::time::Duration;

    #[test]
    fn a_connection_age_is_jittered_within_a_tenth_and_zero_is_never() {
        let age = Duration::from_secs(300);
        assert_eq!(connection_age(age, 0.0), Some(Duration::from_secs(270)));
        assert_eq!(connection_age(age, 1.0), Some(Duration::from_secs(330)));
        assert_eq!(connection_age(age, 0.5), Some(age));
        assert_eq!(connection_age(age, 7.0), Some(Duration::from_secs(330)));
        assert_eq!(connection_age(Duration::ZERO, 0.5), None);
    }
}
