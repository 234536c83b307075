//! Who may call the API (`auth`, and the older `auth_token_file`) and which web pages may call
//! it from a browser (`http.cors`).
//!
//! Two audiences, two credentials: the support token (the dashboard) opens the support routes;
//! the gateway token (a trusted gateway in front of the players) or a player token
//! (`auth.players`, a JWT from the video service's auth) opens the player routes. The older
//! single `auth_token_file` keeps working as before: that one token opens every route.

use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::Deserialize;

use super::error::{ConfigError, invalid, read_named_file};

/// Shortest support or gateway token accepted.
pub const MIN_TOKEN_CHARS: usize = 16;

/// Longest `auth.players.leeway`.
pub const MAX_LEEWAY: Duration = Duration::from_secs(300);

/// `auth`: the credentials of each audience. With none of them (and no `auth_token_file`) the
/// API is open, for a limiter only the gateway's network reaches (the trusted-gateway mode).
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ApiAuthConfig {
    /// File holding the support token: the dashboard's credential, the only one that opens the
    /// support routes (force-stop, limit overrides, audit, fleet, dashboard sessions, any
    /// account's list).
    pub support_token_file: Option<PathBuf>,
    /// File holding the gateway token: a trusted gateway's credential, which opens the player
    /// routes (play-start, heartbeat, stop, list) for any account and nothing else.
    pub gateway_token_file: Option<PathBuf>,
    /// Player tokens: JWTs from the video service's own auth, each opening the player routes for
    /// its own account only.
    pub players: Option<PlayerTokenConfig>,
}

/// `auth.players`.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PlayerTokenConfig {
    /// File holding the HS256 secret (at least 32 bytes) the tokens are signed with.
    pub hs256_secret_file: Option<PathBuf>,
    /// File holding a JWKS document (`{"keys": [...]}`) with the RS256, ES256 or EdDSA public
    /// keys the tokens are signed with; read again when it changes (key rotation).
    pub jwks_file: Option<PathBuf>,
    /// The `iss` every token must carry.
    pub issuer: String,
    /// The `aud` every token must name.
    pub audience: String,
    /// The claim holding the account id (default `sub`).
    #[serde(default = "default_account_claim")]
    pub account_claim: String,
    /// A claim holding the device id; when set, a play-start's `device_id` must be it.
    #[serde(default)]
    pub device_claim: Option<String>,
    /// A claim naming the account's home region (`regions.home_sources: [player_token]`); a
    /// token without it names none.
    #[serde(default)]
    pub home_claim: Option<String>,
    /// Clock difference allowed on `exp` and `nbf` (default 30s, at most 5m).
    #[serde(default = "default_leeway", with = "humantime_serde")]
    pub leeway: Duration,
}

fn default_account_claim() -> String {
    "sub".into()
}

fn default_leeway() -> Duration {
    Duration::from_secs(30)
}

/// `http.cors`: the web pages (origins) whose scripts may call the player routes from a browser.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct CorsConfig {
    /// Exact origins, as a browser sends them (`https://watch.example.com`, no path, no `*`).
    pub allowed_origins: Vec<String>,
    /// How long a browser may keep a preflight's answer.
    #[serde(with = "humantime_serde")]
    pub max_age: Duration,
}

impl Default for CorsConfig {
    fn default() -> Self {
        CorsConfig {
            allowed_origins: Vec::new(),
            max_age: Duration::from_secs(600),
        }
    }
}

/// The credentials read from their files: what the API checks.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Credentials {
    /// Opens the support routes.
    pub support: Option<String>,
    /// Opens the player routes for any account.
    pub gateway: Option<String>,
    /// The one token of `auth_token_file`, which opens every route (as before `auth`).
    pub single: bool,
}

impl Credentials {
    /// Whether any call but the open paths needs a credential.
    pub fn any(&self, players: bool) -> bool {
        self.support.is_some() || self.gateway.is_some() || players
    }
}

/// Checks the shape of `auth` and `http.cors` against each other and `auth_token_file`.
pub fn validate(
    auth: &ApiAuthConfig,
    single: Option<&PathBuf>,
    cors: &CorsConfig,
) -> Result<(), ConfigError> {
    let split = auth.support_token_file.is_some()
        || auth.gateway_token_file.is_some()
        || auth.players.is_some();
    if single.is_some() && split {
        return Err(invalid(
            "auth_token_file",
            "auth_token_file is the one token that opens every route; with the credentials of \
             auth (support_token_file, gateway_token_file, players), drop it (give the \
             dashboard's token as auth.support_token_file, the gateway's as \
             auth.gateway_token_file)",
        ));
    }
    let player_credential = auth.gateway_token_file.is_some() || auth.players.is_some();
    if single.is_none() && auth.support_token_file.is_none() && player_credential {
        return Err(invalid(
            "auth.support_token_file",
            "a player credential (auth.gateway_token_file or auth.players) is configured but no \
             support token: the support routes (force-stop, overrides, audit) would be open to \
             anyone; give the dashboard's token as auth.support_token_file",
        ));
    }
    if auth.support_token_file.is_some() && !player_credential {
        return Err(invalid(
            "auth.support_token_file",
            "a support token without a player credential would leave the player routes open; \
             add auth.gateway_token_file or auth.players, or use auth_token_file for one token \
             that opens every route",
        ));
    }
    if let Some(players) = &auth.players {
        validate_players(players)?;
    }
    validate_cors(cors)
}

fn validate_players(players: &PlayerTokenConfig) -> Result<(), ConfigError> {
    match (&players.hs256_secret_file, &players.jwks_file) {
        (Some(_), Some(_)) => {
            return Err(invalid(
                "auth.players",
                "give the keys as hs256_secret_file or as jwks_file, not both",
            ));
        }
        (None, None) => {
            return Err(invalid(
                "auth.players",
                "name the keys the tokens are signed with: hs256_secret_file (HS256) or \
                 jwks_file (RS256, ES256, EdDSA)",
            ));
        }
        _ => {}
    }
    for (field, value) in [
        ("auth.players.issuer", &players.issuer),
        ("auth.players.audience", &players.audience),
        ("auth.players.account_claim", &players.account_claim),
    ] {
        if value.trim().is_empty() {
            return Err(invalid(field, "must not be empty"));
        }
    }
    if players
        .device_claim
        .as_deref()
        .is_some_and(|c| c.trim().is_empty())
    {
        return Err(invalid(
            "auth.players.device_claim",
            "must not be empty (leave it out for no device binding)",
        ));
    }
    if players
        .home_claim
        .as_deref()
        .is_some_and(|c| c.trim().is_empty())
    {
        return Err(invalid(
            "auth.players.home_claim",
            "must not be empty (leave it out when tokens name no home)",
        ));
    }
    if players.leeway > MAX_LEEWAY {
        return Err(invalid(
            "auth.players.leeway",
            format!("must be at most {}", humantime::format_duration(MAX_LEEWAY)),
        ));
    }
    Ok(())
}

fn validate_cors(cors: &CorsConfig) -> Result<(), ConfigError> {
    for origin in &cors.allowed_origins {
        check_origin(origin).map_err(|problem| {
            invalid(
                "http.cors.allowed_origins",
                format!("{origin:?}: {problem}"),
            )
        })?;
    }
    if cors.max_age > Duration::from_secs(86_400) {
        return Err(invalid("http.cors.max_age", "must be at most 24h"));
    }
    Ok(())
}

/// An origin as a browser sends it: `scheme://host[:port]`, lower case, nothing after.
fn check_origin(origin: &str) -> Result<(), &'static str> {
    if origin == "*" || origin.contains('*') {
        return Err("a wildcard is refused: list each web player's origin exactly");
    }
    let rest = origin
        .strip_prefix("https://")
        .or_else(|| origin.strip_prefix("http://"))
        .ok_or("an origin starts with https:// (or http://)")?;
    if rest.is_empty() {
        return Err("an origin names a host");
    }
    if rest.contains(['/', '?', '#', '@', ' ']) {
        return Err("an origin is scheme://host[:port], without a path or a trailing slash");
    }
    if origin.chars().any(|c| c.is_ascii_uppercase()) {
        return Err("write it in lower case, as browsers send it");
    }
    if let Some((_, port)) = rest.rsplit_once(':')
        && !rest.ends_with(']')
        && port.parse::<u16>().is_err()
    {
        return Err("the port is not a number");
    }
    Ok(())
}

/// Reads the token files.
pub fn resolve(auth: &ApiAuthConfig, single: Option<&PathBuf>) -> Result<Credentials, ConfigError> {
    if let Some(path) = single {
        let token = read_token("auth_token_file", path)?;
        return Ok(Credentials {
            support: Some(token.clone()),
            gateway: Some(token),
            single: true,
        });
    }
    let support = auth
        .support_token_file
        .as_ref()
        .map(|p| read_token("auth.support_token_file", p))
        .transpose()?;
    let gateway = auth
        .gateway_token_file
        .as_ref()
        .map(|p| read_token("auth.gateway_token_file", p))
        .transpose()?;
    if support.is_some() && support == gateway {
        return Err(invalid(
            "auth.gateway_token_file",
            "holds the same token as auth.support_token_file: a gateway holding it could reach \
             the support routes; give each its own token",
        ));
    }
    Ok(Credentials {
        support,
        gateway,
        single: false,
    })
}

pub(crate) fn read_token(field: &'static str, path: &Path) -> Result<String, ConfigError> {
    let token = read_named_file(field, path)?.trim().to_owned();
    if token.chars().count() < MIN_TOKEN_CHARS {
        return Err(invalid(
            field,
            format!("the token must be at least {MIN_TOKEN_CHARS} characters"),
        ));
    }
    if token.chars().any(|c| !c.is_ascii_graphic()) {
        return Err(invalid(
            field,
            "the token must be printable ASCII without spaces (it travels in a header)",
        ));
    }
    Ok(token)
}
