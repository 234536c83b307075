//! Small line charts drawn on the server as SVG (the template writes the elements; this module
//! does the arithmetic): a y scale that ends on a round number, lines broken where there is no
//! data, a dot for a point with no neighbour, and the same numbers as text for screen readers
//! and for anyone who would rather read them.

/// What the values are, for axis labels and text.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Unit {
    PerSecond,
    Percent,
}

impl Unit {
    pub fn format(self, value: f64) -> String {
        match self {
            Unit::PerSecond => format!("{}/s", compact(value)),
            Unit::Percent => format!("{}%", compact(value)),
        }
    }
}

/// `0`, `0.5`, `12`, `1.2k`, `3.4M`: short enough for an axis.
pub fn compact(value: f64) -> String {
    let trim = |s: String| {
        if s.contains('.') {
            s.trim_end_matches('0').trim_end_matches('.').to_owned()
        } else {
            s
        }
    };
    match value.abs() {
        v if v >= 1e6 => format!("{}M", trim(format!("{:.1}", value / 1e6))),
        v if v >= 1e3 => format!("{}k", trim(format!("{:.1}", value / 1e3))),
        v if v >= 10.0 || v == 0.0 => format!("{value:.0}"),
        _ => trim(format!("{value:.1}")),
    }
}

/// The smallest 1, 2 or 5 × 10ⁿ at or above `value` (at least `floor`).
pub fn nice_ceiling(value: f64, floor: f64) -> f64 {
    let value = value.max(floor);
    let magnitude = 10f64.powf(value.log10().floor());
    [1.0, 2.0, 5.0, 10.0]
        .into_iter()
        .map(|step| step * magnitude)
        .find(|candidate| *candidate >= value * (1.0 - 1e-9))
        .unwrap_or(10.0 * magnitude)
}

/// A chart's span in words: `10 minutes`, `1 hour`, `6 hours`.
pub fn span_words(span_sec: u64) -> String {
    match span_sec / 60 {
        60 => "1 hour".into(),
        minutes if minutes >= 120 && minutes % 60 == 0 => format!("{} hours", minutes / 60),
        minutes => format!("{minutes} minutes"),
    }
}

/// One line's input: its name, a CSS class, and a value per bucket (`None`: no data).
pub struct SeriesInput {
    pub name: &'static str,
    pub class: &'static str,
    pub values: Vec<Option<f64>>,
}

pub struct Tick {
    pub at: f64,
    pub label: String,
}

pub struct Dot {
    pub x: f64,
    pub y: f64,
}

pub struct Line {
    pub name: &'static str,
    pub class: &'static str,
    /// SVG path data: one `M … L …` run per stretch of consecutive values.
    pub path: String,
    /// Points with no neighbour, drawn as dots (a path of one point shows nothing).
    pub dots: Vec<Dot>,
    /// The newest value, as text (`no data` when there is none).
    pub latest: String,
    pub peak: String,
}

/// A row of the chart's numbers as text: how long ago, and each line's value.
pub struct Row {
    pub ago: String,
    pub values: Vec<String>,
}

pub struct Chart {
    /// A prefix for the ids the SVG's title and description carry.
    pub id: &'static str,
    pub title: &'static str,
    pub width: f64,
    pub height: f64,
    pub left: f64,
    pub right: f64,
    pub top: f64,
    pub bottom: f64,
    pub y_ticks: Vec<Tick>,
    pub x_ticks: Vec<Tick>,
    pub lines: Vec<Line>,
    /// No line has a single value.
    pub empty: bool,
    /// The description: what is drawn and the newest values.
    pub desc: String,
    pub rows: Vec<Row>,
}

const WIDTH: f64 = 520.0;
const HEIGHT: f64 = 170.0;
const LEFT: f64 = 52.0;
const RIGHT: f64 = 510.0;
const TOP: f64 = 10.0;
const BOTTOM: f64 = 145.0;

fn round1(value: f64) -> f64 {
    (value * 10.0).round() / 10.0
}

impl Chart {
    /// Lays out `series` (each with one value per bucket, oldest first, the last bucket ending
    /// now) over the last `span_sec` seconds. The y axis starts at 0 and ends at a round number
    /// at or above the highest value (at least `y_floor`; `y_cap` when the unit has a ceiling).
    pub fn new(
        id: &'static str,
        title: &'static str,
        unit: Unit,
        span_sec: u64,
        series: Vec<SeriesInput>,
    ) -> Chart {
        let buckets = series.iter().map(|s| s.values.len()).max().unwrap_or(0);
        let highest = series
            .iter()
            .flat_map(|s| s.values.iter().flatten())
            .fold(0.0f64, |a, b| a.max(*b));
        let y_max = match unit {
            Unit::PerSecond => nice_ceiling(highest, 1.0),
            Unit::Percent => nice_ceiling(highest, 1.0).min(100.0),
        };
        let x_of = |index: usize| {
            // Bucket i is drawn at its end: the last one at "now", on the right edge.
            let fraction = if buckets == 0 {
                1.0
            } else {
                (index + 1) as f64 / buckets as f64
            };
            round1(LEFT + fraction * (RIGHT - LEFT))
        };
        let y_of = |value: f64| {
            let clamped = value.clamp(0.0, y_max);
            round1(BOTTOM - clamped / y_max * (BOTTOM - TOP))
        };
        let lines: Vec<Line> = series
            .iter()
            .map(|s| {
                let mut path = String::new();
                let mut dots = Vec::new();
                let mut run: Vec<(f64, f64)> = Vec::new();
                let mut flush = |run: &mut Vec<(f64, f64)>| {
                    match run.as_slice() {
                        [] => {}
                        [(x, y)] => dots.push(Dot { x: *x, y: *y }),
                        points => {
                            for (i, (x, y)) in points.iter().enumerate() {
                                let op = if i == 0 { 'M' } else { 'L' };
                                if !path.is_empty() {
                                    path.push(' ');
                                }
                                path.push_str(&format!("{op}{x} {y}"));
                            }
                        }
                    }
                    run.clear();
                };
                for (index, value) in s.values.iter().enumerate() {
                    match value {
                        Some(v) => run.push((x_of(index), y_of(*v))),
                        None => flush(&mut run),
                    }
                }
                flush(&mut run);
                let known = s.values.iter().flatten();
                Line {
                    name: s.name,
                    class: s.class,
                    path,
                    dots,
                    latest: s
                        .values
                        .iter()
                        .rev()
                        .flatten()
                        .next()
                        .map_or_else(|| "no data".into(), |v| unit.format(*v)),
                    peak: known
                        .copied()
                        .reduce(f64::max)
                        .map_or_else(|| "no data".into(), |v| unit.format(v)),
                }
            })
            .collect();
        let empty = lines.iter().all(|l| l.path.is_empty() && l.dots.is_empty());
        let y_ticks = [0.0, 0.5, 1.0]
            .into_iter()
            .map(|f| Tick {
                at: y_of(y_max * f),
                label: unit.format(y_max * f),
            })
            .collect();
        let minutes = span_sec / 60;
        let x_ticks = [0, minutes / 2, minutes]
            .into_iter()
            .map(|ago| Tick {
                at: round1(RIGHT - ago as f64 / minutes.max(1) as f64 * (RIGHT - LEFT)),
                label: match ago {
                    0 => "now".into(),
                    ago if ago >= 60 && ago % 60 == 0 => format!("−{} h", ago / 60),
                    ago => format!("−{ago} min"),
                },
            })
            .collect();
        let span = span_words(span_sec);
        let bucket_sec = span_sec / buckets.max(1) as u64;
        let rows = (0..buckets)
            .rev()
            .filter(|i| {
                series
                    .iter()
                    .any(|s| s.values.get(*i).copied().flatten().is_some())
            })
            .map(|i| Row {
                ago: match (buckets - 1 - i) as u64 * bucket_sec {
                    0 => "now".into(),
                    ago => format!("{} ago", crate::view::span(ago as i64)),
                },
                values: series
                    .iter()
                    .map(|s| {
                        s.values
                            .get(i)
                            .copied()
                            .flatten()
                            .map_or_else(|| "—".into(), |v| unit.format(v))
                    })
                    .collect(),
            })
            .collect();
        let desc = if empty {
            format!("{title} over the last {span}: no data yet.")
        } else {
            let latest: Vec<String> = lines
                .iter()
                .map(|l| format!("{} {} (peak {})", l.name, l.latest, l.peak))
                .collect();
            format!(
                "{title} over the last {span}, scale 0 to {}. Newest: {}.",
                unit.format(y_max),
                latest.join(", ")
            )
        };
        Chart {
            id,
            title,
            width: WIDTH,
            height: HEIGHT,
            left: LEFT,
            right: RIGHT,
            top: TOP,
            bottom: BOTTOM,
            y_ticks,
            x_ticks,
            lines,
            empty,
            desc,
            rows,
        }
    }

    /// The series' names, for the numbers table's header.
    pub fn names(&self) -> Vec<&'static str> {
        self.lines.iter().map(|l| l.name).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn one(values: Vec<Option<f64>>) -> Vec<SeriesInput> {
        vec![SeriesInput {
            name: "allowed",
            class: "allowed",
            values,
        }]
    }

    #[test]
    fn the_scale_ends_on_a_round_number() {
        assert_eq!(nice_ceiling(0.0, 1.0), 1.0);
        assert_eq!(nice_ceiling(0.3, 0.1), 0.5);
        assert_eq!(nice_ceiling(1.0, 1.0), 1.0);
        assert_eq!(nice_ceiling(1.01, 1.0), 2.0);
        assert_eq!(nice_ceiling(37.0, 1.0), 50.0);
        assert_eq!(nice_ceiling(51.0, 1.0), 100.0);
        assert_eq!(nice_ceiling(12_345.0, 1.0), 20_000.0);
        assert_eq!(compact(0.0), "0");
        assert_eq!(compact(0.26), "0.3");
        assert_eq!(compact(2.5), "2.5");
        assert_eq!(compact(12.4), "12");
        assert_eq!(compact(1500.0), "1.5k");
        assert_eq!(compact(2_000_000.0), "2M");
    }

    #[test]
    fn values_map_onto_the_plot_area() {
        // Four buckets of 150 s over 10 minutes; highest value 40 → scale 0..50.
        let chart = Chart::new(
            "c",
            "Decisions per second",
            Unit::PerSecond,
            600,
            one(vec![Some(0.0), Some(25.0), Some(40.0), Some(50.0)]),
        );
        let line = &chart.lines[0];
        let (width, height) = (RIGHT - LEFT, BOTTOM - TOP);
        let x = |i: f64| round1(LEFT + width * i / 4.0);
        let y = |v: f64| round1(BOTTOM - height * v / 50.0);
        assert_eq!(
            line.path,
            format!(
                "M{} {} L{} {} L{} {} L{} {}",
                x(1.0),
                y(0.0),
                x(2.0),
                y(25.0),
                x(3.0),
                y(40.0),
                x(4.0),
                y(50.0)
            )
        );
        assert_eq!(
            x(4.0),
            RIGHT,
            "the newest bucket is drawn at the right edge"
        );
        assert_eq!(y(50.0), TOP);
        assert_eq!(
            chart
                .y_ticks
                .iter()
                .map(|t| t.label.as_str())
                .collect::<Vec<_>>(),
            ["0/s", "25/s", "50/s"]
        );
        assert_eq!(chart.y_ticks[0].at, BOTTOM);
        assert_eq!(
            chart
                .x_ticks
                .iter()
                .map(|t| t.label.as_str())
                .collect::<Vec<_>>(),
            ["now", "−5 min", "−10 min"]
        );
        assert_eq!(line.latest, "50/s");
        assert!(!chart.empty);
        assert!(
            chart.desc.contains("allowed 50/s (peak 50/s)"),
            "{}",
            chart.desc
        );
        assert_eq!(chart.rows.len(), 4);
        assert_eq!(chart.rows[0].ago, "now");
        assert_eq!(chart.rows[1].ago, "2 min 30 s ago");
    }

    #[test]
    fn an_empty_history_draws_no_line_and_says_so() {
        let chart = Chart::new(
            "c",
            "Decisions per second",
            Unit::PerSecond,
            600,
            one(vec![None; 60]),
        );
        assert!(chart.empty);
        assert!(chart.lines[0].path.is_empty() && chart.lines[0].dots.is_empty());
        assert_eq!(chart.lines[0].latest, "no data");
        assert!(chart.desc.contains("no data yet"), "{}", chart.desc);
        assert!(chart.rows.is_empty());
        // The scale still has labels.
        assert_eq!(chart.y_ticks[2].label, "1/s");
        let none = Chart::new("c", "t", Unit::PerSecond, 600, Vec::new());
        assert!(none.empty && none.lines.is_empty());
    }

    #[test]
    fn a_lone_point_is_a_dot_and_gaps_break_the_line() {
        let mut values = vec![None; 6];
        values[1] = Some(1.0);
        values[3] = Some(2.0);
        values[4] = Some(2.0);
        let chart = Chart::new("c", "t", Unit::PerSecond, 600, one(values));
        let line = &chart.lines[0];
        assert_eq!(line.dots.len(), 1, "bucket 1 has no neighbour");
        assert_eq!(line.path.matches('M').count(), 1, "{}", line.path);
        assert_eq!(line.path.matches('L').count(), 1, "{}", line.path);
        assert_eq!(line.latest, "2/s", "the newest known value");
        assert!(!chart.empty);
    }

    #[test]
    fn percentages_stop_at_one_hundred_and_values_stay_inside() {
        let chart = Chart::new(
            "c",
            "Degraded share",
            Unit::Percent,
            600,
            one(vec![Some(0.4), Some(100.0)]),
        );
        assert_eq!(chart.y_ticks[2].label, "100%");
        let small = Chart::new(
            "c",
            "t",
            Unit::Percent,
            600,
            one(vec![Some(0.0), Some(0.3)]),
        );
        assert_eq!(
            small.y_ticks[2].label, "1%",
            "at least 1% so a 0% line sits on the axis"
        );
        let ys: Vec<f64> = small.lines[0]
            .path
            .split(' ')
            .skip(1)
            .step_by(2)
            .map(|y| y.parse().unwrap())
            .collect();
        assert_eq!(ys.len(), 2, "{}", small.lines[0].path);
        assert!(ys.iter().all(|y| (TOP..=BOTTOM).contains(y)), "{ys:?}");
    }
}
