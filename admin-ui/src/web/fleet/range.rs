//! The charts' range: the one asked for in the address (`?range=`), and the links of the range
//! selector.

use axum::http::StatusCode;

use super::long_range::Range;
use crate::web::error::PageError;

/// One choice of the charts' range selector.
pub struct RangeLink {
    pub param: &'static str,
    pub label: &'static str,
    pub current: bool,
}

/// What the charts show: the dashboard's own samples, or a longer range from Prometheus.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum ChartRange {
    Recent,
    Long(Range),
}

pub(super) const RECENT_PARAM: &str = "10m";

impl ChartRange {
    /// The range asked for in the address (`?range=`); without Prometheus only the recent one.
    pub(super) fn chosen(asked: Option<&str>, prometheus: bool) -> Result<ChartRange, PageError> {
        let long = match asked {
            // With Prometheus the charts open on its hour.
            None | Some("") => Range::Hour,
            Some(RECENT_PARAM) => return Ok(ChartRange::Recent),
            Some(text) => Range::parse(text).ok_or_else(|| {
                PageError::new(
                    StatusCode::BAD_REQUEST,
                    "Unknown chart range",
                    format!(
                        "“{}” is not a range of the fleet charts: choose 10m, 1h, 6h or 24h.",
                        text.chars().take(40).collect::<String>()
                    ),
                )
            })?,
        };
        Ok(match prometheus {
            true => ChartRange::Long(long),
            false => ChartRange::Recent,
        })
    }

    pub(super) fn param(self) -> &'static str {
        match self {
            ChartRange::Recent => RECENT_PARAM,
            ChartRange::Long(range) => range.param(),
        }
    }
}

pub(super) fn range_links(current: ChartRange) -> Vec<RangeLink> {
    let mut links = vec![RangeLink {
        param: RECENT_PARAM,
        label: "10 min",
        current: current == ChartRange::Recent,
    }];
    links.extend(Range::ALL.into_iter().map(|range| RangeLink {
        param: range.param(),
        label: match range {
            Range::Hour => "1 h",
            Range::SixHours => "6 h",
            Range::Day => "24 h",
        },
        current: current == ChartRange::Long(range),
    }));
    links
}
