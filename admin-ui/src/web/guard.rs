//! One middleware in front of every route: gives each visitor a CSRF cookie, refuses state
//! changes that do not carry the matching token, and sets the security headers.

use axum::body::{Body, to_bytes};
use axum::extract::{Request, State};
use axum::http::{HeaderValue, Method, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

use super::ctx::{RequestMeta, cookie, set_cookie};
use super::error::PageError;
use super::state::AppState;
use crate::auth::csrf::{self, Csrf};

/// Largest form the dashboard accepts.
const MAX_FORM_BYTES: usize = 16 * 1024;

pub async fn guard(State(state): State<AppState>, request: Request, next: Next) -> Response {
    let forwarded_tls = request
        .headers()
        .get("x-forwarded-proto")
        .is_some_and(|v| v.as_bytes().eq_ignore_ascii_case(b"https"));
    let secure = state.settings.secure_cookies || forwarded_tls;
    // HSTS only when the configured external URL is https (not on a proxy's word alone).
    let hsts = state.settings.secure_cookies;
    let existing = cookie(request.headers(), csrf::COOKIE).filter(|c| c.len() >= 16);
    let fresh = existing.is_none();
    let csrf_cookie = existing.unwrap_or_else(Csrf::new_cookie);

    let mut request = request;
    if !matches!(
        *request.method(),
        Method::GET | Method::HEAD | Method::OPTIONS
    ) {
        match checked(&state, request, &csrf_cookie, fresh).await {
            Ok(checked) => request = checked,
            Err(refusal) => return with_headers(refusal.into_response(), hsts),
        }
    }
    request.extensions_mut().insert(RequestMeta {
        csrf_cookie: csrf_cookie.clone(),
        secure,
    });
    let mut response = next.run(request).await;
    if fresh {
        response.headers_mut().append(
            header::SET_COOKIE,
            set_cookie(csrf::COOKIE, &csrf_cookie, None, secure),
        );
    }
    with_headers(response, hsts)
}

/// Passes the request on when its CSRF token matches its cookie, else refuses it.
async fn checked(
    state: &AppState,
    request: Request,
    csrf_cookie: &str,
    fresh: bool,
) -> Result<Request, PageError> {
    let cross_site = request
        .headers()
        .get("sec-fetch-site")
        .is_some_and(|v| v.as_bytes() == b"cross-site");
    if fresh || cross_site {
        return Err(PageError::csrf());
    }
    let header_token = request
        .headers()
        .get(csrf::HEADER)
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned);
    let (parts, body) = request.into_parts();
    let bytes = to_bytes(body, MAX_FORM_BYTES).await.map_err(|_| {
        PageError::new(
            axum::http::StatusCode::PAYLOAD_TOO_LARGE,
            "Form too large",
            "That form is larger than the dashboard accepts. Shorten the text and try again.",
        )
    })?;
    let token = header_token.or_else(|| form_field(&bytes, csrf::FIELD));
    match token {
        Some(token) if state.csrf.check(csrf_cookie, &token) => {
            Ok(Request::from_parts(parts, Body::from(bytes)))
        }
        _ => Err(PageError::csrf()),
    }
}

/// The raw value of `name` in an `application/x-www-form-urlencoded` body. The token is
/// base64url, which forms send without escaping.
fn form_field(body: &[u8], name: &str) -> Option<String> {
    std::str::from_utf8(body)
        .ok()?
        .split('&')
        .filter_map(|pair| pair.split_once('='))
        .find(|(key, _)| *key == name)
        .map(|(_, value)| value.to_owned())
}

/// How long browsers keep to https once told (`Strict-Transport-Security`), one year.
const HSTS: &str = "max-age=31536000";

fn with_headers(mut response: Response, hsts: bool) -> Response {
    let headers = response.headers_mut();
    if hsts {
        headers.insert(
            header::STRICT_TRANSPORT_SECURITY,
            HeaderValue::from_static(HSTS),
        );
    }
    let set = [
        (
            header::CONTENT_SECURITY_POLICY,
            "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; \
             connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'",
        ),
        (header::X_CONTENT_TYPE_OPTIONS, "nosniff"),
        (header::REFERRER_POLICY, "same-origin"),
        (header::X_FRAME_OPTIONS, "DENY"),
    ];
    for (name, value) in set {
        headers.insert(name, HeaderValue::from_static(value));
    }
    if !headers.contains_key(header::CACHE_CONTROL) {
        headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    }
    response
}
