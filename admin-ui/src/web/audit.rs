//! The audit page: recent force-stops (kept by the limiter), optionally for one account.

use askama::Template;
use askama_web::WebTemplate;
use axum::Router;
use axum::extract::{Query, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use serde::Deserialize;

use super::AppState;
use super::ctx::{Ctx, Nav};
use super::error::PageError;
use crate::ids;
use crate::view;

/// How many entries the page shows.
const PAGE_SIZE: usize = 100;

pub fn router() -> Router<AppState> {
    Router::new().route("/audit", get(audit))
}

pub struct AuditRow {
    pub at: String,
    pub account_id: String,
    pub device: String,
    pub device_id: String,
    pub stream_id: String,
    pub short_stream_id: String,
    pub actor: String,
    pub reason: String,
}

#[derive(Template, WebTemplate)]
#[template(path = "pages/audit.html")]
struct AuditPage {
    nav: Nav,
    account_id: String,
    error: Option<String>,
    rows: Vec<AuditRow>,
}

#[derive(Deserialize)]
struct AuditQuery {
    account_id: Option<String>,
}

async fn audit(
    State(state): State<AppState>,
    ctx: Ctx,
    Query(query): Query<AuditQuery>,
) -> Result<Response, PageError> {
    let account_id = query.account_id.unwrap_or_default().trim().to_owned();
    let filter = (!account_id.is_empty()).then_some(account_id.as_str());
    if let Some(Err(bad)) = filter.map(ids::check_account_id) {
        let page = AuditPage {
            nav: ctx.nav("audit"),
            error: Some(bad.to_string()),
            account_id,
            rows: Vec::new(),
        };
        return Ok((StatusCode::BAD_REQUEST, page).into_response());
    }
    let entries = state
        .limiter
        .audit(filter, PAGE_SIZE)
        .await
        .map_err(|e| PageError::limiter(&e).with_nav(ctx.nav("audit")))?;
    let rows = entries
        .into_iter()
        .map(|e| AuditRow {
            at: view::clock(&e.at),
            device: if e.device_meta.is_empty() {
                e.device_id.clone()
            } else {
                e.device_meta
            },
            device_id: e.device_id,
            short_stream_id: view::short_id(&e.stream_id),
            stream_id: e.stream_id,
            account_id: e.account_id,
            actor: e.actor,
            reason: e.reason,
        })
        .collect();
    Ok(AuditPage {
        nav: ctx.nav("audit"),
        account_id,
        error: None,
        rows,
    }
    .into_response())
}
