//! The account page and its live device table: search, the page, the htmx fragment.

use askama::Template;
use askama_web::WebTemplate;
use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Redirect, Response};
use serde::Deserialize;
use time::OffsetDateTime;

use super::super::ctx::Ctx;
use super::super::error::PageError;
use super::super::nav::Nav;
use super::super::state::AppState;
use super::limits_form::LimitsForm;
use super::recent::{RECENT_EVENTS, RecentView};
use super::views::{DevicesView, OverrideView};
use crate::ids;
use crate::limiter::{AccountStreams, LimiterError};

#[derive(Template, WebTemplate)]
#[template(path = "pages/account.html")]
pub struct AccountPage {
    nav: Nav,
    query: String,
    error: Option<String>,
    notice: Option<String>,
    devices: Option<DevicesView>,
    /// The account's recent history, beside its devices.
    recent: Option<RecentView>,
    /// Only for the support role.
    limits: Option<LimitsForm>,
}

/// The device table's refresh, and with it the "Recent" panel (swapped in out of band).
#[derive(Template, WebTemplate)]
#[template(path = "partials/devices_refresh.html")]
struct DevicesPartial {
    devices: DevicesView,
    recent: Option<RecentView>,
}

/// The account's "Recent" panel, from the limiter's history of it (asked on its own: the
/// page's own handlers ask for it beside the account's streams).
pub async fn recent_view(state: &AppState, account_id: &str, plan: &str) -> RecentView {
    let history = state
        .limiter
        .account_history(account_id, RECENT_EVENTS)
        .await;
    RecentView::new(history, plan, OffsetDateTime::now_utc())
}

/// Why an account id from the address cannot be looked up, in words; `None` when it is fine.
pub fn malformed(account_id: &str) -> Option<String> {
    ids::check_account_id(account_id)
        .err()
        .map(|e| e.to_string())
}

/// The account page with `message` about the account id, 400.
pub fn bad_account(ctx: &Ctx, account_id: &str, message: String) -> Response {
    (
        StatusCode::BAD_REQUEST,
        AccountPage {
            nav: ctx.nav("accounts"),
            query: account_id.to_owned(),
            error: Some(message),
            notice: None,
            devices: None,
            recent: None,
            limits: None,
        },
    )
        .into_response()
}

#[derive(Deserialize)]
pub struct SearchQuery {
    account_id: Option<String>,
}

pub async fn search(ctx: Ctx, Query(query): Query<SearchQuery>) -> Response {
    let account_id = query.account_id.unwrap_or_default().trim().to_owned();
    if account_id.is_empty() {
        return AccountPage {
            nav: ctx.nav("accounts"),
            query: String::new(),
            error: None,
            notice: None,
            devices: None,
            recent: None,
            limits: None,
        }
        .into_response();
    }
    match malformed(&account_id) {
        Some(message) => bad_account(&ctx, &account_id, message),
        None => Redirect::to(&format!("/accounts/{account_id}")).into_response(),
    }
}

#[derive(Deserialize)]
pub struct NoticeQuery {
    stopped: Option<String>,
    gone: Option<String>,
    /// `granted` or `removed`, after the temporary-limit forms.
    limit: Option<String>,
}

/// What the page says after a temporary limit was granted or removed, from the limiter's
/// current answer (not from the query string, which anyone can type).
fn limit_notice(what: &str, streams: &AccountStreams) -> Option<String> {
    let now = OffsetDateTime::now_utc();
    match (what, &streams.limit_override) {
        ("granted", Some(o)) => {
            let o = OverrideView::new(o, now);
            Some(format!(
                "Temporary limit granted: this account may use {} screen{} until {} ({}). The \
                 plan's limit applies again by itself after that.",
                o.max_streams,
                if o.max_streams == 1 { "" } else { "s" },
                o.until,
                o.until_in
            ))
        }
        ("removed", None) => Some(format!(
            "Temporary limit removed: the plan's limit of {} applies again. Devices playing now \
             keep playing; new plays count against the plan's limit.",
            streams.limit
        )),
        _ => None,
    }
}

pub async fn account(
    State(state): State<AppState>,
    ctx: Ctx,
    Path(account_id): Path<String>,
    Query(notice): Query<NoticeQuery>,
) -> Result<Response, PageError> {
    if let Some(message) = malformed(&account_id) {
        return Ok(bad_account(&ctx, &account_id, message));
    }
    let (streams, history) = tokio::join!(
        state.limiter.account_streams(&account_id),
        state.limiter.account_history(&account_id, RECENT_EVENTS),
    );
    let streams = streams.map_err(|e| PageError::limiter(&e).with_nav(ctx.nav("accounts")))?;
    let notice = match (notice.stopped, notice.gone, notice.limit) {
        (Some(device), _, _) => Some(format!(
            "Force-stopped “{device}”. Its slot is free now and its player is told to stop at its \
             next heartbeat."
        )),
        (None, Some(_), _) => Some("That stream had already ended; nothing was stopped.".into()),
        (None, None, Some(what)) => limit_notice(&what, &streams),
        _ => None,
    };
    let recent = RecentView::new(history, &streams.plan, OffsetDateTime::now_utc());
    Ok(account_page(&state, &ctx, &account_id, &streams, notice, None, recent).into_response())
}

/// The account page for `streams`; `limits` replaces the support role's fresh form.
pub fn account_page(
    state: &AppState,
    ctx: &Ctx,
    account_id: &str,
    streams: &AccountStreams,
    notice: Option<String>,
    limits: Option<LimitsForm>,
    recent: RecentView,
) -> AccountPage {
    let limits = ctx
        .user
        .can_change_limits()
        .then(|| limits.unwrap_or_else(|| LimitsForm::new(streams)));
    AccountPage {
        nav: ctx.nav("accounts"),
        query: account_id.to_owned(),
        error: None,
        notice,
        devices: Some(DevicesView::new(state, ctx, account_id).fill(streams)),
        recent: Some(recent),
        limits,
    }
}

/// The htmx fragment. Always 200 so that htmx swaps it in, errors included.
pub async fn devices(
    State(state): State<AppState>,
    ctx: Ctx,
    Path(account_id): Path<String>,
) -> Response {
    if malformed(&account_id).is_some() {
        return StatusCode::BAD_REQUEST.into_response();
    }
    let view = DevicesView::new(&state, &ctx, &account_id);
    let (streams, history) = tokio::join!(
        state.limiter.account_streams(&account_id),
        state.limiter.account_history(&account_id, RECENT_EVENTS),
    );
    let (view, recent) = match streams {
        Ok(streams) => {
            let mut recent = RecentView::new(history, &streams.plan, OffsetDateTime::now_utc());
            recent.out_of_band = true;
            (view.fill(&streams), Some(recent))
        }
        // The panel keeps what it showed: the device table says the data is paused.
        Err(error) => (
            DevicesView {
                error: Some(limiter_sentence(&error)),
                ..view
            },
            None,
        ),
    };
    DevicesPartial {
        devices: view,
        recent,
    }
    .into_response()
}

fn limiter_sentence(error: &LimiterError) -> String {
    format!("Live data paused: {error}. Retrying every few seconds.")
}
