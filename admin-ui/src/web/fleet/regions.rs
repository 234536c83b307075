//! The regions as one instance reports them: its own, each region's weight, the regions
//! evacuated and whether the accounts moved here still learn, and for each peer whether it
//! answers, how long its last answered call took and the calls it left unanswered.

use crate::limiter::Regions;

pub struct RegionsView {
    /// This instance's region.
    pub name: String,
    /// "eu 1 · us 1 · ap 2": each region's share of the accounts' homes.
    pub weights: String,
    /// "ap → eu · us → by weight": each evacuated region and where its accounts went ("" when
    /// none is).
    pub evacuated: String,
    /// "3 s": how long the accounts whose home moved here still learn ("" when none do).
    pub learning: String,
    pub peers: Vec<PeerRow>,
}

pub struct PeerRow {
    pub name: String,
    pub reachable: bool,
    /// "84 ms", or "—" before an answered call.
    pub last_call: String,
    pub calls: u64,
    pub failed: u64,
    /// Why its last failed call failed ("" when none did).
    pub last_error: String,
}

impl RegionsView {
    pub fn new(regions: Regions) -> RegionsView {
        RegionsView {
            name: regions.name,
            weights: (regions.weights.iter())
                .map(|(name, weight)| format!("{name} {weight}"))
                .collect::<Vec<_>>()
                .join(" · "),
            evacuated: (regions.evacuated.iter())
                .map(|e| {
                    let to = e.secondary.as_deref().unwrap_or("by weight");
                    format!("{} → {to}", e.name)
                })
                .collect::<Vec<_>>()
                .join(" · "),
            learning: regions.learning_ms.map_or_else(String::new, |ms| {
                format!("{:.0} s", (ms as f64 / 1000.0).ceil())
            }),
            peers: (regions.peers.into_iter())
                .map(|peer| PeerRow {
                    last_call: peer
                        .last_call_ms
                        .map_or_else(|| "—".into(), |ms| format!("{ms:.0} ms")),
                    name: peer.name,
                    reachable: peer.reachable,
                    calls: peer.calls,
                    failed: peer.failed,
                    last_error: peer.last_error.unwrap_or_default(),
                })
                .collect(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::limiter::{Evacuated, RegionPeer};

    #[test]
    fn a_peer_reads_as_it_answers() {
        let regions = Regions {
            name: "eu".into(),
            weights: [("eu".into(), 1), ("us".into(), 2)].into(),
            evacuated: vec![
                Evacuated {
                    name: "ap".into(),
                    secondary: Some("eu".into()),
                },
                Evacuated {
                    name: "sa".into(),
                    secondary: None,
                },
            ],
            learning_ms: Some(2_100),
            peers: vec![RegionPeer {
                name: "us".into(),
                reachable: false,
                last_call_ms: Some(83.6),
                calls: 12,
                failed: 3,
                last_error: Some("no answer within 1s".into()),
            }],
        };
        let view = RegionsView::new(regions);
        assert_eq!(view.weights, "eu 1 · us 2");
        assert_eq!(view.evacuated, "ap → eu · sa → by weight");
        assert_eq!(view.learning, "3 s");
        let us = &view.peers[0];
        assert_eq!((us.last_call.as_str(), us.failed), ("84 ms", 3));
        assert!(!us.reachable);
    }
}
