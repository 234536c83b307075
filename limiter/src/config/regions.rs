//! `regions`: this install's region among several, and its peers. Each account has one home
//! region whose store alone decides its count; a call for an account homed elsewhere goes to the
//! home's limiters (`regions/`).

use std::path::PathBuf;
use std::time::Duration;

use serde::Deserialize;

use super::api_access::read_token;
use super::error::{ConfigError, invalid};
use crate::regions::home::Region;

/// Most peers an install may name.
pub const MAX_PEERS: usize = 16;
/// Highest weight of a region.
pub const MAX_WEIGHT: u32 = 1000;
/// Longest a roaming heartbeat waits for its batch.
pub const MAX_HEARTBEAT_WINDOW: Duration = Duration::from_secs(1);

#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RegionsConfig {
    /// This region's name, as its peers name it.
    pub name: String,
    /// This region's share of the accounts' homes (0: home of none).
    #[serde(default = "one")]
    pub weight: u32,
    /// Home of no account while true: the accounts it would hold go to `secondary`.
    #[serde(default)]
    pub evacuated: bool,
    /// The region that takes this region's accounts while it is evacuated (else they spread
    /// over the open regions by the weights).
    #[serde(default)]
    pub secondary: Option<String>,
    /// The token peers present when they call this region (`Authorization: Bearer`).
    pub token_file: PathBuf,
    /// Deadline of one call to a peer, connection included.
    #[serde(default = "default_timeout", with = "humantime_serde")]
    pub timeout: Duration,
    /// How long a roaming stream's heartbeat waits for others to the same home, so that they
    /// travel as one call.
    #[serde(default = "default_heartbeat_window", with = "humantime_serde")]
    pub heartbeat_window: Duration,
    pub peers: Vec<PeerConfig>,
    /// Where an account's home may be named, the first that names one deciding; an account none
    /// names is homed by the hash of the weights.
    #[serde(default)]
    pub home_sources: Vec<HomeSource>,
}

/// A source that may name an account's home region.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum HomeSource {
    /// The subscription database: the `plan_source.postgres.query`'s second column (`NULL`: none).
    PlanSource,
    /// The player token's `auth.players.home_claim` (absent: none).
    PlayerToken,
    /// The `X-Screenlimit-Home-Region` header the gateway sets (taken from the gateway token,
    /// or from anyone when the API has no credentials).
    GatewayHeader,
}

impl HomeSource {
    /// The name in the config, and the `source` label of the metrics.
    pub fn name(self) -> &'static str {
        match self {
            HomeSource::PlanSource => "plan_source",
            HomeSource::PlayerToken => "player_token",
            HomeSource::GatewayHeader => "gateway_header",
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PeerConfig {
    pub name: String,
    /// The peer's limiter Service, `http://` or `https://` (a path prefix is kept).
    pub url: String,
    #[serde(default = "one")]
    pub weight: u32,
    /// As the peer's own `evacuated`.
    #[serde(default)]
    pub evacuated: bool,
    /// As the peer's own `secondary`.
    #[serde(default)]
    pub secondary: Option<String>,
    /// The token this region presents to the peer (the peer's own `regions.token_file`).
    pub token_file: PathBuf,
    /// PEM certificates that sign the peer's certificate, beside the system's roots.
    #[serde(default)]
    pub ca_file: Option<PathBuf>,
}

fn one() -> u32 {
    1
}

fn default_timeout() -> Duration {
    Duration::from_secs(1)
}

fn default_heartbeat_window() -> Duration {
    Duration::from_millis(200)
}

/// The tokens `regions` names, read at start.
#[derive(Clone, PartialEq, Eq)]
pub struct RegionTokens {
    /// What peers must present.
    pub inbound: String,
    /// What this region presents, per peer in the config's order.
    pub peers: Vec<String>,
}

impl std::fmt::Debug for RegionTokens {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("RegionTokens(..)")
    }
}

impl RegionsConfig {
    pub fn validate(&self) -> Result<(), ConfigError> {
        let name_ok = |name: &str| crate::ids::validate_token(name).is_ok();
        if !name_ok(&self.name) {
            return Err(invalid(
                "regions.name",
                format!(
                    "{:?} must be 1-64 characters of A-Z a-z 0-9 . _ : -",
                    self.name
                ),
            ));
        }
        if self.peers.is_empty() || self.peers.len() > MAX_PEERS {
            return Err(invalid(
                "regions.peers",
                format!(
                    "{} peers; name 1 to {MAX_PEERS} (without peers, leave `regions` out)",
                    self.peers.len()
                ),
            ));
        }
        let mut names = vec![self.name.as_str()];
        for peer in &self.peers {
            if !name_ok(&peer.name) {
                return Err(invalid(
                    "regions.peers",
                    format!(
                        "peer name {:?} must be 1-64 characters of A-Z a-z 0-9 . _ : -",
                        peer.name
                    ),
                ));
            }
            if names.contains(&peer.name.as_str()) {
                return Err(invalid(
                    "regions.peers",
                    format!("region {:?} is named twice", peer.name),
                ));
            }
            names.push(&peer.name);
            check_url(&peer.name, &peer.url)?;
        }
        let weights = std::iter::once(self.weight).chain(self.peers.iter().map(|p| p.weight));
        if weights.clone().any(|w| w > MAX_WEIGHT) {
            return Err(invalid(
                "regions",
                format!("a weight is above {MAX_WEIGHT}; use 0 to {MAX_WEIGHT}"),
            ));
        }
        if weights.sum::<u32>() == 0 {
            return Err(invalid(
                "regions",
                "every region weighs 0, so no account has a home; give one a weight",
            ));
        }
        self.check_homes(&names)?;
        for (i, source) in self.home_sources.iter().enumerate() {
            if self.home_sources[..i].contains(source) {
                return Err(invalid(
                    "regions.home_sources",
                    format!("{} is named twice", source.name()),
                ));
            }
        }
        if !(Duration::from_millis(10)..=Duration::from_secs(10)).contains(&self.timeout) {
            return Err(invalid(
                "regions.timeout",
                format!(
                    "{}; use 10ms to 10s (a round trip between regions, and some)",
                    humantime::format_duration(self.timeout)
                ),
            ));
        }
        if self.heartbeat_window > MAX_HEARTBEAT_WINDOW {
            return Err(invalid(
                "regions.heartbeat_window",
                format!(
                    "{}; use 0s to 1s (a heartbeat waits this long for its batch)",
                    humantime::format_duration(self.heartbeat_window)
                ),
            ));
        }
        Ok(())
    }

    /// Each secondary names another region of the list, and one region at least can be a home.
    fn check_homes(&self, names: &[&str]) -> Result<(), ConfigError> {
        let homes = self.homes();
        for region in &homes {
            match &region.secondary {
                Some(s) if *s == region.name => {
                    return Err(invalid(
                        "regions",
                        format!(
                            "region {:?} is its own secondary; name another region",
                            region.name
                        ),
                    ));
                }
                Some(s) if !names.contains(&s.as_str()) => {
                    return Err(invalid(
                        "regions",
                        format!(
                            "the secondary of region {:?}, {s:?}, is not a region of this list",
                            region.name
                        ),
                    ));
                }
                _ => {}
            }
        }
        if !homes.iter().any(Region::open) {
            return Err(invalid(
                "regions",
                "every region with a weight is evacuated, so no account has a home; \
                 end one evacuation",
            ));
        }
        Ok(())
    }

    /// The part a reload puts in force: which region is each account's home.
    pub fn homes(&self) -> Vec<Region> {
        std::iter::once(Region {
            name: self.name.clone(),
            weight: self.weight,
            evacuated: self.evacuated,
            secondary: self.secondary.clone(),
        })
        .chain(self.peers.iter().map(|p| Region {
            name: p.name.clone(),
            weight: p.weight,
            evacuated: p.evacuated,
            secondary: p.secondary.clone(),
        }))
        .collect()
    }

    /// The rest, which only a restart puts in force.
    pub fn without_homes(&self) -> RegionsConfig {
        let mut rest = self.clone();
        (rest.weight, rest.evacuated, rest.secondary) = (0, false, None);
        for peer in &mut rest.peers {
            (peer.weight, peer.evacuated, peer.secondary) = (0, false, None);
        }
        rest
    }

    /// Reads the tokens; each must be a token `auth` would take.
    pub fn read_tokens(&self) -> Result<RegionTokens, ConfigError> {
        let inbound = read_token("regions.token_file", &self.token_file)?;
        let peers = self
            .peers
            .iter()
            .map(|peer| read_token("regions.peers", &peer.token_file))
            .collect::<Result<Vec<_>, _>>()?;
        Ok(RegionTokens { inbound, peers })
    }
}

/// A peer's URL: `http` or `https`, a host, no credentials, query or fragment (the region
/// calls' paths are added to it segment by segment).
fn check_url(peer: &str, url: &str) -> Result<(), ConfigError> {
    let refuse = |why: &str| {
        Err(invalid(
            "regions.peers",
            format!("peer {peer:?}: url {url:?} {why}"),
        ))
    };
    let Ok(parsed) = reqwest::Url::parse(url) else {
        return refuse("is not a URL");
    };
    if !matches!(parsed.scheme(), "http" | "https") {
        return refuse("must be http:// or https://");
    }
    if parsed.host_str().is_none_or(str::is_empty) {
        return refuse("names no host");
    }
    if !parsed.username().is_empty() || parsed.password().is_some() {
        return refuse("must not carry credentials (use token_file)");
    }
    if parsed.query().is_some() || parsed.fragment().is_some() {
        return refuse("must not have a query or fragment");
    }
    Ok(())
}
