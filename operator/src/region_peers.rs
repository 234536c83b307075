//! Whether this region's limiter pods reach their peer regions, from what each pod reports on
//! its `/metrics` per peer: `screenlimit_region_peer_up{peer}` (1: its last call answered, 0:
//! not) and `screenlimit_region_last_call_seconds{peer}` (the last answered call's time). A pod
//! has these series only once it has called the peer. The `/metrics` text is the one read for the
//! config revision (`config_rollout.rs`); this module only parses it and sums the pods' answers
//! up, purely.

use std::collections::BTreeMap;

use crate::crd::{PeerState, RegionPeerStatus, RegionsStatus};

const PEER_UP: &str = "screenlimit_region_peer_up";
const LAST_CALL: &str = "screenlimit_region_last_call_seconds";

/// What one pod reports about one peer.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct PeerSample {
    /// Its last call to the peer answered (`None`: no `peer_up` series, it has not called it).
    pub up: Option<bool>,
    /// The last answered call's time, in seconds.
    pub last_call_seconds: Option<f64>,
}

/// One pod's report, by peer name.
pub type PodPeers = BTreeMap<String, PeerSample>;

/// The peers' series in Prometheus text, by peer. Other metrics, comments and lines that do not
/// parse are skipped.
pub fn peers_in(metrics: &str) -> PodPeers {
    let mut peers = PodPeers::new();
    for line in metrics.lines() {
        let Some((name, labels, value)) = split_sample(line) else {
            continue;
        };
        if name != PEER_UP && name != LAST_CALL {
            continue;
        }
        let Some(peer) = label(labels, "peer") else {
            continue;
        };
        let Ok(value) = value.parse::<f64>() else {
            continue;
        };
        if !value.is_finite() {
            continue;
        }
        let sample = peers.entry(peer).or_default();
        if name == PEER_UP {
            sample.up = Some(value >= 0.5);
        } else {
            sample.last_call_seconds = Some(value);
        }
    }
    peers
}

/// `name{labels} value [timestamp]` → (name, labels, value); `None` for anything else.
fn split_sample(line: &str) -> Option<(&str, &str, &str)> {
    let line = line.trim();
    let open = line.find('{')?;
    let close = line.rfind('}')?;
    if close < open {
        return None;
    }
    let value = line[close + 1..].split_whitespace().next()?;
    Some((&line[..open], &line[open + 1..close], value))
}

/// The value of label `key` in `a="x",b="y"` (escapes `\"`, `\\`, `\n` undone).
fn label(labels: &str, key: &str) -> Option<String> {
    let mut rest = labels;
    loop {
        rest = rest.trim_start_matches([',', ' ']);
        if rest.is_empty() {
            return None;
        }
        let eq = rest.find('=')?;
        let name = rest[..eq].trim();
        let quoted = rest[eq + 1..].trim_start().strip_prefix('"')?;
        let mut value = String::new();
        let mut chars = quoted.char_indices();
        let end = loop {
            match chars.next()? {
                (i, '"') => break i,
                (_, '\\') => match chars.next()?.1 {
                    'n' => value.push('\n'),
                    c => value.push(c),
                },
                (_, c) => value.push(c),
            }
        };
        if name == key {
            return Some(value);
        }
        rest = &quoted[end + 1..];
    }
}

/// What the ready limiter pods said of the peers of `spec.regions`.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct PeersObserved {
    /// `spec.regions.peers[].name`, in their order.
    pub peers: Vec<String>,
    /// The report of each pod whose `/metrics` was read.
    pub pods: Vec<PodPeers>,
}

/// `status.regions`: one entry per peer of `spec.regions.peers`, in their order, from the
/// reports of the pods whose `/metrics` was read. `old` is the status before: a peer's
/// `lastCallMillis` keeps its old value while the new one is within [`settled_millis`]'s
/// tolerance, so that call-time jitter alone does not rewrite the status (each status write
/// is a watch event, and so another reconcile).
pub fn status(peers: &[String], pods: &[PodPeers], old: Option<&RegionsStatus>) -> RegionsStatus {
    let asked = pods.len() as i32;
    let peers = peers
        .iter()
        .map(|name| {
            let samples: Vec<&PeerSample> = pods.iter().filter_map(|p| p.get(name)).collect();
            let called = samples.iter().filter(|s| s.up.is_some()).count();
            let reachable = samples.iter().filter(|s| s.up == Some(true)).count() as i32;
            let state = match (called, reachable) {
                (0, _) => PeerState::Unknown,
                (_, 0) => PeerState::Unreachable,
                _ => PeerState::Reachable,
            };
            let new_millis = samples
                .iter()
                .filter_map(|s| s.last_call_seconds)
                .filter(|s| *s >= 0.0)
                .fold(None, |max: Option<f64>, s| {
                    Some(max.map_or(s, |m| m.max(s)))
                })
                .map(|s| (s * 1000.0).round() as i64);
            let old_millis = old
                .and_then(|o| o.peers.iter().find(|p| &p.name == name))
                .and_then(|p| p.last_call_millis);
            RegionPeerStatus {
                name: name.clone(),
                state,
                pods_reachable: reachable,
                pods_asked: asked,
                last_call_millis: settled_millis(old_millis, new_millis),
            }
        })
        .collect();
    RegionsStatus { peers }
}

/// The call time to report: the old one while the new one is within a quarter of it (and at
/// least 5 ms) of it, else the new one; none when no pod reports one now.
pub fn settled_millis(old: Option<i64>, new: Option<i64>) -> Option<i64> {
    match (old, new) {
        (Some(old), Some(new)) if (new - old).abs() <= (old / 4).max(5) => Some(old),
        (_, new) => new,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample(up: Option<bool>, last: Option<f64>) -> PeerSample {
        PeerSample {
            up,
            last_call_seconds: last,
        }
    }

    #[test]
    fn the_peer_series_are_read_among_other_metrics() {
        let text = "# HELP screenlimit_region_peer_up Whether another region answered\n\
                    # TYPE screenlimit_region_peer_up gauge\n\
                    screenlimit_region_peer_up{peer=\"us\"} 1\n\
                    screenlimit_config_info{revision=\"ab12\"} 1\n\
                    screenlimit_region_peer_up{peer=\"ap\"} 0\n\
                    screenlimit_region_calls_total{op=\"acquire\",outcome=\"answered\",peer=\"us\"} 12\n\
                    screenlimit_region_last_call_seconds{peer=\"us\"} 0.083\n\
                    screenlimit_region_peer_up_total{peer=\"xx\"} 1\n";
        let peers = peers_in(text);
        assert_eq!(peers.len(), 2, "{peers:?}");
        assert_eq!(peers["us"], sample(Some(true), Some(0.083)));
        // Called, never answered: no last call time.
        assert_eq!(peers["ap"], sample(Some(false), None));
    }

    #[test]
    fn the_peer_label_is_found_in_any_order_with_a_timestamp() {
        let text = "screenlimit_region_peer_up{zone=\"a,b\",peer=\"eu-west\",x=\"q\\\"y\"} 1 1700000000000\n\
                    screenlimit_region_last_call_seconds{ x=\"1\" , peer=\"eu-west\" } 2.5e-2\n";
        assert_eq!(peers_in(text)["eu-west"], sample(Some(true), Some(0.025)));
    }

    #[test]
    fn garbage_is_skipped() {
        let text = "screenlimit_region_peer_up 1\n\
                    screenlimit_region_peer_up{peer=\"us\"}\n\
                    screenlimit_region_peer_up{peer=\"us} 1\n\
                    screenlimit_region_peer_up{peer=\"ap\"} yes\n\
                    screenlimit_region_last_call_seconds{peer=\"ap\"} NaN\n\
                    screenlimit_region_peer_up}{peer=\"x\" 1\n\
                    {peer=\"y\"} 1\n\
                    screenlimit_region_peer_up{region=\"us\"} 1\n\
                    \n not metrics at all é\n";
        assert_eq!(peers_in(text), PodPeers::new());
        assert_eq!(peers_in(""), PodPeers::new());
    }

    fn pod(entries: &[(&str, PeerSample)]) -> PodPeers {
        entries
            .iter()
            .map(|(n, s)| ((*n).to_owned(), s.clone()))
            .collect()
    }

    fn names() -> Vec<String> {
        vec!["us".to_owned(), "ap".to_owned()]
    }

    #[test]
    fn every_pod_up_is_reachable_with_the_highest_call_time() {
        let pods = [
            pod(&[
                ("us", sample(Some(true), Some(0.0834))),
                ("ap", sample(Some(true), Some(0.2))),
            ]),
            pod(&[
                ("us", sample(Some(true), Some(0.0906))),
                ("ap", sample(Some(true), Some(0.1))),
            ]),
        ];
        let status = status(&names(), &pods, None);
        let us = &status.peers[0];
        assert_eq!(
            (us.name.as_str(), us.state, us.pods_reachable, us.pods_asked),
            ("us", PeerState::Reachable, 2, 2)
        );
        assert_eq!(us.last_call_millis, Some(91));
        assert_eq!(status.peers[1].name, "ap", "in spec order");
        assert_eq!(status.peers[1].last_call_millis, Some(200));
    }

    #[test]
    fn a_pod_that_fails_leaves_the_peer_reachable_from_the_others() {
        let pods = [
            pod(&[("us", sample(Some(true), Some(0.05)))]),
            pod(&[("us", sample(Some(false), Some(0.04)))]),
        ];
        let us = &status(&names(), &pods, None).peers[0];
        assert_eq!(
            (us.state, us.pods_reachable, us.pods_asked),
            (PeerState::Reachable, 1, 2)
        );
        // Every pod's last call failed: unreachable, with the last answered call's time kept.
        let pods = [
            pod(&[("us", sample(Some(false), Some(0.05)))]),
            pod(&[("us", sample(Some(false), None))]),
        ];
        let us = &status(&names(), &pods, None).peers[0];
        assert_eq!(
            (us.state, us.pods_reachable, us.last_call_millis),
            (PeerState::Unreachable, 0, Some(50))
        );
    }

    #[test]
    fn no_pod_asked_or_a_peer_never_called_is_unknown() {
        let none = status(&names(), &[], None);
        assert!(none.peers.iter().all(|p| p.state == PeerState::Unknown
            && p.pods_asked == 0
            && p.last_call_millis.is_none()));
        let pods = [pod(&[("us", sample(Some(true), Some(0.01)))]), pod(&[])];
        let status = status(&names(), &pods, None);
        let ap = &status.peers[1];
        assert_eq!(
            (
                ap.state,
                ap.pods_reachable,
                ap.pods_asked,
                ap.last_call_millis
            ),
            (PeerState::Unknown, 0, 2, None)
        );
        assert_eq!(status.peers[0].state, PeerState::Reachable);
    }

    #[test]
    fn call_time_jitter_keeps_the_old_value() {
        assert_eq!(settled_millis(Some(80), Some(95)), Some(80));
        assert_eq!(settled_millis(Some(80), Some(101)), Some(101));
        assert_eq!(settled_millis(Some(2), Some(7)), Some(2));
        assert_eq!(settled_millis(Some(2), Some(8)), Some(8));
        assert_eq!(settled_millis(None, Some(8)), Some(8));
        assert_eq!(settled_millis(Some(8), None), None);
        let old = RegionsStatus {
            peers: vec![RegionPeerStatus {
                name: "us".into(),
                state: PeerState::Reachable,
                pods_reachable: 1,
                pods_asked: 1,
                last_call_millis: Some(80),
            }],
        };
        let pods = [pod(&[("us", sample(Some(true), Some(0.09)))])];
        assert_eq!(
            status(&names(), &pods, Some(&old)).peers[0].last_call_millis,
            Some(80)
        );
    }
}
