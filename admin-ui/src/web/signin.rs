//! Sign-in and sign-out (password mode); behind an authenticating proxy the proxy does both.

use askama::Template;
use askama_web::WebTemplate;
use axum::extract::{Query, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Redirect, Response};
use axum::routing::{get, post};
use axum::{Form, Router};
use serde::Deserialize;

use super::AppState;
use super::ctx::{CsrfToken, Ctx, Nav, cookie, set_cookie};
use crate::auth::session;
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

async fn submit(
    State(state): State<AppState>,
    CsrfToken(csrf, secure): CsrfToken,
    Form(form): Form<SignInForm>,
) -> Response {
    let next = next_or_home(form.next.as_deref());
    let name = form.user.trim().to_owned();
    let verified = {
        let state = state.clone();
        let name = name.clone();
        tokio::task::spawn_blocking(move || match &state.settings.auth {
            AuthMode::Credentials(users) => users.verify(&name, &form.password),
            AuthMode::ProxyHeader { .. } => None,
        })
        .await
        .ok()
        .flatten()
    };
    match verified {
        Some(user) => {
            tracing::info!(user = user.name, role = user.role.label(), "signed in");
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
            tracing::info!(user = name, "sign-in refused");
            (
                StatusCode::UNAUTHORIZED,
                SignInPage {
                    nav: Nav::anonymous(csrf),
                    next,
                    user: name,
                    error: Some(
                        "That user name and password do not match. Check both and try again."
                            .into(),
                    ),
                    notice: None,
                },
            )
                .into_response()
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
