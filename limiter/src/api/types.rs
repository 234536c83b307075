//! Request and response bodies of the v1 stream API, and the input rules they enforce.

use serde::{Deserialize, Serialize};
use time::OffsetDateTime;
use time::format_description::well_known::Rfc3339;
use utoipa::{IntoParams, ToSchema};

use super::error::ApiError;
use super::limits::{ACTOR, ADDRESS, MAX_OVERRIDE_SEC, REASON};
use super::schema;
use crate::config::MAX_STREAMS_CEILING;
use crate::ids::{DEVICE_META, validate_text, validate_token};
use crate::model::{
    AUDIT_RECENT, AuditEntry, AuditKind, Device, DeviceType, LimitOverride, Millis, OverrideCmd,
    OverrideGrant, SessionEventCmd,
};
use crate::service::{ActiveStream, PlayStart};

/// `POST /v1/streams`: a device asks to start playing.
#[derive(Debug, Deserialize, ToSchema)]
pub struct PlayStartRequest {
    /// The subscriber account.
    #[schema(schema_with = schema::id)]
    pub account_id: String,
    /// The device, stable across app restarts.
    #[schema(schema_with = schema::id)]
    pub device_id: String,
    /// A configured plan name; without it the account keeps its current plan (or the default).
    /// The document lists the plans this instance knows (`api::openapi`).
    #[schema(schema_with = schema::optional_id)]
    pub plan: Option<String>,
    pub device_type: Option<DeviceType>,
    /// A display name such as "Living Room TV".
    #[schema(schema_with = schema::device_meta)]
    pub device_meta: Option<String>,
    #[schema(schema_with = schema::optional_id)]
    pub profile_id: Option<String>,
    #[schema(schema_with = schema::optional_id)]
    pub title_id: Option<String>,
    /// Take over: stop this stream (one a 409 listed) and take its slot, atomically.
    #[schema(schema_with = schema::optional_stream_id)]
    pub replace_stream_id: Option<String>,
}

fn check_token(field: &'static str, value: &str) -> Result<(), ApiError> {
    validate_token(value).map_err(|e| ApiError::invalid_field(field, &e.to_string()))
}

fn check_optional_token(field: &'static str, value: &Option<String>) -> Result<String, ApiError> {
    match value {
        Some(v) => check_token(field, v).map(|()| v.clone()),
        None => Ok(String::new()),
    }
}

pub fn check_account_id(account_id: &str) -> Result<(), ApiError> {
    check_token("account_id", account_id)
}

impl PlayStartRequest {
    pub fn validate(self) -> Result<PlayStart, ApiError> {
        check_token("account_id", &self.account_id)?;
        check_token("device_id", &self.device_id)?;
        let profile_id = check_optional_token("profile_id", &self.profile_id)?;
        let title_id = check_optional_token("title_id", &self.title_id)?;
        if let Some(plan) = &self.plan {
            check_token("plan", plan)?;
        }
        let meta = self.device_meta.unwrap_or_default();
        validate_text(&DEVICE_META, &meta)
            .map_err(|e| ApiError::invalid_field("device_meta", &e.to_string()))?;
        Ok(PlayStart {
            account_id: self.account_id,
            device: Device {
                id: self.device_id,
                kind: self.device_type.unwrap_or_default(),
                meta,
                profile_id,
                title_id,
            },
            plan: self.plan,
            replace_stream_id: self.replace_stream_id,
            home: Default::default(),
        })
    }
}

/// 200 on `POST /v1/streams`: the play may start.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct PlayStartResponse {
    /// Names this stream in heartbeats and stops; unguessable and bound to account and device.
    pub stream_id: String,
    pub lease_ttl_sec: f64,
    /// Send a heartbeat this often (add a little jitter).
    pub heartbeat_interval_sec: f64,
    /// The account's stream limit.
    pub limit: u32,
    /// Live streams on the account including this one; null when the store was bypassed.
    pub active_count: Option<u32>,
    /// True when the store could not answer and the failure policy decided.
    pub degraded: bool,
    /// Only for an account in shadow (`enforcement`): whether the limits would have refused
    /// this play, and by which rule; log it at the gateway. The play was granted either way.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub shadow: Option<ShadowInfo>,
}

/// A play of an account in shadow, as the limits judged it.
#[derive(Debug, Serialize, Deserialize, ToSchema, PartialEq, Eq)]
pub struct ShadowInfo {
    /// True when the limits would have refused the play (enforced, it would have been a 409);
    /// false also when the play is `degraded` (the store was not asked).
    pub would_refuse: bool,
    /// With `would_refuse`: `max_streams` or `device_type_cap`, as a 409 would name it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rule: Option<String>,
    /// With `would_refuse`: the account's limit.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub limit: Option<u32>,
    /// With `device_type_cap`: the capped type and its cap.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub device_type: Option<DeviceType>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cap: Option<u32>,
}

/// Whether an account's plays over a limit are refused.
#[derive(Debug, Clone, Copy, Serialize, Deserialize, ToSchema, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum AccountEnforcement {
    /// Refused (409).
    Enforce,
    /// Let through, answered with `shadow` and counted (`enforcement` in the config).
    Shadow,
}

/// One live stream, as lists and 409 denials show it.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct StreamInfo {
    pub stream_id: String,
    pub device_id: String,
    pub device_type: DeviceType,
    pub device_meta: String,
    pub profile_id: String,
    pub title_id: String,
    /// RFC 3339, UTC.
    pub started_at: String,
    /// Last heartbeat (or the start), RFC 3339 UTC.
    pub last_seen: String,
    /// When the slot frees unless renewed, RFC 3339 UTC.
    pub expires_at: String,
}

pub fn rfc3339(ms: Millis) -> String {
    let at = OffsetDateTime::from_unix_timestamp_nanos(i128::from(ms) * 1_000_000)
        .unwrap_or(OffsetDateTime::UNIX_EPOCH);
    at.format(&Rfc3339).unwrap_or_default()
}

impl StreamInfo {
    pub fn new(stream: ActiveStream, ttl_ms: Millis) -> Self {
        let ActiveStream { stream_id, lease } = stream;
        StreamInfo {
            stream_id,
            device_id: lease.device.id,
            device_type: lease.device.kind,
            device_meta: lease.device.meta,
            profile_id: lease.device.profile_id,
            title_id: lease.device.title_id,
            started_at: rfc3339(lease.started_at),
            last_seen: rfc3339(
                lease
                    .expires_at
                    .saturating_sub(ttl_ms)
                    .max(lease.started_at),
            ),
            expires_at: rfc3339(lease.expires_at),
        }
    }
}

/// 409 on `POST /v1/streams`: the account is at its limit.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct LimitReachedBody {
    /// Always `concurrent_stream_limit`.
    pub error: String,
    pub message: String,
    pub limit: u32,
    /// `max_streams` (the account is full) or `device_type_cap` (too many of one device type).
    pub rule: String,
    /// With `device_type_cap`: the capped type and its cap.
    pub device_type: Option<DeviceType>,
    pub cap: Option<u32>,
    /// The streams holding the slots; offer "stop one" with `replace_stream_id`.
    pub active: Vec<StreamInfo>,
}

/// Body of heartbeat and stop calls.
#[derive(Debug, Deserialize, ToSchema)]
pub struct AccountRef {
    #[schema(schema_with = schema::id)]
    pub account_id: String,
}

/// `{account_id}` in a path.
#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Path)]
pub struct AccountPath {
    #[param(schema_with = schema::id)]
    pub account_id: String,
}

/// `{stream_id}` in a path: as the play-start answer gave it; any other value is 404.
#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Path)]
pub struct StreamPath {
    #[param(schema_with = schema::stream_id)]
    pub stream_id: String,
}

/// `{account_id}` and `{stream_id}` in a path.
#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Path)]
pub struct AccountStreamPath {
    #[param(schema_with = schema::id)]
    pub account_id: String,
    #[param(schema_with = schema::stream_id)]
    pub stream_id: String,
}

#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct HeartbeatResponse {
    pub ok: bool,
    pub lease_ttl_sec: f64,
    pub degraded: bool,
}

#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct OkResponse {
    pub ok: bool,
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub degraded: bool,
}

/// `GET /v1/accounts/{account_id}/streams`.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct AccountStreamsResponse {
    pub account_id: String,
    pub plan: String,
    /// The limit in force: the override's while one is active, else the plan's.
    pub limit: u32,
    /// A temporary limit support granted, if one is active.
    pub limit_override: Option<OverrideInfo>,
    /// `shadow` when the account's plays over its limit are let through and only counted.
    pub enforcement: AccountEnforcement,
    /// With several regions: the region whose store decides this account's count.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub home_region: Option<String>,
    pub active: Vec<StreamInfo>,
}

/// Every non-2xx answer.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct ErrorBody {
    /// Stable snake_case code: `invalid_request`, `bad_json`, `payload_too_large`,
    /// `unsupported_media_type`, `unknown_plan`, `unknown_stream`, `concurrent_stream_limit`,
    /// `lease_expired`, `stream_revoked`, `store_unavailable`, `unauthorized`, `invalid_token`,
    /// `token_expired`, `support_only`, `players_only`, `account_mismatch`, `device_mismatch`,
    /// `origin_not_allowed`, `not_found`, `method_not_allowed`.
    pub error: String,
    /// What happened and what to do, for a person.
    pub message: String,
    /// `re_acquire` (play again) or `stop`, on 410 heartbeat answers.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub action: Option<String>,
    /// The request field at fault, on 422.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub field: Option<String>,
    /// Which check a player token failed, on 401 `invalid_token` and `token_expired`:
    /// `expired`, `malformed`, `algorithm_not_allowed`, `unknown_key`, `bad_signature`,
    /// `wrong_audience`, `wrong_issuer`, `not_yet_valid`, `missing_claim`, `bad_claim`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
}

/// Optional body of `force-stop`: who asks and why, for the audit log.
#[derive(Debug, Default, Deserialize, ToSchema)]
pub struct ForceStopRequest {
    /// The support agent (or system) stopping the stream; `api` when absent or null.
    #[schema(schema_with = schema::actor)]
    pub actor: Option<String>,
    /// Why.
    #[schema(schema_with = schema::reason)]
    pub reason: Option<String>,
}

fn validate_actor(actor: &str) -> Result<(), String> {
    validate_text(&ACTOR, actor).map_err(|e| e.to_string())?;
    if actor.chars().all(char::is_whitespace) {
        return Err("must not be blank; name who stops the stream".into());
    }
    Ok(())
}

fn validate_reason(reason: &str) -> Result<(), String> {
    if reason.chars().any(|c| c.is_control() && c != '\n') {
        return Err("may not hold control characters other than line breaks (\\n)".into());
    }
    if reason.chars().count() > REASON.max_chars {
        return Err(format!("is longer than {} characters", REASON.max_chars));
    }
    Ok(())
}

/// Checks who and why of a support action: returns (actor, reason), with `api` as the actor
/// when none is named.
fn check_note(actor: Option<String>, reason: Option<String>) -> Result<(String, String), ApiError> {
    let actor = actor.unwrap_or_else(|| "api".into());
    validate_actor(&actor).map_err(|e| ApiError::invalid_field("actor", &e))?;
    let reason = reason.unwrap_or_default();
    validate_reason(&reason).map_err(|e| ApiError::invalid_field("reason", &e))?;
    Ok((actor, reason))
}

impl ForceStopRequest {
    /// Returns (actor, reason), with `api` as the actor when none is named.
    pub fn validate(self) -> Result<(String, String), ApiError> {
        check_note(self.actor, self.reason)
    }
}

/// One support action as the audit log shows it: a force-stop, a temporary limit granted or
/// removed, or a dashboard sign-in event.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct AuditEntryInfo {
    /// RFC 3339 UTC, on the store's clock.
    pub at: String,
    pub kind: AuditKind,
    pub account_id: String,
    /// `force_stop`: the stopped stream; empty for limit changes.
    pub stream_id: String,
    /// `force_stop`: its device; empty for limit changes.
    pub device_id: String,
    /// `force_stop`: the device's display name; empty for limit changes.
    pub device_meta: String,
    /// Who did it: the support agent the caller named, else `api`.
    pub actor: String,
    /// Why, as the caller gave it (may be empty).
    pub reason: String,
    /// Limit changes: the account's limit in force before; null for force-stops.
    pub limit_from: Option<u32>,
    /// Limit changes: the account's limit in force after (the plan's after a removal); null for
    /// force-stops.
    pub limit_to: Option<u32>,
    /// Limit changes, RFC 3339 UTC: when the granted limit ends, or when the removed one would
    /// have ended; null for force-stops.
    pub limit_until: Option<String>,
    /// Sign-in events (`sign_in`, `sign_in_failed`, `sign_in_throttled`, `sign_out`, whose
    /// `actor` is the dashboard user and `account_id` empty): the client's address; empty for
    /// support actions.
    pub address: String,
}

impl From<AuditEntry> for AuditEntryInfo {
    fn from(e: AuditEntry) -> Self {
        AuditEntryInfo {
            at: rfc3339(e.at),
            kind: e.kind,
            account_id: e.account_id,
            stream_id: e.stream_id,
            device_id: e.device_id,
            device_meta: e.device_meta,
            actor: e.actor,
            reason: e.reason,
            limit_from: e.limit_from,
            limit_to: e.limit_to,
            limit_until: e.limit_until.map(rfc3339),
            address: e.address,
        }
    }
}

#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct AuditQuery {
    /// Only this account's entries.
    #[param(schema_with = schema::id)]
    pub account_id: Option<String>,
    /// Only entries of this kind. Read as text so an unknown kind gets a message that lists the
    /// kinds.
    #[param(value_type = Option<AuditKind>)]
    pub kind: Option<String>,
    /// How many entries, newest first (default 50).
    #[param(schema_with = schema::audit_limit)]
    pub limit: Option<usize>,
}

impl AuditQuery {
    /// The kind filter, if any; an unknown kind is a 422 that names the known ones.
    pub fn kind(&self) -> Result<Option<AuditKind>, ApiError> {
        let Some(name) = &self.kind else {
            return Ok(None);
        };
        AuditKind::parse(name).map(Some).ok_or_else(|| {
            let known: Vec<&str> = AuditKind::ALL.iter().map(|k| k.as_str()).collect();
            let shown: String = name.chars().take(40).collect();
            ApiError::invalid_field(
                "kind",
                &format!("must be one of {} (got {shown:?})", known.join(", ")),
            )
        })
    }

    /// How many entries to show: 50 unless asked, 1 to `AUDIT_RECENT` (what the log keeps).
    pub fn limit(&self) -> Result<usize, ApiError> {
        match self.limit {
            None => Ok(50),
            Some(n) if (1..=AUDIT_RECENT).contains(&n) => Ok(n),
            Some(_) => Err(ApiError::invalid_field(
                "limit",
                &format!("must be 1 to {AUDIT_RECENT}"),
            )),
        }
    }
}

#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct AuditResponse {
    pub entries: Vec<AuditEntryInfo>,
}

/// `PUT /v1/accounts/{account_id}/limit-override`.
#[derive(Debug, Deserialize, ToSchema)]
pub struct OverrideRequest {
    /// The account's limit while the override lasts.
    #[schema(schema_with = schema::override_max_streams)]
    #[serde(deserialize_with = "integral")]
    pub max_streams: u64,
    /// How long it lasts, in seconds.
    #[schema(schema_with = schema::override_expires_in_sec)]
    #[serde(deserialize_with = "integral")]
    pub expires_in_sec: u64,
    /// For the audit log: the support agent (or system) granting it; `api` when not given.
    #[schema(schema_with = schema::actor)]
    pub actor: Option<String>,
    /// For the audit log: why.
    #[schema(schema_with = schema::reason)]
    pub reason: Option<String>,
}

/// Optional body of `DELETE /v1/accounts/{account_id}/limit-override`: who removes the
/// temporary limit and why, for the audit log.
#[derive(Debug, Default, Deserialize, ToSchema)]
pub struct ClearOverrideRequest {
    /// The support agent (or system) removing it; `api` when not given.
    #[schema(schema_with = schema::actor)]
    pub actor: Option<String>,
    /// Why.
    #[schema(schema_with = schema::reason)]
    pub reason: Option<String>,
}

impl ClearOverrideRequest {
    pub fn validate(self, account_id: &str) -> Result<OverrideCmd, ApiError> {
        let (actor, reason) = check_note(self.actor, self.reason)?;
        Ok(OverrideCmd {
            account_id: account_id.to_owned(),
            grant: None,
            actor,
            reason,
        })
    }
}

/// A JSON Schema `integer`: any number without a fraction, `3.0` and `3e2` as well as `3`.
/// Out-of-range values are the caller's rule to refuse (with the field named).
fn integral<'de, D: serde::Deserializer<'de>>(deserializer: D) -> Result<u64, D::Error> {
    use serde::de::{Error, Unexpected};
    let number = serde_json::Number::deserialize(deserializer)?;
    if let Some(n) = number.as_u64() {
        return Ok(n);
    }
    match number.as_f64() {
        // `as` saturates: a negative or huge whole number lands outside every range and is
        // refused by the range check, which names the field and the bounds.
        Some(f) if f.fract() == 0.0 => Ok(f as u64),
        _ => Err(D::Error::invalid_value(
            Unexpected::Other(&number.to_string()),
            &"a whole number",
        )),
    }
}

impl OverrideRequest {
    pub fn validate(self, account_id: &str) -> Result<OverrideCmd, ApiError> {
        let grant = self.grant()?;
        let (actor, reason) = check_note(self.actor, self.reason)?;
        Ok(OverrideCmd {
            account_id: account_id.to_owned(),
            grant: Some(grant),
            actor,
            reason,
        })
    }

    fn grant(&self) -> Result<OverrideGrant, ApiError> {
        if !(1..=u64::from(MAX_STREAMS_CEILING)).contains(&self.max_streams) {
            return Err(ApiError::invalid_field(
                "max_streams",
                &format!("must be 1 to {MAX_STREAMS_CEILING}"),
            ));
        }
        if !(1..=MAX_OVERRIDE_SEC).contains(&self.expires_in_sec) {
            return Err(ApiError::invalid_field(
                "expires_in_sec",
                "must be 1 second to 30 days",
            ));
        }
        Ok(OverrideGrant {
            limit: self.max_streams as u32, // at most MAX_STREAMS_CEILING, checked above
            duration_ms: self.expires_in_sec * 1000,
        })
    }
}

/// A temporary limit in force.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct OverrideInfo {
    pub max_streams: u32,
    /// RFC 3339 UTC.
    pub expires_at: String,
}

impl From<LimitOverride> for OverrideInfo {
    fn from(o: LimitOverride) -> Self {
        OverrideInfo {
            max_streams: o.limit,
            expires_at: rfc3339(o.until),
        }
    }
}

/// `{user}` in a path: a dashboard user name (the id rules).
#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Path)]
pub struct UserPath {
    #[param(schema_with = schema::id)]
    pub user: String,
}

/// A dashboard user's session state: sessions issued under an older generation have ended.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct SessionInfo {
    pub user: String,
    /// Starts at 0; every sign-out adds one. A dashboard puts it in the session it issues and
    /// refuses a session whose generation is not the current one.
    pub generation: u64,
    /// Failed sign-ins under this name still counted, reported by any dashboard replica (each
    /// within the `failure_window_sec` it gave, from the last one); a sign-in clears them.
    pub failures: u64,
}

impl SessionInfo {
    pub fn new(user: String, state: crate::model::SessionState) -> SessionInfo {
        SessionInfo {
            user,
            generation: state.generation,
            failures: state.failures,
        }
    }
}

/// What happened at a dashboard's sign-in, as the audit log names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum SessionEvent {
    /// Signed in.
    SignIn,
    /// Wrong user name or password.
    SignInFailed,
    /// Sign-ins paused for the user name or the address (too many failures).
    SignInThrottled,
    /// Signed out: every session of the user ends, on every dashboard replica.
    SignOut,
}

impl From<SessionEvent> for AuditKind {
    fn from(event: SessionEvent) -> AuditKind {
        match event {
            SessionEvent::SignIn => AuditKind::SignIn,
            SessionEvent::SignInFailed => AuditKind::SignInFailed,
            SessionEvent::SignInThrottled => AuditKind::SignInThrottled,
            SessionEvent::SignOut => AuditKind::SignOut,
        }
    }
}

/// `POST /v1/dashboard-sessions/{user}/events`.
#[derive(Debug, Deserialize, ToSchema)]
pub struct SessionEventRequest {
    pub event: SessionEvent,
    /// The client's address, for the audit log.
    #[schema(schema_with = schema::address)]
    pub address: Option<String>,
    /// A note for the audit log (why a sign-in was paused, say).
    #[schema(schema_with = schema::reason)]
    pub reason: Option<String>,
    /// For `sign_in_failed`: how long the failure counts against the name for every dashboard
    /// replica (the dashboards' lockout), 1 to 86400 seconds; none: not counted.
    #[schema(minimum = 1, maximum = 86400)]
    pub failure_window_sec: Option<u64>,
}

/// Longest `failure_window_sec`: a day.
const MAX_FAILURE_WINDOW_SEC: u64 = 86_400;

impl SessionEventRequest {
    pub fn validate(self, user: &str) -> Result<SessionEventCmd, ApiError> {
        check_token("user", user)?;
        let address = self.address.unwrap_or_default();
        validate_text(&ADDRESS, &address)
            .map_err(|e| ApiError::invalid_field("address", &e.to_string()))?;
        if !address
            .bytes()
            .all(|b| b.is_ascii_hexdigit() || b == b':' || b == b'.')
        {
            return Err(ApiError::invalid_field("address", ADDRESS.words));
        }
        let reason = self.reason.unwrap_or_default();
        validate_reason(&reason).map_err(|e| ApiError::invalid_field("reason", &e))?;
        let failure_window_sec = match self.failure_window_sec {
            None => 0,
            Some(sec @ 1..=MAX_FAILURE_WINDOW_SEC) => sec,
            Some(_) => {
                return Err(ApiError::invalid_field(
                    "failure_window_sec",
                    "must be 1 to 86400 seconds",
                ));
            }
        };
        Ok(SessionEventCmd {
            user: user.to_owned(),
            kind: self.event.into(),
            address,
            reason,
            failure_window_ms: failure_window_sec * 1000,
        })
    }
}

/// Checks a dashboard user name from a path.
pub fn check_user(user: &str) -> Result<(), ApiError> {
    check_token("user", user)
}
