//! The pure status step's `MonitoringAvailable` condition.

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
