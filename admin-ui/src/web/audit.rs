//! The audit page: recent support actions (force-stops, temporary limits granted and removed)
//! and dashboard sign-ins (signed in, failed, paused, signed out; who and from where), kept by
//! the limiter, optionally for one account and of one kind.

use askama::Template;
use askama_web::WebTemplate;
use axum::Router;
use axum::extract::{Query, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use screenlimit_limiter::model::AuditKind;
use serde::Deserialize;

use super::ctx::Ctx;
use super::error::PageError;
use super::nav::Nav;
use super::state::AppState;
use crate::ids;
use crate::limiter::AuditEntry;
use crate::view;

/// How many entries the page shows.
const PAGE_SIZE: usize = 100;

pub fn router() -> Router<AppState> {
    Router::new().route("/audit", get(audit))
}

/// What people call each kind, in the filter and in the table.
fn kind_label(kind: AuditKind) -> &'static str {
    match kind {
        AuditKind::ForceStop => "Force-stop",
        AuditKind::LimitGranted => "Temporary limit granted",
        AuditKind::LimitRemoved => "Temporary limit removed",
        AuditKind::SignIn => "Signed in",
        AuditKind::SignInFailed => "Sign-in failed",
        AuditKind::SignInThrottled => "Sign-in paused",
        AuditKind::SignOut => "Signed out",
    }
}

/// The heading of a page filtered to one kind.
fn kind_heading(kind: AuditKind) -> &'static str {
    match kind {
        AuditKind::ForceStop => "Force-stops",
        AuditKind::LimitGranted => "Temporary limits granted",
        AuditKind::LimitRemoved => "Temporary limits removed",
        AuditKind::SignIn => "Sign-ins",
        AuditKind::SignInFailed => "Failed sign-ins",
        AuditKind::SignInThrottled => "Sign-ins paused",
        AuditKind::SignOut => "Sign-outs",
    }
}

/// The device a force-stop stopped.
pub struct StoppedDevice {
    pub name: String,
    pub device_id: String,
    pub stream_id: String,
    pub short_stream_id: String,
}

pub struct AuditRow {
    pub at: String,
    /// The limiter's snake_case kind, for `data-kind`.
    pub kind: String,
    pub kind_label: String,
    pub account_id: String,
    /// Force-stops: the device.
    pub device: Option<StoppedDevice>,
    /// Limit changes: from → to, until when, in words.
    pub change: Option<String>,
    pub actor: String,
    pub reason: String,
}

impl AuditRow {
    fn new(e: AuditEntry) -> AuditRow {
        let kind = AuditKind::parse(&e.kind);
        let change = match (kind, e.limit_from, e.limit_to) {
            (Some(AuditKind::LimitGranted), Some(from), Some(to)) => Some(format!(
                "{from} → {to} screens until {}",
                e.limit_until.as_deref().map_or("—".into(), view::clock)
            )),
            (Some(AuditKind::LimitRemoved), Some(from), Some(to)) => Some(format!(
                "{from} → {to} screens (the plan's limit); it would have lasted until {}",
                e.limit_until.as_deref().map_or("—".into(), view::clock)
            )),
            (Some(k), _, _) if k.is_session_event() => Some(if e.address.is_empty() {
                "Dashboard sign-in".to_owned()
            } else {
                format!("From {}", e.address)
            }),
            _ => None,
        };
        let device = (kind == Some(AuditKind::ForceStop)).then(|| StoppedDevice {
            name: if e.device_meta.is_empty() {
                e.device_id.clone()
            } else {
                e.device_meta
            },
            device_id: e.device_id,
            short_stream_id: view::short_id(&e.stream_id),
            stream_id: e.stream_id,
        });
        AuditRow {
            at: view::clock(&e.at),
            kind_label: kind.map_or_else(|| e.kind.clone(), |k| kind_label(k).to_owned()),
            kind: e.kind,
            account_id: e.account_id,
            device,
            change,
            actor: e.actor,
            reason: e.reason,
        }
    }
}

/// One choice of the kind filter.
pub struct KindChoice {
    pub value: &'static str,
    pub label: &'static str,
    pub selected: bool,
}

#[derive(Template, WebTemplate)]
#[template(path = "pages/audit.html")]
struct AuditPage {
    nav: Nav,
    account_id: String,
    kinds: Vec<KindChoice>,
    /// The chosen kind, as the heading names it.
    kind_heading: Option<&'static str>,
    error: Option<String>,
    rows: Vec<AuditRow>,
}

impl AuditPage {
    fn new(nav: Nav, account_id: String, kind: Option<AuditKind>) -> AuditPage {
        let kinds = AuditKind::ALL
            .into_iter()
            .map(|k| KindChoice {
                value: k.as_str(),
                label: kind_label(k),
                selected: kind == Some(k),
            })
            .collect();
        AuditPage {
            nav,
            account_id,
            kinds,
            kind_heading: kind.map(kind_heading),
            error: None,
            rows: Vec::new(),
        }
    }

    /// The page with the filter as typed and what is wrong with it: 400.
    fn refused(mut self, error: String) -> Response {
        self.error = Some(error);
        (StatusCode::BAD_REQUEST, self).into_response()
    }
}

#[derive(Deserialize)]
struct AuditQuery {
    account_id: Option<String>,
    kind: Option<String>,
}

/// The kind filter from the address; `Err` says in words what is wrong.
fn parse_kind(raw: &str) -> Result<Option<AuditKind>, String> {
    if raw.is_empty() {
        return Ok(None);
    }
    AuditKind::parse(raw).map(Some).ok_or_else(|| {
        let shown: String = raw.chars().take(40).collect();
        let known: Vec<&str> = AuditKind::ALL.iter().map(|k| k.as_str()).collect();
        format!(
            "“{shown}” is not a kind of audit entry. Choose one in the list: {}.",
            known.join(", ")
        )
    })
}

async fn audit(
    State(state): State<AppState>,
    ctx: Ctx,
    Query(query): Query<AuditQuery>,
) -> Result<Response, PageError> {
    let account_id = query.account_id.unwrap_or_default().trim().to_owned();
    let raw_kind = query.kind.unwrap_or_default().trim().to_owned();
    let kind = parse_kind(&raw_kind);
    let chosen = kind.as_ref().ok().copied().flatten();
    let mut page = AuditPage::new(ctx.nav("audit"), account_id, chosen);
    let filter = (!page.account_id.is_empty()).then_some(page.account_id.as_str());
    if let Some(Err(bad)) = filter.map(ids::check_account_id) {
        return Ok(page.refused(bad.to_string()));
    }
    let kind = match kind {
        Ok(kind) => kind,
        Err(message) => return Ok(page.refused(message)),
    };
    let entries = state
        .limiter
        .audit(filter, kind, PAGE_SIZE)
        .await
        .map_err(|e| PageError::limiter(&e).with_nav(ctx.nav("audit")))?;
    page.rows = entries.into_iter().map(AuditRow::new).collect();
    Ok(page.into_response())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kinds_are_the_limiter_s() {
        assert_eq!(parse_kind(""), Ok(None));
        assert_eq!(
            parse_kind("limit_granted"),
            Ok(Some(AuditKind::LimitGranted))
        );
        let error = parse_kind("<b>grant</b>").unwrap_err();
        assert!(
            error.contains("force_stop, limit_granted, limit_removed, sign_in, sign_in_failed"),
            "{error}"
        );
    }
}
