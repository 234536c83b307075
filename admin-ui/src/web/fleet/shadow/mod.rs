//! The fleet page's "Shadow refusals" panel: the enforcement in force (from the instances'
//! `/v1/fleet`), and per plan, over the last hour and the last day, the share of its plays that
//! were let through in shadow although a rule would have refused them, split by rule (from
//! Prometheus's `screenlimit_plays_total`): "Standard would refuse 0.4 % of plays (1 h), 80 % of
//! them by the mobile cap".
//!
//! `counts.rs` what Prometheus counted, `words.rs` how the panel says it; this file the panel.

mod counts;
#[cfg(test)]
mod samples;
mod words;

use std::collections::{BTreeMap, BTreeSet};

pub use counts::{Counted, count};
use counts::{Counts, Window};
use words::{default_words, percent, plan_state, plan_words, plays, sentence};

use crate::limiter::Enforcement;
use crate::view;

/// What the panel knows of the counts.
pub enum Figures {
    /// No `--prometheus-url`.
    NoPrometheus,
    /// Prometheus did not answer, in words.
    Failed(String),
    Counted(Counted),
}

/// What one reachable limiter instance says: its `enforcement` (`None` from a limiter older than
/// shadow enforcement, which enforces every account) and its plans.
#[derive(Debug, Clone, PartialEq)]
pub struct InstanceEnforcement {
    pub enforcement: Option<Enforcement>,
    pub plans: Vec<String>,
}

/// One plan over one window.
pub struct WindowView {
    pub window: &'static str,
    pub sentence: String,
    pub plays: String,
    pub refused: String,
    pub share: String,
    /// "mobile cap 8 · stream limit 2", or "—".
    pub by_rule: String,
}

/// One plan with plays let through in shadow, or in shadow now.
pub struct PlanView {
    pub plan: String,
    pub name: String,
    /// "in shadow", "in shadow for 90 % of accounts", "enforced now".
    pub state: String,
    pub windows: Vec<WindowView>,
}

/// The panel.
pub struct ShadowView {
    /// "Enforcement: 10 % of accounts (the rest in shadow); Premium: shadow".
    pub enforcement: String,
    /// Whether any account is in shadow now (as the first instance that answered says).
    pub any_shadow: bool,
    /// The one line when nothing is in shadow and no play was let through in shadow.
    pub quiet: Option<String>,
    /// Where the shares come from, without Prometheus.
    pub note: Option<String>,
    /// Why Prometheus gave no counts.
    pub error: Option<String>,
    pub plans: Vec<PlanView>,
}

impl ShadowView {
    /// The panel from the reachable instances' answers (in the page's order) and the counts.
    pub fn new(instances: &[InstanceEnforcement], figures: Figures) -> ShadowView {
        let first = instances.first();
        let enforcement = first.map(|i| {
            i.enforcement.clone().unwrap_or(Enforcement {
                enforce_percent: 100,
                plans: BTreeMap::new(),
            })
        });
        let plan_percent = |plan: &str| {
            let e = enforcement.as_ref()?;
            let configured = first.is_some_and(|i| i.plans.iter().any(|p| p == plan));
            configured.then(|| e.plans.get(plan).copied().unwrap_or(e.enforce_percent))
        };
        let mut line = match (&enforcement, first) {
            (Some(e), Some(i)) => {
                let mut line = format!("Enforcement: {}", default_words(e.enforce_percent));
                for (plan, percent) in &e.plans {
                    line.push_str(&format!(
                        "; {}: {}",
                        view::plan_name(plan),
                        plan_words(*percent)
                    ));
                }
                if i.enforcement.is_none() {
                    line.push_str(" (the limiter is older than shadow enforcement)");
                }
                line
            }
            _ => "Enforcement: not known (no limiter instance answered)".into(),
        };
        if instances
            .iter()
            .any(|i| i.enforcement != instances[0].enforcement)
        {
            line.push_str(
                ". The instances do not all say the same (a configuration change on its way?): \
                 this is the first one's",
            );
        }
        let any_shadow = enforcement
            .as_ref()
            .is_some_and(|e| e.enforce_percent < 100 || e.plans.values().any(|p| *p < 100));
        let shadow_plans: BTreeSet<String> = first
            .map(|i| i.plans.iter())
            .into_iter()
            .flatten()
            .filter(|plan| plan_percent(plan).is_some_and(|p| p < 100))
            .cloned()
            .collect();
        let mut view = ShadowView {
            enforcement: line,
            any_shadow,
            quiet: None,
            note: None,
            error: None,
            plans: Vec::new(),
        };
        let counted = match figures {
            Figures::NoPrometheus => {
                if any_shadow {
                    view.note = Some(
                        "The shares of plays that would be refused come from Prometheus: start \
                         the dashboard with --prometheus-url pointing at one that scrapes the \
                         limiters."
                            .into(),
                    );
                } else if enforcement.is_some() {
                    view.quiet =
                        Some("No account is in shadow: every play over a limit is refused.".into());
                }
                return view;
            }
            Figures::Failed(error) => {
                view.error = Some(format!(
                    "{error}. The plays that would be refused cannot be counted now."
                ));
                return view;
            }
            Figures::Counted(counted) => counted,
        };
        let refused_plans: BTreeSet<String> = counted
            .iter()
            .flat_map(|(_, plans)| plans.iter())
            .filter(|(_, c)| c.shadow_refused() > 0.0)
            .map(|(plan, _)| plan.clone())
            .collect();
        if !any_shadow && refused_plans.is_empty() {
            view.quiet = Some(
                "No account is in shadow, and no play was let through in shadow in the last day."
                    .into(),
            );
            return view;
        }
        view.plans = shadow_plans
            .union(&refused_plans)
            .map(|plan| PlanView {
                plan: plan.clone(),
                name: view::plan_name(plan),
                state: plan_state(plan_percent(plan)),
                windows: counted
                    .iter()
                    .map(|(window, plans)| {
                        window_view(plan, *window, &plans.get(plan).cloned().unwrap_or_default())
                    })
                    .collect(),
            })
            .collect();
        view
    }
}

/// One plan's row over one window.
fn window_view(plan: &str, window: Window, counts: &Counts) -> WindowView {
    let by_rule: Vec<String> = counts
        .rule_shares()
        .iter()
        .map(|(rule, _)| {
            let words = rule.words();
            let short = words.strip_prefix("the ").unwrap_or(&words).to_owned();
            format!("{short} {}", plays(counts.by_rule[rule]))
        })
        .collect();
    WindowView {
        window: window.label(),
        sentence: sentence(plan, window, counts),
        plays: plays(counts.plays.max(counts.shadow_refused())),
        refused: plays(counts.shadow_refused()),
        share: counts.share().map_or_else(|| "—".into(), percent),
        by_rule: match by_rule.is_empty() {
            true => "—".into(),
            false => by_rule.join(" · "),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::counts::counts;
    use super::samples::{refused, sample};
    use super::*;

    fn instance(enforce_percent: u8, plans: &[(&str, u8)]) -> InstanceEnforcement {
        InstanceEnforcement {
            enforcement: Some(Enforcement {
                enforce_percent,
                plans: plans.iter().map(|(p, n)| ((*p).to_owned(), *n)).collect(),
            }),
            plans: vec!["basic".into(), "premium".into(), "standard".into()],
        }
    }

    #[test]
    fn the_enforcement_line_names_the_share_and_the_plans_with_their_own() {
        let view = ShadowView::new(&[instance(10, &[("premium", 0)])], Figures::NoPrometheus);
        assert_eq!(
            view.enforcement,
            "Enforcement: 10 % of accounts (the rest in shadow); Premium: shadow"
        );
        assert!(view.any_shadow);
        assert!(view.note.as_deref().unwrap().contains("--prometheus-url"));
        assert!(view.plans.is_empty() && view.quiet.is_none());
        let all = ShadowView::new(&[instance(0, &[("premium", 100)])], Figures::NoPrometheus);
        assert_eq!(
            all.enforcement,
            "Enforcement: no account (all in shadow); Premium: enforced"
        );
        let older = ShadowView::new(
            &[InstanceEnforcement {
                enforcement: None,
                plans: vec!["basic".into()],
            }],
            Figures::NoPrometheus,
        );
        assert_eq!(
            older.enforcement,
            "Enforcement: every account (the limiter is older than shadow enforcement)"
        );
        assert!(!older.any_shadow && older.quiet.is_some());
        let none = ShadowView::new(
            &[],
            Figures::Failed("Prometheus at x did not answer".into()),
        );
        assert_eq!(
            none.enforcement,
            "Enforcement: not known (no limiter instance answered)"
        );
        assert_eq!(
            none.error.as_deref(),
            Some(
                "Prometheus at x did not answer. The plays that would be refused cannot be \
                 counted now."
            )
        );
        let differ = ShadowView::new(
            &[instance(10, &[]), instance(20, &[])],
            Figures::NoPrometheus,
        );
        assert!(
            differ.enforcement.contains("do not all say the same"),
            "{}",
            differ.enforcement
        );
    }

    #[test]
    fn nothing_in_shadow_and_nothing_let_through_is_one_line() {
        let quiet = || {
            vec![
                (
                    Window::Hour,
                    counts(&[], &[sample(&[("plan", "basic")], 10.0)]),
                ),
                (Window::Day, BTreeMap::new()),
            ]
        };
        let view = ShadowView::new(&[instance(100, &[])], Figures::Counted(quiet()));
        assert_eq!(
            view.quiet.as_deref(),
            Some("No account is in shadow, and no play was let through in shadow in the last day.")
        );
        assert!(view.plans.is_empty());
        // Enforced now, but plays were let through before the switch: they are shown.
        let before = vec![
            (Window::Hour, BTreeMap::new()),
            (
                Window::Day,
                counts(
                    &[refused("standard", "max_streams", "", 4.0)],
                    &[sample(&[("plan", "standard")], 100.0)],
                ),
            ),
        ];
        let view = ShadowView::new(&[instance(100, &[])], Figures::Counted(before));
        assert!(view.quiet.is_none());
        let [standard] = &view.plans[..] else {
            panic!("one plan");
        };
        assert_eq!(standard.state, "enforced now");
        assert_eq!(standard.windows[0].sentence, "Standard: no plays (1 h)");
        assert_eq!(
            standard.windows[1].sentence,
            "Standard would refuse 4 % of plays (24 h), 100 % of them by the stream limit"
        );
        assert_eq!(
            (
                standard.windows[1].plays.as_str(),
                standard.windows[1].refused.as_str(),
                standard.windows[1].by_rule.as_str()
            ),
            ("100", "4", "stream limit 4")
        );
    }

    #[test]
    fn every_plan_in_shadow_is_listed_with_both_windows() {
        let counted = vec![
            (
                Window::Hour,
                counts(
                    &[
                        refused("standard", "device_type_cap", "mobile", 8.2),
                        refused("standard", "max_streams", "", 1.9),
                    ],
                    &[
                        sample(&[("plan", "standard")], 2500.0),
                        sample(&[("plan", "premium")], 300.0),
                    ],
                ),
            ),
            (Window::Day, BTreeMap::new()),
        ];
        let view = ShadowView::new(
            &[instance(100, &[("standard", 0), ("premium", 25)])],
            Figures::Counted(counted),
        );
        let names: Vec<(&str, &str)> = view
            .plans
            .iter()
            .map(|p| (p.name.as_str(), p.state.as_str()))
            .collect();
        assert_eq!(
            names,
            [
                ("Premium", "in shadow for 75 % of accounts"),
                ("Standard", "in shadow")
            ]
        );
        let premium = &view.plans[0].windows[0];
        assert_eq!(
            premium.sentence,
            "Premium would refuse none of its plays (1 h)"
        );
        let standard = &view.plans[1].windows[0];
        assert_eq!(standard.window, "1 h");
        assert_eq!(standard.share, "0.4 %");
        assert_eq!(standard.refused, "10");
        assert_eq!(standard.by_rule, "mobile cap 8 · stream limit 2");
        assert_eq!(view.plans[1].windows[1].share, "—");
    }
}
