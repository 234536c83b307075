//! The cluster nodes whose address the limiter cannot use (the slot map names them, but no
//! client can be made for them: a malformed address, a host TLS cannot name). The map is read
//! every few seconds; the log says when the set changes, never once per read, and the count is
//! a gauge (`screenlimit_store_cluster_unusable_nodes`).

use std::collections::BTreeMap;

/// A change in the set, to log once.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Change {
    /// A node the map names whose address cannot be used, and why; its slots go unserved.
    Unusable { address: String, error: String },
    /// A node that was unusable and is no longer (usable now, or gone from the map).
    Cleared { address: String },
}

/// The unusable nodes of the last map read, with their reasons.
#[derive(Debug, Default)]
pub struct UnusableNodes {
    now: BTreeMap<String, String>,
}

impl UnusableNodes {
    /// Takes the unusable nodes of a new map and returns what changed: a node stays reported
    /// while its reason stays the same; a new reason for the same node is a new change.
    pub fn update(&mut self, found: BTreeMap<String, String>) -> Vec<Change> {
        let mut changes: Vec<Change> = self
            .now
            .keys()
            .filter(|address| !found.contains_key(*address))
            .map(|address| Change::Cleared {
                address: address.clone(),
            })
            .collect();
        changes.extend(
            found
                .iter()
                .filter(|(address, error)| self.now.get(*address) != Some(*error))
                .map(|(address, error)| Change::Unusable {
                    address: address.clone(),
                    error: error.clone(),
                }),
        );
        self.now = found;
        changes
    }

    pub fn count(&self) -> usize {
        self.now.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn found(nodes: &[(&str, &str)]) -> BTreeMap<String, String> {
        nodes
            .iter()
            .map(|(a, e)| (a.to_string(), e.to_string()))
            .collect()
    }

    #[test]
    fn a_node_that_stays_unusable_is_reported_once_and_its_end_once() {
        let mut nodes = UnusableNodes::default();
        let bad = found(&[("bad host:7000", "not host:port")]);
        assert_eq!(
            nodes.update(bad.clone()),
            [Change::Unusable {
                address: "bad host:7000".into(),
                error: "not host:port".into()
            }]
        );
        assert_eq!(nodes.count(), 1);
        // The map is read again every few seconds: nothing new to say.
        for _ in 0..100 {
            assert_eq!(nodes.update(bad.clone()), []);
        }
        assert_eq!(nodes.count(), 1);
        // Another reason for the same node is news; the node fixed, once.
        let other = found(&[("bad host:7000", "invalid DNS name")]);
        assert_eq!(nodes.update(other).len(), 1);
        assert_eq!(
            nodes.update(BTreeMap::new()),
            [Change::Cleared {
                address: "bad host:7000".into()
            }]
        );
        assert_eq!(nodes.update(BTreeMap::new()), []);
        assert_eq!(nodes.count(), 0);
    }

    #[test]
    fn each_node_is_reported_on_its_own() {
        let mut nodes = UnusableNodes::default();
        nodes.update(found(&[("a:1", "x")]));
        let changes = nodes.update(found(&[("a:1", "x"), ("b:2", "y")]));
        assert_eq!(
            changes,
            [Change::Unusable {
                address: "b:2".into(),
                error: "y".into()
            }]
        );
        assert_eq!(nodes.count(), 2);
    }
}
