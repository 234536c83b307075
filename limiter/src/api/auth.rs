//! Who may call what: each route belongs to an audience (players or support), and each
//! credential opens one audience's routes. The support token (the dashboard) opens the support
//! routes; the gateway token (a trusted gateway) and player tokens (JWTs, `auth.players`) open
//! the player routes, a player token for its own account only. The older single token
//! (`auth_token_file`) opens both. The health endpoints stay open for probes.

use std::sync::Arc;

use axum::extract::{Request, State};
use axum::http::{StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use subtle::ConstantTimeEq;

use super::error::ApiError;
use crate::config::Credentials;
use crate::player_tokens::{PlayerClaims, PlayerTokens, TokenError};

/// Paths a probe or scraper reaches without the token (the OpenAPI document says so too).
pub const OPEN_PATHS: &[&str] = &["/healthz", "/readyz", "/metrics"];

/// The audience of a route.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Audience {
    /// The health endpoints: no credential.
    Open,
    /// Play-start, heartbeat, stop.
    Player,
    /// An account's list: support for any account, a player for its own.
    Both,
    /// Force-stop, overrides, audit, fleet, dashboard sessions.
    Support,
    /// What other regions call (`/v1/regions/...`): the region token only.
    Region,
    /// The document and unknown paths: any valid credential.
    Any,
}

impl Audience {
    /// The audience of a path, by its segments (each route's path is unique to one audience).
    pub fn of(path: &str) -> Audience {
        if OPEN_PATHS.contains(&path) {
            return Audience::Open;
        }
        let segments: Vec<&str> = path.split('/').skip(1).collect();
        match segments.as_slice() {
            ["v1", "streams"] | ["v1", "streams", _] | ["v1", "streams", _, "heartbeat"] => {
                Audience::Player
            }
            ["v1", "accounts", _, "streams"] => Audience::Both,
            ["v1", "accounts", ..] | ["v1", "audit"] | ["v1", "fleet"] => Audience::Support,
            ["v1", "dashboard-sessions", ..] => Audience::Support,
            ["v1", "regions", ..] => Audience::Region,
            _ => Audience::Any,
        }
    }

    /// Whether browsers may call it from another origin (`http.cors`).
    pub fn faces_players(self) -> bool {
        matches!(self, Audience::Player | Audience::Both)
    }
}

/// Who is calling, once the credential checked out; handlers read it from the request's
/// extensions to hold a player to its own account.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Caller {
    /// The support token, the gateway token, or the single token that is both.
    Service { support: bool, gateway: bool },
    /// A player token: its own account (and device) only.
    Player(PlayerClaims),
    /// Another region (`regions.token_file`): the region routes only.
    Region,
}

impl Caller {
    /// Refuses a player token that names another account than `account_id`.
    pub fn check_account(&self, account_id: &str) -> Result<(), ApiError> {
        match self {
            Caller::Player(claims) if claims.account_id != account_id => Err(ApiError::new(
                StatusCode::FORBIDDEN,
                "account_mismatch",
                "the player token is for another account than the one this call names; \
                 send the account id the token carries",
            )),
            _ => Ok(()),
        }
    }

    /// Refuses a player token bound to a device (`auth.players.device_claim`) that names
    /// another device than `device_id`.
    pub fn check_device(&self, device_id: &str) -> Result<(), ApiError> {
        match self.bound_device() {
            Some(own) if own != device_id => Err(ApiError::new(
                StatusCode::FORBIDDEN,
                "device_mismatch",
                "the player token is for another device than this play-start's device_id",
            )),
            _ => Ok(()),
        }
    }

    /// The device a player token is bound to (`auth.players.device_claim`), if any.
    fn bound_device(&self) -> Option<&str> {
        match self {
            Caller::Player(claims) => claims.device_id.as_deref(),
            Caller::Service { .. } | Caller::Region => None,
        }
    }
}

/// Holds a device-bound player token to the streams of its own device, on the calls that name
/// a stream (heartbeat, stop): the stream id carries its device. A call whose id claims the
/// token's device under another device's MAC acts on nothing (the store finds no such stream).
pub fn check_stream_device(
    caller: &Option<axum::Extension<Caller>>,
    stream_id: &str,
) -> Result<(), ApiError> {
    let own = caller.as_ref().and_then(|c| c.bound_device());
    match (own, crate::ids::device_of(stream_id)) {
        (Some(own), Some(named)) if own != named => Err(ApiError::new(
            StatusCode::FORBIDDEN,
            "device_mismatch",
            "the player token is for another device than the one this stream was started on; \
             a device renews and stops its own streams only",
        )),
        _ => Ok(()),
    }
}

/// Holds a handler's caller (when the API checks credentials) to `account_id`.
pub fn check_account(
    caller: &Option<axum::Extension<Caller>>,
    account_id: &str,
) -> Result<(), ApiError> {
    match caller {
        Some(axum::Extension(caller)) => caller.check_account(account_id),
        None => Ok(()),
    }
}

/// What the API checks: the credentials, and the player tokens' keys.
#[derive(Debug, Clone, Default)]
pub struct ApiAuth {
    pub credentials: Credentials,
    pub players: Option<Arc<PlayerTokens>>,
    /// The token other regions present (`regions.token_file`); it opens their routes only.
    pub region: Option<String>,
}

impl ApiAuth {
    /// The older form: one token that opens every route (or none: no authentication).
    pub fn single_token(token: Option<String>) -> ApiAuth {
        ApiAuth {
            credentials: Credentials {
                support: token.clone(),
                gateway: token.clone(),
                single: token.is_some(),
            },
            players: None,
            region: None,
        }
    }

    /// Whether any call needs a credential.
    pub fn enabled(&self) -> bool {
        self.guards_public_routes() || self.region.is_some()
    }

    /// Whether the player and support routes need a credential (the region token alone does
    /// not close them).
    fn guards_public_routes(&self) -> bool {
        self.credentials.any(self.players.is_some())
    }

    /// Whether the support and player routes take different credentials.
    pub fn split(&self) -> bool {
        !self.credentials.single || self.players.is_some()
    }

    fn identify(&self, presented: &str) -> Result<Caller, AuthError> {
        let matches = |token: &Option<String>| {
            token
                .as_deref()
                .is_some_and(|t| bool::from(presented.as_bytes().ct_eq(t.as_bytes())))
        };
        let (support, gateway) = (
            matches(&self.credentials.support),
            matches(&self.credentials.gateway),
        );
        if support || gateway {
            return Ok(Caller::Service { support, gateway });
        }
        if matches(&self.region) {
            return Ok(Caller::Region);
        }
        // A token with a dot is meant as a JWT: one that is not (two or four parts) is a
        // malformed player token, not a missing credential.
        match &self.players {
            Some(players) if presented.contains('.') => players
                .verify(presented)
                .map(Caller::Player)
                .map_err(AuthError::Token),
            _ => Err(AuthError::Missing),
        }
    }
}

/// Why a call is refused before its handler runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AuthError {
    /// No credential, or not one of the configured ones.
    Missing,
    /// A player token that does not check out.
    Token(TokenError),
    /// A valid credential of the other audience.
    WrongAudience(Audience),
}

impl From<AuthError> for ApiError {
    fn from(error: AuthError) -> Self {
        match error {
            AuthError::Missing => ApiError::new(
                StatusCode::UNAUTHORIZED,
                "unauthorized",
                "this API needs `Authorization: Bearer <token>` with a configured credential",
            ),
            AuthError::Token(TokenError::Expired) => ApiError::new(
                StatusCode::UNAUTHORIZED,
                "token_expired",
                TokenError::Expired.to_string(),
            )
            .with("reason", TokenError::Expired.reason()),
            AuthError::Token(reason) => ApiError::new(
                StatusCode::UNAUTHORIZED,
                "invalid_token",
                reason.to_string(),
            )
            .with("reason", reason.reason()),
            AuthError::WrongAudience(Audience::Support) => ApiError::new(
                StatusCode::FORBIDDEN,
                "support_only",
                "this route is for support (the dashboard's support token); a player or \
                 gateway credential cannot open it",
            ),
            AuthError::WrongAudience(Audience::Region) => ApiError::new(
                StatusCode::FORBIDDEN,
                "regions_only",
                "this route is for other regions of this install (their region token); no \
                 other credential opens it",
            ),
            AuthError::WrongAudience(_) => ApiError::new(
                StatusCode::FORBIDDEN,
                "players_only",
                "this route is for players (a player token or the gateway token); the support \
                 token cannot open it",
            ),
        }
    }
}

impl AuthError {
    fn into_response(self) -> Response {
        let challenge = match self {
            AuthError::Token(_) => "Bearer error=\"invalid_token\"",
            _ => "Bearer",
        };
        let mut response = ApiError::from(self).into_response();
        if response.status() == StatusCode::UNAUTHORIZED {
            response.headers_mut().insert(
                header::WWW_AUTHENTICATE,
                header::HeaderValue::from_static(challenge),
            );
        }
        response
    }
}

/// The token of an `Authorization: Bearer <token>` value; the scheme's name is
/// case-insensitive (RFC 9110 §11.1), so `bearer` and `BEARER` are the same scheme.
fn bearer_token(value: &str) -> Option<&str> {
    let (scheme, token) = value.trim_start().split_once(' ')?;
    scheme
        .eq_ignore_ascii_case("bearer")
        .then(|| token.trim())
        .filter(|t| !t.is_empty())
}

/// Whether `caller` may call a route of `audience`.
fn admits(caller: &Caller, audience: Audience) -> bool {
    match (caller, audience) {
        (_, Audience::Open | Audience::Any) => true,
        (Caller::Service { support, gateway }, Audience::Both) => *support || *gateway,
        (Caller::Service { gateway, .. }, Audience::Player) => *gateway,
        (Caller::Service { support, .. }, Audience::Support) => *support,
        (Caller::Player(_), Audience::Player | Audience::Both) => true,
        (Caller::Player(_), Audience::Support) => false,
        (Caller::Region, audience) => audience == Audience::Region,
        (_, Audience::Region) => false,
    }
}

/// The middleware: checks the credential against the route's audience, and hands the caller to
/// the handler (`Extension<Caller>`).
pub async fn require_credential(
    State(auth): State<Arc<ApiAuth>>,
    mut request: Request,
    next: Next,
) -> Response {
    let audience = Audience::of(request.uri().path());
    if audience == Audience::Open || (audience != Audience::Region && !auth.guards_public_routes())
    {
        return next.run(request).await;
    }
    let presented = request
        .headers()
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(bearer_token)
        .unwrap_or("");
    let caller = match auth.identify(presented) {
        Ok(caller) => caller,
        Err(error) => return error.into_response(),
    };
    if !admits(&caller, audience) {
        return AuthError::WrongAudience(audience).into_response();
    }
    request.extensions_mut().insert(caller);
    next.run(request).await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_bearer_scheme_is_case_insensitive() {
        for value in ["Bearer t0k", "bearer t0k", "BEARER  t0k ", " bEaReR t0k"] {
            assert_eq!(bearer_token(value), Some("t0k"), "{value:?}");
        }
        for value in ["Basic t0k", "Bearer", "Bearer ", "Bearert0k", "t0k", ""] {
            assert_eq!(bearer_token(value), None, "{value:?}");
        }
    }

    #[test]
    fn each_route_has_its_audience() {
        for (path, audience) in [
            ("/healthz", Audience::Open),
            ("/metrics", Audience::Open),
            ("/v1/streams", Audience::Player),
            ("/v1/streams/abc", Audience::Player),
            ("/v1/streams/abc/heartbeat", Audience::Player),
            ("/v1/accounts/a/streams", Audience::Both),
            ("/v1/accounts/a/streams/s/force-stop", Audience::Support),
            ("/v1/accounts/a/limit-override", Audience::Support),
            ("/v1/accounts/a/history", Audience::Support),
            ("/v1/audit", Audience::Support),
            ("/v1/fleet", Audience::Support),
            ("/v1/dashboard-sessions/u", Audience::Support),
            ("/v1/dashboard-sessions/u/events", Audience::Support),
            ("/openapi.json", Audience::Any),
            ("/v2/streams", Audience::Any),
        ] {
            assert_eq!(Audience::of(path), audience, "{path}");
        }
    }

    #[test]
    fn a_credential_opens_its_own_audience_only() {
        let support = Caller::Service {
            support: true,
            gateway: false,
        };
        let gateway = Caller::Service {
            support: false,
            gateway: true,
        };
        let single = Caller::Service {
            support: true,
            gateway: true,
        };
        let player = Caller::Player(PlayerClaims {
            account_id: "a".into(),
            device_id: None,
            home_region: None,
        });
        use Audience::*;
        for (caller, open) in [
            (&support, [false, true, true]),
            (&gateway, [true, true, false]),
            (&single, [true, true, true]),
            (&player, [true, true, false]),
        ] {
            assert_eq!(
                [Player, Both, Support].map(|a| admits(caller, a)),
                open,
                "{caller:?}"
            );
        }
        assert!(player.check_account("a").is_ok());
        assert_eq!(
            player.check_account("b").unwrap_err().code,
            "account_mismatch"
        );
        assert!(gateway.check_account("b").is_ok());
    }
}
