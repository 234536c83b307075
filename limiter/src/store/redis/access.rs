//! How the limiter reaches Redis beyond an address: TLS for `rediss://` addresses (a CA bundle,
//! an optional client certificate; server names always checked) and credentials (a Redis 6+ ACL
//! user, or the default user's password) for the data nodes and, separately, for Sentinel.
//! Passwords come from a file or the environment, never from the config file or a URL.
//!
//! [`Access::resolve`] reads the files once at start; `RedisStore::check_access` then tries every
//! shard once, and [`judge`] turns what it met into a config error (a wrong password, a missing
//! permission, an unknown CA: the start stops with the field named) or an outage (the limiter
//! serves under its failure policy).

use std::path::PathBuf;
use std::time::Duration;

use redis::{
    ClientTlsConfig, ConnectionAddr, ErrorKind, IntoConnectionInfo, RedisError, ServerErrorKind,
    TlsCertificates,
};
use serde::Deserialize;

use crate::config::{ConfigError, StoreConfig};

/// The smallest ACL a data node needs to grant the limiter's user (README, "Redis ACL for the
/// limiter"): its own keys (`sl:*`), no channels, and only the commands it and its scripts run.
pub const LIMITER_ACL_RULES: &str = "on resetkeys ~sl:* resetchannels -@all +ping +evalsha \
     +script|load +role +dbsize +info +cluster|shards +asking +get +getex +set +setrange +incr +del +pexpire +pexpiretime +time +lpush \
     +ltrim +lrange";

/// One text for both rule sets below (`concat!` takes only literals).
macro_rules! first_module_acl_rules {
    () => {
        "+sl.version +sl.acquire +sl.heartbeat +sl.release +sl.list +sl.force_stop +sl.set_override"
    };
}

/// What a data node with the screenlimit module loaded grants beside [`LIMITER_ACL_RULES`]: the
/// module's commands the limiter sends, by name (Redis 7.0 lets no module add an ACL category).
/// Kept apart because a server without the module refuses a rule that names them. Without
/// them the limiter stays on the Lua scripts there (and says why, once).
pub const LIMITER_MODULE_ACL_RULES: &str = concat!(first_module_acl_rules!(), " +sl.renew");

/// The module's commands every release of it has had (all but `SL.RENEW`): what a Redis pod
/// grants when the image that gave it the module wrote no rules file beside it
/// (`module_file.rs`). The limiter then finds `SL.RENEW` not granted and sends each renewal as
/// its own `GETEX`.
pub const LIMITER_MODULE_FIRST_ACL_RULES: &str = first_module_acl_rules!();

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
struct Credentials {
    username: Option<String>,
    password: Option<String>,
}

/// Everything a connection needs beyond its address, read once at start.
#[derive(Clone, Default)]
pub struct Access {
    ca: Option<Vec<u8>>,
    client_identity: Option<(Vec<u8>, Vec<u8>)>,
    data: Credentials,
    sentinel: Credentials,
    /// `store.allow_eviction`: a shard whose `maxmemory-policy` evicts keys is accepted (see
    /// `health::first_look`).
    pub allow_eviction: bool,
}

impl std::fmt::Debug for Access {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Access")
            .field("ca", &self.ca.is_some())
            .field("client_certificate", &self.client_identity.is_some())
            .field("data_user", &self.data.username)
            .field("sentinel_user", &self.sentinel.username)
            .finish_non_exhaustive()
    }
}

fn invalid(field: &'static str, message: impl Into<String>) -> ConfigError {
    ConfigError::Invalid {
        field,
        message: message.into(),
    }
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

impl Access {
    /// Reads the files `store.tls` and the `auth` blocks name.
    pub fn resolve(store: &StoreConfig) -> Result<Access, ConfigError> {
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
            None => Credentials::default(),
        };
        Ok(Access {
            ca,
            client_identity,
            data: credentials(&store.auth, "store.auth.password_file")?,
            sentinel,
            allow_eviction: store.allow_eviction,
        })
    }

    /// A client for a data node at `url`.
    pub fn data_client(&self, url: &str) -> Result<redis::Client, String> {
        let info = url.into_connection_info().map_err(|e| e.to_string())?;
        self.client(info, &self.data)
    }

    /// A client for the data node a Sentinel named, over TLS when the Sentinels are.
    pub fn data_client_at(
        &self,
        host: &str,
        port: u16,
        tls: bool,
    ) -> Result<redis::Client, String> {
        let addr = if tls {
            ConnectionAddr::TcpTls {
                host: host.to_owned(),
                port,
                insecure: false,
                tls_params: None,
            }
        } else {
            ConnectionAddr::Tcp(host.to_owned(), port)
        };
        let info = addr.into_connection_info().map_err(|e| e.to_string())?;
        self.client(info, &self.data)
    }

    /// A client for a Sentinel at `url`.
    pub fn sentinel_client(&self, url: &str) -> Result<redis::Client, String> {
        let info = url.into_connection_info().map_err(|e| e.to_string())?;
        self.client(info, &self.sentinel)
    }

    fn client(
        &self,
        info: redis::ConnectionInfo,
        credentials: &Credentials,
    ) -> Result<redis::Client, String> {
        // No CLIENT SETINFO after connecting: one command fewer for the ACL to allow.
        let mut settings = info.redis_settings().clone().set_skip_set_lib_name();
        if let Some(user) = &credentials.username {
            settings = settings.set_username(user);
        }
        if let Some(password) = &credentials.password {
            settings = settings.set_password(password);
        }
        let tls = matches!(info.addr(), ConnectionAddr::TcpTls { .. });
        let info = info.set_redis_settings(settings);
        if !tls {
            return redis::Client::open(info).map_err(|e| e.to_string());
        }
        install_crypto_provider();
        let certificates = TlsCertificates {
            client_tls: self
                .client_identity
                .as_ref()
                .map(|(cert, key)| ClientTlsConfig {
                    client_cert: cert.clone(),
                    client_key: key.clone(),
                }),
            root_cert: self.ca.clone(),
        };
        redis::Client::build_with_tls(info, certificates).map_err(|e| e.to_string())
    }
}

/// rustls needs a process-wide provider; ring is the only one built in.
fn install_crypto_provider() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        let _ = rustls::crypto::ring::default_provider().install_default();
    });
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
    let versions = super::cert_version::versions(&bytes);
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

fn credentials(auth: &AuthConfig, file_field: &'static str) -> Result<Credentials, ConfigError> {
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
    Ok(Credentials {
        username: auth.username.clone(),
        password,
    })
}

/// What a first contact with a Redis says about the config.
pub enum Contact {
    /// It answered as the limiter needs.
    Fine,
    /// Unreachable or slow: an outage, not a config mistake; the failure policy covers it.
    Down(String),
}

/// Turns a failed first contact into a config error when the config is at fault (credentials,
/// permissions, TLS), or [`Contact::Down`] when the server is only out of reach.
pub fn judge(
    error: &RedisError,
    at: &str,
    auth_field: &'static str,
) -> Result<Contact, ConfigError> {
    let code = error.code().unwrap_or_default();
    if error.kind() == ErrorKind::AuthenticationFailed || code == "WRONGPASS" {
        return Err(invalid(
            auth_field,
            format!(
                "{at} refused the credentials (WRONGPASS): check the user name and the password \
                 (its file, or the environment variable that overrides it)"
            ),
        ));
    }
    if code == "NOAUTH" {
        return Err(invalid(
            auth_field,
            format!(
                "{at} requires a password (NOAUTH): set its password file or environment variable"
            ),
        ));
    }
    if error.kind() == ErrorKind::Server(ServerErrorKind::NoPerm) || code == "NOPERM" {
        return Err(invalid(
            auth_field,
            format!(
                "{at} does not let this user run what the limiter needs (NOPERM): {}; grant the \
                 ACL in the README (\"Redis ACL for the limiter\")",
                error.detail().unwrap_or("no detail")
            ),
        ));
    }
    if error.is_connection_refusal() || error.is_timeout() {
        return Ok(Contact::Down(error.to_string()));
    }
    let text = error.to_string();
    let lowered = text.to_ascii_lowercase();
    if ["certificate", "tls", "handshake", "peer", "ssl"]
        .iter()
        .any(|word| lowered.contains(word))
    {
        return Err(invalid(
            "store.tls",
            format!(
                "TLS to {at} failed: {text}; check store.tls.ca_file (the CA that signed the \
                 server's certificate), the client certificate, and that the address's host name \
                 is in the server's certificate"
            ),
        ));
    }
    Ok(Contact::Down(text))
}

/// How long a first contact may take before the server counts as down.
pub fn contact_deadline(store_timeout: Duration) -> Duration {
    store_timeout.max(Duration::from_secs(2))
}
