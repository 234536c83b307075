//! The fleet charts of the last 10 minutes, drawn from the dashboard's own samples
//! (`history.rs`'s buckets), fleet-wide.

use super::chart::{Chart, SeriesInput, Unit};
use super::drawn::DRAWN;
use super::history;

/// Decisions per second and the degraded share over the last minutes, fleet-wide.
pub(super) fn charts(history: &history::Buckets) -> Vec<Chart> {
    let span = history::HISTORY.as_secs();
    let decisions = DRAWN
        .iter()
        .map(|(name, class)| SeriesInput {
            name,
            class,
            values: history
                .iter()
                .map(|b| b.as_ref().map(|r| r.get(*name).copied().unwrap_or(0.0)))
                .collect(),
        })
        .collect();
    let degraded = vec![SeriesInput {
        name: "degraded",
        class: "degraded",
        values: history
            .iter()
            .map(|b| {
                let rates = b.as_ref()?;
                let all: f64 = rates.values().sum();
                (all > 0.0).then(|| rates.get("degraded").copied().unwrap_or(0.0) / all * 100.0)
            })
            .collect(),
    }];
    vec![
        Chart::new(
            "chart-decisions",
            "Decisions per second",
            Unit::PerSecond,
            span,
            decisions,
        ),
        Chart::new(
            "chart-degraded",
            "Share of decisions answered degraded",
            Unit::Percent,
            span,
            degraded,
        ),
    ]
}
