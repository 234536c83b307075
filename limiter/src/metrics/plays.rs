//! `screenlimit_plays_total{decision, plan, rule, device_type}`: every play-start's outcome by
//! plan and, for a refusal or a refusal it would have been (shadow), by the rule: what a platform
//! team reads before and while it switches enforcement on ("Standard would refuse 0.4 % of
//! plays, 80 % of them by the mobile cap").

use prometheus::{IntCounterVec, Opts, Registry};

use crate::model::DenyRule;

/// A play-start's outcome, the `decision` label.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PlayOutcome {
    /// Granted by the store.
    Allowed,
    /// Refused by the store.
    Denied,
    /// Granted in shadow although the limits would have refused it.
    ShadowRefused,
    /// Answered by the failure policy, not the store.
    Degraded,
}

impl PlayOutcome {
    pub fn label(self) -> &'static str {
        match self {
            PlayOutcome::Allowed => "allowed",
            PlayOutcome::Denied => "denied",
            PlayOutcome::ShadowRefused => "shadow_refused",
            PlayOutcome::Degraded => "degraded",
        }
    }
}

/// The rule's labels: its name (as the 409 answer names it) and the capped type; empty for a
/// play no rule refused.
fn rule_labels(rule: Option<DenyRule>) -> (&'static str, &'static str) {
    match rule {
        None => ("", ""),
        Some(DenyRule::MaxStreams) => (DenyRule::MaxStreams.name(), ""),
        Some(rule @ DenyRule::DeviceTypeCap { kind, .. }) => (rule.name(), kind.name()),
    }
}

/// The counter; its plan label takes only configured plan names, so its series stay few.
#[derive(Clone)]
pub struct PlayCounter(IntCounterVec);

impl PlayCounter {
    pub fn register(registry: &Registry) -> PlayCounter {
        let counter = IntCounterVec::new(
            Opts::new(
                "plays_total",
                "Play-starts by decision (allowed, denied, shadow_refused: let through in shadow although a rule would have refused it, degraded), plan, and the rule that refused or would have (max_streams, device_type_cap, with the device_type capped)",
            ),
            &["decision", "plan", "rule", "device_type"],
        )
        .expect("valid metric");
        registry
            .register(Box::new(counter.clone()))
            .expect("metric registered once");
        PlayCounter(counter)
    }

    pub fn count(&self, outcome: PlayOutcome, plan: &str, rule: Option<DenyRule>) {
        let (rule, device_type) = rule_labels(rule);
        self.0
            .with_label_values(&[outcome.label(), plan, rule, device_type])
            .inc();
    }
}
