//! Who may talk to managed Redis and how: the generated credentials Secret (`<name>-redis-auth`)
//! handed to Redis, Sentinel and limiter pods, and the optional TLS Secret of `redis.tls`.
//!
//! Redis and Sentinel pods get the passwords as environment variables from the Secret (their
//! start scripts write them into their config in the pod's emptyDir; `REDISCLI_AUTH` lets the
//! probes and hooks authenticate); limiter pods get only the two keys they need as files. No
//! password is ever rendered into a ConfigMap, an argument or an annotation.

use k8s_openapi::api::core::v1::{
    EnvVar, EnvVarSource, KeyToPath, SecretKeySelector, SecretVolumeSource, Volume,
};
use screenlimit_limiter::store::redis::access::LIMITER_ACL_RULES;

use super::pod::env;
use crate::crd::{RedisMode, StreamLimiter};
use crate::names::{
    LIMITER_PASSWORD_KEY, LIMITER_REDIS_USER, Names, REDIS_PASSWORD_KEY, SENTINEL_PASSWORD_KEY,
};

/// Where the TLS Secret is mounted in Redis, Sentinel and limiter pods.
pub const TLS_DIR: &str = "/etc/screenlimit/redis-tls";
/// Where the limiter's Redis and Sentinel passwords are mounted in limiter pods.
pub const LIMITER_AUTH_DIR: &str = "/etc/screenlimit/redis-auth";

/// The Secret key holding the password for external Redis, when `redis.external.auth` is set.
pub fn external_auth(sl: &StreamLimiter) -> Option<&crate::crd::ExternalRedisAuth> {
    match sl.spec.redis.mode {
        RedisMode::External => sl.spec.redis.external.as_ref()?.auth.as_ref(),
        RedisMode::Managed => None,
    }
}

/// File name of the external Redis password in `LIMITER_AUTH_DIR`.
pub const EXTERNAL_PASSWORD_FILE: &str = "password";

/// Whether the operator runs Redis, and so generates and enforces its credentials.
pub fn managed(sl: &StreamLimiter) -> bool {
    sl.spec.redis.mode == RedisMode::Managed
}

/// The TLS Secret, when `redis.tls` is set.
pub fn tls_secret(sl: &StreamLimiter) -> Option<&str> {
    sl.spec.redis.tls.as_ref().map(|t| t.secret_name.as_str())
}

/// An environment variable from a key of a Secret (which must exist).
pub fn secret_env(name: &str, secret: &str, key: &str) -> EnvVar {
    EnvVar {
        name: name.to_owned(),
        value_from: Some(EnvVarSource {
            secret_key_ref: Some(SecretKeySelector {
                name: secret.to_owned(),
                key: key.to_owned(),
                optional: Some(false),
            }),
            ..EnvVarSource::default()
        }),
        ..EnvVar::default()
    }
}

/// What the Redis pod of a shard needs to set its users up: the default user's password (also
/// `REDISCLI_AUTH` for probes and hooks), the limiter user with its ACL and password, and with
/// Sentinel the Sentinels' password (the scripts ask them who is primary).
pub fn redis_env(names: &Names, sentinel: bool) -> Vec<EnvVar> {
    let secret = names.redis_auth_secret();
    let mut vars = vec![
        secret_env("REDIS_PASSWORD", &secret, REDIS_PASSWORD_KEY),
        secret_env("REDISCLI_AUTH", &secret, REDIS_PASSWORD_KEY),
        secret_env("LIMITER_PASSWORD", &secret, LIMITER_PASSWORD_KEY),
        env("LIMITER_USER", LIMITER_REDIS_USER),
        env("LIMITER_ACL", LIMITER_ACL_RULES),
    ];
    if sentinel {
        vars.push(secret_env(
            "SENTINEL_PASSWORD",
            &secret,
            SENTINEL_PASSWORD_KEY,
        ));
    }
    vars
}

/// What a Sentinel needs: its own password (`requirepass`, `sentinel sentinel-pass`, and as
/// `REDISCLI_AUTH` for probes) and the data nodes' default user's (`sentinel auth-pass`).
pub fn sentinel_env(names: &Names) -> Vec<EnvVar> {
    let secret = names.redis_auth_secret();
    vec![
        secret_env("SENTINEL_PASSWORD", &secret, SENTINEL_PASSWORD_KEY),
        secret_env("REDISCLI_AUTH", &secret, SENTINEL_PASSWORD_KEY),
        secret_env("REDIS_PASSWORD", &secret, REDIS_PASSWORD_KEY),
    ]
}

/// `TLS_DIR` for the start scripts, when the pods serve TLS.
pub fn tls_env(sl: &StreamLimiter) -> Option<EnvVar> {
    tls_secret(sl).map(|_| env("TLS_DIR", TLS_DIR))
}

/// A Secret volume with `keys` as files of the same names; `mode` as `defaultMode`.
fn secret_keys_volume(volume: &str, secret: &str, keys: &[&str], mode: i32) -> Volume {
    Volume {
        name: volume.to_owned(),
        secret: Some(SecretVolumeSource {
            secret_name: Some(secret.to_owned()),
            items: Some(
                keys.iter()
                    .map(|k| KeyToPath {
                        key: (*k).to_owned(),
                        path: (*k).to_owned(),
                        ..KeyToPath::default()
                    })
                    .collect(),
            ),
            default_mode: Some(mode),
            ..SecretVolumeSource::default()
        }),
        ..Volume::default()
    }
}

/// Volume `redis-tls` for Redis and Sentinel pods: the certificate, its key and the CA, readable
/// by the pod's group (`fsGroup`) only.
pub fn server_tls_volume(secret: &str) -> Volume {
    secret_keys_volume(
        "redis-tls",
        secret,
        &["tls.crt", "tls.key", "ca.crt"],
        0o440,
    )
}

/// Volume `redis-tls` for limiter pods: only the CA it trusts.
pub fn limiter_tls_volume(secret: &str) -> Volume {
    secret_keys_volume("redis-tls", secret, &["ca.crt"], 0o440)
}

/// Volume `redis-auth` for limiter pods: its own password and, with Sentinel, the Sentinels'.
pub fn limiter_auth_volume(names: &Names, sentinel: bool) -> Volume {
    let keys: &[&str] = if sentinel {
        &[LIMITER_PASSWORD_KEY, SENTINEL_PASSWORD_KEY]
    } else {
        &[LIMITER_PASSWORD_KEY]
    };
    secret_keys_volume("redis-auth", &names.redis_auth_secret(), keys, 0o440)
}

/// `redis-cli` arguments that reach a local server as it listens (TLS or not).
pub fn cli_tls_args(sl: &StreamLimiter) -> Vec<String> {
    match tls_secret(sl) {
        Some(_) => vec![
            "--tls".to_owned(),
            "--cacert".to_owned(),
            format!("{TLS_DIR}/ca.crt"),
        ],
        None => Vec::new(),
    }
}
