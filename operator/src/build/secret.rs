//! Secrets the operator generates: created once with random bytes from a CSPRNG, never rotated
//! by reconcile (an existing Secret is left as it is; see `reconcile::ensure_secret`).

use std::collections::BTreeMap;

use base64::Engine;
use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use rand::RngCore;

use super::meta::meta;
use crate::names::{
    Component, LIMITER_PASSWORD_KEY, Names, REDIS_PASSWORD_KEY, SENTINEL_PASSWORD_KEY,
    STREAM_ID_SECRET_KEY,
};

/// Random bytes in a new stream id secret.
pub const SECRET_BYTES: usize = 32;
/// Random bytes in each generated Redis password (hex encoded: 64 characters, no character a
/// config file or a shell would need to quote).
pub const PASSWORD_BYTES: usize = 32;

fn random<const N: usize>() -> [u8; N] {
    let mut bytes = [0u8; N];
    // ThreadRng: a ChaCha CSPRNG seeded (and periodically reseeded) from the OS.
    rand::rng().fill_bytes(&mut bytes);
    bytes
}

/// A fresh random password: 64 lowercase hex characters.
pub fn random_password() -> String {
    random::<PASSWORD_BYTES>()
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

fn opaque(
    name: String,
    ns: &str,
    labels: BTreeMap<String, String>,
    owner: &OwnerReference,
    data: BTreeMap<String, String>,
) -> Secret {
    Secret {
        metadata: meta(name, ns, labels, owner),
        string_data: Some(data),
        type_: Some("Opaque".to_owned()),
        ..Secret::default()
    }
}

/// A fresh stream id Secret (`key` is printable: base64 of 32 random bytes).
pub fn stream_id_secret(names: &Names, ns: &str, owner: &OwnerReference) -> Secret {
    let value = base64::engine::general_purpose::STANDARD.encode(random::<SECRET_BYTES>());
    opaque(
        names.stream_id_secret(),
        ns,
        names.labels(Component::StreamIdSecret),
        owner,
        BTreeMap::from([(STREAM_ID_SECRET_KEY.to_owned(), value)]),
    )
}

/// A fresh managed Redis credentials Secret: one random password per key, all three always
/// (turning Sentinel on later finds its key already there).
pub fn redis_auth_secret(names: &Names, ns: &str, owner: &OwnerReference) -> Secret {
    opaque(
        names.redis_auth_secret(),
        ns,
        names.labels(Component::RedisAuth),
        owner,
        [
            REDIS_PASSWORD_KEY,
            LIMITER_PASSWORD_KEY,
            SENTINEL_PASSWORD_KEY,
        ]
        .into_iter()
        .map(|key| (key.to_owned(), random_password()))
        .collect(),
    )
}
