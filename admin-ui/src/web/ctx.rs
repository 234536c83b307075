//! Request context extractors: the signed-in user (or a redirect to sign-in), the CSRF token
//! for forms, and what the layout needs to draw its navigation.

use axum::extract::FromRequestParts;
use axum::http::request::Parts;
use axum::http::{HeaderMap, HeaderValue, Method, StatusCode};
use axum::response::{IntoResponse, Redirect, Response};

use super::error::PageError;
use super::nav::Nav;
use super::state::AppState;
use crate::auth::session::{self, Session};
use crate::auth::{Role, User};
use crate::config::AuthMode;
use crate::view::query_encode;

/// Set by `guard` on every request.
#[derive(Clone)]
pub struct RequestMeta {
    /// This visitor's CSRF cookie (maybe issued by this very response).
    pub csrf_cookie: String,
    /// Cookies get `Secure`.
    pub secure: bool,
}

/// The value of cookie `name`, if the request carries it.
pub fn cookie(headers: &HeaderMap, name: &str) -> Option<String> {
    headers
        .get_all(axum::http::header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .filter_map(|pair| pair.trim().split_once('='))
        .find(|(key, _)| *key == name)
        .map(|(_, value)| value.to_owned())
}

/// A `Set-Cookie` value: always `HttpOnly; SameSite=Strict; Path=/`, `Secure` over TLS.
pub fn set_cookie(name: &str, value: &str, max_age: Option<u64>, secure: bool) -> HeaderValue {
    cookie_with(
        name,
        value,
        max_age,
        secure,
        "Path=/; HttpOnly; SameSite=Strict",
    )
}

/// A cookie with `attributes` (path, SameSite, ...), otherwise as [`set_cookie`].
pub fn cookie_with(
    name: &str,
    value: &str,
    max_age: Option<u64>,
    secure: bool,
    attributes: &str,
) -> HeaderValue {
    let mut text = format!("{name}={value}; {attributes}");
    if let Some(age) = max_age {
        text.push_str(&format!("; Max-Age={age}"));
    }
    if secure {
        text.push_str("; Secure");
    }
    HeaderValue::from_str(&text).expect("cookie values are base64url")
}

/// A signed-in request. Extracting it redirects anyone else to the sign-in page.
pub struct Ctx {
    pub user: User,
    pub csrf: String,
    pub session: Option<Session>,
    pub secure: bool,
    proxy_mode: bool,
}

impl Ctx {
    pub fn nav(&self, active: &'static str) -> Nav {
        Nav {
            user: Some(self.user.clone()),
            csrf: self.csrf.clone(),
            active,
            can_sign_out: !self.proxy_mode,
        }
    }

    /// 403 unless the user has the support role; `action` says what they tried ("force-stop
    /// streams").
    pub fn require_support(&self, active: &'static str, action: &str) -> Result<(), PageError> {
        if self.user.role >= Role::Support {
            Ok(())
        } else {
            Err(PageError::new(
                StatusCode::FORBIDDEN,
                "Not allowed",
                format!(
                    "Your role is {}; only the support role may {action}. Ask an \
                     administrator if you need it.",
                    self.user.role.label()
                ),
            )
            .with_nav(self.nav(active)))
        }
    }
}

/// The peer's address (the connection's; see `client::client_address` for the client's).
pub struct Peer(pub Option<std::net::IpAddr>);

impl<S: Send + Sync> FromRequestParts<S> for Peer {
    type Rejection = std::convert::Infallible;

    async fn from_request_parts(parts: &mut Parts, _: &S) -> Result<Self, Self::Rejection> {
        Ok(Peer(super::client::peer(parts)))
    }
}

/// The CSRF token for a form, for pages anyone may see (the sign-in page).
pub struct CsrfToken(pub String, pub bool);

fn meta(parts: &Parts) -> RequestMeta {
    parts
        .extensions
        .get::<RequestMeta>()
        .cloned()
        .expect("guard middleware runs before every handler")
}

impl FromRequestParts<AppState> for CsrfToken {
    type Rejection = std::convert::Infallible;

    async fn from_request_parts(
        parts: &mut Parts,
        state: &AppState,
    ) -> Result<Self, Self::Rejection> {
        let meta = meta(parts);
        Ok(CsrfToken(state.csrf.token(&meta.csrf_cookie), meta.secure))
    }
}

impl FromRequestParts<AppState> for Ctx {
    type Rejection = Response;

    async fn from_request_parts(
        parts: &mut Parts,
        state: &AppState,
    ) -> Result<Self, Self::Rejection> {
        let meta = meta(parts);
        let csrf = state.csrf.token(&meta.csrf_cookie);
        match &state.settings.auth {
            AuthMode::Credentials(_) => {
                let session = cookie(&parts.headers, session::COOKIE)
                    .and_then(|value| state.sessions.read(&value));
                let Some(session) = session else {
                    return Err(to_sign_in(parts));
                };
                // A state change needs the limiter's word, fresh, that the session was not
                // signed out on another replica; a page read makes do with a cached one, or
                // with none when the limiter cannot answer (its page will say so anyway).
                let changes_state = !matches!(parts.method, Method::GET | Method::HEAD);
                match state.session_live(&session, changes_state).await {
                    Ok(true) => {}
                    Ok(false) => return Err(to_sign_in(parts)),
                    Err(error) if changes_state => {
                        tracing::warn!(%error, user = session.user, "session state unreadable");
                        let user = session.user();
                        let nav = Nav {
                            user: Some(user),
                            csrf,
                            active: "",
                            can_sign_out: true,
                        };
                        return Err(PageError::new(
                            StatusCode::SERVICE_UNAVAILABLE,
                            "Your sign-in cannot be confirmed",
                            format!(
                                "Nothing was changed. Before a change the dashboard checks with \
                                 the limiter that you have not signed out elsewhere, and the \
                                 limiter did not answer ({error}). Try again in a few seconds."
                            ),
                        )
                        .with_nav(nav)
                        .into_response());
                    }
                    Err(error) => {
                        tracing::debug!(%error, "session state unreadable; reading a page");
                    }
                }
                Ok(Ctx {
                    user: session.user(),
                    csrf,
                    session: Some(session),
                    secure: meta.secure,
                    proxy_mode: false,
                })
            }
            AuthMode::ProxyHeader {
                user_header,
                role_header,
                support_group,
                default_role,
            } => {
                let name = parts
                    .headers
                    .get(user_header)
                    .and_then(|v| v.to_str().ok())
                    .map(str::trim)
                    .filter(|name| {
                        !name.is_empty()
                            && screenlimit_limiter::ids::validate_display_name(name).is_ok()
                    });
                let Some(name) = name else {
                    return Err(PageError::new(
                        StatusCode::UNAUTHORIZED,
                        "Not signed in",
                        format!(
                            "This dashboard expects the authenticating proxy in front of it to \
                             name the user in the `{user_header}` header (at most 64 bytes), and \
                             this request has none. Open the dashboard through the proxy."
                        ),
                    )
                    .with_nav(Nav::anonymous(csrf))
                    .into_response());
                };
                let groups = role_header
                    .as_ref()
                    .and_then(|h| parts.headers.get(h))
                    .and_then(|v| v.to_str().ok())
                    .unwrap_or("");
                let role = if groups
                    .split([',', ' '])
                    .any(|g| g.trim() == support_group.as_str())
                {
                    Role::Support
                } else {
                    *default_role
                };
                Ok(Ctx {
                    user: User {
                        name: name.to_owned(),
                        role,
                        display: None,
                    },
                    csrf,
                    session: None,
                    secure: meta.secure,
                    proxy_mode: true,
                })
            }
        }
    }
}

/// Sends a signed-out visitor to the sign-in page, and back here afterwards.
fn to_sign_in(parts: &Parts) -> Response {
    let here = parts
        .uri
        .path_and_query()
        .map(|pq| pq.as_str())
        .unwrap_or("/");
    // A polling fragment is not a page to come back to: return to the page that polled.
    let is_htmx = parts.headers.contains_key("hx-request");
    let back = if is_htmx {
        parts
            .headers
            .get("hx-current-url")
            .and_then(|v| v.to_str().ok())
            .and_then(|url| url.find("://").map(|i| &url[i + 3..]))
            .and_then(|rest| rest.find('/').map(|i| rest[i..].to_owned()))
            .unwrap_or_else(|| "/accounts".into())
    } else {
        here.to_owned()
    };
    let target = format!("/sign-in?next={}", query_encode(&back));
    if is_htmx {
        let mut response = StatusCode::OK.into_response();
        response.headers_mut().insert(
            "hx-redirect",
            HeaderValue::from_str(&target).expect("percent-encoded path"),
        );
        response
    } else {
        Redirect::to(&target).into_response()
    }
}
