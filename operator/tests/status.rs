//! The pure status step's `MonitoringAvailable`, `RedisMemoryBounded` and `RegionsReachable`
//! conditions.

use screenlimit_operator::build::monitoring::MonitoringKind;
use screenlimit_operator::crd::Condition;
use screenlimit_operator::status::{Assessment, MONITORING, MonitoringOutcome, Observed, compute};
use screenlimit_operator::validate::FieldError;

fn monitoring(conditions: &[Condition]) -> Option<&Condition> {
    conditions.iter().find(|c| c.type_ == MONITORING)
}

fn observed(requested: &[MonitoringKind], missing: &[MonitoringKind]) -> Assessment {
    Assessment::Observed(Observed {
        monitoring: MonitoringOutcome {
            requested: requested.to_vec(),
            missing: missing.to_vec(),
        },
        ..Observed::default()
    })
}

#[test]
fn monitoring_available_follows_what_was_asked_and_served() {
    use MonitoringKind::{PrometheusRule, ServiceMonitor};
    // Nothing asked: no condition.
    let none = compute(None, Some(1), &observed(&[], &[]), None, "t0");
    assert!(monitoring(&none.conditions).is_none());

    let missing = compute(
        Some(&none),
        Some(2),
        &observed(&[ServiceMonitor, PrometheusRule], &[PrometheusRule]),
        None,
        "t1",
    );
    let c = monitoring(&missing.conditions).unwrap();
    assert_eq!(
        (c.status.as_str(), c.reason.as_str()),
        ("False", "PrometheusRuleNotServed")
    );
    assert!(
        c.message
            .contains("monitoring.coreos.com/v1 PrometheusRule"),
        "{}",
        c.message
    );
    assert_eq!(c.last_transition_time, "t1");

    // An invalid spec keeps what was last observed of monitoring, with its transition time.
    let invalid = Assessment::Invalid(vec![FieldError {
        field: "spec.defaultPlan".into(),
        message: "not a plan".into(),
    }]);
    let kept = compute(Some(&missing), Some(3), &invalid, None, "t2");
    assert_eq!(monitoring(&kept.conditions), Some(c));

    let applied = compute(
        Some(&kept),
        Some(4),
        &observed(&[ServiceMonitor, PrometheusRule], &[]),
        None,
        "t3",
    );
    let c = monitoring(&applied.conditions).unwrap();
    assert_eq!((c.status.as_str(), c.reason.as_str()), ("True", "Applied"));
    assert_eq!(c.message, "ServiceMonitor and PrometheusRule applied");
    assert_eq!(c.last_transition_time, "t3");
}

#[test]
fn managed_shards_without_a_memory_limit_are_named_in_a_condition() {
    use screenlimit_operator::status::{MemoryBound, REDIS_MEMORY};
    let with = |bound: Option<MemoryBound>| {
        let assessment = Assessment::Observed(Observed {
            redis_memory: bound,
            ..Observed::default()
        });
        compute(None, Some(1), &assessment, None, "t0")
            .conditions
            .into_iter()
            .find(|c| c.type_ == REDIS_MEMORY)
    };
    assert!(with(None).is_none(), "external mode: no condition");
    let unbounded = with(Some(MemoryBound::Unbounded)).unwrap();
    assert_eq!(
        (unbounded.status.as_str(), unbounded.reason.as_str()),
        ("False", "NoMemoryLimit")
    );
    assert!(
        unbounded
            .message
            .contains("spec.redis.resources.limits.memory"),
        "{}",
        unbounded.message
    );
    let bounded = with(Some(MemoryBound::Bounded {
        limit: "4Gi".into(),
        maxmemory: 3_006_477_040,
    }))
    .unwrap();
    assert_eq!(
        (bounded.status.as_str(), bounded.reason.as_str()),
        ("True", "MaxmemoryFromLimit")
    );
    assert!(
        bounded.message.contains("3006477040"),
        "{}",
        bounded.message
    );
}

mod regions {
    use screenlimit_operator::crd::{Condition, PeerState, StreamLimiterStatus};
    use screenlimit_operator::region_peers::{PeerSample, PeersObserved, PodPeers};
    use screenlimit_operator::status::{Assessment, Observed, REGIONS_REACHABLE, compute};
    use screenlimit_operator::validate::FieldError;

    /// A pod's report: per peer, (its last call answered, the last answered call's seconds).
    fn pod(peers: &[(&str, bool, Option<f64>)]) -> PodPeers {
        peers
            .iter()
            .map(|(name, up, last)| {
                (
                    (*name).to_owned(),
                    PeerSample {
                        up: Some(*up),
                        last_call_seconds: *last,
                    },
                )
            })
            .collect()
    }

    fn with(pods: Vec<PodPeers>, old: Option<&StreamLimiterStatus>) -> StreamLimiterStatus {
        let assessment = Assessment::Observed(Observed {
            regions: Some(Box::new(PeersObserved {
                peers: vec!["us".into(), "ap".into()],
                pods,
            })),
            ..Observed::default()
        });
        compute(old, Some(1), &assessment, None, "t0")
    }

    fn reachable(status: &StreamLimiterStatus) -> &Condition {
        status
            .conditions
            .iter()
            .find(|c| c.type_ == REGIONS_REACHABLE)
            .expect("RegionsReachable")
    }

    #[test]
    fn without_spec_regions_there_is_neither_status_nor_condition() {
        let status = compute(
            None,
            Some(1),
            &Assessment::Observed(Observed::default()),
            None,
            "t0",
        );
        assert!(status.regions.is_none());
        assert!(
            status
                .conditions
                .iter()
                .all(|c| c.type_ != REGIONS_REACHABLE)
        );
        let json = serde_json::to_value(&status).unwrap();
        assert!(json.get("regions").is_none(), "{json}");
    }

    #[test]
    fn every_peer_answering_some_pod_is_reachable() {
        let status = with(
            vec![
                pod(&[("us", true, Some(0.0834)), ("ap", true, Some(0.21))]),
                pod(&[("us", true, Some(0.0712)), ("ap", false, Some(0.19))]),
            ],
            None,
        );
        let c = reachable(&status);
        assert_eq!(
            (c.status.as_str(), c.reason.as_str()),
            ("True", "PeersReachable")
        );
        assert!(c.message.contains("us, ap"), "{}", c.message);
        let json = serde_json::to_value(status.regions.as_ref().unwrap()).unwrap();
        assert_eq!(
            json,
            serde_json::json!({"peers": [
                {"name": "us", "state": "Reachable", "podsReachable": 2, "podsAsked": 2, "lastCallMillis": 83},
                {"name": "ap", "state": "Reachable", "podsReachable": 1, "podsAsked": 2, "lastCallMillis": 210},
            ]})
        );
    }

    #[test]
    fn a_peer_no_pod_reaches_is_named_in_a_false_condition() {
        let status = with(
            vec![
                pod(&[("us", false, Some(0.08)), ("ap", true, Some(0.2))]),
                pod(&[("us", false, None), ("ap", true, None)]),
            ],
            None,
        );
        let c = reachable(&status);
        assert_eq!(
            (c.status.as_str(), c.reason.as_str()),
            ("False", "PeerUnreachable")
        );
        assert!(c.message.starts_with("peer region us "), "{}", c.message);
        let us = &status.regions.as_ref().unwrap().peers[0];
        assert_eq!((us.state, us.pods_reachable), (PeerState::Unreachable, 0));
    }

    #[test]
    fn a_peer_never_called_or_no_pod_asked_is_unknown() {
        let status = with(vec![pod(&[("us", true, Some(0.08))]), pod(&[])], None);
        let c = reachable(&status);
        assert_eq!(
            (c.status.as_str(), c.reason.as_str()),
            ("Unknown", "PeersNotCalledYet")
        );
        assert!(c.message.contains("peer region ap yet"), "{}", c.message);
        let ap = &status.regions.as_ref().unwrap().peers[1];
        assert_eq!(
            (ap.state, ap.pods_asked, ap.last_call_millis),
            (PeerState::Unknown, 2, None)
        );

        let none = with(Vec::new(), None);
        let c = reachable(&none);
        assert_eq!(
            (c.status.as_str(), c.reason.as_str()),
            ("Unknown", "NoPodAsked")
        );
        let peers = &none.regions.as_ref().unwrap().peers;
        assert_eq!(peers.len(), 2);
        assert!(
            peers
                .iter()
                .all(|p| p.state == PeerState::Unknown && p.pods_asked == 0)
        );
    }

    #[test]
    fn call_time_jitter_does_not_change_the_status() {
        let first = with(
            vec![pod(&[("us", true, Some(0.080)), ("ap", true, Some(0.2))])],
            None,
        );
        let again = with(
            vec![pod(&[("us", true, Some(0.092)), ("ap", true, Some(0.21))])],
            Some(&first),
        );
        assert_eq!(again, first, "a rewrite would trigger another reconcile");
        let slower = with(
            vec![pod(&[("us", true, Some(0.3)), ("ap", true, Some(0.2))])],
            Some(&first),
        );
        assert_eq!(slower.regions.unwrap().peers[0].last_call_millis, Some(300));
    }

    #[test]
    fn an_invalid_spec_keeps_what_was_observed() {
        let before = with(vec![pod(&[("us", false, None), ("ap", true, None)])], None);
        let invalid = Assessment::Invalid(vec![FieldError {
            field: "spec.regions".into(),
            message: "bad".into(),
        }]);
        let after = compute(Some(&before), Some(2), &invalid, None, "t1");
        assert_eq!(after.regions, before.regions);
        assert_eq!(reachable(&after), reachable(&before));
    }
}
