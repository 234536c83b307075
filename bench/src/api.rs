//! The stream API as the load generator calls it: each call records its latency (from the moment
//! it was meant to be sent, so a backlog shows) and its outcome, and counts transport errors,
//! 5xx and degraded (store-less) answers as failures.

use std::sync::Arc;
use std::time::Instant;

use http::Method;
use serde::Deserialize;

use crate::client::HttpClient;
use crate::stats::Recorder;

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct Body {
    stream_id: Option<String>,
    limit: Option<u32>,
    active_count: Option<u32>,
    degraded: bool,
    error: Option<String>,
    active: Vec<Active>,
    heartbeat_interval_sec: Option<f64>,
    lease_ttl_sec: Option<f64>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub struct Active {
    pub stream_id: String,
    pub device_id: String,
}

#[derive(Debug)]
pub enum Play {
    Granted {
        stream_id: String,
        limit: u32,
        active_count: Option<u32>,
        heartbeat_interval_sec: f64,
        lease_ttl_sec: f64,
    },
    Denied {
        limit: u32,
        active: Vec<Active>,
    },
    /// Anything else (already counted as a failure or recorded with its status).
    Other(u16, String),
}

#[derive(Debug, PartialEq, Eq)]
pub enum Beat {
    Ok,
    Expired,
    Revoked,
    Other(u16, String),
}

pub struct PlayArgs<'a> {
    pub account: &'a str,
    pub device: &'a str,
    pub plan: Option<&'a str>,
    pub device_type: &'a str,
    pub meta: &'a str,
    pub replace: Option<&'a str>,
}

impl<'a> PlayArgs<'a> {
    /// A play from `device` of the given `(device_type, meta)` kind (see [`DEVICE_KINDS`]).
    pub fn new(
        account: &'a str,
        device: &'a str,
        plan: Option<&'a str>,
        (device_type, meta): (&'a str, &'a str),
    ) -> Self {
        PlayArgs {
            account,
            device,
            plan,
            device_type,
            meta,
            replace: None,
        }
    }

    /// The same play, taking over the stream `stream_id`.
    pub fn replacing(self, stream_id: &'a str) -> Self {
        PlayArgs {
            replace: Some(stream_id),
            ..self
        }
    }
}

pub const DEVICE_KINDS: [(&str, &str); 5] = [
    ("tv", "Living Room TV"),
    ("mobile", "Samsung Galaxy S23"),
    ("tablet", "iPad Air 5th gen"),
    ("web", "Chrome on Windows"),
    ("console", "PlayStation 5 Pro"),
];

#[derive(Clone)]
pub struct Api {
    pub http: Arc<HttpClient>,
    pub rec: Arc<Recorder>,
}

impl Api {
    pub fn new(http: HttpClient, rec: Arc<Recorder>) -> Self {
        Api {
            http: Arc::new(http),
            rec,
        }
    }

    async fn call(
        &self,
        op: &'static str,
        method: Method,
        path: &str,
        body: String,
        intended: Instant,
    ) -> Result<(u16, Body), String> {
        match self.http.send(method, path, body).await {
            Ok(reply) => {
                let parsed: Body = serde_json::from_slice(&reply.body).unwrap_or_default();
                let label = match (reply.status, &parsed.error) {
                    (s, Some(e)) => format!("{s} {e}"),
                    (s, None) if parsed.degraded => format!("{s} degraded"),
                    (s, None) => s.to_string(),
                };
                self.rec.record(op, intended.elapsed(), &label);
                if reply.status >= 500 {
                    self.rec.fail(&format!("{op}: {label}"));
                } else if parsed.degraded {
                    self.rec
                        .fail(&format!("{op}: degraded (store did not answer)"));
                }
                Ok((reply.status, parsed))
            }
            Err(e) => {
                self.rec.record(op, intended.elapsed(), "transport error");
                self.rec.fail(&format!("{op}: transport error"));
                Err(e.to_string())
            }
        }
    }

    pub async fn play(&self, op: &'static str, a: &PlayArgs<'_>, intended: Instant) -> Play {
        // Ids and display names used here never need JSON escaping.
        let mut body = format!(
            r#"{{"account_id":"{}","device_id":"{}","device_type":"{}","device_meta":"{}","profile_id":"profile-1","title_id":"title:tt0111161""#,
            a.account, a.device, a.device_type, a.meta
        );
        if let Some(plan) = a.plan {
            body.push_str(&format!(r#","plan":"{plan}""#));
        }
        if let Some(replace) = a.replace {
            body.push_str(&format!(r#","replace_stream_id":"{replace}""#));
        }
        body.push('}');
        match self
            .call(op, Method::POST, "/v1/streams", body, intended)
            .await
        {
            Ok((200, b)) => {
                if let Some(i) = b.heartbeat_interval_sec {
                    self.rec.note_interval(i);
                }
                Play::Granted {
                    stream_id: b.stream_id.unwrap_or_default(),
                    limit: b.limit.unwrap_or(0),
                    active_count: b.active_count,
                    heartbeat_interval_sec: b.heartbeat_interval_sec.unwrap_or(0.0),
                    lease_ttl_sec: b.lease_ttl_sec.unwrap_or(0.0),
                }
            }
            Ok((409, b)) => Play::Denied {
                limit: b.limit.unwrap_or(0),
                active: b.active,
            },
            Ok((s, b)) => Play::Other(s, b.error.unwrap_or_default()),
            Err(e) => Play::Other(0, e),
        }
    }

    pub async fn heartbeat(&self, account: &str, stream_id: &str, intended: Instant) -> Beat {
        let path = format!("/v1/streams/{stream_id}/heartbeat");
        let body = format!(r#"{{"account_id":"{account}"}}"#);
        match self
            .call("heartbeat", Method::PUT, &path, body, intended)
            .await
        {
            Ok((200, _)) => Beat::Ok,
            Ok((410, b)) if b.error.as_deref() == Some("stream_revoked") => Beat::Revoked,
            Ok((410, _)) => Beat::Expired,
            Ok((s, b)) => Beat::Other(s, b.error.unwrap_or_default()),
            Err(e) => Beat::Other(0, e),
        }
    }

    /// Graceful stop; true when answered 200.
    pub async fn release(&self, account: &str, stream_id: &str, intended: Instant) -> bool {
        let path = format!("/v1/streams/{stream_id}");
        let body = format!(r#"{{"account_id":"{account}"}}"#);
        matches!(
            self.call("release", Method::DELETE, &path, body, intended)
                .await,
            Ok((200, _))
        )
    }

    /// The account's limit and live streams, as the list call reports them.
    pub async fn list(&self, account: &str) -> Option<(u32, Vec<Active>)> {
        let path = format!("/v1/accounts/{account}/streams");
        match self
            .call("list", Method::GET, &path, String::new(), Instant::now())
            .await
        {
            Ok((200, b)) => Some((b.limit.unwrap_or(0), b.active)),
            _ => None,
        }
    }

    /// Lists `account` and checks it holds no more live streams than its limit (and, when
    /// given, than `cap`).
    pub async fn check_cap(&self, account: &str, cap: Option<u32>) {
        if let Some((limit, active)) = self.list(account).await {
            self.rec.checked("no_account_above_cap", 1);
            let bound = cap.map_or(limit, |c| c.min(limit));
            if active.len() as u32 > bound {
                self.rec.violated("no_account_above_cap");
                eprintln!(
                    "VIOLATION: {account} holds {} streams, cap {bound}",
                    active.len()
                );
            }
        } else {
            self.rec.fail("list: no answer");
        }
    }
}
