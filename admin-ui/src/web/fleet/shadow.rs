//! The fleet page's "Shadow refusals" panel: the enforcement in force (from the instances'
//! `/v1/fleet`), and per plan, over the last hour and the last day, the share of its plays that
//! were let through in shadow although a rule would have refused them, split by rule (from
//! Prometheus's `screenlimit_plays_total`): "Standard would refuse 0.4 % of plays (1 h), 80 % of
//! them by the mobile cap".

use std::collections::{BTreeMap, BTreeSet};

use crate::limiter::Enforcement;
use crate::prometheus::{PrometheusClient, PrometheusError, Sample};
use crate::view;

/// A window the panel counts over.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Window {
    Hour,
    Day,
}

impl Window {
    pub const ALL: [Window; 2] = [Window::Hour, Window::Day];

    /// The range selector of the queries.
    fn promql(self) -> &'static str {
        match self {
            Window::Hour => "1h",
            Window::Day => "1d",
        }
    }

    /// As the sentences and the table name it; also the rows' `data-window`.
    pub fn label(self) -> &'static str {
        match self {
            Window::Hour => "1 h",
            Window::Day => "24 h",
        }
    }
}

/// The PromQL of one window: the plays let through in shadow by plan and rule, and every play
/// by plan. No name from the limiter enters a query: Prometheus groups by plan, and the panel
/// reads the plans from the answer's labels.
pub fn queries(window: Window) -> (String, String) {
    let w = window.promql();
    (
        format!(
            "sum by (plan, rule, device_type) \
             (increase(screenlimit_plays_total{{decision=\"shadow_refused\"}}[{w}]))"
        ),
        format!("sum by (plan) (increase(screenlimit_plays_total[{w}]))"),
    )
}

/// The rule that would have refused a play: the account's stream limit (its plan's, or a
/// temporary one), or one device type's cap.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub enum Rule {
    MaxStreams,
    /// The capped type (`mobile`, `tv`, …; empty when the series does not say).
    Cap(String),
    /// A rule a newer limiter counts, by its label.
    Other(String),
}

impl Rule {
    fn of(labels: &BTreeMap<String, String>) -> Rule {
        let label = |name: &str| labels.get(name).cloned().unwrap_or_default();
        match label("rule").as_str() {
            "max_streams" => Rule::MaxStreams,
            "device_type_cap" => Rule::Cap(label("device_type")),
            other => Rule::Other(other.to_owned()),
        }
    }

    /// "the stream limit", "the mobile cap", "the TV cap".
    pub fn words(&self) -> String {
        match self {
            Rule::MaxStreams => "the stream limit".into(),
            Rule::Cap(kind) if kind.is_empty() => "a device-type cap".into(),
            Rule::Cap(kind) => match view::device_type_label(kind) {
                "TV" => "the TV cap".into(),
                "Other" if kind != "other" => format!("the {kind} cap"),
                label => format!("the {} cap", label.to_lowercase()),
            },
            Rule::Other(label) if label.is_empty() => "an unnamed rule".into(),
            Rule::Other(label) => format!("the rule {label}"),
        }
    }
}

/// One plan's plays over one window, as Prometheus counted them (`increase`: extrapolated over
/// the window, so not always whole numbers).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Counts {
    /// Every play: allowed, denied, let through in shadow, degraded.
    pub plays: f64,
    /// The plays let through in shadow, by the rule that would have refused them.
    pub by_rule: BTreeMap<Rule, f64>,
}

impl Counts {
    /// The plays let through in shadow.
    pub fn shadow_refused(&self) -> f64 {
        self.by_rule.values().sum()
    }

    /// The share of the plays that were let through in shadow, in percent (none without plays).
    /// Each series is extrapolated on its own, so the part can come out above the whole: the
    /// whole is at least the part.
    pub fn share(&self) -> Option<f64> {
        let refused = self.shadow_refused();
        let plays = self.plays.max(refused);
        (plays > 0.0).then(|| refused * 100.0 / plays)
    }

    /// Each rule's part of the plays let through in shadow, in percent, the largest first.
    pub fn rule_shares(&self) -> Vec<(Rule, f64)> {
        let refused = self.shadow_refused();
        if refused <= 0.0 {
            return Vec::new();
        }
        let mut shares: Vec<(Rule, f64)> = self
            .by_rule
            .iter()
            .filter(|(_, n)| **n > 0.0)
            .map(|(rule, n)| (rule.clone(), n * 100.0 / refused))
            .collect();
        shares.sort_by(|a, b| b.1.total_cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
        shares
    }
}

/// Each plan's counts over a window, from the answers of its two queries.
pub fn counts(refused: &[Sample], plays: &[Sample]) -> BTreeMap<String, Counts> {
    let plan = |s: &Sample| s.labels.get("plan").cloned().unwrap_or_default();
    let mut by_plan: BTreeMap<String, Counts> = BTreeMap::new();
    for sample in plays {
        by_plan.entry(plan(sample)).or_default().plays += sample.value.max(0.0);
    }
    for sample in refused {
        *by_plan
            .entry(plan(sample))
            .or_default()
            .by_rule
            .entry(Rule::of(&sample.labels))
            .or_default() += sample.value.max(0.0);
    }
    by_plan
}

/// Each window's counts per plan, in the order of [`Window::ALL`].
pub type Counted = Vec<(Window, BTreeMap<String, Counts>)>;

/// The counts of both windows at `now` (unix seconds): four instant queries at once, each with
/// the client's deadline.
pub async fn count(client: &PrometheusClient, now: u64) -> Result<Counted, PrometheusError> {
    let [(hour_refused, hour_plays), (day_refused, day_plays)] = Window::ALL.map(queries);
    let (hour_refused, hour_plays, day_refused, day_plays) = tokio::try_join!(
        client.query(&hour_refused, now),
        client.query(&hour_plays, now),
        client.query(&day_refused, now),
        client.query(&day_plays, now),
    )?;
    Ok(vec![
        (Window::Hour, counts(&hour_refused, &hour_plays)),
        (Window::Day, counts(&day_refused, &day_plays)),
    ])
}

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

/// A share enforced, for the whole fleet: "every account", "10 % of accounts (the rest in
/// shadow)".
fn default_words(percent: u8) -> String {
    match percent {
        100.. => "every account".into(),
        0 => "no account (all in shadow)".into(),
        n => format!("{n} % of accounts (the rest in shadow)"),
    }
}

/// A plan's own share enforced: "shadow", "enforced", "25 % of accounts".
fn plan_words(percent: u8) -> String {
    match percent {
        100.. => "enforced".into(),
        0 => "shadow".into(),
        n => format!("{n} % of accounts"),
    }
}

/// How much of a plan is in shadow, beside its sentences.
fn plan_state(percent: Option<u8>) -> String {
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
fn plays(value: f64) -> String {
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
                        let counts = plans.get(plan).cloned().unwrap_or_default();
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
                            sentence: sentence(plan, *window, &counts),
                            plays: plays(counts.plays.max(counts.shadow_refused())),
                            refused: plays(counts.shadow_refused()),
                            share: counts.share().map_or_else(|| "—".into(), percent),
                            by_rule: match by_rule.is_empty() {
                                true => "—".into(),
                                false => by_rule.join(" · "),
                            },
                        }
                    })
                    .collect(),
            })
            .collect();
        view
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample(labels: &[(&str, &str)], value: f64) -> Sample {
        Sample {
            labels: labels
                .iter()
                .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                .collect(),
            value,
        }
    }

    fn refused(plan: &str, rule: &str, kind: &str, value: f64) -> Sample {
        sample(
            &[("plan", plan), ("rule", rule), ("device_type", kind)],
            value,
        )
    }

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
    fn the_queries_group_by_plan_and_rule_and_name_no_plan() {
        let (refused, plays) = queries(Window::Hour);
        assert_eq!(
            refused,
            "sum by (plan, rule, device_type) (increase(screenlimit_plays_total{decision=\"shadow_refused\"}[1h]))"
        );
        assert_eq!(
            plays,
            "sum by (plan) (increase(screenlimit_plays_total[1h]))"
        );
        let (refused, plays) = queries(Window::Day);
        assert!(refused.ends_with("[1d]))") && plays.ends_with("[1d]))"));
    }

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
