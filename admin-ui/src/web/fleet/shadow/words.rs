//! The panel's words: the enforcement in force, a share, a count, and the sentence a platform
//! team reads ("Standard would refuse 0.4 % of plays (1 h), 80 % of them by the mobile cap").

use super::counts::{Counts, Window};
use crate::view;

/// A share enforced, for the whole fleet: "every account", "10 % of accounts (the rest in
/// shadow)".
pub(super) fn default_words(percent: u8) -> String {
    match percent {
        100.. => "every account".into(),
        0 => "no account (all in shadow)".into(),
        n => format!("{n} % of accounts (the rest in shadow)"),
    }
}

/// A plan's own share enforced: "shadow", "enforced", "25 % of accounts".
pub(super) fn plan_words(percent: u8) -> String {
    match percent {
        100.. => "enforced".into(),
        0 => "shadow".into(),
        n => format!("{n} % of accounts"),
    }
}

/// How much of a plan is in shadow, beside its sentences.
pub(super) fn plan_state(percent: Option<u8>) -> String {
    match percent {
        None => "not a plan of the limiter now".into(),
        Some(100..) => "enforced now".into(),
        Some(0) => "in shadow".into(),
        Some(n) => format!("in shadow for {} % of accounts", 100 - n),
    }
}

/// A share as the panel writes it: `0.4 %`, `80 %`, `< 0.1 %`, `> 99 %`.
pub fn percent(value: f64) -> String {
    let trim = |s: String| match s.strip_suffix(".0") {
        Some(whole) => whole.to_owned(),
        None => s,
    };
    match value {
        v if v <= 0.0 => "0 %".into(),
        v if v < 0.1 => "< 0.1 %".into(),
        v if v < 10.0 => format!("{} %", trim(format!("{v:.1}"))),
        v if v < 99.5 => format!("{v:.0} %"),
        v if v < 100.0 => "> 99 %".into(),
        _ => "100 %".into(),
    }
}

/// A count as the panel writes it (Prometheus extrapolates: rounded to a whole play).
pub(super) fn plays(value: f64) -> String {
    format!("{:.0}", value.max(0.0))
}

/// "A", "A and B", "A, B and C".
fn listed(parts: &[String]) -> String {
    match parts {
        [] => String::new(),
        [one] => one.clone(),
        [rest @ .., last] => format!("{} and {last}", rest.join(", ")),
    }
}

/// "Standard would refuse 0.4 % of plays (1 h), 80 % of them by the mobile cap and 20 % by the
/// stream limit".
pub fn sentence(plan: &str, window: Window, counts: &Counts) -> String {
    let plan = view::plan_name(plan);
    let label = window.label();
    let Some(share) = counts.share() else {
        return format!("{plan}: no plays ({label})");
    };
    let rules = counts.rule_shares();
    if rules.is_empty() {
        return format!("{plan} would refuse none of its plays ({label})");
    }
    let by: Vec<String> = rules
        .iter()
        .enumerate()
        .map(|(i, (rule, part))| match i {
            0 => format!("{} of them by {}", percent(*part), rule.words()),
            _ => format!("{} by {}", percent(*part), rule.words()),
        })
        .collect();
    format!(
        "{plan} would refuse {} of plays ({label}), {}",
        percent(share),
        listed(&by)
    )
}

#[cfg(test)]
mod tests {
    use super::super::counts::{Rule, counts};
    use super::super::samples::{refused, sample};
    use super::*;

    #[test]
    fn a_plans_share_is_its_shadow_refusals_over_all_its_plays_split_by_rule() {
        let by_plan = counts(
            &[
                refused("standard", "device_type_cap", "mobile", 8.0),
                refused("standard", "max_streams", "", 2.0),
                refused("premium", "max_streams", "", 1.0),
            ],
            &[
                sample(&[("plan", "standard")], 2500.0),
                sample(&[("plan", "premium")], 0.5),
                sample(&[("plan", "basic")], 40.0),
            ],
        );
        let standard = &by_plan["standard"];
        assert_eq!(standard.shadow_refused(), 10.0);
        assert_eq!(standard.share(), Some(0.4));
        assert_eq!(
            standard.rule_shares(),
            [(Rule::Cap("mobile".into()), 80.0), (Rule::MaxStreams, 20.0)]
        );
        assert_eq!(
            sentence("standard", Window::Hour, standard),
            "Standard would refuse 0.4 % of plays (1 h), 80 % of them by the mobile cap and 20 % \
             by the stream limit"
        );
        // Extrapolated apart, the part may exceed the whole: never over 100 %.
        assert_eq!(by_plan["premium"].share(), Some(100.0));
        let basic = &by_plan["basic"];
        assert_eq!(basic.share(), Some(0.0));
        assert!(basic.rule_shares().is_empty());
        assert_eq!(
            sentence("basic", Window::Day, basic),
            "Basic would refuse none of its plays (24 h)"
        );
        assert_eq!(
            sentence("gold", Window::Day, &Counts::default()),
            "Gold: no plays (24 h)"
        );
    }

    #[test]
    fn caps_are_split_per_device_type_and_unknown_rules_keep_their_label() {
        let by_plan = counts(
            &[
                refused("standard", "device_type_cap", "mobile", 3.0),
                refused("standard", "device_type_cap", "tv", 1.0),
                refused("standard", "device_type_cap", "mobile", 3.0),
                refused("standard", "new_rule", "", 3.0),
            ],
            &[sample(&[("plan", "standard")], 100.0)],
        );
        let shares = by_plan["standard"].rule_shares();
        assert_eq!(
            shares,
            [
                (Rule::Cap("mobile".into()), 60.0),
                (Rule::Other("new_rule".into()), 30.0),
                (Rule::Cap("tv".into()), 10.0),
            ]
        );
        assert_eq!(
            sentence("standard", Window::Hour, &by_plan["standard"]),
            "Standard would refuse 10 % of plays (1 h), 60 % of them by the mobile cap, 30 % by \
             the rule new_rule and 10 % by the TV cap"
        );
        assert_eq!(Rule::Cap(String::new()).words(), "a device-type cap");
        assert_eq!(Rule::Cap("watch".into()).words(), "the watch cap");
        assert_eq!(Rule::Cap("other".into()).words(), "the other cap");
    }

    #[test]
    fn shares_are_written_with_the_precision_they_have() {
        assert_eq!(percent(0.0), "0 %");
        assert_eq!(percent(0.04), "< 0.1 %");
        assert_eq!(percent(0.4), "0.4 %");
        assert_eq!(percent(5.0), "5 %");
        assert_eq!(percent(12.4), "12 %");
        assert_eq!(percent(99.7), "> 99 %");
        assert_eq!(percent(100.0), "100 %");
    }
}
