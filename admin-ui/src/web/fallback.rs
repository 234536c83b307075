//! The page for an address the dashboard does not serve.

use axum::http::StatusCode;

use super::ctx::CsrfToken;
use super::error::PageError;
use super::nav::Nav;

/// 404 in the layout, with the sign-out form's token.
pub async fn not_found(CsrfToken(csrf, _): CsrfToken) -> PageError {
    PageError::new(
        StatusCode::NOT_FOUND,
        "Page not found",
        "There is no page at this address. Start from the account search.",
    )
    .with_nav(Nav::anonymous(csrf))
}
