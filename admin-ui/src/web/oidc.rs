//! Sign-in through the company's identity provider (OpenID Connect): `/oidc/start` sends the
//! browser to the provider, `/oidc/callback` takes it back (see `auth::oidc` for the checks).

use askama::Template;
use askama_web::WebTemplate;
use axum::Router;
use axum::extract::{Query, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{AppendHeaders, IntoResponse, Redirect, Response};
use axum::routing::get;
use screenlimit_limiter::model::AuditKind;
use serde::Deserialize;

use super::client::client_address;
use super::ctx::{CsrfToken, Peer, cookie, cookie_with, set_cookie};
use super::nav::Nav;
use super::signin::{SignInPage, audit, next_or_home};
use super::state::AppState;
use crate::auth::oidc::{CALLBACK_PATH, FLOW_COOKIE, FLOW_TTL, OidcError};
use crate::auth::session;

pub fn router() -> Router<AppState> {
    Router::new()
        .route("/oidc/start", get(start))
        .route(CALLBACK_PATH, get(callback))
}

/// The flow cookie: only for the callback's path, and `SameSite=Lax`, since the provider's
/// redirect back is a cross-site navigation.
fn flow_cookie(value: &str, max_age: u64, secure: bool) -> axum::http::HeaderValue {
    cookie_with(
        FLOW_COOKIE,
        value,
        Some(max_age),
        secure,
        "Path=/oidc; HttpOnly; SameSite=Lax",
    )
}

#[derive(Deserialize)]
struct StartQuery {
    next: Option<String>,
}

/// The sign-in page again with `status` and what went wrong (the password form still there).
fn failed(state: &AppState, csrf: String, status: StatusCode, error: &OidcError) -> Response {
    let page = SignInPage::new(state, csrf, "/accounts".into()).with_error(format!(
        "Signing in through {} did not work: {error}.",
        state.oidc.as_ref().map_or("the identity provider", |o| o
            .settings()
            .display_name
            .as_str())
    ));
    (status, page).into_response()
}

fn status_of(error: &OidcError) -> StatusCode {
    match error {
        OidcError::ProviderDown { .. } => StatusCode::BAD_GATEWAY,
        OidcError::ProviderMisconfigured { .. } => StatusCode::BAD_GATEWAY,
        OidcError::StaleFlow | OidcError::BadToken(_) => StatusCode::BAD_REQUEST,
        OidcError::Refused(_) => StatusCode::FORBIDDEN,
    }
}

async fn start(
    State(state): State<AppState>,
    CsrfToken(csrf, secure): CsrfToken,
    Query(query): Query<StartQuery>,
) -> Response {
    let Some(oidc) = &state.oidc else {
        return super::fallback::not_found(CsrfToken(csrf, secure))
            .await
            .into_response();
    };
    let next = next_or_home(query.next.as_deref());
    match oidc.start(&next).await {
        Ok((url, flow)) => (
            [(
                header::SET_COOKIE,
                flow_cookie(&flow, FLOW_TTL.as_secs(), secure),
            )],
            Redirect::to(&url),
        )
            .into_response(),
        Err(error) => {
            tracing::warn!(%error, "OpenID Connect sign-in could not start");
            failed(&state, csrf, status_of(&error), &error)
        }
    }
}

#[derive(Deserialize)]
struct CallbackQuery {
    code: Option<String>,
    state: Option<String>,
    error: Option<String>,
    error_description: Option<String>,
}

#[derive(Template, WebTemplate)]
#[template(path = "pages/signed_in.html")]
struct SignedIn {
    nav: Nav,
    name: String,
    next: String,
}

/// At most `n` characters of `text`, without control characters (an audit reason).
fn clip(text: &str, n: usize) -> String {
    text.chars().filter(|c| !c.is_control()).take(n).collect()
}

async fn callback(
    State(state): State<AppState>,
    CsrfToken(csrf, secure): CsrfToken,
    Peer(peer): Peer,
    headers: HeaderMap,
    Query(query): Query<CallbackQuery>,
) -> Response {
    let Some(oidc) = &state.oidc else {
        return super::fallback::not_found(CsrfToken(csrf, secure))
            .await
            .into_response();
    };
    let address = client_address(&state.settings, peer, &headers);
    let clear_flow = [(header::SET_COOKIE, flow_cookie("", 0, secure))];
    let outcome = match (&query.code, &query.state, &query.error) {
        (_, _, Some(error)) => Err(OidcError::Refused(clip(
            &format!(
                "{error}{}",
                query
                    .error_description
                    .as_deref()
                    .map(|d| format!(": {d}"))
                    .unwrap_or_default()
            ),
            160,
        ))),
        (Some(code), Some(flow_state), None) => {
            let flow = cookie(&headers, FLOW_COOKIE);
            oidc.finish(flow.as_deref(), code, flow_state).await
        }
        _ => Err(OidcError::StaleFlow),
    };
    let verified = match outcome {
        Ok(verified) => verified,
        Err(error) => {
            tracing::warn!(%error, %address, "OpenID Connect sign-in refused");
            if !matches!(error, OidcError::ProviderDown { .. }) {
                let reason = clip(&format!("OpenID Connect: {error}"), 200);
                audit(&state, "-", AuditKind::SignInFailed, address, reason);
            }
            return (clear_flow, failed(&state, csrf, status_of(&error), &error)).into_response();
        }
    };
    let who = format!("{} (subject {})", verified.display, verified.subject);
    let Some(role) = verified.role else {
        let user = verified.user(crate::auth::Role::Viewer);
        tracing::info!(user = user.name, groups = ?verified.groups, "OpenID Connect user without a role");
        audit(
            &state,
            &user.name,
            AuditKind::SignInFailed,
            address,
            clip(
                &format!("OpenID Connect: {who} holds no dashboard group"),
                200,
            ),
        );
        let settings = oidc.settings();
        let wanted: Vec<&str> = settings
            .support_groups
            .iter()
            .chain(&settings.viewer_groups)
            .map(String::as_str)
            .collect();
        let page = super::error::PageError::new(
            StatusCode::FORBIDDEN,
            "No access to the support dashboard",
            format!(
                "{} confirmed that you are {}, but none of your groups gives access to this \
                 dashboard. It needs one of these groups in the claim “{}”: {}. Ask the \
                 administrator of your identity provider to add you to one.",
                settings.display_name,
                verified.display,
                settings.roles_claim,
                wanted.join(", ")
            ),
        )
        .with_nav(Nav::anonymous(csrf));
        return (clear_flow, page).into_response();
    };
    let user = verified.user(role);
    let reason = clip(&format!("OpenID Connect: {who}"), 200);
    let generation = match state
        .limiter
        .session_event(&user.name, AuditKind::SignIn, &address.to_string(), &reason)
        .await
    {
        Ok(generation) => generation,
        Err(error) => {
            tracing::warn!(%error, user = user.name, "sign-in not recorded");
            let page = SignInPage::new(&state, csrf, verified.next.clone()).with_error(format!(
                "Your identity provider confirmed you, but the dashboard cannot sign you in \
                 while the limiter does not answer ({error}). Try again in a few seconds."
            ));
            return (clear_flow, (StatusCode::SERVICE_UNAVAILABLE, page)).into_response();
        }
    };
    state.generations.remember(&user.name, generation);
    tracing::info!(user = user.name, name = verified.display, role = user.role.label(), %address, "signed in through OpenID Connect");
    let value = state.sessions.issue_from(&user, generation, true);
    let max_age = state.sessions.ttl().as_secs();
    // A page that moves on by itself rather than a redirect: this answer ends a cross-site
    // navigation (from the provider), and the SameSite=Strict session cookie is sent from the
    // next, same-site one.
    (
        AppendHeaders([
            (
                header::SET_COOKIE,
                set_cookie(session::COOKIE, &value, Some(max_age), secure),
            ),
            (header::SET_COOKIE, flow_cookie("", 0, secure)),
        ]),
        SignedIn {
            nav: Nav::anonymous(csrf),
            name: verified.display,
            next: verified.next,
        },
    )
        .into_response()
}
