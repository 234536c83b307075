//! One call per operation, each answer typed: what the limiter's `/openapi.json` documents.

use std::time::Duration;

use reqwest::{Method, StatusCode};
use serde::{Deserialize, Serialize};
use serde_json::Value;

/// A play-start's body.
#[derive(Debug, Clone, Default, Serialize)]
pub struct PlayStart {
    pub account_id: String,
    /// Stable across app restarts: a restart then replaces its own earlier stream.
    pub device_id: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub device_type: Option<String>,
    /// A display name ("Living Room TV") the other devices see in a 409.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub device_meta: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub profile_id: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub title_id: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub plan: Option<String>,
    /// Take over this stream (one a 409 listed) in the same call.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub replace_stream_id: Option<String>,
}

impl PlayStart {
    pub fn new(account_id: impl Into<String>, device_id: impl Into<String>) -> PlayStart {
        PlayStart {
            account_id: account_id.into(),
            device_id: device_id.into(),
            ..PlayStart::default()
        }
    }
}

/// 200 to a play-start.
#[derive(Debug, Clone, PartialEq, Deserialize)]
pub struct Granted {
    pub stream_id: String,
    pub lease_ttl_sec: f64,
    pub heartbeat_interval_sec: f64,
    pub limit: u32,
    pub active_count: u32,
    #[serde(default)]
    pub degraded: bool,
    /// Only for an account in shadow: whether the limits would have refused this play (log it;
    /// the play was granted either way).
    #[serde(default)]
    pub shadow: Option<Shadow>,
}

/// A play of an account in shadow, as the limits judged it.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct Shadow {
    pub would_refuse: bool,
    /// With `would_refuse`: `max_streams` or `device_type_cap`.
    #[serde(default)]
    pub rule: Option<String>,
    #[serde(default)]
    pub limit: Option<u32>,
    /// With `device_type_cap`: the capped type and its cap.
    #[serde(default)]
    pub device_type: Option<String>,
    #[serde(default)]
    pub cap: Option<u32>,
}

impl Granted {
    pub fn heartbeat_interval(&self) -> Duration {
        Duration::from_secs_f64(self.heartbeat_interval_sec.max(0.001))
    }
}

/// One stream holding a slot, as a 409 or a list shows it.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct ActiveStream {
    pub stream_id: String,
    pub device_id: String,
    pub device_type: String,
    pub device_meta: String,
    pub started_at: String,
    pub last_seen: String,
    pub expires_at: String,
}

/// 409 to a play-start: the account is at its limit.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct Denial {
    pub message: String,
    pub limit: u32,
    /// `max_streams` or `device_type_cap`.
    pub rule: String,
    pub active: Vec<ActiveStream>,
}

#[derive(Debug, Clone, PartialEq)]
pub enum PlayOutcome {
    Granted(Granted),
    Denied(Denial),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HeartbeatOutcome {
    Renewed {
        degraded: bool,
    },
    /// 410 `lease_expired`: start a new play.
    Expired,
    /// 410 `stream_revoked`: stop playing.
    Revoked,
}

/// An account's streams.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct AccountStreams {
    pub account_id: String,
    pub plan: String,
    pub limit: u32,
    pub active: Vec<ActiveStream>,
}

/// What went wrong with a call.
#[derive(Debug, Clone, thiserror::Error)]
pub enum ClientError {
    /// No answer: connection refused, reset, or the deadline passed.
    #[error("the limiter did not answer: {0}")]
    Unreachable(String),
    /// An error answer (`{"error": code, "message": ...}`).
    #[error("the limiter answered {status} {code}: {message}")]
    Refused {
        status: u16,
        code: String,
        message: String,
        /// `Retry-After` in seconds, on a 503.
        retry_after: Option<u64>,
    },
    /// A success whose body is not what the API documents.
    #[error("unexpected answer body: {0}")]
    BadBody(String),
}

impl ClientError {
    /// The answer's `error` code, when there was an answer.
    pub fn code(&self) -> Option<&str> {
        match self {
            ClientError::Refused { code, .. } => Some(code),
            _ => None,
        }
    }

    /// Worth another try later: no answer, 429, 502, 503, 504.
    pub fn is_transient(&self) -> bool {
        match self {
            ClientError::Unreachable(_) => true,
            ClientError::Refused { status, .. } => matches!(status, 429 | 502 | 503 | 504),
            ClientError::BadBody(_) => false,
        }
    }
}

/// A limiter (or the gateway in front of it) and the credential to call it with.
#[derive(Debug, Clone)]
pub struct Client {
    base: reqwest::Url,
    token: Option<String>,
    http: reqwest::Client,
}

impl Client {
    /// `base_url` like `https://limiter.example.com`; `token` a player token (JWT), the gateway
    /// token, or (for the support calls) the support token. Every call has `timeout` as its
    /// deadline; redirects are not followed.
    pub fn new(
        base_url: &str,
        token: Option<String>,
        timeout: Duration,
    ) -> Result<Client, ClientError> {
        let base = reqwest::Url::parse(base_url)
            .map_err(|e| ClientError::Unreachable(format!("bad base URL {base_url:?}: {e}")))?;
        let http = reqwest::Client::builder()
            .timeout(timeout)
            .connect_timeout(timeout)
            .redirect(reqwest::redirect::Policy::none())
            .build()
            .map_err(|e| ClientError::Unreachable(e.to_string()))?;
        Ok(Client { base, token, http })
    }

    /// The URL of `segments`, each percent-encoded.
    fn url(&self, segments: &[&str]) -> reqwest::Url {
        let mut url = self.base.clone();
        if let Ok(mut path) = url.path_segments_mut() {
            path.pop_if_empty().extend(segments);
        }
        url
    }

    async fn call(
        &self,
        method: Method,
        segments: &[&str],
        body: Option<&Value>,
    ) -> Result<(StatusCode, Value), ClientError> {
        let mut request = self.http.request(method, self.url(segments));
        if let Some(token) = &self.token {
            request = request.bearer_auth(token);
        }
        if let Some(body) = body {
            request = request.json(body);
        }
        let response = request
            .send()
            .await
            .map_err(|e| ClientError::Unreachable(e.to_string()))?;
        let status = response.status();
        let retry_after = response
            .headers()
            .get(reqwest::header::RETRY_AFTER)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.trim().parse().ok());
        let body: Value = response
            .json()
            .await
            .map_err(|e| ClientError::Unreachable(e.to_string()))?;
        if status.is_success() || status == StatusCode::CONFLICT || status == StatusCode::GONE {
            return Ok((status, body));
        }
        Err(ClientError::Refused {
            status: status.as_u16(),
            code: body["error"]
                .as_str()
                .unwrap_or("unexpected_answer")
                .to_owned(),
            message: body["message"].as_str().unwrap_or_default().to_owned(),
            retry_after,
        })
    }

    pub async fn play_start(&self, request: &PlayStart) -> Result<PlayOutcome, ClientError> {
        let body =
            serde_json::to_value(request).map_err(|e| ClientError::BadBody(e.to_string()))?;
        let (status, body) = self
            .call(Method::POST, &["v1", "streams"], Some(&body))
            .await?;
        match status {
            StatusCode::CONFLICT => parse(body).map(PlayOutcome::Denied),
            StatusCode::OK => parse(body).map(PlayOutcome::Granted),
            _ => Err(ClientError::BadBody(format!("{status}: {body}"))),
        }
    }

    pub async fn heartbeat(
        &self,
        account_id: &str,
        stream_id: &str,
    ) -> Result<HeartbeatOutcome, ClientError> {
        let body = serde_json::json!({ "account_id": account_id });
        let (status, body) = self
            .call(
                Method::PUT,
                &["v1", "streams", stream_id, "heartbeat"],
                Some(&body),
            )
            .await?;
        match (status, body["error"].as_str()) {
            (StatusCode::OK, _) => Ok(HeartbeatOutcome::Renewed {
                degraded: body["degraded"].as_bool().unwrap_or(false),
            }),
            (StatusCode::GONE, Some("stream_revoked")) => Ok(HeartbeatOutcome::Revoked),
            (StatusCode::GONE, _) => Ok(HeartbeatOutcome::Expired),
            _ => Err(ClientError::BadBody(format!("{status}: {body}"))),
        }
    }

    /// Stops a stream; its slot is free at once. Idempotent.
    pub async fn release(&self, account_id: &str, stream_id: &str) -> Result<(), ClientError> {
        let body = serde_json::json!({ "account_id": account_id });
        self.call(Method::DELETE, &["v1", "streams", stream_id], Some(&body))
            .await
            .map(|_| ())
    }

    pub async fn list(&self, account_id: &str) -> Result<AccountStreams, ClientError> {
        let (_, body) = self
            .call(
                Method::GET,
                &["v1", "accounts", account_id, "streams"],
                None,
            )
            .await?;
        parse(body)
    }

    /// Support: kicks a device (needs the support token).
    pub async fn force_stop(
        &self,
        account_id: &str,
        stream_id: &str,
        actor: &str,
        reason: &str,
    ) -> Result<(), ClientError> {
        let body = serde_json::json!({ "actor": actor, "reason": reason });
        self.call(
            Method::POST,
            &[
                "v1",
                "accounts",
                account_id,
                "streams",
                stream_id,
                "force-stop",
            ],
            Some(&body),
        )
        .await
        .map(|_| ())
    }
}

fn parse<T: serde::de::DeserializeOwned>(body: Value) -> Result<T, ClientError> {
    serde_json::from_value(body).map_err(|e| ClientError::BadBody(e.to_string()))
}
