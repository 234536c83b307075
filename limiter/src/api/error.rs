//! Every error answer is `{"error": "<code>", "message": "...", ...}` with a fitting status.

use axum::Json;
use axum::extract::rejection::{JsonRejection, PathRejection};
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde_json::{Map, Value, json};

use crate::service::ServiceError;

#[derive(Debug)]
pub struct ApiError {
    pub status: StatusCode,
    pub code: &'static str,
    pub message: String,
    /// Extra fields merged into the body (`action`, `field`, `limit`, `active`).
    pub extra: Map<String, Value>,
}

impl ApiError {
    pub fn new(status: StatusCode, code: &'static str, message: impl Into<String>) -> Self {
        ApiError {
            status,
            code,
            message: message.into(),
            extra: Map::new(),
        }
    }

    pub fn with(mut self, key: &str, value: impl Into<Value>) -> Self {
        self.extra.insert(key.to_owned(), value.into());
        self
    }

    pub fn invalid_field(field: &'static str, problem: &str) -> Self {
        ApiError::new(
            StatusCode::UNPROCESSABLE_ENTITY,
            "invalid_request",
            format!("`{field}` {problem}"),
        )
        .with("field", field)
    }

    pub fn unknown_stream() -> Self {
        ApiError::new(
            StatusCode::NOT_FOUND,
            "unknown_stream",
            "no such stream on this account; check the stream_id and account_id",
        )
    }

    pub fn unsupported_media_type() -> Self {
        ApiError::new(
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            "unsupported_media_type",
            "send the body as JSON with `Content-Type: application/json`",
        )
    }

    pub fn not_found() -> Self {
        ApiError::new(
            StatusCode::NOT_FOUND,
            "not_found",
            "no such endpoint; see /openapi.json",
        )
    }

    /// A request shed because the instance is at `http.max_in_flight` (503, `Retry-After`).
    pub fn overloaded() -> Self {
        ApiError::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "overloaded",
            "this limiter instance is at its bound of requests in flight; retry in a second",
        )
    }

    /// A request whose body did not arrive within `http.body_read_timeout`; the connection is
    /// closed after this answer.
    pub fn request_timeout() -> Self {
        ApiError::new(
            StatusCode::REQUEST_TIMEOUT,
            "request_timeout",
            "the request body did not arrive in time; the connection is closed",
        )
    }

    pub fn method_not_allowed() -> Self {
        ApiError::new(
            StatusCode::METHOD_NOT_ALLOWED,
            "method_not_allowed",
            "this endpoint does not take that method; see /openapi.json",
        )
    }
}

impl From<ServiceError> for ApiError {
    fn from(error: ServiceError) -> Self {
        match error {
            ServiceError::UnknownPlan(plan) => ApiError::new(
                StatusCode::UNPROCESSABLE_ENTITY,
                "unknown_plan",
                format!("plan {plan:?} is not configured; omit `plan` to use the account's plan"),
            )
            .with("field", "plan"),
            ServiceError::UnknownStream => ApiError::unknown_stream(),
            ServiceError::UnknownAccount => ApiError::new(
                StatusCode::FORBIDDEN,
                "unknown_account",
                "the subscription database has no plan for this account; check the account id",
            ),
            ServiceError::StoreUnavailable(cause) => ApiError::new(
                StatusCode::SERVICE_UNAVAILABLE,
                "store_unavailable",
                format!("the stream store cannot answer right now ({cause}); retry in a second"),
            ),
            ServiceError::Overloaded => ApiError::overloaded(),
        }
    }
}

impl From<JsonRejection> for ApiError {
    fn from(rejection: JsonRejection) -> Self {
        match rejection {
            JsonRejection::JsonDataError(e) => ApiError::new(
                StatusCode::UNPROCESSABLE_ENTITY,
                "invalid_request",
                format!("the JSON body does not fit this call: {}", e.body_text()),
            ),
            JsonRejection::JsonSyntaxError(e) => ApiError::new(
                StatusCode::BAD_REQUEST,
                "bad_json",
                format!("the body is not valid JSON: {}", e.body_text()),
            ),
            JsonRejection::MissingJsonContentType(_) => ApiError::unsupported_media_type(),
            JsonRejection::BytesRejection(e) if e.status() == StatusCode::PAYLOAD_TOO_LARGE => {
                ApiError::new(
                    StatusCode::PAYLOAD_TOO_LARGE,
                    "payload_too_large",
                    "the request body is too large",
                )
            }
            other => ApiError::new(other.status(), "bad_request", other.body_text()),
        }
    }
}

impl From<PathRejection> for ApiError {
    /// A path value that cannot be read (not UTF-8 once decoded) breaks its id rule like any
    /// other bad id: 422, as the document says. Missing parameters would be a routing bug.
    fn from(rejection: PathRejection) -> Self {
        match rejection {
            PathRejection::FailedToDeserializePathParams(e) => ApiError::new(
                StatusCode::UNPROCESSABLE_ENTITY,
                "invalid_request",
                format!(
                    "a value in the path is not a valid id ({}); ids are {}",
                    e.body_text(),
                    crate::ids::ID.words
                ),
            ),
            other => ApiError::new(
                StatusCode::INTERNAL_SERVER_ERROR,
                "internal",
                other.body_text(),
            ),
        }
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let mut body = Map::new();
        body.insert("error".into(), json!(self.code));
        body.insert("message".into(), json!(self.message));
        body.extend(self.extra);
        let mut response = (self.status, Json(Value::Object(body))).into_response();
        if self.status == StatusCode::SERVICE_UNAVAILABLE {
            response
                .headers_mut()
                .insert(header::RETRY_AFTER, header::HeaderValue::from_static("1"));
        }
        response
    }
}
