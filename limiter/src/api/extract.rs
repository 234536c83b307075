//! Extractors whose rejections are JSON error bodies instead of axum's plain text.

use axum::body::Bytes;
use axum::extract::rejection::JsonRejection;
use axum::extract::{FromRequest, FromRequestParts, Request};
use axum::http::request::Parts;
use axum::http::{HeaderMap, header};
use serde::de::DeserializeOwned;

use super::error::ApiError;

/// `axum::Json` that rejects with the API's JSON error body, and takes objects only: serde
/// would also fill a struct from an array of its fields (`["acct"]`), which no schema allows.
pub struct ApiJson<T>(pub T);

/// The body parsed as JSON; refuses any other value than an object (422).
fn object_only<T>(bytes: &[u8], value: T) -> Result<T, ApiError> {
    match bytes.iter().find(|b| !b.is_ascii_whitespace()) {
        Some(b'{') => Ok(value),
        _ => Err(ApiError::new(
            axum::http::StatusCode::UNPROCESSABLE_ENTITY,
            "invalid_request",
            "the JSON body must be an object (`{...}`) with the fields this call documents",
        )),
    }
}

impl<T: DeserializeOwned, S: Send + Sync> FromRequest<S> for ApiJson<T> {
    type Rejection = ApiError;

    async fn from_request(req: Request, state: &S) -> Result<Self, Self::Rejection> {
        if !json_content_type(req.headers()) {
            return Err(ApiError::unsupported_media_type());
        }
        let bytes = Bytes::from_request(req, state)
            .await
            .map_err(JsonRejection::from)?;
        parse_object(&bytes).map(ApiJson)
    }
}

/// Parses a JSON object. Plain serde_json accepts exactly what `axum::Json` accepts, without
/// tracking the path of every field; a body it refuses is parsed again by axum, for the very
/// same rejection (400 bad JSON, 422 wrong shape).
fn parse_object<T: DeserializeOwned>(bytes: &[u8]) -> Result<T, ApiError> {
    let value = match serde_json::from_slice(bytes) {
        Ok(value) => value,
        Err(_) => axum::Json::<T>::from_bytes(bytes)?.0,
    };
    object_only(bytes, value)
}

/// The content types `axum::Json` takes: `application/json` or `application/*+json`, with
/// parameters (the same test as axum's, which is private).
pub fn json_content_type(headers: &HeaderMap) -> bool {
    let Some(value) = headers.get(header::CONTENT_TYPE) else {
        return false;
    };
    if value.as_bytes().eq_ignore_ascii_case(b"application/json") {
        return true;
    }
    let Some(mime) = value
        .to_str()
        .ok()
        .and_then(|v| v.parse::<mime::Mime>().ok())
    else {
        return false;
    };
    mime.type_() == "application"
        && (mime.subtype() == "json" || mime.suffix().is_some_and(|name| name == "json"))
}

/// An optional JSON body: none (empty or blank) or `null` is `T::default()`; any other body is
/// read as `ApiJson` reads it, with the same answers (415 without the JSON content type, 400,
/// 413, 422).
pub struct ApiOptionalJson<T>(pub T);

impl<T: DeserializeOwned + Default, S: Send + Sync> FromRequest<S> for ApiOptionalJson<T> {
    type Rejection = ApiError;

    async fn from_request(req: Request, state: &S) -> Result<Self, Self::Rejection> {
        let json = json_content_type(req.headers());
        let bytes = Bytes::from_request(req, state)
            .await
            .map_err(JsonRejection::from)?;
        if bytes.trim_ascii().is_empty() || (json && bytes.trim_ascii() == b"null") {
            return Ok(ApiOptionalJson(T::default()));
        }
        if !json {
            return Err(ApiError::unsupported_media_type());
        }
        parse_object(&bytes).map(ApiOptionalJson)
    }
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

    #[tokio::test]
    async fn a_struct_comes_from_an_object_only() {
        let array = r#"["a", {"n": 1}]"#;
        let axums =
            axum::Json::<Shape>::from_request(request(Some("application/json"), array), &()).await;
        assert!(axums.is_ok(), "serde fills a struct from an array");
        let ours =
            ApiJson::<Shape>::from_request(request(Some("application/json"), array), &()).await;
        assert_eq!(outcome(ours.map(|_| ())).unwrap_err().0, 422);
    }

    #[tokio::test]
    async fn an_optional_body_may_be_absent_or_null_but_is_json_when_sent() {
        #[derive(Debug, Default, Deserialize, PartialEq)]
        struct Note {
            text: Option<String>,
        }
        let read = |content_type: Option<&'static str>, body: &'static str| async move {
            outcome(
                ApiOptionalJson::<Note>::from_request(request(content_type, body), &())
                    .await
                    .map(|ApiOptionalJson(v)| v),
            )
        };
        let none = Ok(Note::default());
        assert_eq!(read(None, "").await, none);
        assert_eq!(read(Some("text/plain"), " \n").await, none);
        assert_eq!(read(Some("application/json"), "null").await, none);
        assert_eq!(
            read(Some("application/json"), r#"{"text": "hi"}"#).await,
            Ok(Note {
                text: Some("hi".into())
            })
        );
        assert_eq!(read(None, r#"{"text": "hi"}"#).await.unwrap_err().0, 415);
        assert_eq!(
            read(Some("application/json"), "{").await.unwrap_err().0,
            400
        );
        assert_eq!(
            read(Some("application/json"), "[null]")
                .await
                .unwrap_err()
                .0,
            422
        );
    }
}
