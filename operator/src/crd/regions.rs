//! `spec.regions`: this install's region among several (one `StreamLimiter` per cluster), and its
//! peers, as the limiter's `regions` takes them. The tokens and CAs are Secret keys, mounted
//! into the limiter pods; a change rolls them (the limiter reads them at start only), but for
//! the homes (weights, evacuations, secondaries), which the limiter applies live.

use kube::KubeSchema;
use serde::{Deserialize, Serialize};

use super::shared::{SecretKeyRef, default_one};

/// Most peers one region may name (the limiter's own bound).
pub const MAX_REGION_PEERS: usize = 16;

/// This region and its peers (the limiter's `regions`). Every region names the same regions
/// with the same weights, evacuations and secondaries: each its own as `name`/`weight`/...,
/// the others as `peers` (how they pick the homes: `evacuated`).
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
#[x_kube(
    validation = Rule::new("self.peers.all(p, p.name != self.name)").message("no peer may carry this region's own name (regions.name)").field_path(".peers").reason(Reason::FieldValueInvalid),
    validation = Rule::new("self.weight > 0 || self.peers.exists(p, p.weight > 0)").message("every region weighs 0, so no account would have a home; give one region a weight above 0").field_path(".weight").reason(Reason::FieldValueInvalid),
    // Kept apart from the rule above (which it leaves to say its own when every weight is 0).
    validation = Rule::new("(self.weight == 0 && self.peers.all(p, p.weight == 0)) || (self.weight > 0 && !self.evacuated) || self.peers.exists(p, p.weight > 0 && !p.evacuated)").message("every region of weight above 0 is evacuated, so no account would have a home; keep one region of weight above 0 not evacuated").field_path(".evacuated").reason(Reason::FieldValueInvalid),
    validation = Rule::new("!has(self.secondary) || self.peers.exists(p, p.name == self.secondary)").message("regions.secondary must name one of the peers (another region than this one)").field_path(".secondary").reason(Reason::FieldValueInvalid),
    validation = Rule::new("self.peers.all(p, !has(p.secondary) || p.secondary == self.name || self.peers.exists(q, q.name == p.secondary))").message("a peer's secondary must name a region of this spec: regions.name or a peer's name").field_path(".peers").reason(Reason::FieldValueInvalid)
)]
#[serde(rename_all = "camelCase")]
pub struct RegionsSpec {
    /// This region's name, as its peers name it: letters, digits, `.`, `_`, `:` or `-`, at
    /// most 64.
    #[schemars(length(min = 1, max = 64), regex(pattern = r"^[A-Za-z0-9._:-]+$"))]
    pub name: String,
    /// This region's share of the accounts' homes (0 to 1000; 0: home of none). Applied live.
    #[serde(default = "default_one")]
    #[schemars(range(min = 0, max = 1000))]
    pub weight: i32,
    /// While true, this region is home of no account. An account's home is the region the
    /// weighted hash picks among the regions of weight above 0, evacuated ones included; if
    /// that region is evacuated, the home is its `secondary` when that names a region not
    /// evacuated and of weight above 0, else the hash's best region among those not evacuated.
    /// Applied live: no pod restarts; a new home learns the moved accounts' streams for one
    /// lease TTL. Set the same in every region's `StreamLimiter` (here, in the others as
    /// `peers[].evacuated`).
    #[serde(default)]
    pub evacuated: bool,
    /// Where this region's accounts go while it is evacuated: one of the `peers` by name (same
    /// rules as a name). Without it, each account goes to the hash's best region among those
    /// not evacuated. Applied live.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 64), regex(pattern = r"^[A-Za-z0-9._:-]+$"))]
    pub secondary: Option<String>,
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
    /// Where an account's home may be named, in order of precedence, the first that names one
    /// deciding (each at most once): `planSource` (the second column of
    /// `planSource.postgres.query`; needs `planSource.kind: postgres`), `playerToken` (the
    /// claim `limiter.playerAuth.homeClaim` names) or `gatewayHeader` (the
    /// `X-Screenlimit-Home-Region` header the gateway sets). An account none names is homed by
    /// the hash of the weights; empty (the default): always. Read at start: a change rolls the
    /// limiter pods.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 3))]
    #[x_kube(validation = Rule::new("self.all(s, self.filter(t, t == s).size() == 1)").message("regions.homeSources must name each source at most once").reason(Reason::FieldValueDuplicate))]
    pub home_sources: Vec<HomeSource>,
    /// The other regions (1 to 16), names unique and none this region's `name`.
    #[schemars(length(min = 1, max = 16))]
    #[x_kube(
        validation = Rule::new("self.all(p, self.filter(q, q.name == p.name).size() == 1)").message("region peer names must be unique").reason(Reason::FieldValueDuplicate),
        merge_strategy = ListMerge::Map(vec!["name".into()])
    )]
    pub peers: Vec<RegionPeerSpec>,
}

/// A source that may name an account's home region (the limiter's `regions.home_sources`).
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub enum HomeSource {
    /// The subscription database: the second column of `planSource.postgres.query` (`NULL`:
    /// none).
    PlanSource,
    /// The player token's claim `limiter.playerAuth.homeClaim` (absent: none).
    PlayerToken,
    /// The `X-Screenlimit-Home-Region` header the gateway sets.
    GatewayHeader,
}

impl HomeSource {
    /// The limiter's own source: its `name()` is how the limiter's config spells it.
    pub fn in_limiter(self) -> screenlimit_limiter::config::HomeSource {
        use screenlimit_limiter::config::HomeSource as Limiter;
        match self {
            HomeSource::PlanSource => Limiter::PlanSource,
            HomeSource::PlayerToken => Limiter::PlayerToken,
            HomeSource::GatewayHeader => Limiter::GatewayHeader,
        }
    }
}

/// Another region, as this one calls it.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
#[x_kube(
    validation = Rule::new("!has(self.secondary) || self.secondary != self.name").message("a peer's secondary must be another region than the peer itself").field_path(".secondary").reason(Reason::FieldValueInvalid)
)]
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
    /// Applied live.
    #[serde(default = "default_one")]
    #[schemars(range(min = 0, max = 1000))]
    pub weight: i32,
    /// Whether the peer is evacuated (home of no account), as the peer gives it itself.
    /// Applied live.
    #[serde(default)]
    pub evacuated: bool,
    /// Where the peer's accounts go while it is evacuated, as the peer gives it itself: this
    /// region's `name` or another peer's. Applied live.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 64), regex(pattern = r"^[A-Za-z0-9._:-]+$"))]
    pub secondary: Option<String>,
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
