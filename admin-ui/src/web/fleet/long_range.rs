//! The fleet charts over a longer range (1 h, 6 h, 24 h), drawn from Prometheus's
//! `query_range` where one is configured (`--prometheus-url`): the same two charts as the
//! dashboard's own samples draw for the last 10 minutes, from the limiters' scraped
//! `screenlimit_decisions_total`, summed over every instance Prometheus scrapes.

use crate::prometheus::{PrometheusClient, PrometheusError, Series};

use super::chart::{Chart, SeriesInput, Unit};
use super::drawn::DRAWN;

/// Points per chart (as many as the 10-minute charts have buckets).
pub const POINTS: u64 = 60;
/// The shortest rate window: Prometheus needs two scrapes inside one, at the usual 30 s–1 min.
const MIN_WINDOW_SEC: u64 = 120;

/// A range the charts offer where Prometheus is configured.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Range {
    Hour,
    SixHours,
    Day,
}

impl Range {
    pub const ALL: [Range; 3] = [Range::Hour, Range::SixHours, Range::Day];

    /// The `range` query parameter's value.
    pub fn param(self) -> &'static str {
        match self {
            Range::Hour => "1h",
            Range::SixHours => "6h",
            Range::Day => "24h",
        }
    }

    pub fn parse(text: &str) -> Option<Range> {
        Range::ALL.into_iter().find(|r| r.param() == text)
    }

    pub fn seconds(self) -> u64 {
        match self {
            Range::Hour => 3600,
            Range::SixHours => 6 * 3600,
            Range::Day => 24 * 3600,
        }
    }

    /// Seconds between two points.
    pub fn step(self) -> u64 {
        self.seconds() / POINTS
    }
}

/// The PromQL of the two charts, each rate over `window` seconds.
pub fn queries(window: u64) -> (String, String) {
    let kinds: Vec<&str> = DRAWN.iter().map(|(name, _)| *name).collect();
    let decisions = format!(
        "sum by (decision) (rate(screenlimit_decisions_total{{decision=~\"{}\"}}[{window}s]))",
        kinds.join("|")
    );
    // No degraded decision at all is a share of 0 %, not a gap; no decision at all stays a gap.
    let degraded = format!(
        "100 * (sum(rate(screenlimit_decisions_total{{decision=\"degraded\"}}[{window}s])) or vector(0)) \
         / sum(rate(screenlimit_decisions_total[{window}s]))"
    );
    (decisions, degraded)
}

/// Each series' values on the grid of `POINTS` points ending at `end`, `step` apart (`None`
/// where Prometheus has none).
fn on_grid(series: &Series, end: u64, step: u64) -> Vec<Option<f64>> {
    let start = end.saturating_sub(step * (POINTS - 1)) as f64;
    let mut values = vec![None; POINTS as usize];
    for (at, value) in &series.points {
        let index = ((at - start) / step as f64).round();
        if (0.0..POINTS as f64).contains(&index) {
            values[index as usize] = Some(*value);
        }
    }
    values
}

/// The two charts over `range` ending at `now` (unix seconds), from two range queries.
pub async fn charts(
    client: &PrometheusClient,
    range: Range,
    now: u64,
) -> Result<Vec<Chart>, PrometheusError> {
    let step = range.step();
    // The newest point is now (not the last multiple of the step, which for 24 h could be 24
    // minutes old).
    let end = now;
    let start = end.saturating_sub(step * (POINTS - 1));
    let (decisions_query, degraded_query) = queries(step.max(MIN_WINDOW_SEC));
    let (decisions, degraded) = tokio::try_join!(
        client.query_range(&decisions_query, start, end, step),
        client.query_range(&degraded_query, start, end, step),
    )?;
    let by_kind: Vec<(&str, Vec<Option<f64>>)> = DRAWN
        .iter()
        .map(|(name, _)| {
            let values = decisions
                .iter()
                .find(|s| s.labels.get("decision").map(String::as_str) == Some(*name))
                .map(|s| on_grid(s, end, step))
                .unwrap_or_else(|| vec![None; POINTS as usize]);
            (*name, values)
        })
        .collect();
    // Where any kind has a value the others, absent from Prometheus's answer, were 0/s.
    let any: Vec<bool> = (0..POINTS as usize)
        .map(|i| by_kind.iter().any(|(_, v)| v[i].is_some()))
        .collect();
    let decision_lines = DRAWN
        .iter()
        .zip(by_kind)
        .map(|((name, class), (_, values))| SeriesInput {
            name,
            class,
            values: values
                .into_iter()
                .zip(&any)
                .map(|(v, any)| v.or(any.then_some(0.0)))
                .collect(),
        })
        .collect();
    let share = degraded
        .first()
        .map(|s| on_grid(s, end, step))
        .unwrap_or_else(|| vec![None; POINTS as usize]);
    Ok(vec![
        Chart::new(
            "chart-decisions",
            "Decisions per second",
            Unit::PerSecond,
            range.seconds(),
            decision_lines,
        ),
        Chart::new(
            "chart-degraded",
            "Share of decisions answered degraded",
            Unit::Percent,
            range.seconds(),
            vec![SeriesInput {
                name: "degraded",
                class: "degraded",
                values: share,
            }],
        ),
    ])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranges_read_their_parameter_and_have_sixty_points() {
        for range in Range::ALL {
            assert_eq!(Range::parse(range.param()), Some(range));
            assert_eq!(range.step() * POINTS, range.seconds());
        }
        assert_eq!(Range::parse("7d"), None);
        assert_eq!(Range::parse(""), None);
    }

    #[test]
    fn points_land_on_their_place_of_the_grid() {
        let series = Series {
            labels: Default::default(),
            points: vec![(1_000_000.0, 1.0), (1_000_060.0, 2.0), (5.0, 9.0)],
        };
        let grid = on_grid(&series, 1_000_060, 60);
        assert_eq!(grid.len(), POINTS as usize);
        assert_eq!(grid[POINTS as usize - 1], Some(2.0));
        assert_eq!(grid[POINTS as usize - 2], Some(1.0));
        assert_eq!(
            grid.iter().flatten().count(),
            2,
            "a point off the grid is left out"
        );
    }

    #[test]
    fn the_queries_sum_the_drawn_kinds_and_a_missing_degraded_count_is_zero() {
        let (decisions, degraded) = queries(120);
        assert_eq!(
            decisions,
            "sum by (decision) (rate(screenlimit_decisions_total{decision=~\"allowed|denied|degraded|renewed\"}[120s]))"
        );
        assert!(degraded.contains("or vector(0)"), "{degraded}");
    }
}
