//! Granting and removing a temporary limit.

use axum::Form;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Redirect, Response};

use super::super::ctx::Ctx;
use super::super::error::PageError;
use super::super::state::AppState;
use super::limits_form::{LimitsForm, OverrideForm, RemoveForm, parse_override};
use super::page::{account_page, bad_account, malformed, recent_view};
use super::reason::{MAX_REASON_BYTES, clean_reason};
use crate::limiter::{AccountStreams, LimiterError};

/// A stray GET (a bookmarked form address) goes back to the account.
pub async fn back_to_account(Path(account_id): Path<String>) -> Response {
    match malformed(&account_id) {
        Some(_) => Redirect::to("/accounts").into_response(),
        None => Redirect::to(&format!("/accounts/{account_id}")).into_response(),
    }
}

/// The limiter's refusal of a temporary-limit call, as a page.
fn override_error(ctx: &Ctx, error: &LimiterError) -> PageError {
    match error {
        LimiterError::Status {
            status: 404 | 405, ..
        } => PageError::new(
            StatusCode::BAD_GATEWAY,
            "The limiter cannot set temporary limits",
            "This limiter version has no per-account limit overrides. Upgrade the limiter; \
             nothing was changed.",
        ),
        LimiterError::Status {
            status: 422,
            message,
            ..
        } => PageError::new(
            StatusCode::UNPROCESSABLE_ENTITY,
            "The limiter refused that limit",
            format!("{message}. Nothing was changed; go back and correct it."),
        ),
        other => PageError::limiter(other),
    }
    .with_nav(ctx.nav("accounts"))
}

pub async fn grant_override(
    State(state): State<AppState>,
    ctx: Ctx,
    Path(account_id): Path<String>,
    Form(form): Form<OverrideForm>,
) -> Result<Response, PageError> {
    ctx.require_support("accounts", "change an account's limit")?;
    if let Some(message) = malformed(&account_id) {
        return Ok(bad_account(&ctx, &account_id, message));
    }
    let checked = parse_override(&form.max_streams, &form.expires_in)
        .and_then(|(streams, seconds)| Ok((streams, seconds, clean_reason(&form.reason)?)));
    let (max_streams, seconds, reason) = match checked {
        Ok(valid) => valid,
        Err(message) => {
            let form = |streams: &AccountStreams| LimitsForm::refused(streams, &form, message);
            return refused_limits(&state, &ctx, &account_id, form).await;
        }
    };
    let granted = state
        .limiter
        .set_limit_override(&account_id, max_streams, seconds, &ctx.user.name, &reason)
        .await
        .map_err(|e| override_error(&ctx, &e))?;
    // The limiter's audit log is the record; this line is for the dashboard's own log.
    tracing::info!(
        account_id,
        max_streams,
        expires_at = granted.expires_at,
        actor = ctx.user.name,
        reason,
        "temporary limit granted"
    );
    Ok(Redirect::to(&format!("/accounts/{account_id}?limit=granted")).into_response())
}

/// The account page again, 422, with the limits form `form` makes (what was typed, and why it
/// was refused).
async fn refused_limits(
    state: &AppState,
    ctx: &Ctx,
    account_id: &str,
    form: impl FnOnce(&AccountStreams) -> LimitsForm,
) -> Result<Response, PageError> {
    let streams = state
        .limiter
        .account_streams(account_id)
        .await
        .map_err(|e| PageError::limiter(&e).with_nav(ctx.nav("accounts")))?;
    let limits = form(&streams);
    let recent = recent_view(state, account_id, &streams.plan).await;
    let page = account_page(state, ctx, account_id, &streams, None, Some(limits), recent);
    Ok((StatusCode::UNPROCESSABLE_ENTITY, page).into_response())
}

pub async fn remove_override(
    State(state): State<AppState>,
    ctx: Ctx,
    Path(account_id): Path<String>,
    Form(form): Form<RemoveForm>,
) -> Result<Response, PageError> {
    ctx.require_support("accounts", "change an account's limit")?;
    if let Some(message) = malformed(&account_id) {
        return Ok(bad_account(&ctx, &account_id, message));
    }
    let reason = match clean_reason(&form.reason) {
        Ok(reason) => reason,
        Err(message) => {
            let limits = |streams: &AccountStreams| LimitsForm {
                reason: form.reason.chars().take(MAX_REASON_BYTES).collect(),
                error: Some(message),
                ..LimitsForm::new(streams)
            };
            return refused_limits(&state, &ctx, &account_id, limits).await;
        }
    };
    state
        .limiter
        .clear_limit_override(&account_id, &ctx.user.name, &reason)
        .await
        .map_err(|e| override_error(&ctx, &e))?;
    tracing::info!(
        account_id,
        actor = ctx.user.name,
        reason,
        "temporary limit removed"
    );
    Ok(Redirect::to(&format!("/accounts/{account_id}?limit=removed")).into_response())
}
