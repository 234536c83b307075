//! Sign-in and sign-out (password mode); behind an authenticating proxy the proxy does both.

use std::net::IpAddr;
use std::time::Duration;

use askama::Template;
use askama_web::WebTemplate;
use axum::extract::{Query, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Redirect, Response};
use axum::routing::{get, post};
use axum::{Form, Router};
use screenlimit_limiter::model::AuditKind;
use serde::Deserialize;

use super::AppState;
use super::client::client_address;
use super::ctx::{CsrfToken, Nav, Peer, cookie, set_cookie};
use super::error::PageError;
use crate::auth::session;
use crate::auth::throttle::Verdict;
use crate::config::AuthMode;
use crate::view::local_path;

pub fn router() -> Router<AppState> {
    Router::new()
        .route("/sign-in", get(show).post(submit))
        .route("/sign-out", post(sign_out))
}

#[derive(Template, WebTemplate)]
#[template(path = "pages/sign_in.html")]
struct SignInPage {
    nav: Nav,
    next: String,
    user: String,
    error: Option<String>,
    notice: Option<String>,
}

#[derive(Deserialize)]
struct ShowQuery {
    next: Option<String>,
    signed_out: Option<String>,
}

fn next_or_home(next: Option<&str>) -> String {
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
    SignInPage {
        nav: Nav::anonymous(csrf),
        next,
        user: String::new(),
        error: None,
        notice: query.signed_out.map(|_| "You are signed out.".to_owned()),
    }
    .into_response()
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
    status: StatusCode,
    csrf: String,
    next: String,
    user: String,
    error: String,
    retry_after: Option<Duration>,
) -> Response {
    let page = SignInPage {
        nav: Nav::anonymous(csrf),
        next,
        user,
        error: Some(error),
        notice: None,
    };
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
    let AuthMode::Credentials(_) = &state.settings.auth else {
        return Redirect::to(&next).into_response();
    };
    let address = client_address(&state.settings, peer, &headers);
    let wait = match state.throttle.attempt(&name, address) {
        Verdict::Proceed { wait } => wait,
        Verdict::Refused {
            retry_after,
            locked,
            lockout_started,
        } => {
            tracing::warn!(user = name, %address, locked, lockout_started, "sign-in throttled");
            if lockout_started {
                // Once per lockout, not once per refused attempt.
                let reason = format!("sign-in paused for {}", wait_words(retry_after));
                audit(&state, &name, AuditKind::SignInThrottled, address, reason);
            }
            let error = if locked {
                format!(
                    "Too many failed sign-ins for this user name or from this address. Sign-in \
                     is paused for {}; try again then, or ask an administrator to check the \
                     audit log.",
                    wait_words(retry_after)
                )
            } else {
                format!(
                    "Too many sign-in attempts at once. Wait {} and try again.",
                    wait_words(retry_after)
                )
            };
            return refused(
                StatusCode::TOO_MANY_REQUESTS,
                csrf,
                next,
                name,
                error,
                Some(retry_after),
            );
        }
    };
    if !wait.is_zero() {
        tokio::time::sleep(wait).await;
    }
    // At most a few argon2 verifications at once, so other pages keep answering.
    let queue_timeout = state.settings.signin_queue_timeout;
    let Ok(Ok(permit)) =
        tokio::time::timeout(queue_timeout, state.verify_slots.clone().acquire_owned()).await
    else {
        state.throttle.not_tried(&name, address);
        tracing::warn!(user = name, %address, "sign-in refused: verification queue full");
        return refused(
            StatusCode::SERVICE_UNAVAILABLE,
            csrf,
            next,
            name,
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
            state.throttle.succeeded(&name, address);
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
                        StatusCode::SERVICE_UNAVAILABLE,
                        csrf,
                        next,
                        name,
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
            (
                [(
                    header::SET_COOKIE,
                    set_cookie(session::COOKIE, &value, Some(max_age), secure),
                )],
                Redirect::to(&next),
            )
                .into_response()
        }
        None => {
            tracing::info!(user = name, %address, "sign-in refused");
            audit(
                &state,
                &name,
                AuditKind::SignInFailed,
                address,
                String::new(),
            );
            refused(
                StatusCode::UNAUTHORIZED,
                csrf,
                next,
                name,
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

/// Records a sign-in failure or throttling in the limiter's audit log, in the background (the
/// answer does not wait for it; a lost entry is logged here).
fn audit(state: &AppState, name: &str, kind: AuditKind, address: IpAddr, reason: String) {
    let limiter = state.limiter.clone();
    let name = audit_name(name).to_owned();
    tokio::spawn(async move {
        if let Err(error) = limiter
            .session_event(&name, kind, &address.to_string(), &reason)
            .await
        {
            tracing::warn!(%error, user = name, kind = kind.as_str(), "sign-in event not audited");
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
            (clear, Redirect::to("/sign-in?signed_out=1")).into_response()
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
