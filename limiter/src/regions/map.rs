//! This region and its peers as the config names them: which region is an account's home, and
//! for a home elsewhere, the peer that takes its calls (with its heartbeat batch).

use std::sync::Arc;
use std::time::{Duration, Instant};

use arc_swap::ArcSwap;

use super::heartbeats::HeartbeatBatch;
use super::home::{Region, named_home};
use super::named::{HomeHint, NamedHomes};
use super::peer::{Peer, PeerView};
use super::provisional::ProvisionalBook;
use crate::config::{HomeSource, RegionTokens, RegionsConfig};
use crate::metrics::RegionMetrics;
use crate::plans::PlanSource;

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
    /// The homes the sources name, and those the calls named.
    named: NamedHomes,
    /// With home sources: each account's home as this instance last found it, and until when it
    /// learns after that home changed (a named home moved: its new home learns it too).
    last_homes: moka::future::Cache<String, (Arc<str>, Option<Instant>)>,
    metrics: RegionMetrics,
}

/// An account's home as one call finds it: the region a source named, if one did, and whether
/// that home changed less than a lease TTL ago (as this instance saw it).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CallHome {
    pub named: Option<Arc<str>>,
    pub moved: bool,
}

/// The home rule's table in force, and the tables it replaced less than a lease TTL ago: an
/// account that one of those homed elsewhere than this table does is learning at its new home
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

    /// Whether the account's home (`named` by a source, else by the hash) moved less than a TTL
    /// before `now`: a table replaced since then put it elsewhere. Its new home learns it.
    fn moved(&self, account_id: &str, named: Option<&str>, now: Instant) -> bool {
        if self.replaced.is_empty() {
            return false;
        }
        let home = |table: &[Region]| named_home(account_id, named, table).map(|r| r.name.clone());
        let current = home(&self.table);
        (self.replaced.iter()).any(|r| r.until > now && home(&r.table) != current)
    }
}

impl RegionMap {
    /// `named` caches the homes calls name, like plans (`plan_source.cache_capacity`,
    /// `cache_max_stale`).
    pub fn from_config(
        config: &RegionsConfig,
        tokens: &RegionTokens,
        named: (u64, Duration),
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
            named: NamedHomes::new(config.home_sources.clone(), named.0, named.1),
            last_homes: moka::future::Cache::builder()
                .max_capacity(named.0)
                .time_to_live(named.1)
                .build(),
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

    /// The account's home (`named` by a source, else by the hash): `None` for this region, else
    /// the peer that takes its calls.
    pub fn home(&self, account_id: &str, named: Option<&str>) -> Option<&PeerLink> {
        let homes = self.homes.load();
        let home = named_home(account_id, named, &homes.table)?;
        if home.name == self.here {
            return None;
        }
        self.peers.iter().find(|link| link.peer.name == home.name)
    }

    /// The name of the account's home region.
    pub fn home_name(&self, account_id: &str, named: Option<&str>) -> String {
        let homes = self.homes.load();
        named_home(account_id, named, &homes.table)
            .map_or_else(|| self.here.clone(), |r| r.name.clone())
    }

    /// Whether the account's home moved less than a lease TTL ago (learning mode): its new home's
    /// store has not seen its live streams yet, which re-register by heartbeat even at the limit.
    /// A change of the homes table moves it; so does a change of its named home (`home.moved`).
    pub fn learning(&self, account_id: &str, home: &CallHome) -> bool {
        home.moved || (self.homes.load()).moved(account_id, home.named.as_deref(), Instant::now())
    }

    /// The account's home as a call finds it: the region a source names (`regions.home_sources`),
    /// if it is one of this install's (a name that is none is counted and left out: the hash
    /// decides), and whether the home changed, as this instance saw it, less than `ttl` ago.
    pub async fn call_home(
        &self,
        account_id: &str,
        hint: &HomeHint,
        plans: &PlanSource,
        cached_only: bool,
        ttl: Duration,
    ) -> CallHome {
        if self.named.sources().is_empty() {
            return CallHome::default();
        }
        let named = match self.named.named(account_id, hint, plans, cached_only).await {
            Some((name, source)) => {
                let known = (self.homes.load().table.iter()).any(|r| *r.name == *name);
                if !known {
                    self.metrics.unknown_home(source.name());
                }
                known.then_some(name)
            }
            None => None,
        };
        let home: Arc<str> = self.home_name(account_id, named.as_deref()).into();
        let now = Instant::now();
        let moved = match self.last_homes.get(account_id).await {
            Some((last, until)) if last == home => until.is_some_and(|until| until > now),
            // Another home than the one this instance last found: the new home learns.
            Some(_) => {
                let entry = (home, Some(now + ttl));
                self.last_homes.insert(account_id.to_owned(), entry).await;
                true
            }
            None => {
                self.last_homes
                    .insert(account_id.to_owned(), (home, None))
                    .await;
                false
            }
        };
        CallHome { named, moved }
    }

    /// The sources that may name an account's home.
    pub fn home_sources(&self) -> &[HomeSource] {
        self.named.sources()
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
            home_sources: (self.home_sources().iter())
                .map(|s| s.name().to_owned())
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
    /// How long the accounts whose home the last change of the homes moved still learn (their
    /// live streams re-register at the new home even at the limit), in milliseconds; absent when
    /// none do.
    pub learning_ms: Option<u64>,
    /// The sources that may name an account's home, the first that names one deciding (none:
    /// the hash homes every account).
    pub home_sources: Vec<String>,
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
    use crate::regions::home::home_of;

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
    fn only_the_accounts_whose_home_moved_learn_and_only_for_the_ttl() {
        let start = Homes {
            table: table(None),
            replaced: Vec::new(),
        };
        let (was_ap, was_us) = (homed(&start.table, "ap"), homed(&start.table, "us"));
        assert!(!start.moved(&was_ap, None, Instant::now()));
        let ttl = Duration::from_secs(30);
        let now = Instant::now();
        let evacuated = start.replaced_by(table(Some("ap")), now + ttl);
        // ap's accounts moved to eu and learn there; us's did not move.
        assert!(evacuated.moved(&was_ap, None, now));
        assert!(!evacuated.moved(&was_us, None, now));
        // A home named by a source moves the same way, whatever the hash says.
        assert!(evacuated.moved(&was_us, Some("ap"), now));
        assert!(!evacuated.moved(&was_ap, Some("us"), now));
        // One TTL later, the new home enforces.
        assert!(!evacuated.moved(&was_ap, None, now + ttl));
        // The evacuation ended within the TTL: the accounts move back and learn again.
        let back = evacuated.replaced_by(table(None), now + ttl);
        assert!(back.moved(&was_ap, None, now));
        assert!(!back.moved(&was_us, None, now));
    }
}
