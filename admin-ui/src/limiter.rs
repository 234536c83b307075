//! The dashboard's only source of truth: the limiter's HTTP API, with a deadline on every call.
//!
//! The body types are the dashboard's own (tolerant: unknown fields are ignored, missing ones
//! default) so that a dashboard and a limiter of neighbouring versions still understand each other.

use std::collections::BTreeMap;
use std::time::Duration;

use reqwest::{StatusCode, Url};
use screenlimit_limiter::model::AuditKind;
use serde::Deserialize;
use serde::de::DeserializeOwned;

mod history;

pub use history::{AccountHistory, HistoryDevice, HistoryEntry};

/// Why a limiter call gave no usable answer.
#[derive(Debug, thiserror::Error)]
pub enum LimiterError {
    #[error("the limiter at {url} did not answer within {timeout:?}")]
    Timeout { url: String, timeout: Duration },
    #[error("the limiter at {url} cannot be reached: {detail}")]
    Unreachable { url: String, detail: String },
    #[error(
        "the limiter refused the dashboard's service token (HTTP {status}); check --limiter-token-file"
    )]
    Unauthorized { status: u16 },
    #[error("the limiter answered HTTP {status} `{code}`: {message}")]
    Status {
        status: u16,
        code: String,
        message: String,
    },
    #[error("the limiter's answer could not be read: {0}")]
    BadBody(String),
    /// Refused before sending: the segment cannot stand in a URL path as itself.
    #[error(
        "“{segment}” cannot be sent to the limiter: an empty or dot-only path segment would be \
         read as part of the address, not as an id"
    )]
    Unaddressable { segment: String },
    #[error("the limiter URL {url} is not usable: {detail}; check --limiter-url and --fleet-url")]
    BadUrl { url: String, detail: String },
}

/// Whether `segment` can be one path segment of a limiter URL as itself. HTTP clients resolve
/// `.` and `..` (even percent-encoded) as steps in the path, and an empty segment disappears, so
/// such a segment would address something else.
pub fn addressable(segment: &str) -> bool {
    !matches!(segment, "" | "." | "..")
}

/// `GET /v1/accounts/{id}/streams`.
#[derive(Debug, Clone, Deserialize)]
pub struct AccountStreams {
    pub account_id: String,
    #[serde(default)]
    pub plan: String,
    /// The limit in force: the override's while one is active, else the plan's.
    pub limit: u32,
    /// A temporary limit support granted, if one is active (newer limiters).
    #[serde(default)]
    pub limit_override: Option<LimitOverride>,
    /// `enforce` or `shadow` (plays over the limit let through and counted); absent from
    /// limiters older than shadow enforcement, which enforce.
    #[serde(default)]
    pub enforcement: Option<String>,
    /// With several regions: the region whose store decides the account's count.
    #[serde(default)]
    pub home_region: Option<String>,
    #[serde(default)]
    pub active: Vec<ActiveStream>,
}

impl AccountStreams {
    /// Whether the account is in shadow: its plays over a limit are let through and counted.
    pub fn in_shadow(&self) -> bool {
        self.enforcement.as_deref() == Some("shadow")
    }
}

/// A temporary per-account limit: `PUT /v1/accounts/{id}/limit-override` answers one, and
/// `GET /v1/accounts/{id}/streams` carries the active one.
#[derive(Debug, Clone, Deserialize)]
pub struct LimitOverride {
    pub max_streams: u32,
    /// RFC 3339 UTC.
    pub expires_at: String,
}

#[derive(Debug, Clone, Deserialize)]
pub struct ActiveStream {
    pub stream_id: String,
    pub device_id: String,
    #[serde(default)]
    pub device_type: String,
    #[serde(default)]
    pub device_meta: String,
    #[serde(default)]
    pub profile_id: String,
    #[serde(default)]
    pub title_id: String,
    #[serde(default)]
    pub started_at: String,
    #[serde(default)]
    pub last_seen: String,
    #[serde(default)]
    pub expires_at: String,
}

impl ActiveStream {
    /// What a person calls the device: its display name, else its id.
    pub fn label(&self) -> &str {
        if self.device_meta.trim().is_empty() {
            &self.device_id
        } else {
            &self.device_meta
        }
    }
}

/// One support action from `GET /v1/audit`.
#[derive(Debug, Clone, Deserialize)]
pub struct AuditEntry {
    pub at: String,
    /// `force_stop`, `limit_granted`, `limit_removed` (older limiters log force-stops only and
    /// send no kind).
    #[serde(default = "force_stop")]
    pub kind: String,
    pub account_id: String,
    /// Force-stops: the stream, its device and display name.
    #[serde(default)]
    pub stream_id: String,
    #[serde(default)]
    pub device_id: String,
    #[serde(default)]
    pub device_meta: String,
    #[serde(default)]
    pub actor: String,
    #[serde(default)]
    pub reason: String,
    /// Limit changes: the limit in force before and after, and when the granted limit ends (or
    /// the removed one would have ended), RFC 3339.
    #[serde(default)]
    pub limit_from: Option<u32>,
    #[serde(default)]
    pub limit_to: Option<u32>,
    #[serde(default)]
    pub limit_until: Option<String>,
    /// Sign-in events: the client's address.
    #[serde(default)]
    pub address: String,
}

/// `GET /v1/dashboard-sessions/{user}` and the answer of its events: what every dashboard
/// replica shares of a user.
#[derive(Debug, Clone, Copy, Deserialize)]
pub struct UserSessions {
    /// Sessions issued under an older generation have ended.
    pub generation: u64,
    /// Failed sign-ins under the name still counted, from any replica (0 from a limiter that
    /// does not count them).
    #[serde(default)]
    pub failures: u64,
}

fn force_stop() -> String {
    AuditKind::ForceStop.as_str().to_owned()
}

#[derive(Debug, Deserialize)]
struct AuditBody {
    entries: Vec<AuditEntry>,
}

/// `GET /v1/fleet`: one limiter instance's view of itself and its store.
#[derive(Debug, Clone, Deserialize)]
pub struct Fleet {
    pub instance: Instance,
    #[serde(default)]
    pub failure_policy: String,
    /// Plan name -> its limit: a number, or an object with `max_streams` (newer limiters).
    #[serde(default)]
    pub plans: BTreeMap<String, serde_json::Value>,
    #[serde(default)]
    pub default_plan: String,
    /// Who is refused over a limit and who is in shadow; absent from limiters older than shadow
    /// enforcement.
    #[serde(default)]
    pub enforcement: Option<Enforcement>,
    #[serde(default)]
    pub lease_ttl_sec: f64,
    #[serde(default)]
    pub heartbeat_interval_sec: f64,
    #[serde(default)]
    pub shards: Vec<Shard>,
    #[serde(default)]
    pub decisions: BTreeMap<String, u64>,
    /// Absent from limiters older than the field.
    #[serde(default)]
    pub live_streams: Option<LiveStreams>,
    /// With several regions: this one, the weights, how each peer answers.
    #[serde(default)]
    pub regions: Option<Regions>,
}

/// The regions as one limiter instance sees them.
#[derive(Debug, Clone, Deserialize)]
pub struct Regions {
    pub name: String,
    #[serde(default)]
    pub weights: BTreeMap<String, u32>,
    /// The regions evacuated, each with the region that takes its accounts.
    #[serde(default)]
    pub evacuated: Vec<Evacuated>,
    /// How long the accounts whose home moved here still learn, in milliseconds.
    #[serde(default)]
    pub learning_ms: Option<u64>,
    #[serde(default)]
    pub peers: Vec<RegionPeer>,
}

/// A region home of no account for now, and where its accounts went (none named: spread over
/// the others by weight).
#[derive(Debug, Clone, Deserialize)]
pub struct Evacuated {
    pub name: String,
    #[serde(default)]
    pub secondary: Option<String>,
}

/// A peer region: whether it answers, its last answered call's time, the calls it failed.
#[derive(Debug, Clone, Deserialize)]
pub struct RegionPeer {
    pub name: String,
    pub reachable: bool,
    #[serde(default)]
    pub last_call_ms: Option<f64>,
    #[serde(default)]
    pub calls: u64,
    #[serde(default)]
    pub failed: u64,
    #[serde(default)]
    pub last_error: Option<String>,
}

/// The enforcement in force: the share of accounts refused over a limit, in percent (100 every
/// account, 0 none: all in shadow), and the plans that have their own.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct Enforcement {
    pub enforce_percent: u8,
    #[serde(default)]
    pub plans: BTreeMap<String, u8>,
}

/// Live streams per shard: `exact` (embedded store) or `heartbeat_rate` (Redis: this instance's
/// share, estimated from the heartbeats it answers).
#[derive(Debug, Clone, Deserialize)]
pub struct LiveStreams {
    #[serde(default)]
    pub method: String,
    #[serde(default)]
    pub window_sec: f64,
    #[serde(default)]
    pub shards: Vec<u64>,
}

/// The stream limit a `plans` entry names, whichever shape it has.
pub fn plan_limit(rule: &serde_json::Value) -> Option<u64> {
    rule.as_u64()
        .or_else(|| rule.get("max_streams").and_then(|v| v.as_u64()))
}

#[derive(Debug, Clone, Deserialize)]
pub struct Instance {
    pub version: String,
    pub uptime_sec: u64,
    pub backend: String,
}

#[derive(Debug, Clone, Deserialize)]
pub struct Shard {
    pub shard: usize,
    pub endpoint: String,
    pub reachable: bool,
    pub circuit: String,
    pub keys: Option<u64>,
    /// Shedding what the shard cannot answer within the store deadline (absent from limiters
    /// older than the field).
    #[serde(default)]
    pub overloaded: bool,
    /// A replica answered (`READONLY`); an older limiter says nothing.
    #[serde(default)]
    pub read_only: bool,
    /// Fewer replicas in sync than it needs to write (`NOREPLICAS`); an older limiter says
    /// nothing.
    #[serde(default)]
    pub no_replicas: bool,
    /// It refuses new state (`OOM`).
    #[serde(default)]
    pub out_of_memory: bool,
    #[serde(default)]
    pub memory: Option<ShardMemory>,
    /// `native` (the screenlimit module's commands) or `lua` (the scripts); absent from the
    /// embedded store and from limiters older than the field.
    #[serde(default)]
    pub path: Option<String>,
}

/// A shard's memory as the limiter last sampled it.
#[derive(Debug, Clone, Deserialize)]
pub struct ShardMemory {
    pub used_bytes: u64,
    /// 0: no limit.
    pub max_bytes: u64,
    pub policy: Option<String>,
}

#[derive(Debug, Deserialize)]
struct ErrorBody {
    #[serde(default)]
    error: String,
    #[serde(default)]
    message: String,
}

/// What a force-stop did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ForceStopOutcome {
    Stopped,
    /// No such stream on this account (it ended, or the id is not this account's).
    UnknownStream,
}

/// A client of one limiter (or of the Service in front of several).
#[derive(Clone)]
pub struct LimiterClient {
    http: reqwest::Client,
    base: String,
    token: Option<String>,
    timeout: Duration,
}

impl LimiterClient {
    pub fn new(base: &str, token: Option<String>, timeout: Duration) -> anyhow::Result<Self> {
        let http = reqwest::Client::builder()
            .timeout(timeout)
            .connect_timeout(timeout)
            .build()?;
        let client = LimiterClient {
            http,
            base: base.trim_end_matches('/').to_owned(),
            token,
            timeout,
        };
        client.endpoint(&[])?;
        Ok(client)
    }

    /// The same client aimed at another instance (the fleet page polls each one).
    pub fn at(&self, base: &str) -> Self {
        LimiterClient {
            base: base.trim_end_matches('/').to_owned(),
            ..self.clone()
        }
    }

    pub fn base_url(&self) -> &str {
        &self.base
    }

    pub async fn account_streams(&self, account_id: &str) -> Result<AccountStreams, LimiterError> {
        let url = self.endpoint(&["v1", "accounts", account_id, "streams"])?;
        self.send(self.http.get(url)).await
    }

    pub async fn force_stop(
        &self,
        account_id: &str,
        stream_id: &str,
        actor: &str,
        reason: &str,
    ) -> Result<ForceStopOutcome, LimiterError> {
        let url = self.endpoint(&[
            "v1",
            "accounts",
            account_id,
            "streams",
            stream_id,
            "force-stop",
        ])?;
        let body = serde_json::json!({ "actor": actor, "reason": reason });
        match self
            .send::<serde_json::Value>(self.http.post(url).json(&body))
            .await
        {
            Ok(_) => Ok(ForceStopOutcome::Stopped),
            Err(LimiterError::Status { code, .. }) if code == "unknown_stream" => {
                Ok(ForceStopOutcome::UnknownStream)
            }
            Err(e) => Err(e),
        }
    }

    /// Grants `account_id` a limit of `max_streams` for `expires_in_sec`, replacing any earlier
    /// override; the limiter's audit log records `actor` and `reason`.
    pub async fn set_limit_override(
        &self,
        account_id: &str,
        max_streams: u32,
        expires_in_sec: u64,
        actor: &str,
        reason: &str,
    ) -> Result<LimitOverride, LimiterError> {
        let url = self.endpoint(&["v1", "accounts", account_id, "limit-override"])?;
        let body = serde_json::json!({ "max_streams": max_streams, "expires_in_sec": expires_in_sec,
            "actor": actor, "reason": reason });
        self.send(self.http.put(url).json(&body)).await
    }

    /// Removes `account_id`'s override (its plan's limit applies again); fine when there is none.
    /// The limiter's audit log records `actor` and `reason`.
    pub async fn clear_limit_override(
        &self,
        account_id: &str,
        actor: &str,
        reason: &str,
    ) -> Result<(), LimiterError> {
        let url = self.endpoint(&["v1", "accounts", account_id, "limit-override"])?;
        let body = serde_json::json!({ "actor": actor, "reason": reason });
        self.send::<serde_json::Value>(self.http.delete(url).json(&body))
            .await
            .map(|_| ())
    }

    /// The newest support actions, of one account and of one kind when given.
    pub async fn audit(
        &self,
        account_id: Option<&str>,
        kind: Option<AuditKind>,
        limit: usize,
    ) -> Result<Vec<AuditEntry>, LimiterError> {
        let mut request = self
            .http
            .get(self.endpoint(&["v1", "audit"])?)
            .query(&[("limit", limit.to_string())]);
        if let Some(account_id) = account_id {
            request = request.query(&[("account_id", account_id)]);
        }
        if let Some(kind) = kind {
            request = request.query(&[("kind", kind.as_str())]);
        }
        let mut entries = self.send::<AuditBody>(request).await?.entries;
        // A limiter older than kinds ignores the filter and sends force-stops only.
        entries.retain(|e| kind.is_none_or(|k| e.kind == k.as_str()));
        Ok(entries)
    }

    /// The account's newest `limit` history entries (refusals, take-overs, stops, expiries,
    /// temporary limits), newest first.
    pub async fn account_history(
        &self,
        account_id: &str,
        limit: usize,
    ) -> Result<AccountHistory, LimiterError> {
        let request = self
            .http
            .get(self.endpoint(&["v1", "accounts", account_id, "history"])?)
            .query(&[("limit", limit.to_string())]);
        self.send(request).await
    }

    /// `user`'s session generation (a session issued under an older one has ended) and failed
    /// sign-ins still counted.
    pub async fn user_sessions(&self, user: &str) -> Result<UserSessions, LimiterError> {
        let url = self.endpoint(&["v1", "dashboard-sessions", user])?;
        self.send::<UserSessions>(self.http.get(url)).await
    }

    /// `user`'s session generation: a session issued under an older one has ended.
    pub async fn session_generation(&self, user: &str) -> Result<u64, LimiterError> {
        Ok(self.user_sessions(user).await?.generation)
    }

    /// Records a sign-in event (`kind` one of `AuditKind::SESSION_EVENTS`) in the limiter's
    /// audit log; a sign-out also ends every session of `user`. Returns the generation in force.
    pub async fn session_event(
        &self,
        user: &str,
        kind: AuditKind,
        address: &str,
        reason: &str,
    ) -> Result<u64, LimiterError> {
        Ok(self
            .record_session_event(user, kind, address, reason, None)
            .await?
            .generation)
    }

    /// [`Self::session_event`]; a `SignInFailed` with `failure_window` counts against the name
    /// for every replica that long (a sign-in clears it). Returns what is in force after it.
    pub async fn record_session_event(
        &self,
        user: &str,
        kind: AuditKind,
        address: &str,
        reason: &str,
        failure_window: Option<Duration>,
    ) -> Result<UserSessions, LimiterError> {
        let url = self.endpoint(&["v1", "dashboard-sessions", user, "events"])?;
        let mut body =
            serde_json::json!({ "event": kind.as_str(), "address": address, "reason": reason });
        if let Some(window) = failure_window {
            body["failure_window_sec"] = window.as_secs().clamp(1, 86_400).into();
        }
        self.send::<UserSessions>(self.http.post(url).json(&body))
            .await
    }

    pub async fn fleet(&self) -> Result<Fleet, LimiterError> {
        self.send(self.http.get(self.endpoint(&["v1", "fleet"])?))
            .await
    }

    /// The limiter URL of `segments`, each percent-encoded as one path segment (`/`, `?`, `#`
    /// and `%` inside an id cannot leave it), never spliced into a string; a segment that cannot
    /// stand as itself ([`addressable`]) is refused.
    fn endpoint(&self, segments: &[&str]) -> Result<Url, LimiterError> {
        let bad_url = |detail: &str| LimiterError::BadUrl {
            url: self.base.clone(),
            detail: detail.to_owned(),
        };
        let mut url = Url::parse(&self.base).map_err(|e| bad_url(&e.to_string()))?;
        if !matches!(url.scheme(), "http" | "https") || url.query().is_some() {
            return Err(bad_url("it must be an http(s) URL without a query"));
        }
        if let Some(segment) = segments.iter().find(|s| !addressable(s)) {
            return Err(LimiterError::Unaddressable {
                segment: (*segment).to_owned(),
            });
        }
        url.path_segments_mut()
            .map_err(|()| bad_url("it cannot take a path"))?
            .pop_if_empty()
            .extend(segments);
        Ok(url)
    }

    async fn send<T: DeserializeOwned>(
        &self,
        mut request: reqwest::RequestBuilder,
    ) -> Result<T, LimiterError> {
        if let Some(token) = &self.token {
            request = request.bearer_auth(token);
        }
        let response = request.send().await.map_err(|e| self.transport(e))?;
        let status = response.status();
        let bytes = response.bytes().await.map_err(|e| self.transport(e))?;
        if status.is_success() {
            return serde_json::from_slice(&bytes)
                .map_err(|e| LimiterError::BadBody(e.to_string()));
        }
        if status == StatusCode::UNAUTHORIZED || status == StatusCode::FORBIDDEN {
            return Err(LimiterError::Unauthorized {
                status: status.as_u16(),
            });
        }
        let body: ErrorBody = serde_json::from_slice(&bytes).unwrap_or(ErrorBody {
            error: "unexpected_answer".into(),
            message: String::from_utf8_lossy(&bytes).chars().take(200).collect(),
        });
        Err(LimiterError::Status {
            status: status.as_u16(),
            code: body.error,
            message: body.message,
        })
    }

    fn transport(&self, error: reqwest::Error) -> LimiterError {
        if error.is_timeout() {
            LimiterError::Timeout {
                url: self.base.clone(),
                timeout: self.timeout,
            }
        } else {
            let mut detail = error.to_string();
            let mut source = std::error::Error::source(&error);
            while let Some(cause) = source {
                detail = format!("{detail}: {cause}");
                source = cause.source();
            }
            LimiterError::Unreachable {
                url: self.base.clone(),
                detail,
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn client(base: &str) -> LimiterClient {
        LimiterClient::new(base, None, Duration::from_secs(1)).unwrap()
    }

    #[test]
    fn every_segment_stays_one_segment() {
        let limiter = client("http://limiter:8080");
        let url = limiter
            .endpoint(&[
                "v1",
                "accounts",
                "a/b",
                "streams",
                "x?y#z%2F..",
                "force-stop",
            ])
            .unwrap();
        assert_eq!(
            url.as_str(),
            "http://limiter:8080/v1/accounts/a%2Fb/streams/x%3Fy%23z%252F../force-stop"
        );
        let url = client("https://example.com/limiter/")
            .endpoint(&["v1", "audit"])
            .unwrap();
        assert_eq!(url.as_str(), "https://example.com/limiter/v1/audit");
    }

    #[test]
    fn segments_that_would_step_through_the_path_are_refused() {
        let limiter = client("http://limiter:8080");
        for segment in ["", ".", ".."] {
            let error = limiter
                .endpoint(&["v1", "accounts", segment, "streams"])
                .unwrap_err();
            assert!(
                matches!(&error, LimiterError::Unaddressable { segment: s } if s == segment),
                "{segment:?}: {error}"
            );
        }
        assert!(
            limiter
                .endpoint(&["v1", "accounts", "...", "streams"])
                .is_ok()
        );
    }

    #[test]
    fn a_base_url_that_cannot_take_a_path_stops_the_start() {
        for bad in [
            "limiter:8080",
            "mailto:ops@example.com",
            "http://l/?x=1",
            "ftp://l",
        ] {
            assert!(
                LimiterClient::new(bad, None, Duration::from_secs(1)).is_err(),
                "{bad}"
            );
        }
    }
}
