//! Error pages a person can act on.

use askama::Template;
use askama_web::WebTemplate;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};

use super::nav::Nav;
use crate::ids::BadId;
use crate::limiter::LimiterError;

#[derive(Template, WebTemplate)]
#[template(path = "pages/error.html")]
struct ErrorPage {
    nav: Nav,
    title: String,
    message: String,
}

/// A page-level failure: a status, a title and a sentence that says what to do.
#[derive(Debug)]
pub struct PageError {
    pub status: StatusCode,
    pub title: String,
    pub message: String,
    nav: Option<Box<Nav>>,
}

impl PageError {
    pub fn new(status: StatusCode, title: &str, message: impl Into<String>) -> PageError {
        PageError {
            status,
            title: title.to_owned(),
            message: message.into(),
            nav: None,
        }
    }

    pub fn with_nav(mut self, nav: Nav) -> PageError {
        self.nav = Some(Box::new(nav));
        self
    }

    /// An id from the address that the dashboard will not pass on: 400, saying what is wrong.
    pub fn bad_id(error: &BadId) -> PageError {
        let title = match error {
            BadId::Account { .. } | BadId::Unaddressable { .. } => "That is not an account id",
            BadId::Stream { .. } => "That is not a stream id",
        };
        PageError::new(StatusCode::BAD_REQUEST, title, error.to_string())
    }

    /// The limiter did not answer, or answered something unusable.
    pub fn limiter(error: &LimiterError) -> PageError {
        if let LimiterError::Unaddressable { segment } = error {
            // Caught before sending: the id is at fault, not the limiter.
            return PageError::new(
                StatusCode::BAD_REQUEST,
                "That id cannot be looked up",
                format!("{error}. Nothing was sent to the limiter; check the id “{segment}”."),
            );
        }
        let (status, title) = match error {
            LimiterError::Timeout { .. } => {
                (StatusCode::GATEWAY_TIMEOUT, "The limiter is not answering")
            }
            LimiterError::Unreachable { .. } => {
                (StatusCode::BAD_GATEWAY, "The limiter is unreachable")
            }
            LimiterError::Unauthorized { .. } => {
                (StatusCode::BAD_GATEWAY, "The limiter refused the dashboard")
            }
            LimiterError::Status { status: 503, .. } => (
                StatusCode::SERVICE_UNAVAILABLE,
                "The limiter's store is unavailable",
            ),
            _ => (
                StatusCode::BAD_GATEWAY,
                "The limiter gave an unexpected answer",
            ),
        };
        tracing::warn!(%error, "limiter call failed");
        PageError::new(
            status,
            title,
            format!(
                "{error}. Live data cannot be shown until the limiter answers again; try again \
                 in a few seconds, and check the limiter's health if this persists."
            ),
        )
    }

    pub fn csrf() -> PageError {
        PageError::new(
            StatusCode::FORBIDDEN,
            "This form has expired",
            "The form was not sent from this dashboard (its security token is missing or stale). \
             Nothing was changed. Go back, reload the page and try again.",
        )
    }
}

impl IntoResponse for PageError {
    fn into_response(self) -> Response {
        let nav = self
            .nav
            .map_or_else(|| Nav::anonymous(String::new()), |n| *n);
        let page = ErrorPage {
            nav,
            title: self.title,
            message: self.message,
        };
        (self.status, page).into_response()
    }
}
