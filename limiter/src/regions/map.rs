//! This region and its peers as the config names them: which region is an account's home, and
//! for a home elsewhere, the peer that takes its calls (with its heartbeat batch).

use std::sync::Arc;

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
    /// Every region with its weight, this one included, for the home rule.
    table: Vec<Region>,
    /// The peers, in the config's order.
    peers: Vec<PeerLink>,
}

impl RegionMap {
    pub fn from_config(
        config: &RegionsConfig,
        tokens: &RegionTokens,
        metrics: &RegionMetrics,
    ) -> anyhow::Result<RegionMap> {
        let table = std::iter::once(Region {
            name: config.name.clone(),
            weight: config.weight,
        })
        .chain(config.peers.iter().map(|p| Region {
            name: p.name.clone(),
            weight: p.weight,
        }))
        .collect();
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
            table,
            peers,
        })
    }

    /// The account's home: `None` for this region, else the peer that takes its calls.
    pub fn home(&self, account_id: &str) -> Option<&PeerLink> {
        let home = home_of(account_id, &self.table)?;
        if home.name == self.here {
            return None;
        }
        self.peers.iter().find(|link| link.peer.name == home.name)
    }

    /// The name of the account's home region.
    pub fn home_name(&self, account_id: &str) -> &str {
        home_of(account_id, &self.table).map_or(&self.here, |r| &r.name)
    }

    pub fn links(&self) -> &[PeerLink] {
        &self.peers
    }

    /// This region, every region's weight and how each peer answers, for `/v1/fleet`.
    pub fn view(&self) -> RegionsView {
        RegionsView {
            name: self.here.clone(),
            weights: (self.table.iter())
                .map(|r| (r.name.clone(), r.weight))
                .collect(),
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
    pub peers: Vec<PeerView>,
}
