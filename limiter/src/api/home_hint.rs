//! What a call says of its account's home region (several regions, `regions.home_sources`): its
//! player token's home claim, and the `X-Screenlimit-Home-Region` header, taken only from the
//! gateway token (or from anyone when the API takes no credential: then every caller is trusted)
//! and checked by the id rules. A source the config does not list is not read.

use axum::Extension;
use axum::http::HeaderMap;

use super::auth::Caller;
use super::error::ApiError;
use crate::config::HomeSource;
use crate::service::{HomeHint, StreamService};

/// The header a trusted gateway names an account's home region with.
pub const HOME_HEADER: &str = "x-screenlimit-home-region";

/// The call's hint; a malformed header is refused (422 naming it).
pub fn home_hint(
    service: &StreamService,
    caller: &Option<Extension<Caller>>,
    headers: &HeaderMap,
) -> Result<HomeHint, ApiError> {
    let Some(regions) = service.regions() else {
        return Ok(HomeHint::NONE);
    };
    let sources = regions.home_sources();
    let caller = caller.as_ref().map(|Extension(caller)| caller);
    let token = match caller {
        Some(Caller::Player(claims)) if sources.contains(&HomeSource::PlayerToken) => {
            claims.home_region.clone()
        }
        _ => None,
    };
    let trusted = match caller {
        None => true,
        Some(Caller::Service { gateway, .. }) => *gateway,
        Some(_) => false,
    };
    let header = match headers.get(HOME_HEADER) {
        Some(value) if trusted && sources.contains(&HomeSource::GatewayHeader) => {
            let text = value.to_str().unwrap_or("\u{0}");
            crate::ids::validate_token(text)
                .map_err(|e| ApiError::invalid_field(HOME_HEADER, &e.to_string()))?;
            Some(text.to_owned())
        }
        _ => None,
    };
    Ok(HomeHint { token, header })
}
