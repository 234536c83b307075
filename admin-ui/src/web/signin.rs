//! Sign-in and sign-out (password mode); behind an authenticating proxy the proxy does both.

use std::net::IpAddr;
use std::time::Duration;

use askama::Template;
use askama_web::WebTemplate;
use axum::extract::{Query, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{AppendHeaders, IntoResponse, Redirect, Response};
use axum::routing::{get, post};
use axum::{Form, Router};
use screenlimit_limiter::model::AuditKind;
use serde::Deserialize;

use super::client::client_address;
use super::ctx::{CsrfToken, Peer, cookie, set_cookie};
use super::error::PageError;
use super::nav::Nav;
use super::state::AppState;
use crate::auth::throttle::Verdict;
use crate::auth::{device, session};
use crate::config::AuthMode;
use crate::view::local_path;

pub fn router() -> Router<AppState> {
    Router::new()
        .route("/sign-in", get(show).post(submit))
        .route("/sign-out", post(sign_out))
}

#[derive(Template, WebTemplate)]
#[template(path = "pages/sign_in.html")]
pub(super) struct SignInPage {
    nav: Nav,
    next: String,
    user: String,
    error: Option<String>,
    notice: Option<String>,
    /// The password form is drawn (there are password users).
    passwords: bool,
    /// "Sign in with …", when the identity provider is on.
    provider: Option<String>,
    /// The provider's end-session URL, offered after a sign-out of a provider's user.
    end_session: Option<String>,
}

impl SignInPage {
    /// The sign-in page for `next`, with what this dashboard offers.
    pub(super) fn new(state: &AppState, csrf: String, next: String) -> SignInPage {
        SignInPage {
            nav: Nav::anonymous(csrf),
            next,
            user: String::new(),
            error: None,
            notice: None,
            passwords: matches!(&state.settings.auth, AuthMode::Credentials(users) if !users.is_empty()),
            provider: state
                .oidc
                .as_ref()
                .map(|oidc| oidc.settings().display_name.clone()),
            end_session: None,
        }
    }

    pub(super) fn with_error(mut self, error: String) -> SignInPage {
        self.error = Some(error);
        self
    }
}

#[derive(Deserialize)]
struct ShowQuery {
    next: Option<String>,
    signed_out: Option<String>,
    provider: Option<String>,
}

pub(super) fn next_or_home(next: Option<&str>) -> String {
    next.and_then(local_path)
        .filter(|p| !p.starts_with("/sign-"))
        .unwrap_or("/accounts")
        .to_owned()
}

async fn show(
    State(state): State<AppState>,
    CsrfToken(csrf, _): CsrfToken,
    headers: HeaderMap,
    Query(query): Query<ShowQuery>,
) -> Response {
    let next = next_or_home(query.next.as_deref());
    let session = cookie(&headers, session::COOKIE).and_then(|value| state.sessions.read(&value));
    let signed_in = match &session {
        Some(session) => state.session_live(session, false).await.unwrap_or(false),
        None => false,
    };
    if signed_in || matches!(state.settings.auth, AuthMode::ProxyHeader { .. }) {
        return Redirect::to(&next).into_response();
    }
    let mut page = SignInPage::new(&state, csrf, next);
    if query.signed_out.is_some() {
        page.notice = Some("You are signed out of the dashboard, on every replica.".to_owned());
        if query.provider.is_some()
            && let Some(oidc) = &state.oidc
        {
            page.end_session = oidc.end_session_url().await;
        }
    }
    page.into_response()
}

#[derive(Deserialize)]
struct SignInForm {
    user: String,
    password: String,
    next: Option<String>,
}

/// "3 seconds", "1 minute", "14 minutes": a wait as people read it, rounded up.
fn wait_words(wait: Duration) -> String {
    let secs = wait.as_secs() + u64::from(wait.subsec_nanos() > 0);
    match secs {
        0 | 1 => "1 second".to_owned(),
        2..=90 => format!("{secs} seconds"),
        _ => {
            let minutes = secs.div_ceil(60);
            format!("{minutes} minute{}", if minutes == 1 { "" } else { "s" })
        }
    }
}

/// The sign-in page again, with `status`, an error and, for refusals, `Retry-After`.
fn refused(
    state: &AppState,
    status: StatusCode,
    (csrf, next, user): (String, String, String),
    error: String,
    retry_after: Option<Duration>,
) -> Response {
    let mut page = SignInPage::new(state, csrf, next).with_error(error);
    page.user = user;
    let mut response = (status, page).into_response();
    if let Some(wait) = retry_after {
        let secs = wait.as_secs() + u64::from(wait.subsec_nanos() > 0);
        response
            .headers_mut()
            .insert(header::RETRY_AFTER, HeaderValue::from(secs.max(1)));
    }
    response
}

async fn submit(
    State(state): State<AppState>,
    CsrfToken(csrf, secure): CsrfToken,
    Peer(peer): Peer,
    headers: HeaderMap,
    Form(form): Form<SignInForm>,
) -> Response {
    let next = next_or_home(form.next.as_deref());
    let name = form.user.trim().to_owned();
    let AuthMode::Credentials(users) = &state.settings.auth else {
        return Redirect::to(&next).into_response();
    };
    if users.is_empty() {
        let error = "This dashboard has no password users: sign in with the button below.";
        return refused(
            &state,
            StatusCode::NOT_FOUND,
            (csrf, next, name),
            error.into(),
            None,
        );
    }
    let address = client_address(&state.settings, peer, &headers);
    // A browser that signed in as this name before (a genuine device cookie naming it) is
    // judged on its own budget, apart from strangers' guesses.
    let device_cookie = cookie(&headers, device::COOKIE);
    let device_id = device_cookie
        .as_deref()
        .and_then(|value| state.devices.read(value, &name));
    if device_id.is_none() {
        // A stranger's attempt is judged on the name's failures at every replica, not this
        // one's alone (the limiter counts them); a known browser has its own budget here.
        share_failures(&state, &name).await;
    }
    let (wait, ticket) = match state.throttle.attempt(&name, address, device_id.as_deref()) {
        Verdict::Proceed { wait, ticket } => (wait, ticket),
        Verdict::Refused {
            retry_after,
            locked,
            lockout_started,
        } => {
            tracing::warn!(user = name, %address, locked, lockout_started, "sign-in throttled");
            if lockout_started {
                // Once per lockout, not once per refused attempt.
                let reason = format!(
                    "sign-in from this address paused for {}",
                    wait_words(retry_after)
                );
                audit(&state, &name, AuditKind::SignInThrottled, address, reason);
            }
            let error = if locked {
                format!(
                    "Too many failed sign-ins from this address. Sign-in is paused for {}; try \
                     again then, from a browser you signed in with before, or ask an \
                     administrator to check the audit log.",
                    wait_words(retry_after)
                )
            } else {
                format!(
                    "Too many sign-in attempts at once. Wait {} and try again.",
                    wait_words(retry_after)
                )
            };
            return refused(
                &state,
                StatusCode::TOO_MANY_REQUESTS,
                (csrf, next, name),
                error,
                Some(retry_after),
            );
        }
    };
    if ticket.device_distrusted {
        tracing::warn!(user = name, %address, "a known browser used up its sign-in budget");
        let reason = format!(
            "a known browser used up its own budget; judged as a new browser for {}",
            wait_words(state.throttle.rules().lockout)
        );
        audit(&state, &name, AuditKind::SignInThrottled, address, reason);
    }
    if !wait.is_zero() {
        tokio::time::sleep(wait).await;
    }
    // At most a few argon2 verifications at once, so other pages keep answering.
    let queue_timeout = state.settings.signin_queue_timeout;
    // Known browsers have slots of their own: a flood of strangers' guesses cannot keep them
    // waiting.
    let slots = if ticket.known_browser() {
        &state.known_browser_slots
    } else {
        &state.verify_slots
    };
    let Ok(Ok(permit)) = tokio::time::timeout(queue_timeout, slots.clone().acquire_owned()).await
    else {
        state.throttle.not_tried(&ticket);
        tracing::warn!(user = name, %address, "sign-in refused: verification queue full");
        return refused(
            &state,
            StatusCode::SERVICE_UNAVAILABLE,
            (csrf, next, name),
            "The dashboard is busy checking other sign-ins. Nothing is wrong with your \
             account: wait a few seconds and try again."
                .into(),
            Some(Duration::from_secs(2)),
        );
    };
    let verified = {
        let state = state.clone();
        let name = name.clone();
        tokio::task::spawn_blocking(move || {
            let _permit = permit;
            match &state.settings.auth {
                AuthMode::Credentials(users) => users.verify(&name, &form.password),
                AuthMode::ProxyHeader { .. } => None,
            }
        })
        .await
        .ok()
        .flatten()
    };
    match verified {
        Some(user) => {
            state.throttle.succeeded(&ticket);
            // The sign-in is recorded, and the session issued under the user's generation, by
            // the limiter; without it there is no session that every replica could end.
            let generation = match state
                .limiter
                .session_event(&user.name, AuditKind::SignIn, &address.to_string(), "")
                .await
            {
                Ok(generation) => generation,
                Err(error) => {
                    tracing::warn!(%error, user = user.name, "sign-in not recorded");
                    return refused(
                        &state,
                        StatusCode::SERVICE_UNAVAILABLE,
                        (csrf, next, name),
                        format!(
                            "Your password is right, but the dashboard cannot sign you in while \
                             the limiter does not answer ({error}). Try again in a few seconds."
                        ),
                        Some(Duration::from_secs(5)),
                    );
                }
            };
            state.generations.remember(&user.name, generation);
            tracing::info!(user = user.name, role = user.role.label(), %address, "signed in");
            let value = state.sessions.issue(&user, generation);
            let max_age = state.sessions.ttl().as_secs();
            let device = state.devices.issue(&user.name, device_cookie.as_deref());
            (
                AppendHeaders([
                    (
                        header::SET_COOKIE,
                        set_cookie(session::COOKIE, &value, Some(max_age), secure),
                    ),
                    (
                        header::SET_COOKIE,
                        set_cookie(
                            device::COOKIE,
                            &device,
                            Some(state.devices.ttl_secs()),
                            secure,
                        ),
                    ),
                ]),
                Redirect::to(&next),
            )
                .into_response()
        }
        None => {
            tracing::info!(user = name, %address, "sign-in refused");
            // A stranger's failure counts against the name at every replica; a known
            // browser's only against its own budget, as here.
            let counted = (!ticket.known_browser()).then(|| state.throttle.rules().lockout);
            record(
                &state,
                &name,
                AuditKind::SignInFailed,
                address,
                String::new(),
                counted,
            );
            refused(
                &state,
                StatusCode::UNAUTHORIZED,
                (csrf, next, name),
                "That user name and password do not match. Check both and try again.".into(),
                None,
            )
        }
    }
}

/// The name an audit entry gives the user: as typed when it follows the id rules (unknown
/// names included: they show what was tried), else a placeholder (the limiter keeps ids only,
/// and a password typed into the name field must not end up in a log).
fn audit_name(typed: &str) -> &str {
    if screenlimit_limiter::ids::validate_token(typed).is_ok() {
        typed
    } else {
        "-"
    }
}

/// Raises this replica's count of failed sign-ins under `name` to every replica's, as the
/// limiter keeps it. Without an answer in time, this replica's own count decides.
async fn share_failures(state: &AppState, name: &str) {
    if audit_name(name) != name {
        return; // not a name the limiter keeps
    }
    match state.limiter.user_sessions(name).await {
        Ok(shared) => state.throttle.shared_failures(name, shared.failures),
        Err(error) => tracing::debug!(%error, user = name, "shared sign-in failures not read"),
    }
}

/// Records a sign-in failure or throttling in the limiter's audit log, in the background (the
/// answer does not wait for it; a lost entry is logged here).
pub(super) fn audit(
    state: &AppState,
    name: &str,
    kind: AuditKind,
    address: IpAddr,
    reason: String,
) {
    record(state, name, kind, address, reason, None);
}

/// [`audit`]; with `counted`, a failure also counts against the name at the limiter for that
/// long, for every replica, and the count it answers is taken in here.
fn record(
    state: &AppState,
    name: &str,
    kind: AuditKind,
    address: IpAddr,
    reason: String,
    counted: Option<Duration>,
) {
    let state = state.clone();
    let name = audit_name(name).to_owned();
    tokio::spawn(async move {
        match state
            .limiter
            .record_session_event(&name, kind, &address.to_string(), &reason, counted)
            .await
        {
            Ok(shared) => state.throttle.shared_failures(&name, shared.failures),
            Err(error) => {
                tracing::warn!(%error, user = name, kind = kind.as_str(), "sign-in event not audited")
            }
        }
    });
}

/// Signs out: the limiter raises the user's session generation, which ends every session of
/// the user on every replica; this replica also forgets this session at once.
async fn sign_out(
    State(state): State<AppState>,
    CsrfToken(csrf, secure): CsrfToken,
    Peer(peer): Peer,
    headers: HeaderMap,
) -> Response {
    let clear = [(
        header::SET_COOKIE,
        set_cookie(session::COOKIE, "", Some(0), secure),
    )];
    let Some(session) =
        cookie(&headers, session::COOKIE).and_then(|value| state.sessions.read(&value))
    else {
        return (clear, Redirect::to("/sign-in?signed_out=1")).into_response();
    };
    state.sessions.end(&session);
    let address = client_address(&state.settings, peer, &headers);
    match state
        .limiter
        .session_event(&session.user, AuditKind::SignOut, &address.to_string(), "")
        .await
    {
        Ok(generation) => {
            state.generations.remember(&session.user, generation);
            tracing::info!(user = session.user, %address, "signed out everywhere");
            // A provider's user is offered the provider's own sign-out too.
            let to = if session.provider && state.oidc.is_some() {
                "/sign-in?signed_out=1&provider=1"
            } else {
                "/sign-in?signed_out=1"
            };
            (clear, Redirect::to(to)).into_response()
        }
        Err(error) => {
            tracing::warn!(%error, user = session.user, "sign-out not recorded by the limiter");
            let page = PageError::new(
                StatusCode::SERVICE_UNAVAILABLE,
                "Signed out here only",
                format!(
                    "This browser is signed out, but the limiter did not answer ({error}), so \
                     your other sign-ins (other browsers, other dashboard replicas) may still \
                     be open. Sign in and out again when the limiter is back."
                ),
            )
            .with_nav(Nav::anonymous(csrf));
            (clear, page).into_response()
        }
    }
}
