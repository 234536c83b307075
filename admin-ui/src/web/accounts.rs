//! The account page: search, plan and limit (and a temporary override), the live device table,
//! force-stop, granting and removing a temporary limit.

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
use super::ctx::Ctx;
use super::error::PageError;
use super::nav::Nav;
use crate::ids;
use crate::limiter::{AccountStreams, ActiveStream, ForceStopOutcome, LimitOverride, LimiterError};
use crate::view;

/// Longest force-stop reason the limiter keeps, in bytes.
pub const MAX_REASON_BYTES: usize = 200;

/// Highest temporary limit the limiter accepts (its largest plan).
pub const MAX_OVERRIDE_STREAMS: u32 = screenlimit_limiter::config::MAX_STREAMS_CEILING;

/// Longest temporary limit the limiter accepts: 30 days.
pub use screenlimit_limiter::api::limits::MAX_OVERRIDE_SEC;

/// The durations the grant form offers, in seconds.
pub const OVERRIDE_PRESETS: [(u64, &str); 5] = [
    (3600, "1 hour"),
    (24 * 3600, "24 hours"),
    (3 * 24 * 3600, "3 days"),
    (7 * 24 * 3600, "7 days"),
    (MAX_OVERRIDE_SEC, "30 days"),
];

/// The preset the grant form starts on.
const DEFAULT_OVERRIDE_SEC: u64 = 24 * 3600;

pub fn router() -> Router<AppState> {
    Router::new()
        .route("/accounts", get(search))
        .route("/accounts/{account_id}", get(account))
        .route("/accounts/{account_id}/devices", get(devices))
        .route(
            "/accounts/{account_id}/streams/{stream_id}/force-stop",
            get(confirm_force_stop).post(force_stop),
        )
        .route(
            "/accounts/{account_id}/limit-override",
            get(back_to_account).post(grant_override),
        )
        .route(
            "/accounts/{account_id}/limit-override/remove",
            get(back_to_account).post(remove_override),
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

/// An active temporary limit as people read it.
pub struct OverrideView {
    pub max_streams: u32,
    /// `22:00 UTC`, or with the date when it is not today.
    pub until: String,
    /// `in 2 h 0 min`.
    pub until_in: String,
    /// The exact time, for a tooltip.
    pub expires_at: String,
}

impl OverrideView {
    fn new(o: &LimitOverride, now: OffsetDateTime) -> OverrideView {
        OverrideView {
            max_streams: o.max_streams,
            until: view::clock_short(now, &o.expires_at),
            until_in: view::until(now, &o.expires_at),
            expires_at: view::clock(&o.expires_at),
        }
    }
}

/// The live part of the account page, re-fetched by htmx every few seconds.
pub struct DevicesView {
    pub account_id: String,
    pub plan: String,
    /// The limit in force (the override's while one is active).
    pub limit: u32,
    pub limit_override: Option<OverrideView>,
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
            limit_override: None,
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
        self.limit_override = streams
            .limit_override
            .as_ref()
            .map(|o| OverrideView::new(o, now));
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

/// One choice of the duration list.
pub struct Preset {
    pub seconds: u64,
    pub label: &'static str,
    pub selected: bool,
}

/// The support role's "temporary limit" form under the device table.
pub struct LimitsForm {
    /// Whether an override is active now (the remove button shows).
    pub active: bool,
    /// The screens field, as typed (or the suggestion).
    pub max_streams: String,
    pub presets: Vec<Preset>,
    /// The reason field, as typed (it goes to the audit log).
    pub reason: String,
    pub error: Option<String>,
}

impl LimitsForm {
    fn new(streams: &AccountStreams) -> LimitsForm {
        let suggestion = match &streams.limit_override {
            Some(o) => o.max_streams,
            None => (streams.limit + 1).min(MAX_OVERRIDE_STREAMS),
        };
        LimitsForm {
            active: streams.limit_override.is_some(),
            max_streams: suggestion.to_string(),
            presets: presets(DEFAULT_OVERRIDE_SEC),
            reason: String::new(),
            error: None,
        }
    }

    /// The form again with what was typed and why it was refused.
    fn refused(streams: &AccountStreams, input: &OverrideForm, error: String) -> LimitsForm {
        let chosen = input
            .expires_in
            .trim()
            .parse()
            .unwrap_or(DEFAULT_OVERRIDE_SEC);
        LimitsForm {
            max_streams: input.max_streams.chars().take(20).collect(),
            presets: presets(chosen),
            reason: input.reason.chars().take(MAX_REASON_BYTES).collect(),
            error: Some(error),
            ..LimitsForm::new(streams)
        }
    }
}

fn presets(selected: u64) -> Vec<Preset> {
    OVERRIDE_PRESETS
        .iter()
        .map(|&(seconds, label)| Preset {
            seconds,
            label,
            selected: seconds == selected,
        })
        .collect()
}

#[derive(Template, WebTemplate)]
#[template(path = "pages/account.html")]
struct AccountPage {
    nav: Nav,
    query: String,
    error: Option<String>,
    notice: Option<String>,
    devices: Option<DevicesView>,
    /// Only for the support role.
    limits: Option<LimitsForm>,
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

/// Why an account id from the address cannot be looked up, in words; `None` when it is fine.
fn malformed(account_id: &str) -> Option<String> {
    ids::check_account_id(account_id)
        .err()
        .map(|e| e.to_string())
}

/// A stream id from the address that must not reach the limiter, as a 400 page.
fn check_stream(ctx: &Ctx, stream_id: &str) -> Result<(), PageError> {
    ids::check_stream_id(stream_id).map_err(|e| PageError::bad_id(&e).with_nav(ctx.nav("accounts")))
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
            limits: None,
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
struct NoticeQuery {
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
    let notice = match (notice.stopped, notice.gone, notice.limit) {
        (Some(device), _, _) => Some(format!(
            "Force-stopped “{device}”. Its slot is free now and its player is told to stop at its \
             next heartbeat."
        )),
        (None, Some(_), _) => Some("That stream had already ended; nothing was stopped.".into()),
        (None, None, Some(what)) => limit_notice(&what, &streams),
        _ => None,
    };
    Ok(account_page(&state, &ctx, &account_id, &streams, notice, None).into_response())
}

/// The account page for `streams`; `limits` replaces the support role's fresh form.
fn account_page(
    state: &AppState,
    ctx: &Ctx,
    account_id: &str,
    streams: &AccountStreams,
    notice: Option<String>,
    limits: Option<LimitsForm>,
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
        limits,
    }
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

// ---- temporary limit ---------------------------------------------------------------------

#[derive(Deserialize)]
struct OverrideForm {
    /// Text, not a number, so that "abc" gets a sentence rather than a bare 422.
    #[serde(default)]
    max_streams: String,
    /// Seconds, one of `OVERRIDE_PRESETS` (any value in range is accepted).
    #[serde(default)]
    expires_in: String,
    /// Why, for the audit log (optional).
    #[serde(default)]
    reason: String,
}

#[derive(Deserialize)]
struct RemoveForm {
    /// Why, for the audit log (optional).
    #[serde(default)]
    reason: String,
}

/// Checks the grant form; says in words what is wrong, if anything.
pub fn parse_override(max_streams: &str, expires_in: &str) -> Result<(u32, u64), String> {
    let typed = max_streams.trim();
    let streams = match typed.parse::<u32>() {
        Ok(n) if (1..=MAX_OVERRIDE_STREAMS).contains(&n) => n,
        _ if typed.is_empty() => {
            return Err(format!(
                "Enter how many screens the account may use at once: a whole number from 1 to \
                 {MAX_OVERRIDE_STREAMS}."
            ));
        }
        _ => {
            let shown: String = typed.chars().take(20).collect();
            return Err(format!(
                "“{shown}” is not a number of screens the limiter accepts. Enter a whole number \
                 from 1 to {MAX_OVERRIDE_STREAMS}."
            ));
        }
    };
    let seconds = match expires_in.trim().parse::<u64>() {
        Ok(s) if (1..=MAX_OVERRIDE_SEC).contains(&s) => s,
        _ => {
            return Err(
                "Choose how long the temporary limit lasts, from 1 hour to 30 days.".to_owned(),
            );
        }
    };
    Ok((streams, seconds))
}

/// A stray GET (a bookmarked form address) goes back to the account.
async fn back_to_account(Path(account_id): Path<String>) -> Response {
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

async fn grant_override(
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
    let page = account_page(state, ctx, account_id, &streams, None, Some(limits));
    Ok((StatusCode::UNPROCESSABLE_ENTITY, page).into_response())
}

async fn remove_override(
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

    #[test]
    fn override_input_is_checked_in_words() {
        assert_eq!(parse_override(" 3 ", "86400"), Ok((3, 86400)));
        assert_eq!(parse_override("100", "2592000"), Ok((100, 2_592_000)));
        assert!(
            parse_override("", "3600")
                .unwrap_err()
                .contains("Enter how many")
        );
        for bad in ["0", "101", "-1", "2.5", "three"] {
            let message = parse_override(bad, "3600").unwrap_err();
            assert!(message.contains("1 to 100"), "{bad}: {message}");
        }
        for bad in ["", "0", "2592001", "1h"] {
            assert!(parse_override("3", bad).is_err(), "{bad}");
        }
    }
}
