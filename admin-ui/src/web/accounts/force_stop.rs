//! Force-stopping a stream: the confirmation page and the stop.

use askama::Template;
use askama_web::WebTemplate;
use axum::Form;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Redirect, Response};
use serde::Deserialize;
use time::OffsetDateTime;

use super::super::ctx::Ctx;
use super::super::error::PageError;
use super::super::nav::Nav;
use super::super::state::AppState;
use super::page::{bad_account, malformed};
use super::reason::clean_reason;
use super::views::DeviceRow;
use crate::ids;
use crate::limiter::{ActiveStream, ForceStopOutcome};
use crate::view;

#[derive(Template, WebTemplate)]
#[template(path = "pages/force_stop.html")]
struct ForceStopPage {
    nav: Nav,
    account_id: String,
    device: DeviceRow,
    reason: String,
    error: Option<String>,
}

/// A stream id from the address that must not reach the limiter, as a 400 page.
fn check_stream(ctx: &Ctx, stream_id: &str) -> Result<(), PageError> {
    ids::check_stream_id(stream_id).map_err(|e| PageError::bad_id(&e).with_nav(ctx.nav("accounts")))
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

pub async fn confirm_force_stop(
    State(state): State<AppState>,
    ctx: Ctx,
    Path((account_id, stream_id)): Path<(String, String)>,
) -> Result<Response, PageError> {
    ctx.require_support("accounts", "force-stop streams")?;
    if let Some(message) = malformed(&account_id) {
        return Ok(bad_account(&ctx, &account_id, message));
    }
    check_stream(&ctx, &stream_id)?;
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
pub struct ForceStopForm {
    #[serde(default)]
    reason: String,
    /// The device's display name, echoed back for the notice after the redirect.
    #[serde(default)]
    device: String,
}

pub async fn force_stop(
    State(state): State<AppState>,
    ctx: Ctx,
    Path((account_id, stream_id)): Path<(String, String)>,
    Form(form): Form<ForceStopForm>,
) -> Result<Response, PageError> {
    ctx.require_support("accounts", "force-stop streams")?;
    if let Some(message) = malformed(&account_id) {
        return Ok(bad_account(&ctx, &account_id, message));
    }
    check_stream(&ctx, &stream_id)?;
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
