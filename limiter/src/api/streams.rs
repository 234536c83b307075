//! The v1 stream handlers: parse, validate, call the service, shape the answer.

use std::sync::Arc;

use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::{Extension, Json};
use serde_json::json;

use super::auth::{Caller, check_account, check_stream_device};
use super::error::ApiError;
use super::extract::{ApiJson, ApiOptionalJson, ApiPath, ApiQuery};
use super::home_hint::home_hint;
use super::responses::{
    BadJson, InvalidPlayStart, InvalidRequest, PayloadTooLarge, RequestTimeout, StoreUnavailable,
    StreamGone, UnknownAccount, UnknownStream, UnsupportedMediaType,
};
use super::types::{
    AccountEnforcement, AccountPath, AccountRef, AccountStreamPath, AccountStreamsResponse,
    AuditEntryInfo, AuditQuery, AuditResponse, ClearOverrideRequest, ForceStopRequest,
    HeartbeatResponse, LimitReachedBody, OkResponse, OverrideInfo, OverrideRequest,
    PlayStartRequest, PlayStartResponse, ShadowInfo, StreamInfo, StreamPath, check_account_id,
};
use crate::model::{DenyRule, ForceStopOutcome, HeartbeatOutcome};
use crate::overload::{Admission, RequestSlot};
use crate::service::{FleetView, Load, PlayDecision, ShadowVerdict, StreamService};

pub type AppState = Arc<StreamService>;

/// The request's place in flight, taken now that its body is in (`overload.rs`), and whether
/// it must be shed. Without an `Admission` (a router served by other means) it is not bounded.
fn admit(admission: Option<Extension<Admission>>) -> (Load, Option<RequestSlot>) {
    match admission.map(|Extension(admission)| admission.admit()) {
        Some(None) => (Load::Shed, None),
        Some(place) => (Load::Normal, place),
        None => (Load::Normal, None),
    }
}

fn ttl_sec(service: &StreamService) -> f64 {
    service.timing().ttl_ms as f64 / 1000.0
}

/// Start a play: take a slot for the account, or learn which devices hold them all.
#[utoipa::path(
    post, path = "/v1/streams", tag = "streams",
    request_body = PlayStartRequest,
    responses(
        (status = 200, description = "Play allowed", body = PlayStartResponse),
        (status = 400, response = BadJson),
        (status = 403, response = UnknownAccount),
        (status = 404, response = UnknownStream),
        (status = 409, description = "The account is at its limit", body = LimitReachedBody),
        (status = 413, response = PayloadTooLarge),
        (status = 408, response = RequestTimeout),
        (status = 415, response = UnsupportedMediaType),
        (status = 422, response = InvalidPlayStart),
        (status = 503, response = StoreUnavailable),
    )
)]
pub async fn play_start(
    State(service): State<AppState>,
    admission: Option<Extension<Admission>>,
    caller: Option<Extension<Caller>>,
    headers: HeaderMap,
    ApiJson(request): ApiJson<PlayStartRequest>,
) -> Result<Response, ApiError> {
    let mut request = request.validate()?;
    if let Some(Extension(caller)) = &caller {
        caller.check_account(&request.account_id)?;
        caller.check_device(&request.device.id)?;
    }
    request.home = home_hint(&service, &caller, &headers)?;
    let (load, _place) = admit(admission);
    match service.play_start(request, load).await? {
        PlayDecision::Granted {
            stream_id,
            limit,
            active_count,
            degraded,
            shadow,
        } => {
            // A degraded play is counted (`decisions_total{decision="degraded"}`), never logged
            // one by one: the store's circuit and shedding log when they start and stop.
            Ok(Json(PlayStartResponse {
                stream_id,
                lease_ttl_sec: ttl_sec(&service),
                heartbeat_interval_sec: service.heartbeat_interval().as_secs_f64(),
                limit,
                active_count,
                degraded,
                shadow: shadow.map(|verdict| shadow_info(limit, verdict)),
            })
            .into_response())
        }
        PlayDecision::Denied {
            limit,
            rule,
            active,
        } => {
            let active: Vec<StreamInfo> = active
                .into_iter()
                .map(|s| StreamInfo::new(s, service.timing().ttl_ms))
                .collect();
            Err(limit_reached(limit, rule).with("active", json!(active)))
        }
    }
}

/// The `shadow` part of a granted play's answer: the rule as a 409 would have named it.
fn shadow_info(limit: u32, verdict: ShadowVerdict) -> ShadowInfo {
    let rule = verdict.would_refuse;
    let capped = match rule {
        Some(DenyRule::DeviceTypeCap { kind, cap }) => Some((kind, cap)),
        _ => None,
    };
    ShadowInfo {
        would_refuse: rule.is_some(),
        rule: rule.map(|r| r.name().to_owned()),
        limit: rule.map(|_| limit),
        device_type: capped.map(|(kind, _)| kind),
        cap: capped.map(|(_, cap)| cap),
    }
}

/// The 409 body for a refused play: which rule, in words a player can show.
fn limit_reached(limit: u32, rule: DenyRule) -> ApiError {
    let plural = |n: u32| if n == 1 { "" } else { "s" };
    match rule {
        DenyRule::MaxStreams => ApiError::new(
            StatusCode::CONFLICT,
            "concurrent_stream_limit",
            format!(
                "this account may stream on {limit} device{} at once; stop one of the active streams \
                 (or retry with replace_stream_id) to play here",
                plural(limit)
            ),
        )
        .with("limit", limit)
        .with("rule", rule.name()),
        DenyRule::DeviceTypeCap { kind, cap } => {
            ApiError::new(
                StatusCode::CONFLICT,
                "concurrent_stream_limit",
                format!(
                    "this plan allows {cap} stream{} at once on {} devices; stop one of them to play here",
                    plural(cap),
                    kind.name()
                ),
            )
            .with("limit", limit)
            .with("rule", rule.name())
            .with("device_type", kind.name())
            .with("cap", cap)
        }
    }
}

/// Renew a stream's lease; send every `heartbeat_interval_sec`.
#[utoipa::path(
    put, path = "/v1/streams/{stream_id}/heartbeat", tag = "streams",
    params(StreamPath),
    request_body = AccountRef,
    responses(
        (status = 200, description = "Lease renewed (or re-registered after a loss)", body = HeartbeatResponse),
        (status = 400, response = BadJson),
        (status = 404, response = UnknownStream),
        (status = 410, response = StreamGone),
        (status = 413, response = PayloadTooLarge),
        (status = 408, response = RequestTimeout),
        (status = 415, response = UnsupportedMediaType),
        (status = 422, response = InvalidRequest),
        (status = 503, response = StoreUnavailable),
    )
)]
pub async fn heartbeat(
    State(service): State<AppState>,
    admission: Option<Extension<Admission>>,
    caller: Option<Extension<Caller>>,
    headers: HeaderMap,
    ApiPath(StreamPath { stream_id }): ApiPath<StreamPath>,
    ApiJson(body): ApiJson<AccountRef>,
) -> Result<Json<HeartbeatResponse>, ApiError> {
    check_account_id(&body.account_id)?;
    check_account(&caller, &body.account_id)?;
    check_stream_device(&caller, &stream_id)?;
    let home = home_hint(&service, &caller, &headers)?;
    let (load, _place) = admit(admission);
    let renewal = service
        .heartbeat(&body.account_id, &stream_id, &home, load)
        .await?;
    match renewal.outcome {
        HeartbeatOutcome::Renewed { .. } | HeartbeatOutcome::Reregistered { .. } => {
            Ok(Json(HeartbeatResponse {
                ok: true,
                lease_ttl_sec: ttl_sec(&service),
                degraded: renewal.degraded,
            }))
        }
        HeartbeatOutcome::Expired => Err(ApiError::new(
            StatusCode::GONE,
            "lease_expired",
            "this stream's lease ended and the account is full; start a new play to continue",
        )
        .with("action", "re_acquire")),
        HeartbeatOutcome::Revoked => Err(ApiError::new(
            StatusCode::GONE,
            "stream_revoked",
            "this stream was stopped from another device or by support; stop playing",
        )
        .with("action", "stop")),
        HeartbeatOutcome::RevokedOverLimit => Err(ApiError::new(
            StatusCode::GONE,
            "stream_revoked",
            "this stream was let play while the account's home region did not answer, and the \
             account was over its limit once it answered again (the oldest streams keep playing); \
             stop playing",
        )
        .with("action", "stop")
        .with("reason", "over_limit_after_partition")),
    }
}

/// Stop a stream and free its slot now. Idempotent.
#[utoipa::path(
    delete, path = "/v1/streams/{stream_id}", tag = "streams",
    params(StreamPath),
    request_body = AccountRef,
    responses(
        (status = 200, description = "Stopped (or was not playing)", body = OkResponse),
        (status = 400, response = BadJson),
        (status = 404, response = UnknownStream),
        (status = 413, response = PayloadTooLarge),
        (status = 408, response = RequestTimeout),
        (status = 415, response = UnsupportedMediaType),
        (status = 422, response = InvalidRequest),
        (status = 503, response = StoreUnavailable),
    )
)]
pub async fn release(
    State(service): State<AppState>,
    admission: Option<Extension<Admission>>,
    caller: Option<Extension<Caller>>,
    headers: HeaderMap,
    ApiPath(StreamPath { stream_id }): ApiPath<StreamPath>,
    ApiJson(body): ApiJson<AccountRef>,
) -> Result<Json<OkResponse>, ApiError> {
    check_account_id(&body.account_id)?;
    check_account(&caller, &body.account_id)?;
    check_stream_device(&caller, &stream_id)?;
    let home = home_hint(&service, &caller, &headers)?;
    let (load, _place) = admit(admission);
    let degraded = service
        .release(&body.account_id, &stream_id, &home, load)
        .await?;
    Ok(Json(OkResponse { ok: true, degraded }))
}

/// The account's plan and the streams holding its slots.
#[utoipa::path(
    get, path = "/v1/accounts/{account_id}/streams", tag = "accounts",
    params(AccountPath),
    responses(
        (status = 200, description = "Active streams", body = AccountStreamsResponse),
        (status = 422, response = InvalidRequest),
        (status = 503, response = StoreUnavailable),
    )
)]
pub async fn list(
    State(service): State<AppState>,
    caller: Option<Extension<Caller>>,
    headers: HeaderMap,
    ApiPath(AccountPath { account_id }): ApiPath<AccountPath>,
) -> Result<Json<AccountStreamsResponse>, ApiError> {
    check_account_id(&account_id)?;
    check_account(&caller, &account_id)?;
    let home = home_hint(&service, &caller, &headers)?;
    let streams = service.list(&account_id, &home).await?;
    let ttl_ms = service.timing().ttl_ms;
    Ok(Json(AccountStreamsResponse {
        account_id,
        plan: streams.plan,
        limit: streams.limit,
        limit_override: streams.limit_override.map(OverrideInfo::from),
        enforcement: match streams.enforced {
            true => AccountEnforcement::Enforce,
            false => AccountEnforcement::Shadow,
        },
        home_region: streams.home_region,
        active: streams
            .active
            .into_iter()
            .map(|s| StreamInfo::new(s, ttl_ms))
            .collect(),
    }))
}

/// Kick a device: free its slot now, answer its heartbeats `stream_revoked`, log who and why.
#[utoipa::path(
    post, path = "/v1/accounts/{account_id}/streams/{stream_id}/force-stop", tag = "accounts",
    params(AccountStreamPath),
    request_body(content = Option<ForceStopRequest>, description = "Optional (an empty body is none): actor and reason for the audit log"),
    responses(
        (status = 200, description = "Stopped (or already stopped)", body = OkResponse),
        (status = 400, response = BadJson),
        (status = 404, response = UnknownStream),
        (status = 413, response = PayloadTooLarge),
        (status = 408, response = RequestTimeout),
        (status = 415, response = UnsupportedMediaType),
        (status = 422, response = InvalidRequest),
        (status = 503, response = StoreUnavailable),
    )
)]
pub async fn force_stop(
    State(service): State<AppState>,
    ApiPath(AccountStreamPath {
        account_id,
        stream_id,
    }): ApiPath<AccountStreamPath>,
    ApiOptionalJson(request): ApiOptionalJson<ForceStopRequest>,
) -> Result<Json<OkResponse>, ApiError> {
    check_account_id(&account_id)?;
    let (actor, reason) = request.validate()?;
    let outcome = service
        .force_stop(&account_id, &stream_id, &actor, &reason)
        .await?;
    if outcome == ForceStopOutcome::Stopped {
        tracing::info!(account_id, stream_id, actor, reason, "stream force-stopped");
    }
    Ok(Json(OkResponse {
        ok: true,
        degraded: false,
    }))
}

/// Grant the account a temporary limit (support gives an extra stream), replacing any earlier one;
/// the audit log records it (`limit_granted`) with actor and reason.
#[utoipa::path(
    put, path = "/v1/accounts/{account_id}/limit-override", tag = "accounts",
    params(AccountPath),
    request_body = OverrideRequest,
    responses(
        (status = 200, description = "The override in force", body = OverrideInfo),
        (status = 400, response = BadJson),
        (status = 413, response = PayloadTooLarge),
        (status = 408, response = RequestTimeout),
        (status = 415, response = UnsupportedMediaType),
        (status = 422, response = InvalidRequest),
        (status = 503, response = StoreUnavailable),
    )
)]
pub async fn set_override(
    State(service): State<AppState>,
    ApiPath(AccountPath { account_id }): ApiPath<AccountPath>,
    ApiJson(body): ApiJson<OverrideRequest>,
) -> Result<Json<OverrideInfo>, ApiError> {
    check_account_id(&account_id)?;
    let cmd = body.validate(&account_id)?;
    let granted = service.set_override(&cmd).await?;
    let granted = granted.ok_or_else(|| {
        ApiError::new(
            StatusCode::INTERNAL_SERVER_ERROR,
            "internal",
            "override not stored",
        )
    })?;
    Ok(Json(OverrideInfo::from(granted)))
}

/// Remove the account's temporary limit; its plan's limit applies again. The audit log records
/// it (`limit_removed`) with actor and reason, when there was one to remove.
#[utoipa::path(
    delete, path = "/v1/accounts/{account_id}/limit-override", tag = "accounts",
    params(AccountPath),
    request_body(content = Option<ClearOverrideRequest>, description = "Optional: actor and reason for the audit log"),
    responses(
        (status = 200, description = "No override in force (idempotent)", body = OkResponse),
        (status = 400, response = BadJson),
        (status = 413, response = PayloadTooLarge),
        (status = 408, response = RequestTimeout),
        (status = 415, response = UnsupportedMediaType),
        (status = 422, response = InvalidRequest),
        (status = 503, response = StoreUnavailable),
    )
)]
pub async fn clear_override(
    State(service): State<AppState>,
    ApiPath(AccountPath { account_id }): ApiPath<AccountPath>,
    ApiOptionalJson(request): ApiOptionalJson<ClearOverrideRequest>,
) -> Result<Json<OkResponse>, ApiError> {
    check_account_id(&account_id)?;
    let cmd = request.validate(&account_id)?;
    service.set_override(&cmd).await?;
    Ok(Json(OkResponse {
        ok: true,
        degraded: false,
    }))
}

/// The newest support actions (force-stops, temporary limits granted and removed), fleet-wide or
/// for one account, of every kind or of one.
#[utoipa::path(
    get, path = "/v1/audit", tag = "accounts",
    params(AuditQuery),
    responses(
        (status = 200, description = "Newest first", body = AuditResponse),
        (status = 422, response = InvalidRequest),
        (status = 503, response = StoreUnavailable),
    )
)]
pub async fn audit(
    State(service): State<AppState>,
    ApiQuery(query): ApiQuery<AuditQuery>,
) -> Result<Json<AuditResponse>, ApiError> {
    if let Some(account_id) = &query.account_id {
        check_account_id(account_id)?;
    }
    let kind = query.kind()?;
    let limit = query.limit()?;
    let entries = service
        .audit(query.account_id.as_deref(), kind, limit)
        .await?;
    Ok(Json(AuditResponse {
        entries: entries.into_iter().map(AuditEntryInfo::from).collect(),
    }))
}

/// This instance, its store's shards and its decision counters, for the fleet overview.
#[utoipa::path(get, path = "/v1/fleet", tag = "ops", responses((status = 200, description = "This instance and its store", body = FleetView)))]
pub async fn fleet(State(service): State<AppState>) -> Json<FleetView> {
    Json(service.fleet().await)
}
