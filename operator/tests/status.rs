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
