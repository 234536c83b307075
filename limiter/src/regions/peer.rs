//! One other region as this one calls it: its limiters' URL, the token it takes, one HTTP client
//! (HTTP/2: with prior knowledge on `http://`, by ALPN on `https://`, so that every call shares
//! one connection and none pays a handshake), and each call under the regions' deadline.
//!
//! After [`FAILURES_TO_OPEN`] calls in a row without an answer the peer is taken as unreachable:
//! calls fail at once instead of each waiting out the deadline, and a probe asks it every
//! [`PROBE_INTERVAL`] until it answers, then wakes [`Peer::healed`]. Each change is logged once,
//! with the calls that failed meanwhile, never a line per call.

use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::sync::Notify;

use serde::Serialize;
use serde::de::DeserializeOwned;

use super::wire::{MAX_BODY_BYTES, Op};
use crate::config::PeerConfig;
use crate::config::error::{invalid, read_named_file};
use crate::metrics::{CallOutcome, CallRecord, RegionMetrics};
use crate::store::StoreError;

/// Calls in a row without an answer that make a peer unreachable.
pub const FAILURES_TO_OPEN: u32 = 2;
/// How often an unreachable peer is asked whether it answers again.
pub const PROBE_INTERVAL: Duration = Duration::from_secs(1);

/// How a peer answered lately, as `/v1/fleet` shows it.
#[derive(Debug, Clone, PartialEq, serde::Serialize, utoipa::ToSchema)]
pub struct PeerView {
    pub name: String,
    /// False from the second call in a row it left unanswered until a probe gets an answer.
    pub reachable: bool,
    /// The last answered call's time, in milliseconds.
    pub last_call_ms: Option<f64>,
    pub calls: u64,
    pub failed: u64,
    /// Why the last failed call failed.
    pub last_error: Option<String>,
}

pub struct Peer {
    pub name: String,
    /// Each operation's URL, built once from the base by path segments.
    urls: Vec<reqwest::Url>,
    authorization: reqwest::header::HeaderValue,
    http: reqwest::Client,
    timeout: Duration,
    metrics: RegionMetrics,
    reachable: AtomicBool,
    failures_in_a_row: AtomicU32,
    /// Woken when an unreachable peer answers again.
    pub healed: Notify,
    calls: AtomicU64,
    failed: AtomicU64,
    /// Calls failed since the last change of reachability, for its log line.
    failed_since_change: AtomicU64,
    last: Mutex<(Option<f64>, Option<String>)>,
}

impl Peer {
    pub fn new(
        config: &PeerConfig,
        token: &str,
        timeout: Duration,
        metrics: RegionMetrics,
    ) -> anyhow::Result<Peer> {
        let base = reqwest::Url::parse(&config.url)?;
        let urls = Op::ALL
            .iter()
            .map(|op| {
                let mut url = base.clone();
                url.path_segments_mut()
                    .map_err(|()| anyhow::anyhow!("{} cannot take a path", config.url))?
                    .pop_if_empty()
                    .extend(["v1", "regions", op.name()]);
                Ok(url)
            })
            .collect::<anyhow::Result<Vec<_>>>()?;
        let mut builder = reqwest::Client::builder()
            .timeout(timeout)
            .connect_timeout(timeout)
            .redirect(reqwest::redirect::Policy::none())
            .tcp_nodelay(true)
            // A link that went silent (a partition) is found by its pings, not by the calls
            // that wait on it.
            .http2_keep_alive_interval(Duration::from_secs(5))
            .http2_keep_alive_timeout(timeout.max(Duration::from_secs(1)))
            .http2_keep_alive_while_idle(true)
            .pool_idle_timeout(Duration::from_secs(90));
        if base.scheme() == "http" {
            builder = builder.http2_prior_knowledge();
        }
        if let Some(path) = &config.ca_file {
            // Config errors (exit 2), naming the field, like the token files.
            let pem = read_named_file("regions.peers", path)?;
            let no_certs = |why: String| {
                invalid(
                    "regions.peers",
                    format!(
                        "peer {:?}: ca_file {} holds no PEM certificate{why}",
                        config.name,
                        path.display()
                    ),
                )
            };
            let certs = reqwest::Certificate::from_pem_bundle(pem.as_bytes())
                .map_err(|e| no_certs(format!(" ({e})")))?;
            if certs.is_empty() {
                return Err(no_certs(String::new()).into());
            }
            for cert in certs {
                builder = builder.add_root_certificate(cert);
            }
        }
        let mut authorization = reqwest::header::HeaderValue::from_str(&format!("Bearer {token}"))?;
        authorization.set_sensitive(true);
        Ok(Peer {
            name: config.name.clone(),
            urls,
            authorization,
            http: builder.build()?,
            timeout,
            metrics,
            reachable: AtomicBool::new(true),
            failures_in_a_row: AtomicU32::new(0),
            healed: Notify::new(),
            calls: AtomicU64::new(0),
            failed: AtomicU64::new(0),
            failed_since_change: AtomicU64::new(0),
            last: Mutex::new((None, None)),
        })
    }

    /// Asks the peer's store `op` with `body`, carrying `carried` operations: its answer, the
    /// error its store gave, or [`StoreError::Region`] when it gave neither in time (at once
    /// while it is unreachable).
    pub async fn call<Q: Serialize, A: DeserializeOwned>(
        self: &Arc<Self>,
        op: Op,
        body: &Q,
        carried: usize,
    ) -> Result<A, StoreError> {
        if !self.reachable.load(Ordering::Relaxed) {
            return Err(self.error("unreachable; asked again every second".into()));
        }
        let answer = self.send(op, body, carried).await;
        if matches!(answer, Err(StoreError::Region { .. })) {
            self.note_failed();
        } else {
            self.failures_in_a_row.store(0, Ordering::Relaxed);
        }
        answer
    }

    /// The region metrics this peer's calls are counted in.
    pub fn metrics(&self) -> &RegionMetrics {
        &self.metrics
    }

    /// Whether the peer is taken as answering.
    pub fn reachable(&self) -> bool {
        self.reachable.load(Ordering::Relaxed)
    }

    async fn send<Q: Serialize, A: DeserializeOwned>(
        &self,
        op: Op,
        body: &Q,
        carried: usize,
    ) -> Result<A, StoreError> {
        let started = Instant::now();
        let payload = serde_json::to_vec(body).map_err(|e| self.error(format!("encode: {e}")))?;
        let sent = payload.len();
        let exchange = tokio::time::timeout(self.timeout, self.exchange(op, payload)).await;
        let reply = match exchange {
            Ok(Ok(bytes)) => serde_json::from_slice::<Result<A, StoreError>>(&bytes)
                .map(|answer| (answer, bytes.len()))
                .map_err(|e| (format!("an answer that is not one: {e}"), bytes.len())),
            Ok(Err(why)) => Err((why, 0)),
            Err(_) => Err((
                format!(
                    "no answer within {}",
                    humantime::format_duration(self.timeout)
                ),
                0,
            )),
        };
        let elapsed = started.elapsed();
        let (outcome, received) = match &reply {
            Ok((_, received)) => (CallOutcome::Answered, *received),
            Err((_, received)) => (CallOutcome::Failed, *received),
        };
        let record = CallRecord {
            outcome,
            elapsed,
            sent,
            received,
            carried,
        };
        self.metrics.call(&self.name, op.name(), &record);
        self.calls.fetch_add(1, Ordering::Relaxed);
        match reply {
            Ok((answer, _)) => {
                self.last.lock().unwrap_or_else(|p| p.into_inner()).0 =
                    Some(elapsed.as_secs_f64() * 1000.0);
                answer
            }
            Err((why, _)) => {
                self.failed.fetch_add(1, Ordering::Relaxed);
                self.failed_since_change.fetch_add(1, Ordering::Relaxed);
                self.last.lock().unwrap_or_else(|p| p.into_inner()).1 = Some(why.clone());
                Err(self.error(why))
            }
        }
    }

    async fn exchange(&self, op: Op, payload: Vec<u8>) -> Result<Vec<u8>, String> {
        let url = self.urls[op as usize].clone();
        let mut response = self
            .http
            .post(url)
            .header(reqwest::header::AUTHORIZATION, self.authorization.clone())
            .header(reqwest::header::CONTENT_TYPE, "application/json")
            .body(payload)
            .send()
            .await
            .map_err(|e| describe(&e))?;
        let status = response.status();
        let mut body = Vec::new();
        while let Some(chunk) = response.chunk().await.map_err(|e| describe(&e))? {
            if body.len() + chunk.len() > MAX_BODY_BYTES {
                return Err(format!("an answer larger than {MAX_BODY_BYTES} bytes"));
            }
            body.extend_from_slice(&chunk);
        }
        if !status.is_success() {
            let code = serde_json::from_slice::<serde_json::Value>(&body)
                .ok()
                .and_then(|v| v["error"].as_str().map(str::to_owned))
                .unwrap_or_default();
            return Err(format!("HTTP {} {code}", status.as_u16()));
        }
        Ok(body)
    }

    fn error(&self, message: String) -> StoreError {
        StoreError::Region {
            region: self.name.clone(),
            message,
        }
    }

    /// One more call without an answer: the peer becomes unreachable at the threshold, and a
    /// probe starts.
    fn note_failed(self: &Arc<Self>) {
        let in_a_row = self.failures_in_a_row.fetch_add(1, Ordering::Relaxed) + 1;
        if in_a_row < FAILURES_TO_OPEN || !self.reachable.swap(false, Ordering::Relaxed) {
            return;
        }
        let why = self.view().last_error.unwrap_or_default();
        tracing::warn!(peer = %self.name, error = why, "region did not answer; its accounts' plays follow the failure policy until it does");
        let peer = self.clone();
        tokio::spawn(async move { peer.probe().await });
    }

    /// Asks the peer every [`PROBE_INTERVAL`] until it answers, then takes it as reachable.
    async fn probe(&self) {
        loop {
            tokio::time::sleep(PROBE_INTERVAL).await;
            if self.send::<_, ()>(Op::Ping, &(), 0).await.is_ok() {
                break;
            }
        }
        self.failures_in_a_row.store(0, Ordering::Relaxed);
        self.reachable.store(true, Ordering::Relaxed);
        let failed = self.failed_since_change.swap(0, Ordering::Relaxed);
        tracing::info!(peer = %self.name, failed_calls = failed, "region answers again");
        self.healed.notify_one();
    }

    pub fn view(&self) -> PeerView {
        let (last_call_ms, last_error) =
            self.last.lock().unwrap_or_else(|p| p.into_inner()).clone();
        PeerView {
            name: self.name.clone(),
            reachable: self.reachable.load(Ordering::Relaxed),
            last_call_ms,
            calls: self.calls.load(Ordering::Relaxed),
            failed: self.failed.load(Ordering::Relaxed),
            last_error,
        }
    }
}

/// A transport error in a few words, with its cause (reqwest's own text omits it).
fn describe(error: &reqwest::Error) -> String {
    let mut text = error.to_string();
    let mut source = std::error::Error::source(error);
    while let Some(cause) = source {
        text.push_str(": ");
        text.push_str(&cause.to_string());
        source = cause.source();
    }
    text
}
