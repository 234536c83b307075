//! `spec.regions` in the limiter pod: the token and CA Secret keys it names, each mounted
//! read-only from a volume of its own that holds only that key, and the limiter's `regions`
//! block naming those files.
//!
//! Paths are made from a peer's position in `peers`, never from its name: a region name may
//! hold `:` (which a mount path may not) or be `..`, and a volume name must be a DNS label.

use k8s_openapi::api::core::v1::{Volume, VolumeMount};
use serde::Serialize;

use super::pod::{mount, secret_file_volume};
use crate::crd::{RegionsSpec, StreamLimiter};

/// Where the region Secrets are mounted, one directory per Secret key.
pub const REGIONS_DIR: &str = "/etc/screenlimit/regions";
/// The file name of a token in its directory.
pub const TOKEN_FILE: &str = "token";
/// The file name of a peer's CA in its directory.
pub const CA_FILE: &str = "ca.crt";

/// The directory of the inbound token (what peers present to this region).
pub fn inbound_token_dir() -> String {
    format!("{REGIONS_DIR}/inbound")
}

/// The directory of the token this region presents to peer `index` (its place in `peers`).
pub fn peer_token_dir(index: usize) -> String {
    format!("{REGIONS_DIR}/peer-{index}-token")
}

/// The directory of the CA that signs peer `index`'s certificate.
pub fn peer_ca_dir(index: usize) -> String {
    format!("{REGIONS_DIR}/peer-{index}-ca")
}

/// The limiter's `regions`, with the files the Secrets are mounted as. The homes (weights,
/// evacuations, secondaries) are the limiter's live part; `clear_homes` takes them out.
#[derive(Serialize, Debug)]
pub struct RegionsBlock<'a> {
    name: &'a str,
    weight: i32,
    /// Written only when true (the limiter's default is false), so that a spec which never
    /// evacuated renders the file it did before.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    evacuated: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    secondary: Option<&'a str>,
    token_file: String,
    timeout: String,
    heartbeat_window: String,
    peers: Vec<PeerBlock<'a>>,
    /// Read at start only, unlike the homes: it stays in what rolls the pods. Left out when
    /// empty (the hash alone), so that a spec without it renders the file it did before.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    home_sources: Vec<&'static str>,
}

#[derive(Serialize, Debug)]
struct PeerBlock<'a> {
    name: &'a str,
    url: &'a str,
    weight: i32,
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    evacuated: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    secondary: Option<&'a str>,
    token_file: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    ca_file: Option<String>,
}

/// The `regions` block of the limiter config, when the spec names regions.
pub fn config(sl: &StreamLimiter) -> Option<RegionsBlock<'_>> {
    let regions = sl.spec.regions.as_ref()?;
    Some(RegionsBlock {
        name: &regions.name,
        weight: regions.weight,
        evacuated: regions.evacuated,
        secondary: regions.secondary.as_deref(),
        token_file: format!("{}/{TOKEN_FILE}", inbound_token_dir()),
        timeout: format!("{}ms", regions.timeout_millis),
        heartbeat_window: format!("{}ms", regions.heartbeat_window_millis),
        peers: regions
            .peers
            .iter()
            .enumerate()
            .map(|(i, peer)| PeerBlock {
                name: &peer.name,
                url: &peer.url,
                weight: peer.weight,
                evacuated: peer.evacuated,
                secondary: peer.secondary.as_deref(),
                token_file: format!("{}/{TOKEN_FILE}", peer_token_dir(i)),
                ca_file: peer
                    .ca_secret
                    .as_ref()
                    .map(|_| format!("{}/{CA_FILE}", peer_ca_dir(i))),
            })
            .collect(),
        home_sources: (regions.home_sources.iter())
            .map(|s| s.in_limiter().name())
            .collect(),
    })
}

/// One region's part in the homes (weight, evacuation, secondary) under its name: what the
/// limiter applies live from the mounted file.
#[derive(Serialize, Debug)]
pub struct Home<'a> {
    name: &'a str,
    weight: i32,
    evacuated: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    secondary: Option<&'a str>,
}

impl<'a> RegionsBlock<'a> {
    /// The homes of this region, then of each peer in `peers` order.
    pub fn homes(&self) -> Vec<Home<'a>> {
        let home = Home {
            name: self.name,
            weight: self.weight,
            evacuated: self.evacuated,
            secondary: self.secondary,
        };
        std::iter::once(home)
            .chain(self.peers.iter().map(|p| Home {
                name: p.name,
                weight: p.weight,
                evacuated: p.evacuated,
                secondary: p.secondary,
            }))
            .collect()
    }

    /// The block without the homes (each weight 0, none evacuated, no secondary): what of it
    /// rolls the pods.
    pub fn clear_homes(&mut self) {
        self.weight = 0;
        self.evacuated = false;
        self.secondary = None;
        for peer in &mut self.peers {
            peer.weight = 0;
            peer.evacuated = false;
            peer.secondary = None;
        }
    }
}

/// The volumes and mounts of the region Secrets: the inbound token, then each peer's token and
/// CA in `peers` order. Nothing without `regions`.
pub fn volumes_and_mounts(sl: &StreamLimiter) -> (Vec<Volume>, Vec<VolumeMount>) {
    let mut volumes = Vec::new();
    let mut mounts = Vec::new();
    let Some(regions) = &sl.spec.regions else {
        return (volumes, mounts);
    };
    let mut add = |volume: String, secret: &crate::crd::SecretKeyRef, file: &str, dir: String| {
        volumes.push(secret_file_volume(&volume, &secret.name, &secret.key, file));
        mounts.push(mount(&volume, &dir));
    };
    add(
        "region-token".to_owned(),
        &regions.token_secret,
        TOKEN_FILE,
        inbound_token_dir(),
    );
    for (i, peer) in regions.peers.iter().enumerate() {
        add(
            format!("region-peer-{i}-token"),
            &peer.token_secret,
            TOKEN_FILE,
            peer_token_dir(i),
        );
        if let Some(ca) = &peer.ca_secret {
            add(format!("region-peer-{i}-ca"), ca, CA_FILE, peer_ca_dir(i));
        }
    }
    (volumes, mounts)
}

/// What of the region Secrets rolls the limiter pods when it changes: each reference's Secret
/// name and key (their content is read at start, and cannot be seen from here).
pub fn hash_inputs(regions: &RegionsSpec) -> Vec<String> {
    let mut inputs = vec![format!(
        "region-token:{}/{}",
        regions.token_secret.name, regions.token_secret.key
    )];
    for (i, peer) in regions.peers.iter().enumerate() {
        let token = &peer.token_secret;
        inputs.push(format!(
            "region-peer-{i}-token:{}/{}",
            token.name, token.key
        ));
        if let Some(ca) = &peer.ca_secret {
            inputs.push(format!("region-peer-{i}-ca:{}/{}", ca.name, ca.key));
        }
    }
    inputs
}
