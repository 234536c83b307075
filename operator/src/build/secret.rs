//! The stream id Secret: created once with random bytes, never rotated by reconcile.

use std::collections::BTreeMap;

use base64::Engine;
use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use rand::RngCore;

use super::common::meta;
use crate::names::{Component, Names, STREAM_ID_SECRET_KEY};

/// Random bytes in a new stream id secret.
pub const SECRET_BYTES: usize = 32;

/// A fresh stream id Secret (`key` is printable: base64 of 32 random bytes).
pub fn stream_id_secret(names: &Names, ns: &str, owner: &OwnerReference) -> Secret {
    let mut bytes = [0u8; SECRET_BYTES];
    rand::rng().fill_bytes(&mut bytes);
    let value = base64::engine::general_purpose::STANDARD.encode(bytes);
    Secret {
        metadata: meta(
            names.stream_id_secret(),
            ns,
            names.labels(Component::StreamIdSecret),
            owner,
        ),
        string_data: Some(BTreeMap::from([(STREAM_ID_SECRET_KEY.to_owned(), value)])),
        type_: Some("Opaque".to_owned()),
        ..Secret::default()
    }
}
