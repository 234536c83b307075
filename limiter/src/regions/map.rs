//! This region and its peers as the config names them: which region is an account's home, and
//! for a home elsewhere, the peer that takes its calls (with its heartbeat batch).

use std::sync::Arc;
use std::time::{Duration, Instant};

use arc_swap::ArcSwap;

use super::heartbeats::HeartbeatBatch;
use super::home::{Region, home_of};
use super::peer::{Peer, PeerView};
use super::provisional::ProvisionalBook;
use crate::config::{RegionTokens, RegionsConfig};
use crate::metrics::RegionMetrics;

/// A peer, the batch its roaming heartbeats wait in, and what this region let play while it
/// did not answer.
pub struct PeerLink {
    pub peer: Arc<Peer>,
    pub heartbeats: HeartbeatBatch,
    pub provisional: Arc<ProvisionalBook>,
}

pub struct RegionMap {
    /// This region's name.
    pub here: String,
    /// Every region with its weight, this one included, for the home rule; a reload swaps it.
    homes: ArcSwap<Homes>,
    /// The peers, in the config's order.
    peers: Vec<PeerLink>,
    metrics: RegionMetrics,
}

/// The home rule's table in force, and the tables it replaced less than a lease TTL ago: an
/// account that one of those homed elsewhere and this table homes here is learning
/// ([`RegionMap::learning`]).
#[derive(Debug, Default)]
struct Homes {
    table: Vec<Region>,
    replaced: Vec<Replaced>,
}

#[derive(Debug, Clone)]
struct Replaced {
    table: Vec<Region>,
    /// The end of the learning this replacement started.
    until: Instant,
}

impl Homes {
    /// `table` in force from now, this one learned from until `until` (and those it replaced,
    /// while they last).
    fn replaced_by(&self, table: Vec<Region>, until: Instant) -> Homes {
        let now = Instant::now();
        let mut replaced: Vec<Replaced> = (self.replaced.iter())
            .filter(|r| r.until > now)
            .cloned()
            .collect();
        replaced.push(Replaced {
            table: self.table.clone(),
            until,
        });
        Homes { table, replaced }
    }

    /// Whether `here` is the account's home and a table replaced before `now` less than a TTL
    /// ago homed it elsewhere.
    fn learning(&self, here: &str, account_id: &str, now: Instant) -> bool {
        let is_here =
            |table: &[Region]| home_of(account_id, table).is_none_or(|home| home.name == here);
        !self.replaced.is_empty()
            && is_here(&self.table)
            && (self.replaced.iter()).any(|r| r.until > now && !is_here(&r.table))
    }
}

impl RegionMap {
    pub fn from_config(
        config: &RegionsConfig,
        tokens: &RegionTokens,
        metrics: &RegionMetrics,
    ) -> anyhow::Result<RegionMap> {
        let peers = config
            .peers
            .iter()
            .zip(&tokens.peers)
            .map(|(peer, token)| {
                let peer = Arc::new(Peer::new(peer, token, config.timeout, metrics.clone())?);
                Ok(PeerLink {
                    heartbeats: HeartbeatBatch::new(peer.clone(), config.heartbeat_window),
                    peer,
                    provisional: Arc::default(),
                })
            })
            .collect::<anyhow::Result<Vec<_>>>()?;
        Ok(RegionMap {
            here: config.name.clone(),
            homes: ArcSwap::from_pointee(Homes {
                table: config.homes(),
                replaced: Vec::new(),
            }),
            peers,
            metrics: metrics.clone(),
        })
    }

    /// Counts a stream re-registered while its account learns.
    pub fn learned(&self) {
        self.metrics.learned();
    }

    /// Puts a reloaded config's homes in force. An account this moves here learns for `ttl`: its
    /// live streams re-register by heartbeat even when it is at its limit. Whether any home moved.
    pub fn set_homes(&self, table: Vec<Region>, ttl: Duration) -> bool {
        let old = self.homes.load();
        if old.table == table {
            return false;
        }
        self.homes
            .store(Arc::new(old.replaced_by(table, Instant::now() + ttl)));
        true
    }

    /// The account's home: `None` for this region, else the peer that takes its calls.
    pub fn home(&self, account_id: &str) -> Option<&PeerLink> {
        let homes = self.homes.load();
        let home = home_of(account_id, &homes.table)?;
        if home.name == self.here {
            return None;
        }
        self.peers.iter().find(|link| link.peer.name == home.name)
    }

    /// The name of the account's home region.
    pub fn home_name(&self, account_id: &str) -> String {
        let homes = self.homes.load();
        home_of(account_id, &homes.table).map_or_else(|| self.here.clone(), |r| r.name.clone())
    }

    /// Whether the account's home moved here less than a lease TTL ago (learning mode): this
    /// region's store has not seen its live streams yet, which re-register by heartbeat.
    pub fn learning(&self, account_id: &str) -> bool {
        self.homes
            .load()
            .learning(&self.here, account_id, Instant::now())
    }

    /// When the newest learning ends, if one is under way.
    fn learning_until(&self) -> Option<Instant> {
        let now = Instant::now();
        (self.homes.load().replaced.iter())
            .map(|r| r.until)
            .filter(|until| *until > now)
            .max()
    }

    pub fn links(&self) -> &[PeerLink] {
        &self.peers
    }

    /// This region, every region's weight and how each peer answers, for `/v1/fleet`.
    pub fn view(&self) -> RegionsView {
        let homes = self.homes.load();
        RegionsView {
            name: self.here.clone(),
            weights: (homes.table.iter())
                .map(|r| (r.name.clone(), r.weight))
                .collect(),
            evacuated: (homes.table.iter())
                .filter(|r| r.evacuated)
                .map(|r| EvacuatedView {
                    name: r.name.clone(),
                    secondary: r.secondary.clone(),
                })
                .collect(),
            learning_ms: self
                .learning_until()
                .map(|until| until.saturating_duration_since(Instant::now()).as_millis() as u64),
            peers: self.peers.iter().map(|link| link.peer.view()).collect(),
        }
    }
}

/// The regions as `/v1/fleet` shows them.
#[derive(Debug, Clone, PartialEq, serde::Serialize, utoipa::ToSchema)]
pub struct RegionsView {
    /// This region.
    pub name: String,
    /// Each region's share of the accounts' homes.
    pub weights: std::collections::BTreeMap<String, u32>,
    /// The regions evacuated, home of no account, each with the region that takes its accounts
    /// (none: they spread over the open regions by the weights).
    pub evacuated: Vec<EvacuatedView>,
    /// How long the accounts whose home moved here by the last change of the homes still learn
    /// (their live streams re-register even at the limit), in milliseconds; absent when none do.
    pub learning_ms: Option<u64>,
    pub peers: Vec<PeerView>,
}

#[derive(Debug, Clone, PartialEq, serde::Serialize, utoipa::ToSchema)]
pub struct EvacuatedView {
    pub name: String,
    pub secondary: Option<String>,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn table(evacuated: Option<&str>) -> Vec<Region> {
        ["eu", "us", "ap"]
            .into_iter()
            .map(|name| Region {
                name: name.into(),
                weight: 1,
                evacuated: evacuated == Some(name),
                secondary: Some("eu".into()),
            })
            .collect()
    }

    fn homed(table: &[Region], home: &str) -> String {
        (0..)
            .map(|i| format!("acct-{i}"))
            .find(|a| home_of(a, table).unwrap().name == home)
            .unwrap()
    }

    #[test]
    fn only_the_accounts_moved_here_learn_and_only_for_the_ttl() {
        let start = Homes {
            table: table(None),
            replaced: Vec::new(),
        };
        let (was_ap, was_us, was_eu) = (
            homed(&start.table, "ap"),
            homed(&start.table, "us"),
            homed(&start.table, "eu"),
        );
        assert!(!start.learning("eu", &was_ap, Instant::now()));
        let ttl = Duration::from_secs(30);
        let now = Instant::now();
        let evacuated = start.replaced_by(table(Some("ap")), now + ttl);
        // ap's accounts moved to eu: eu learns them; its own and us's do not.
        assert!(evacuated.learning("eu", &was_ap, now));
        assert!(!evacuated.learning("eu", &was_eu, now));
        assert!(!evacuated.learning("eu", &was_us, now));
        assert!(!evacuated.learning("us", &was_us, now), "us is no new home");
        assert!(!evacuated.learning("ap", &was_ap, now), "ap is no home now");
        // One TTL later, eu enforces.
        assert!(!evacuated.learning("eu", &was_ap, now + ttl));
        // The evacuation ended within the TTL: ap learns its accounts back, eu no longer.
        let back = evacuated.replaced_by(table(None), now + ttl);
        assert!(back.learning("ap", &was_ap, now));
        assert!(!back.learning("eu", &was_ap, now));
    }
}
