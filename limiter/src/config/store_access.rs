//! `store.tls` and the `auth` blocks: what a connection to Redis trusts, shows and logs in
//! with. Passwords come from a file or the environment, never from the config file or a URL.
//! [`read_secrets`] reads the files once at start (the store builds its clients from them).

use std::path::PathBuf;

use redis::{ConnectionAddr, IntoConnectionInfo};
use serde::Deserialize;

use super::{ConfigError, StoreConfig, cert_version, invalid};

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

fn read(field: &'static str, path: &PathBuf) -> Result<Vec<u8>, ConfigError> {
    std::fs::read(path).map_err(|source| ConfigError::ReadFile {
        field,
        path: path.clone(),
        source,
    })
}

/// Checks what can be checked without reading a file: addresses carry no password, the TLS
/// settings go together and serve a `rediss://` address, user names are plain.
pub fn validate(store: &StoreConfig) -> Result<(), ConfigError> {
    let sentinel_addresses = store.sentinel.iter().flat_map(|s| &s.addresses);
    let cluster_nodes = store.cluster.iter().flat_map(|c| &c.nodes);
    let addresses = store
        .redis_shards
        .iter()
        .map(|url| ("store.redis_shards", url))
        .chain(sentinel_addresses.map(|url| ("store.sentinel.addresses", url)))
        .chain(cluster_nodes.map(|url| ("store.cluster.nodes", url)));
    let mut any_tls = false;
    for (field, url) in addresses {
        let info = url
            .as_str()
            .into_connection_info()
            .map_err(|e| invalid(field, format!("{}: {e}", without_userinfo(url))))?;
        if info.redis_settings().password().is_some() || info.redis_settings().username().is_some()
        {
            return Err(invalid(
                field,
                format!(
                    "{} carries credentials; name the user in store.auth (store.sentinel.auth for \
                     Sentinels) and give the password by file or environment, never in the config",
                    without_userinfo(url)
                ),
            ));
        }
        any_tls |= matches!(info.addr(), ConnectionAddr::TcpTls { .. });
    }
    let tls = &store.tls;
    match (&tls.client_cert_file, &tls.client_key_file) {
        (Some(_), None) => {
            return Err(invalid(
                "store.tls.client_key_file",
                "client_cert_file needs its private key",
            ));
        }
        (None, Some(_)) => {
            return Err(invalid(
                "store.tls.client_cert_file",
                "client_key_file needs its certificate",
            ));
        }
        _ => {}
    }
    let tls_named = tls.ca_file.is_some() || tls.client_cert_file.is_some();
    if tls_named && !any_tls {
        return Err(invalid(
            "store.tls",
            "is set but no address is rediss://: TLS is used for rediss:// addresses only",
        ));
    }
    let sentinel_auth = store
        .sentinel
        .iter()
        .map(|s| ("store.sentinel.auth.username", &s.auth));
    for (field, auth) in std::iter::once(("store.auth.username", &store.auth)).chain(sentinel_auth)
    {
        if let Some(name) = &auth.username
            && (name.is_empty() || name.len() > 128 || name.chars().any(|c| c.is_whitespace()))
        {
            return Err(invalid(field, "must be 1-128 characters without spaces"));
        }
    }
    Ok(())
}

/// The URL with any `user:password@` cut out, for messages.
fn without_userinfo(url: &str) -> String {
    match (url.find("://"), url.rfind('@')) {
        (Some(scheme_end), Some(at)) if at > scheme_end => {
            format!("{}{}", &url[..scheme_end + 3], &url[at + 1..])
        }
        _ => url.to_owned(),
    }
}

/// Reads the files `store.tls` and the `auth` blocks name.
pub fn read_secrets(store: &StoreConfig) -> Result<StoreSecrets, ConfigError> {
    let tls = &store.tls;
    let ca = match &tls.ca_file {
        Some(path) => Some(pem(
            read("store.tls.ca_file", path)?,
            "store.tls.ca_file",
            "CERTIFICATE",
        )?),
        None => None,
    };
    let client_identity = match (&tls.client_cert_file, &tls.client_key_file) {
        (Some(cert), Some(key)) => Some((
            v3_only(
                pem(
                    read("store.tls.client_cert_file", cert)?,
                    "store.tls.client_cert_file",
                    "CERTIFICATE",
                )?,
                cert,
            )?,
            pem(
                read("store.tls.client_key_file", key)?,
                "store.tls.client_key_file",
                "PRIVATE KEY",
            )?,
        )),
        _ => None,
    };
    let sentinel = match &store.sentinel {
        Some(s) => credentials(&s.auth, "store.sentinel.auth.password_file")?,
        None => RedisCredentials::default(),
    };
    Ok(StoreSecrets {
        ca,
        client_identity,
        data: credentials(&store.auth, "store.auth.password_file")?,
        sentinel,
    })
}

fn pem(bytes: Vec<u8>, field: &'static str, label: &str) -> Result<Vec<u8>, ConfigError> {
    let text = String::from_utf8_lossy(&bytes);
    if text.contains("-----BEGIN ") && text.contains(&format!("{label}-----")) {
        Ok(bytes)
    } else {
        Err(invalid(field, format!("is not a PEM file with a {label}")))
    }
}

/// The client certificate (and its chain) as rustls takes it: X.509 v3 only. Said here, with the
/// file named, since rustls's own refusal blames the server.
fn v3_only(bytes: Vec<u8>, path: &std::path::Path) -> Result<Vec<u8>, ConfigError> {
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

fn credentials(
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
