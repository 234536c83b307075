//! The account page: search, plan and limit, the live device table, force-stop.

use askama::Template;
use askama_web::WebTemplate;
use axum::Form;
use axum::Router;
use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Redirect, Response};
use axum::routing::get;
use serde::Deserialize;
use time::OffsetDateTime;

use super::AppState;
use super::ctx::{Ctx, Nav};
use super::error::PageError;
use crate::limiter::{AccountStreams, ActiveStream, ForceStopOutcome, LimiterError};
use crate::view;

/// Longest force-stop reason the limiter keeps, in bytes.
pub const MAX_REASON_BYTES: usize = 200;

pub fn router() -> Router<AppState> {
    Router::new()
        .route("/accounts", get(search))
        .route("/accounts/{account_id}", get(account))
        .route("/accounts/{account_id}/devices", get(devices))
        .route(
            "/accounts/{account_id}/streams/{stream_id}/force-stop",
            get(confirm_force_stop).post(force_stop),
        )
}

// ---- view models -------------------------------------------------------------------------

/// One active stream as the table shows it.
pub struct DeviceRow {
    pub stream_id: String,
    pub short_stream_id: String,
    pub name: String,
    pub device_id: String,
    pub kind: &'static str,
    pub profile: String,
    pub title: String,
    pub started: String,
    pub started_ago: String,
    pub last_seen_ago: String,
    pub expires_in: String,
}

impl DeviceRow {
    fn new(stream: &ActiveStream, now: OffsetDateTime) -> DeviceRow {
        let or_dash = |s: &str| {
            if s.is_empty() {
                "—".to_owned()
            } else {
                s.to_owned()
            }
        };
        DeviceRow {
            stream_id: stream.stream_id.clone(),
            short_stream_id: view::short_id(&stream.stream_id),
            name: stream.label().to_owned(),
            device_id: stream.device_id.clone(),
            kind: view::device_type_label(&stream.device_type),
            profile: or_dash(&stream.profile_id),
            title: or_dash(&stream.title_id),
            started: view::clock(&stream.started_at),
            started_ago: view::ago(now, &stream.started_at),
            last_seen_ago: view::ago(now, &stream.last_seen),
            expires_in: view::until(now, &stream.expires_at),
        }
    }
}

/// The live part of the account page, re-fetched by htmx every few seconds.
pub struct DevicesView {
    pub account_id: String,
    pub plan: String,
    pub limit: u32,
    pub in_use: usize,
    pub rows: Vec<DeviceRow>,
    pub can_force_stop: bool,
    pub refresh_secs: u64,
    pub updated: String,
    /// Set when the limiter did not answer (the fragment keeps polling and recovers).
    pub error: Option<String>,
}

impl DevicesView {
    fn new(state: &AppState, ctx: &Ctx, account_id: &str) -> DevicesView {
        DevicesView {
            account_id: account_id.to_owned(),
            plan: String::new(),
            limit: 0,
            in_use: 0,
            rows: Vec::new(),
            can_force_stop: ctx.user.can_force_stop(),
            refresh_secs: state.settings.refresh.as_secs().max(1),
            updated: view::clock(&now_rfc3339()),
            error: None,
        }
    }

    fn fill(mut self, streams: &AccountStreams) -> DevicesView {
        let now = OffsetDateTime::now_utc();
        self.plan = streams.plan.clone();
        self.limit = streams.limit;
        self.in_use = streams.active.len();
        self.rows = streams
            .active
            .iter()
            .map(|s| DeviceRow::new(s, now))
            .collect();
        self
    }
}

fn now_rfc3339() -> String {
    OffsetDateTime::now_utc()
        .format(&time::format_description::well_known::Rfc3339)
        .unwrap_or_default()
}

#[derive(Template, WebTemplate)]
#[template(path = "pages/account.html")]
struct AccountPage {
    nav: Nav,
    query: String,
    error: Option<String>,
    notice: Option<String>,
    devices: Option<DevicesView>,
}

#[derive(Template, WebTemplate)]
#[template(path = "partials/devices.html")]
struct DevicesPartial {
    devices: DevicesView,
}

#[derive(Template, WebTemplate)]
#[template(path = "pages/force_stop.html")]
struct ForceStopPage {
    nav: Nav,
    account_id: String,
    device: DeviceRow,
    reason: String,
    error: Option<String>,
}

/// Why an account id cannot be looked up, in words; `None` when it is fine.
fn malformed(account_id: &str) -> Option<String> {
    screenlimit_limiter::ids::validate_token(account_id)
        .err()
        .map(|_| {
            format!(
                "“{account_id}” is not an account id. Account ids are 1 to 64 characters: \
                 letters A–Z and a–z, digits, and . _ : - (no spaces). Check the id the customer \
                 read out, or copy it from the customer record."
            )
        })
}

fn bad_account(ctx: &Ctx, account_id: &str, message: String) -> Response {
    (
        StatusCode::BAD_REQUEST,
        AccountPage {
            nav: ctx.nav("accounts"),
            query: account_id.to_owned(),
            error: Some(message),
            notice: None,
            devices: None,
        },
    )
        .into_response()
}

// ---- handlers ----------------------------------------------------------------------------

#[derive(Deserialize)]
struct SearchQuery {
    account_id: Option<String>,
}

async fn search(ctx: Ctx, Query(query): Query<SearchQuery>) -> Response {
    let account_id = query.account_id.unwrap_or_default().trim().to_owned();
    if account_id.is_empty() {
        return AccountPage {
            nav: ctx.nav("accounts"),
            query: String::new(),
            error: None,
            notice: None,
            devices: None,
        }
        .into_response();
    }
    match malformed(&account_id) {
        Some(message) => bad_account(&ctx, &account_id, message),
        None => Redirect::to(&format!("/accounts/{account_id}")).into_response(),
    }
}

#[derive(Deserialize)]
struct NoticeQuery {
    stopped: Option<String>,
    gone: Option<String>,
}

async fn account(
    State(state): State<AppState>,
    ctx: Ctx,
    Path(account_id): Path<String>,
    Query(notice): Query<NoticeQuery>,
) -> Result<Response, PageError> {
    if let Some(message) = malformed(&account_id) {
        return Ok(bad_account(&ctx, &account_id, message));
    }
    let streams = state
        .limiter
        .account_streams(&account_id)
        .await
        .map_err(|e| PageError::limiter(&e).with_nav(ctx.nav("accounts")))?;
    let notice = match (notice.stopped, notice.gone) {
        (Some(device), _) => Some(format!(
            "Force-stopped “{device}”. Its slot is free now and its player is told to stop at its \
             next heartbeat."
        )),
        (None, Some(_)) => Some("That stream had already ended; nothing was stopped.".into()),
        _ => None,
    };
    Ok(AccountPage {
        nav: ctx.nav("accounts"),
        query: account_id.clone(),
        error: None,
        notice,
        devices: Some(DevicesView::new(&state, &ctx, &account_id).fill(&streams)),
    }
    .into_response())
}

/// The htmx fragment. Always 200 so that htmx swaps it in, errors included.
async fn devices(
    State(state): State<AppState>,
    ctx: Ctx,
    Path(account_id): Path<String>,
) -> Response {
    if malformed(&account_id).is_some() {
        return StatusCode::BAD_REQUEST.into_response();
    }
    let view = DevicesView::new(&state, &ctx, &account_id);
    let view = match state.limiter.account_streams(&account_id).await {
        Ok(streams) => view.fill(&streams),
        Err(error) => DevicesView {
            error: Some(limiter_sentence(&error)),
            ..view
        },
    };
    DevicesPartial { devices: view }.into_response()
}

fn limiter_sentence(error: &LimiterError) -> String {
    format!("Live data paused: {error}. Retrying every few seconds.")
}

/// Finds the stream to name it on the confirmation page.
async fn find_stream(
    state: &AppState,
    ctx: &Ctx,
    account_id: &str,
    stream_id: &str,
) -> Result<Option<ActiveStream>, PageError> {
    let streams = state
        .limiter
        .account_streams(account_id)
        .await
        .map_err(|e| PageError::limiter(&e).with_nav(ctx.nav("accounts")))?;
    Ok(streams
        .active
        .into_iter()
        .find(|s| s.stream_id == stream_id))
}

async fn confirm_force_stop(
    State(state): State<AppState>,
    ctx: Ctx,
    Path((account_id, stream_id)): Path<(String, String)>,
) -> Result<Response, PageError> {
    ctx.require_support("accounts")?;
    if let Some(message) = malformed(&account_id) {
        return Ok(bad_account(&ctx, &account_id, message));
    }
    let Some(stream) = find_stream(&state, &ctx, &account_id, &stream_id).await? else {
        return Ok(Redirect::to(&format!("/accounts/{account_id}?gone=1")).into_response());
    };
    Ok(ForceStopPage {
        nav: ctx.nav("accounts"),
        device: DeviceRow::new(&stream, OffsetDateTime::now_utc()),
        account_id,
        reason: String::new(),
        error: None,
    }
    .into_response())
}

#[derive(Deserialize)]
struct ForceStopForm {
    #[serde(default)]
    reason: String,
    /// The device's display name, echoed back for the notice after the redirect.
    #[serde(default)]
    device: String,
}

/// Normalizes a reason typed in a text area; says what is wrong with it, if anything.
pub fn clean_reason(raw: &str) -> Result<String, String> {
    let reason = raw.replace("\r\n", "\n").trim().to_owned();
    if reason.len() > MAX_REASON_BYTES {
        return Err(format!(
            "The reason is {} bytes long; the audit log keeps at most {MAX_REASON_BYTES}. \
             Shorten it and confirm again.",
            reason.len()
        ));
    }
    if reason.chars().any(|c| c.is_control() && c != '\n') {
        return Err("The reason holds control characters; type it as plain text.".into());
    }
    Ok(reason)
}

async fn force_stop(
    State(state): State<AppState>,
    ctx: Ctx,
    Path((account_id, stream_id)): Path<(String, String)>,
    Form(form): Form<ForceStopForm>,
) -> Result<Response, PageError> {
    ctx.require_support("accounts")?;
    if let Some(message) = malformed(&account_id) {
        return Ok(bad_account(&ctx, &account_id, message));
    }
    let reason = match clean_reason(&form.reason) {
        Ok(reason) => reason,
        Err(message) => {
            let Some(stream) = find_stream(&state, &ctx, &account_id, &stream_id).await? else {
                return Ok(Redirect::to(&format!("/accounts/{account_id}?gone=1")).into_response());
            };
            let page = ForceStopPage {
                nav: ctx.nav("accounts"),
                device: DeviceRow::new(&stream, OffsetDateTime::now_utc()),
                account_id,
                reason: form.reason,
                error: Some(message),
            };
            return Ok((StatusCode::UNPROCESSABLE_ENTITY, page).into_response());
        }
    };
    let outcome = state
        .limiter
        .force_stop(&account_id, &stream_id, &ctx.user.name, &reason)
        .await
        .map_err(|e| PageError::limiter(&e).with_nav(ctx.nav("accounts")))?;
    let target = match outcome {
        ForceStopOutcome::Stopped => {
            tracing::info!(
                account_id,
                stream_id,
                actor = ctx.user.name,
                reason,
                "force-stopped"
            );
            let device = if form.device.trim().is_empty() {
                stream_id
                    .rsplit('.')
                    .next()
                    .unwrap_or("the device")
                    .to_owned()
            } else {
                form.device.chars().take(64).collect()
            };
            format!(
                "/accounts/{account_id}?stopped={}",
                view::query_encode(&device)
            )
        }
        ForceStopOutcome::UnknownStream => format!("/accounts/{account_id}?gone=1"),
    };
    Ok(Redirect::to(&target).into_response())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reasons_are_normalized_and_bounded() {
        assert_eq!(
            clean_reason("  customer asked\r\nticket 7 "),
            Ok("customer asked\nticket 7".into())
        );
        assert!(clean_reason(&"x".repeat(201)).is_err());
        assert!(clean_reason("bell\u{7}").is_err());
        assert!(malformed("acct-42").is_none());
        assert!(malformed("acct 42").is_some());
        assert!(malformed(&"a".repeat(65)).is_some());
    }
}
