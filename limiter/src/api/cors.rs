//! CORS for browser players (`http.cors.allowed_origins`): the player routes answer the pages of
//! the listed origins, exactly (no wildcard). A preflight (`OPTIONS` with
//! `Access-Control-Request-Method`) is answered here, before the credential check and without the
//! store; the other routes (support) never carry CORS headers, so no page can call them.

use std::sync::Arc;

use axum::extract::{Request, State};
use axum::http::{HeaderMap, HeaderValue, Method, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

use super::auth::Audience;
use super::error::ApiError;
use crate::config::CorsConfig;

/// What a preflight allows: the player routes' methods and the headers the client library sends.
const ALLOW_METHODS: &str = "GET, POST, PUT, DELETE";
const ALLOW_HEADERS: &str = "authorization, content-type";
/// Headers a page's script may read (a 503's `Retry-After`).
const EXPOSE_HEADERS: &str = "retry-after";

#[derive(Debug, Clone)]
pub struct CorsPolicy {
    origins: Vec<HeaderValue>,
    max_age: HeaderValue,
}

impl CorsPolicy {
    /// `None` when no origin is listed: no CORS headers at all.
    pub fn from_config(config: &CorsConfig) -> Option<Arc<CorsPolicy>> {
        if config.allowed_origins.is_empty() {
            return None;
        }
        Some(Arc::new(CorsPolicy {
            origins: config
                .allowed_origins
                .iter()
                .filter_map(|o| HeaderValue::from_str(o).ok())
                .collect(),
            max_age: HeaderValue::from(config.max_age.as_secs()),
        }))
    }

    fn allowed<'a>(&self, headers: &'a HeaderMap) -> Option<&'a HeaderValue> {
        let origin = headers.get(header::ORIGIN)?;
        self.origins.iter().any(|o| o == origin).then_some(origin)
    }
}

pub async fn cors(State(policy): State<Arc<CorsPolicy>>, request: Request, next: Next) -> Response {
    if !Audience::of(request.uri().path()).faces_players() {
        return next.run(request).await;
    }
    let origin = policy.allowed(request.headers()).cloned();
    let preflight = request.method() == Method::OPTIONS
        && request
            .headers()
            .contains_key(header::ACCESS_CONTROL_REQUEST_METHOD);
    if preflight {
        let Some(origin) = origin else {
            return ApiError::new(
                StatusCode::FORBIDDEN,
                "origin_not_allowed",
                "this page's origin is not among http.cors.allowed_origins",
            )
            .into_response();
        };
        let mut response = StatusCode::NO_CONTENT.into_response();
        let headers = response.headers_mut();
        headers.insert(header::ACCESS_CONTROL_ALLOW_ORIGIN, origin);
        headers.insert(
            header::ACCESS_CONTROL_ALLOW_METHODS,
            HeaderValue::from_static(ALLOW_METHODS),
        );
        headers.insert(
            header::ACCESS_CONTROL_ALLOW_HEADERS,
            HeaderValue::from_static(ALLOW_HEADERS),
        );
        headers.insert(header::ACCESS_CONTROL_MAX_AGE, policy.max_age.clone());
        headers.insert(header::VARY, HeaderValue::from_static("origin"));
        return response;
    }
    let mut response = next.run(request).await;
    let headers = response.headers_mut();
    headers.append(header::VARY, HeaderValue::from_static("origin"));
    if let Some(origin) = origin {
        headers.insert(header::ACCESS_CONTROL_ALLOW_ORIGIN, origin);
        headers.insert(
            header::ACCESS_CONTROL_EXPOSE_HEADERS,
            HeaderValue::from_static(EXPOSE_HEADERS),
        );
    }
    response
}
