//! Extractors whose rejections are JSON error bodies instead of axum's plain text.

use axum::body::Bytes;
use axum::extract::rejection::JsonRejection;
use axum::extract::{FromRequest, FromRequestParts, Request};
use axum::http::header;
use axum::http::request::Parts;
use serde::de::DeserializeOwned;

use super::error::ApiError;

/// `axum::Json` that rejects with the API's JSON error body.
pub struct ApiJson<T>(pub T);

impl<T: DeserializeOwned, S: Send + Sync> FromRequest<S> for ApiJson<T> {
    type Rejection = ApiError;

    async fn from_request(req: Request, state: &S) -> Result<Self, Self::Rejection> {
        // The common case, `content-type: application/json`, parses with plain serde_json: it
        // accepts exactly what `axum::Json` accepts, without tracking the path of every field.
        // A body it refuses is parsed again by `axum::Json`, for the very same rejection.
        let plain_json = req
            .headers()
            .get(header::CONTENT_TYPE)
            .is_some_and(|v| v.as_bytes().eq_ignore_ascii_case(b"application/json"));
        if !plain_json {
            let axum::Json(value) = axum::Json::<T>::from_request(req, state).await?;
            return Ok(ApiJson(value));
        }
        let bytes = Bytes::from_request(req, state)
            .await
            .map_err(JsonRejection::from)?;
        match serde_json::from_slice(&bytes) {
            Ok(value) => Ok(ApiJson(value)),
            Err(_) => {
                let axum::Json(value) = axum::Json::<T>::from_bytes(&bytes)?;
                Ok(ApiJson(value))
            }
        }
    }
}

/// An optional JSON body (force-stop, removing a temporary limit): nothing, or only whitespace,
/// gives `T::default()`; anything else must be JSON of `T`, else 422.
pub fn optional_json<T: DeserializeOwned + Default>(body: &Bytes) -> Result<T, ApiError> {
    if body.iter().all(u8::is_ascii_whitespace) {
        return Ok(T::default());
    }
    serde_json::from_slice(body).map_err(|e| {
        ApiError::new(
            axum::http::StatusCode::UNPROCESSABLE_ENTITY,
            "invalid_request",
            format!("the JSON body does not fit this call: {e}"),
        )
    })
}

/// `axum::extract::Path` that rejects with the API's JSON error body.
pub struct ApiPath<T>(pub T);

impl<T: DeserializeOwned + Send, S: Send + Sync> FromRequestParts<S> for ApiPath<T> {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, Self::Rejection> {
        let axum::extract::Path(value) =
            axum::extract::Path::<T>::from_request_parts(parts, state).await?;
        Ok(ApiPath(value))
    }
}

/// `axum::extract::Query` that rejects with the API's JSON error body.
pub struct ApiQuery<T>(pub T);

impl<T: DeserializeOwned + Send, S: Send + Sync> FromRequestParts<S> for ApiQuery<T> {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, Self::Rejection> {
        let axum::extract::Query(value) =
            axum::extract::Query::<T>::from_request_parts(parts, state)
                .await
                .map_err(|e| {
                    ApiError::new(
                        axum::http::StatusCode::UNPROCESSABLE_ENTITY,
                        "invalid_request",
                        e.body_text(),
                    )
                })?;
        Ok(ApiQuery(value))
    }
}

#[cfg(test)]
mod tests {
    use axum::body::Body;
    use serde::Deserialize;

    use super::*;

    #[derive(Debug, Deserialize, PartialEq)]
    struct Shape {
        account_id: String,
        inner: Inner,
    }

    #[derive(Debug, Deserialize, PartialEq)]
    struct Inner {
        n: u32,
    }

    fn request(content_type: Option<&str>, body: &str) -> Request {
        let mut builder = Request::builder().method("POST").uri("/v1/streams");
        if let Some(content_type) = content_type {
            builder = builder.header(header::CONTENT_TYPE, content_type);
        }
        builder.body(Body::from(body.to_owned())).unwrap()
    }

    /// What the extractor answered, comparable: the value or (status, code, message).
    fn outcome<T>(result: Result<T, ApiError>) -> Result<T, (u16, &'static str, String)> {
        result.map_err(|e| (e.status.as_u16(), e.code, e.message))
    }

    #[tokio::test]
    async fn the_plain_json_path_answers_exactly_like_axum_json() {
        let bodies = [
            r#"{"account_id": "a", "inner": {"n": 1}}"#,
            r#"{"account_id": "a", "inner": {"n": 1}}  "#,
            r#"{"account_id": "a", "inner": {"n": 1}} x"#,
            r#"{"account_id": "a", "inner": {"n": -1}}"#,
            r#"{"account_id": "a", "inner": {}}"#,
            r#"{"account_id": 7, "inner": {"n": 1}}"#,
            r#"{"account_id": "a""#,
            "[]",
            "",
        ];
        let content_types = [
            Some("application/json"),
            Some("Application/JSON"),
            Some("application/json; charset=utf-8"),
            Some("application/problem+json"),
            Some("text/plain"),
            None,
        ];
        for body in bodies {
            for content_type in content_types {
                let ours = ApiJson::<Shape>::from_request(request(content_type, body), &())
                    .await
                    .map(|ApiJson(v)| v);
                let axums = axum::Json::<Shape>::from_request(request(content_type, body), &())
                    .await
                    .map(|axum::Json(v)| v)
                    .map_err(ApiError::from);
                assert_eq!(outcome(ours), outcome(axums), "{content_type:?} {body:?}");
            }
        }
    }
}
