//! What Prometheus counted: each plan's plays and, by the rule that would have refused them,
//! its plays let through in shadow, over the last hour and day (`screenlimit_plays_total`).

use std::collections::BTreeMap;

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
    pub(super) fn of(labels: &BTreeMap<String, String>) -> Rule {
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

#[cfg(test)]
mod tests {
    use super::*;

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
}
