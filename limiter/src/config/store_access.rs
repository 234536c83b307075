//! `store.tls` and the `auth` blocks: what a connection to Redis trusts, shows and logs in
//! with. Passwords come from a file or the environment, never from the config file or a URL.
//! `store.rs` reads the files into [`StoreSecrets`] once at start; the store builds its clients
//! from them.

use std::path::PathBuf;

use serde::Deserialize;

use super::cert_version;
use super::error::{ConfigError, invalid};

/// `store.tls`: what a `rediss://` connection trusts and shows.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TlsConfig {
    /// PEM bundle of the CAs that sign the servers' certificates; none: the system's trust store.
    pub ca_file: Option<PathBuf>,
    /// PEM client certificate, for servers that ask for one (`tls-auth-clients yes`).
    pub client_cert_file: Option<PathBuf>,
    /// PEM private key of `client_cert_file`.
    pub client_key_file: Option<PathBuf>,
}

/// `store.auth` (the data nodes) and `store.sentinel.auth` (the Sentinels).
#[derive(Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AuthConfig {
    /// An ACL user; none: the `default` user (`requirepass`).
    pub username: Option<String>,
    /// A file holding the password (a mounted Secret); a trailing newline is ignored.
    pub password_file: Option<PathBuf>,
    /// From the environment only (`SCREENLIMIT_REDIS_PASSWORD`, `SCREENLIMIT_SENTINEL_PASSWORD`);
    /// it wins over `password_file`.
    #[serde(skip)]
    pub password: Option<String>,
}

impl AuthConfig {
    /// `<PREFIX>_USERNAME` and `<PREFIX>_PASSWORD` from the environment, over the file.
    pub fn apply_env(&mut self, env: impl Fn(&str) -> Option<String>, prefix: &str) {
        if let Some(username) = env(&format!("{prefix}_USERNAME")) {
            self.username = Some(username);
        }
        if let Some(password) = env(&format!("{prefix}_PASSWORD")) {
            self.password = Some(password);
        }
    }
}

impl std::fmt::Debug for AuthConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AuthConfig")
            .field("username", &self.username)
            .field("password_file", &self.password_file)
            .field(
                "password",
                &self.password.as_ref().map(|_| "<from the environment>"),
            )
            .finish()
    }
}

/// A user and password, read.
#[derive(Clone, Default)]
pub struct RedisCredentials {
    pub username: Option<String>,
    pub password: Option<String>,
}

/// What the files `store.tls` and the `auth` blocks name hold, read and checked.
#[derive(Clone, Default)]
pub struct StoreSecrets {
    /// The CA bundle (PEM).
    pub ca: Option<Vec<u8>>,
    /// The client certificate and its key (PEM).
    pub client_identity: Option<(Vec<u8>, Vec<u8>)>,
    /// For the data nodes.
    pub data: RedisCredentials,
    /// For the Sentinels.
    pub sentinel: RedisCredentials,
}

pub(super) fn read(field: &'static str, path: &PathBuf) -> Result<Vec<u8>, ConfigError> {
    std::fs::read(path).map_err(|source| ConfigError::ReadFile {
        field,
        path: path.clone(),
        source,
    })
}

pub(super) fn pem(
    bytes: Vec<u8>,
    field: &'static str,
    label: &str,
) -> Result<Vec<u8>, ConfigError> {
    let text = String::from_utf8_lossy(&bytes);
    if text.contains("-----BEGIN ") && text.contains(&format!("{label}-----")) {
        Ok(bytes)
    } else {
        Err(invalid(field, format!("is not a PEM file with a {label}")))
    }
}

/// The client certificate (and its chain) as rustls takes it: X.509 v3 only. Said here, with the
/// file named, since rustls's own refusal blames the server.
pub(super) fn v3_only(bytes: Vec<u8>, path: &std::path::Path) -> Result<Vec<u8>, ConfigError> {
    let versions = cert_version::versions(&bytes);
    if let Some((at, Some(v))) = versions
        .iter()
        .enumerate()
        .find(|(_, v)| v.is_some_and(|v| v < 3))
    {
        let which = match at {
            0 => "is".to_owned(),
            n => format!("has as its certificate {}", n + 1),
        };
        return Err(invalid(
            "store.tls.client_cert_file",
            format!(
                "{} {which} an X.509 v{v} certificate (no extensions: what `openssl x509 -req` \
                 makes without `-extfile`); rustls takes only v3. Issue it again with \
                 extensions, e.g. `-extfile` with `extendedKeyUsage=clientAuth`",
                path.display()
            ),
        ));
    }
    Ok(bytes)
}

pub(super) fn credentials(
    auth: &AuthConfig,
    file_field: &'static str,
) -> Result<RedisCredentials, ConfigError> {
    let password = match (&auth.password, &auth.password_file) {
        (Some(password), _) => Some(password.clone()),
        (None, Some(path)) => {
            let text = String::from_utf8(read(file_field, path)?)
                .map_err(|_| invalid(file_field, "the password file is not UTF-8 text"))?;
            let password = text.trim_end_matches(['\n', '\r']).to_owned();
            if password.is_empty() {
                return Err(invalid(file_field, "the password file is empty"));
            }
            Some(password)
        }
        (None, None) => None,
    };
    Ok(RedisCredentials {
        username: auth.username.clone(),
        password,
    })
}
