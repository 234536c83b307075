//! `spec.regions`: this install's region among several (one `StreamLimiter` per cluster), and its
//! peers, as the limiter's `regions` takes them. The tokens and CAs are Secret keys, mounted
//! into the limiter pods; a change rolls them (the limiter reads `regions` at start only).

use kube::KubeSchema;
use serde::{Deserialize, Serialize};

use super::shared::{SecretKeyRef, default_one};

/// Most peers one region may name (the limiter's own bound).
pub const MAX_REGION_PEERS: usize = 16;

/// This region and its peers (the limiter's `regions`). Every region names the same regions
/// with the same weights: each its own as `name`/`weight`, the others as `peers`.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
#[x_kube(
    validation = Rule::new("self.peers.all(p, p.name != self.name)").message("no peer may carry this region's own name (regions.name)").field_path(".peers").reason(Reason::FieldValueInvalid),
    validation = Rule::new("self.weight > 0 || self.peers.exists(p, p.weight > 0)").message("every region weighs 0, so no account would have a home; give one region a weight above 0").field_path(".weight").reason(Reason::FieldValueInvalid)
)]
#[serde(rename_all = "camelCase")]
pub struct RegionsSpec {
    /// This region's name, as its peers name it: letters, digits, `.`, `_`, `:` or `-`, at
    /// most 64.
    #[schemars(length(min = 1, max = 64), regex(pattern = r"^[A-Za-z0-9._:-]+$"))]
    pub name: String,
    /// This region's share of the accounts' homes (0 to 1000; 0: home of none, e.g. while it is
    /// evacuated).
    #[serde(default = "default_one")]
    #[schemars(range(min = 0, max = 1000))]
    pub weight: i32,
    /// A key of a Secret holding the token peers present when they call this region (at least
    /// 16 printable ASCII characters, no spaces); each peer's own `peers[].tokenSecret` holds
    /// the same token. It opens the region routes only.
    pub token_secret: SecretKeyRef,
    /// Deadline of one call to a peer, connection included (10 to 10000 milliseconds); a peer
    /// that does not answer in time is a store error, decided by the failure policy.
    #[serde(default = "default_timeout_millis")]
    #[schemars(range(min = 10, max = 10000))]
    pub timeout_millis: i32,
    /// How long a roaming stream's heartbeat waits for others to the same home region, so that
    /// they travel as one call (0 to 1000 milliseconds).
    #[serde(default = "default_heartbeat_window_millis")]
    #[schemars(range(min = 0, max = 1000))]
    pub heartbeat_window_millis: i32,
    /// The other regions (1 to 16), names unique and none this region's `name`.
    #[schemars(length(min = 1, max = 16))]
    #[x_kube(
        validation = Rule::new("self.all(p, self.filter(q, q.name == p.name).size() == 1)").message("region peer names must be unique").reason(Reason::FieldValueDuplicate),
        merge_strategy = ListMerge::Map(vec!["name".into()])
    )]
    pub peers: Vec<RegionPeerSpec>,
}

/// Another region, as this one calls it.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct RegionPeerSpec {
    /// The peer's name (its own `regions.name`): letters, digits, `.`, `_`, `:` or `-`, at
    /// most 64.
    #[schemars(length(min = 1, max = 64), regex(pattern = r"^[A-Za-z0-9._:-]+$"))]
    pub name: String,
    /// The peer's limiter Service as this region reaches it (through a private link or a
    /// gateway that lets `/v1/regions/` through): `http://` or `https://`, a host, no
    /// credentials, query or fragment (a path prefix is kept).
    #[schemars(
        length(min = 1, max = 2048),
        regex(pattern = r"^https?://[^/?#@:\s][^/?#@\s]*(/[^?#\s]*)?$")
    )]
    pub url: String,
    /// The peer's share of the accounts' homes (0 to 1000), as the peer gives it itself.
    #[serde(default = "default_one")]
    #[schemars(range(min = 0, max = 1000))]
    pub weight: i32,
    /// A key of a Secret holding the token this region presents to the peer (the peer's own
    /// `regions.tokenSecret`).
    pub token_secret: SecretKeyRef,
    /// A key of a Secret holding PEM certificates that sign the peer's certificate (an
    /// `https://` peer with a private CA), trusted beside the system's roots.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ca_secret: Option<SecretKeyRef>,
}

/// The limiter's own default (`regions.timeout`, 1 s).
fn default_timeout_millis() -> i32 {
    1_000
}
/// The limiter's own default (`regions.heartbeat_window`, 200 ms).
fn default_heartbeat_window_millis() -> i32 {
    200
}
