//! How the limiter reaches Redis beyond an address: TLS for `rediss://` addresses (a CA bundle,
//! an optional client certificate; server names always checked) and credentials (a Redis 6+ ACL
//! user, or the default user's password) for the data nodes and, separately, for Sentinel.
//! Passwords come from a file or the environment, never from the config file or a URL.
//!
//! [`Access::resolve`] takes the files `config::store_access` read; `RedisStore::check_access` then tries every
//! shard once, and [`judge`] turns what it met into a config error (a wrong password, a missing
//! permission, an unknown CA: the start stops with the field named) or an outage (the limiter
//! serves under its failure policy).

use std::time::Duration;

use redis::{
    ClientTlsConfig, ConnectionAddr, ErrorKind, IntoConnectionInfo, RedisError, ServerErrorKind,
    TlsCertificates,
};

use crate::config::error::{ConfigError, invalid};
use crate::config::store::{StoreConfig, read_secrets};
use crate::config::store_access::{RedisCredentials, StoreSecrets};

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

/// Everything a connection needs beyond its address, read once at start.
#[derive(Clone, Default)]
pub struct Access {
    secrets: StoreSecrets,
    /// `store.allow_eviction`: a shard whose `maxmemory-policy` evicts keys is accepted (see
    /// `health::first_look`).
    pub allow_eviction: bool,
}

impl std::fmt::Debug for Access {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Access")
            .field("ca", &self.secrets.ca.is_some())
            .field(
                "client_certificate",
                &self.secrets.client_identity.is_some(),
            )
            .field("data_user", &self.secrets.data.username)
            .field("sentinel_user", &self.secrets.sentinel.username)
            .finish_non_exhaustive()
    }
}

impl Access {
    /// Reads the files `store.tls` and the `auth` blocks name.
    pub fn resolve(store: &StoreConfig) -> Result<Access, ConfigError> {
        Ok(Access {
            secrets: read_secrets(store)?,
            allow_eviction: store.allow_eviction,
        })
    }

    /// A client for a data node at `url`.
    pub fn data_client(&self, url: &str) -> Result<redis::Client, String> {
        let info = url.into_connection_info().map_err(|e| e.to_string())?;
        self.client(info, &self.secrets.data)
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
        self.client(info, &self.secrets.data)
    }

    /// A client for a Sentinel at `url`.
    pub fn sentinel_client(&self, url: &str) -> Result<redis::Client, String> {
        let info = url.into_connection_info().map_err(|e| e.to_string())?;
        self.client(info, &self.secrets.sentinel)
    }

    fn client(
        &self,
        info: redis::ConnectionInfo,
        credentials: &RedisCredentials,
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
        let certificates =
            TlsCertificates {
                client_tls: self.secrets.client_identity.as_ref().map(|(cert, key)| {
                    ClientTlsConfig {
                        client_cert: cert.clone(),
                        client_key: key.clone(),
                    }
                }),
                root_cert: self.secrets.ca.clone(),
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
