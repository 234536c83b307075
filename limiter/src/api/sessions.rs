//! Dashboard sessions: the state that says a dashboard session has ended lives here, in the
//! store every dashboard replica reaches, so a sign-out holds on all of them. A session carries
//! its user's generation; a sign-out adds one, ending every session issued before it. The same
//! call records sign-in events in the audit log.

use axum::Json;
use axum::extract::State;

use super::error::ApiError;
use super::extract::{ApiJson, ApiPath};
use super::responses::{
    BadJson, InvalidRequest, PayloadTooLarge, StoreUnavailable, UnsupportedMediaType,
};
use super::streams::AppState;
use super::types::{SessionEventRequest, SessionInfo, UserPath, check_user};

/// A dashboard user's session generation: a session issued under an older one has ended.
#[utoipa::path(
    get, path = "/v1/dashboard-sessions/{user}", tag = "dashboard",
    params(UserPath),
    responses(
        (status = 200, description = "The generation in force (0 until the user first signs out) and the failed sign-ins still counted", body = SessionInfo),
        (status = 422, response = InvalidRequest),
        (status = 503, response = StoreUnavailable),
    )
)]
pub async fn session(
    State(service): State<AppState>,
    ApiPath(UserPath { user }): ApiPath<UserPath>,
) -> Result<Json<SessionInfo>, ApiError> {
    check_user(&user)?;
    let state = service.session_state(&user).await?;
    Ok(Json(SessionInfo::new(user, state)))
}

/// Record a dashboard sign-in event in the audit log (`sign_in`, `sign_in_failed`,
/// `sign_in_throttled`, `sign_out`, with the client's address); a `sign_out` also ends every
/// session of the user, on every dashboard replica (its generation goes up by one); a
/// `sign_in_failed` with `failure_window_sec` counts against the name for every replica, and a
/// `sign_in` clears the count.
#[utoipa::path(
    post, path = "/v1/dashboard-sessions/{user}/events", tag = "dashboard",
    params(UserPath),
    request_body = SessionEventRequest,
    responses(
        (status = 200, description = "Recorded; the generation now in force", body = SessionInfo),
        (status = 400, response = BadJson),
        (status = 413, response = PayloadTooLarge),
        (status = 415, response = UnsupportedMediaType),
        (status = 422, response = InvalidRequest),
        (status = 503, response = StoreUnavailable),
    )
)]
pub async fn event(
    State(service): State<AppState>,
    ApiPath(UserPath { user }): ApiPath<UserPath>,
    ApiJson(body): ApiJson<SessionEventRequest>,
) -> Result<Json<SessionInfo>, ApiError> {
    let cmd = body.validate(&user)?;
    let state = service.session_event(&cmd).await?;
    Ok(Json(SessionInfo::new(user, state)))
}
