//! Player tokens (`auth.players`): JWTs the video service's own auth issues to its players, checked
//! here so that the API can face players directly. A token is accepted when its signature is one
//! of the configured keys' (an HS256 secret file, or the RS256 / ES256 / EdDSA keys of a JWKS
//! file), its `alg` is the one its key is for (`none` never is), and `exp`, `iss` and `aud` hold;
//! it names the account (and, when configured, the device) its holder may play as.
//!
//! The key file is read again when it changes (a Kubernetes Secret updated in place, a key
//! rotated): [`PlayerTokens::reload_if_changed`] runs once a second on lane 0. A new file that
//! cannot be used leaves the keys in force and is logged once.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use arc_swap::ArcSwap;
use jsonwebtoken::jwk::{AlgorithmParameters, EllipticCurve, Jwk, JwkSet, KeyAlgorithm};
use jsonwebtoken::{Algorithm, DecodingKey, Validation, errors::ErrorKind};
use serde_json::{Map, Value};

use crate::config::api_access::PlayerTokenConfig;
use crate::config::error::ConfigError;

/// Shortest HS256 secret accepted: the hash's own size (RFC 7518, 3.2).
pub const MIN_HS256_SECRET_BYTES: usize = 32;

/// What a valid token says about its holder.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PlayerClaims {
    pub account_id: String,
    /// Present when `auth.players.device_claim` is configured.
    pub device_id: Option<String>,
    /// The account's home region, when `auth.players.home_claim` is configured and the token
    /// carries it.
    pub home_region: Option<String>,
}

/// Why a token is refused; each is named in the 401 answer (`reason`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum TokenError {
    #[error("the token has expired; get a new one from the video service's sign-in")]
    Expired,
    #[error("the token is not a well-formed JWT")]
    Malformed,
    #[error("the token's `alg` is not one the configured keys are for (`none` never is)")]
    AlgorithmNotAllowed,
    #[error("no configured key has the token's `kid`")]
    UnknownKey,
    #[error("the token's signature does not verify with the configured key")]
    BadSignature,
    #[error("the token's `aud` does not name this service (`auth.players.audience`)")]
    WrongAudience,
    #[error("the token's `iss` is not the configured issuer (`auth.players.issuer`)")]
    WrongIssuer,
    #[error("the token is not valid yet (`nbf`)")]
    NotYetValid,
    #[error("the token lacks a claim it needs (`exp`, `iss`, `aud`, the account or device claim)")]
    MissingClaim,
    #[error("the token's account or device claim is not a valid id")]
    BadClaim,
}

impl TokenError {
    /// The `reason` field of the answer.
    pub fn reason(self) -> &'static str {
        match self {
            TokenError::Expired => "expired",
            TokenError::Malformed => "malformed",
            TokenError::AlgorithmNotAllowed => "algorithm_not_allowed",
            TokenError::UnknownKey => "unknown_key",
            TokenError::BadSignature => "bad_signature",
            TokenError::WrongAudience => "wrong_audience",
            TokenError::WrongIssuer => "wrong_issuer",
            TokenError::NotYetValid => "not_yet_valid",
            TokenError::MissingClaim => "missing_claim",
            TokenError::BadClaim => "bad_claim",
        }
    }

    /// Every reason, for the document.
    pub const ALL: [TokenError; 10] = [
        TokenError::Expired,
        TokenError::Malformed,
        TokenError::AlgorithmNotAllowed,
        TokenError::UnknownKey,
        TokenError::BadSignature,
        TokenError::WrongAudience,
        TokenError::WrongIssuer,
        TokenError::NotYetValid,
        TokenError::MissingClaim,
        TokenError::BadClaim,
    ];

    /// [`Self::of`], where a claim the library calls missing is present but not what it must be
    /// (`"exp": "tomorrow"`): that is `bad_claim`.
    fn of_claims(kind: &ErrorKind, token: &str) -> TokenError {
        match kind {
            ErrorKind::MissingRequiredClaim(name) if payload_has(token, name) => {
                TokenError::BadClaim
            }
            other => TokenError::of(other),
        }
    }

    fn of(kind: &ErrorKind) -> TokenError {
        match kind {
            ErrorKind::ExpiredSignature => TokenError::Expired,
            ErrorKind::InvalidSignature => TokenError::BadSignature,
            ErrorKind::InvalidAlgorithm | ErrorKind::InvalidAlgorithmName => {
                TokenError::AlgorithmNotAllowed
            }
            ErrorKind::InvalidAudience => TokenError::WrongAudience,
            ErrorKind::InvalidIssuer => TokenError::WrongIssuer,
            ErrorKind::ImmatureSignature => TokenError::NotYetValid,
            ErrorKind::MissingRequiredClaim(_) => TokenError::MissingClaim,
            _ => TokenError::Malformed,
        }
    }
}

/// One usable key: what it verifies, and the one algorithm it is for.
struct Key {
    id: Option<String>,
    algorithm: Algorithm,
    key: DecodingKey,
}

/// The keys of one reading of the key file.
struct KeySet {
    keys: Vec<Key>,
    /// A digest of the file's bytes when read: other bytes mean read it again. The content, not
    /// its modified time and length, which a rotation within the same second to a key of the
    /// same size leaves as they were.
    stamp: Stamp,
}

/// The checker of player tokens; cheap to share (`Arc`), the keys swap atomically on a reload.
pub struct PlayerTokens {
    config: PlayerTokenConfig,
    keys: ArcSwap<KeySet>,
}

impl std::fmt::Debug for PlayerTokens {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PlayerTokens")
            .field("issuer", &self.config.issuer)
            .field("keys", &self.keys.load().keys.len())
            .finish()
    }
}

impl PlayerTokens {
    /// Reads the key file; a file that cannot be used is a config error naming its field.
    pub fn from_config(config: &PlayerTokenConfig) -> Result<Arc<PlayerTokens>, ConfigError> {
        let (field, path) = key_file(config);
        let keys = read_keys(config).map_err(|message| ConfigError::Invalid { field, message })?;
        tracing::debug!(file = %path.display(), keys = keys.keys.len(), "player token keys read");
        Ok(Arc::new(PlayerTokens {
            config: config.clone(),
            keys: ArcSwap::from_pointee(keys),
        }))
    }

    /// Checks `token` and returns who it is for.
    pub fn verify(&self, token: &str) -> Result<PlayerClaims, TokenError> {
        if token.split('.').count() != 3 {
            return Err(TokenError::Malformed);
        }
        let header = jsonwebtoken::decode_header(token).map_err(|e| match e.kind() {
            // An `alg` the library does not know (`none` among them) fails the header's parse.
            ErrorKind::Json(_) if token_names_alg_none(token) => TokenError::AlgorithmNotAllowed,
            other => TokenError::of(other),
        })?;
        let keys = self.keys.load();
        let named: Vec<&Key> = keys
            .keys
            .iter()
            // A key without a `kid` (an HS256 secret, a JWKS key that names none) takes a token
            // whatever `kid` its issuer set; a key with one only the tokens that name it.
            .filter(|k| header.kid.is_none() || k.id.is_none() || k.id == header.kid)
            .collect();
        if named.is_empty() {
            return Err(TokenError::UnknownKey);
        }
        // Without a `kid`, each key of the token's algorithm is tried in turn.
        let mut refused = TokenError::AlgorithmNotAllowed;
        for key in named.into_iter().filter(|k| k.algorithm == header.alg) {
            match jsonwebtoken::decode::<Map<String, Value>>(
                token,
                &key.key,
                &self.validation(key.algorithm),
            ) {
                Ok(data) => return self.claims(&data.claims),
                Err(e) => refused = TokenError::of_claims(e.kind(), token),
            }
            if refused != TokenError::BadSignature {
                break;
            }
        }
        Err(refused)
    }

    fn validation(&self, algorithm: Algorithm) -> Validation {
        let mut validation = Validation::new(algorithm);
        validation.set_issuer(&[&self.config.issuer]);
        validation.set_audience(&[&self.config.audience]);
        validation.set_required_spec_claims(&["exp", "iss", "aud"]);
        validation.leeway = self.config.leeway.as_secs();
        validation.validate_nbf = true;
        validation
    }

    fn claims(&self, claims: &Map<String, Value>) -> Result<PlayerClaims, TokenError> {
        let text = |name: &str| -> Result<String, TokenError> {
            let value = claims.get(name).ok_or(TokenError::MissingClaim)?;
            let text = value.as_str().ok_or(TokenError::BadClaim)?;
            crate::ids::validate_token(text).map_err(|_| TokenError::BadClaim)?;
            Ok(text.to_owned())
        };
        Ok(PlayerClaims {
            account_id: text(&self.config.account_claim)?,
            device_id: match &self.config.device_claim {
                Some(name) => Some(text(name)?),
                None => None,
            },
            home_region: match &self.config.home_claim {
                Some(name) if claims.contains_key(name) => Some(text(name)?),
                _ => None,
            },
        })
    }

    /// Reads the key file again when it changed since the last reading. A file that cannot be
    /// used keeps the keys in force; the problem is logged once per change of the file.
    pub fn reload_if_changed(&self) {
        let (field, path) = key_file(&self.config);
        let Ok(bytes) = std::fs::read(path) else {
            return; // gone for a moment (a Secret's symlinks swapped): keep the keys in force
        };
        let stamp = stamp_of(&bytes);
        let current = self.keys.load();
        if stamp == current.stamp {
            return;
        }
        match keys_of(&self.config, &bytes) {
            Ok(keys) => {
                tracing::info!(file = %path.display(), keys = keys.keys.len(), "player token keys read again");
                self.keys.store(Arc::new(keys));
            }
            Err(message) => {
                tracing::warn!(
                    field,
                    file = %path.display(),
                    "{message}; the keys read before stay in force"
                );
                // Remember the stamp so that the same bad file is not reported every second.
                self.keys.store(Arc::new(KeySet {
                    keys: current.keys.iter().map(Key::clone_of).collect(),
                    stamp,
                }));
            }
        }
    }

    /// Runs [`Self::reload_if_changed`] every second until the task is dropped.
    pub fn spawn_reload(self: &Arc<Self>) -> tokio::task::JoinHandle<()> {
        let tokens = self.clone();
        tokio::spawn(async move {
            let mut every = tokio::time::interval(Duration::from_secs(1));
            every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                every.tick().await;
                tokens.reload_if_changed();
            }
        })
    }
}

impl Key {
    fn clone_of(&self) -> Key {
        Key {
            id: self.id.clone(),
            algorithm: self.algorithm,
            key: self.key.clone(),
        }
    }
}

/// The JSON object of a token's `index`th part (0 the header, 1 the payload), unchecked: only
/// to name a refusal precisely, never to accept anything.
fn part_of(token: &str, index: usize) -> Option<Map<String, Value>> {
    use base64::Engine as _;
    let part = token.split('.').nth(index)?;
    base64::engine::general_purpose::URL_SAFE_NO_PAD
        .decode(part)
        .ok()
        .and_then(|bytes| serde_json::from_slice::<Map<String, Value>>(&bytes).ok())
}

/// Whether the token's payload carries the claim `name` at all.
fn payload_has(token: &str, name: &str) -> bool {
    part_of(token, 1).is_some_and(|claims| claims.contains_key(name))
}

/// Whether the header says `"alg": "none"` (the library's parse fails on it first).
fn token_names_alg_none(token: &str) -> bool {
    part_of(token, 0)
        .and_then(|h| {
            h.get("alg")
                .and_then(Value::as_str)
                .map(str::to_ascii_lowercase)
        })
        .is_some_and(|alg| alg == "none")
}

fn key_file(config: &PlayerTokenConfig) -> (&'static str, &Path) {
    match (&config.hs256_secret_file, &config.jwks_file) {
        (Some(path), _) => ("auth.players.hs256_secret_file", path.as_path()),
        (None, Some(path)) => ("auth.players.jwks_file", path.as_path()),
        // `validate` makes sure one is set.
        (None, None) => ("auth.players", Path::new("")),
    }
}

type Stamp = [u8; 32];

fn stamp_of(bytes: &[u8]) -> Stamp {
    use sha2::Digest as _;
    sha2::Sha256::digest(bytes).into()
}

fn read_keys(config: &PlayerTokenConfig) -> Result<KeySet, String> {
    let (_, path) = key_file(config);
    let bytes = std::fs::read(path).map_err(|e| format!("cannot read {}: {e}", path.display()))?;
    keys_of(config, &bytes)
}

/// The keys in `bytes`, the key file's content.
fn keys_of(config: &PlayerTokenConfig, bytes: &[u8]) -> Result<KeySet, String> {
    let (_, path) = key_file(config);
    let stamp = stamp_of(bytes);
    let keys = if config.hs256_secret_file.is_some() {
        let secret = bytes.trim_ascii();
        if secret.len() < MIN_HS256_SECRET_BYTES {
            return Err(format!(
                "the HS256 secret in {} must be at least {MIN_HS256_SECRET_BYTES} bytes",
                path.display()
            ));
        }
        vec![Key {
            id: None,
            algorithm: Algorithm::HS256,
            key: DecodingKey::from_secret(secret),
        }]
    } else {
        jwks_keys(bytes).map_err(|e| format!("{}: {e}", path.display()))?
    };
    Ok(KeySet { keys, stamp })
}

/// The RS256, ES256 and EdDSA public keys of a JWKS document. Other keys (symmetric, other
/// curves or algorithms, encryption keys) are refused: a key file that holds one is likely not
/// the one meant.
fn jwks_keys(bytes: &[u8]) -> Result<Vec<Key>, String> {
    let set: JwkSet = serde_json::from_slice(bytes)
        .map_err(|e| format!("not a JWKS document ({{\"keys\": [...]}}): {e}"))?;
    if set.keys.is_empty() {
        return Err("the JWKS document holds no key".into());
    }
    set.keys
        .iter()
        .enumerate()
        .map(|(i, jwk)| {
            let name = jwk.common.key_id.as_deref().unwrap_or("without kid");
            let algorithm = algorithm_of(jwk).map_err(|e| format!("key {i} ({name}): {e}"))?;
            let key = DecodingKey::from_jwk(jwk)
                .map_err(|e| format!("key {i} ({name}) cannot be used: {e}"))?;
            Ok(Key {
                id: jwk.common.key_id.clone(),
                algorithm,
                key,
            })
        })
        .collect()
}

fn algorithm_of(jwk: &Jwk) -> Result<Algorithm, String> {
    let by_type = match &jwk.algorithm {
        AlgorithmParameters::RSA(_) => Algorithm::RS256,
        AlgorithmParameters::EllipticCurve(p) if p.curve == EllipticCurve::P256 => Algorithm::ES256,
        AlgorithmParameters::OctetKeyPair(p) if p.curve == EllipticCurve::Ed25519 => {
            Algorithm::EdDSA
        }
        _ => {
            return Err(
                "only RSA (RS256), P-256 (ES256) and Ed25519 (EdDSA) public keys are accepted"
                    .into(),
            );
        }
    };
    match jwk.common.key_algorithm {
        None => Ok(by_type),
        Some(alg) => {
            let named = match alg {
                KeyAlgorithm::RS256 => Some(Algorithm::RS256),
                KeyAlgorithm::ES256 => Some(Algorithm::ES256),
                KeyAlgorithm::EdDSA => Some(Algorithm::EdDSA),
                _ => None,
            };
            match named {
                Some(named) if named == by_type => Ok(named),
                _ => Err(format!(
                    "its `alg` ({alg:?}) is not RS256, ES256 or EdDSA for its key type"
                )),
            }
        }
    }
}
