//! `history`: how much of each account's recent history (refused plays, take-overs,
//! force-stops, revocations, expired leases, temporary limits) the store keeps.

use std::time::Duration;

use serde::Deserialize;

use super::error::{ConfigError, invalid};
use crate::model::HistoryLimits;

/// Most entries an account's history may keep: each refused play's entry lists the devices that
/// held the slots, so a long history is the bulk of an account's memory.
pub const MAX_HISTORY_EVENTS: u32 = 1000;
/// Shortest retention: an entry must outlive the support call it answers.
pub const MIN_HISTORY_RETENTION: Duration = Duration::from_secs(60);
/// Longest retention: 90 days.
pub const MAX_HISTORY_RETENTION: Duration = Duration::from_secs(90 * 24 * 3600);

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct HistoryConfig {
    /// The newest entries kept per account.
    pub max_events: u32,
    /// How long an account's history outlives its newest entry.
    #[serde(with = "humantime_serde")]
    pub retention: Duration,
}

impl Default for HistoryConfig {
    fn default() -> Self {
        let limits = HistoryLimits::default();
        HistoryConfig {
            max_events: limits.max_events,
            retention: Duration::from_millis(limits.retention_ms),
        }
    }
}

impl HistoryConfig {
    pub fn validate(&self) -> Result<(), ConfigError> {
        if !(1..=MAX_HISTORY_EVENTS).contains(&self.max_events) {
            return Err(invalid(
                "history.max_events",
                format!(
                    "{} entries per account; use 1 to {MAX_HISTORY_EVENTS}",
                    self.max_events
                ),
            ));
        }
        if !(MIN_HISTORY_RETENTION..=MAX_HISTORY_RETENTION).contains(&self.retention) {
            return Err(invalid(
                "history.retention",
                format!(
                    "{}; use 1m to 90d (an account's history is kept this long after its newest entry)",
                    humantime::format_duration(self.retention)
                ),
            ));
        }
        Ok(())
    }

    /// The bounds the stores apply.
    pub fn limits(&self) -> HistoryLimits {
        HistoryLimits {
            max_events: self.max_events,
            retention_ms: self.retention.as_millis() as u64,
        }
    }
}
