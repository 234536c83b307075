//! Sign-in and sign-out (password mode); behind an authenticating proxy the proxy does both.

use askama::Template;
use askama_web::WebTemplate;
use axum::extract::{Query, State};
use std::time::Duration;

use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Redirect, Response};
use axum::routing::{get, post};
use axum::{Form, Router};
use serde::Deserialize;

use super::AppState;
use super::client::client_address;
use super::ctx::{CsrfToken, Ctx, Nav, Peer, cookie, set_cookie};
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
    let signed_in = cookie(&headers, session::COOKIE)
        .and_then(|value| state.sessions.read(&value))
        .is_some();
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
            tracing::info!(user = user.name, role = user.role.label(), %address, "signed in");
            let value = state.sessions.issue(&user);
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

async fn sign_out(State(state): State<AppState>, ctx: Ctx) -> Response {
    if let Some(session) = &ctx.session {
        state.sessions.end(session);
        tracing::info!(user = ctx.user.name, "signed out");
    }
    (
        [(
            header::SET_COOKIE,
            set_cookie(session::COOKIE, "", Some(0), ctx.secure),
        )],
        Redirect::to("/sign-in?signed_out=1"),
    )
        .into_response()
}
