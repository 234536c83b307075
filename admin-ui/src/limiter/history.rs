//! `GET /v1/accounts/{id}/history` as the dashboard reads it: kinds and rules as text, and each
//! entry read on its own, so that an entry of a kind a newer limiter adds still shows (as
//! itself, even with fields of shapes this dashboard does not know) instead of failing the page.

use serde::{Deserialize, Deserializer};

#[derive(Debug, Clone, Deserialize)]
pub struct AccountHistory {
    pub account_id: String,
    #[serde(default, deserialize_with = "entries")]
    pub entries: Vec<HistoryEntry>,
}

/// Every entry: as its kind has it, else (fields of another shape) its time and kind alone.
fn entries<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Vec<HistoryEntry>, D::Error> {
    let raw = Vec::<serde_json::Value>::deserialize(deserializer)?;
    Ok(raw.into_iter().map(HistoryEntry::read).collect())
}

/// One event of an account's history; the fields its kind does not use are absent.
#[derive(Debug, Clone, Default, Deserialize)]
pub struct HistoryEntry {
    /// RFC 3339 UTC.
    pub at: String,
    pub kind: String,
    #[serde(default)]
    pub device: Option<HistoryDevice>,
    /// `plan_limit`, `temporary_limit` or `device_type_cap` (refusals).
    #[serde(default)]
    pub rule: Option<String>,
    #[serde(default)]
    pub limit: Option<u32>,
    #[serde(default)]
    pub holders: Vec<HistoryDevice>,
    #[serde(default)]
    pub replaced: Option<HistoryDevice>,
    #[serde(default)]
    pub actor: Option<String>,
    #[serde(default)]
    pub ended_at: Option<String>,
    #[serde(default)]
    pub until: Option<String>,
}

impl HistoryEntry {
    fn read(raw: serde_json::Value) -> HistoryEntry {
        serde_json::from_value(raw.clone()).unwrap_or_else(|_| {
            let text = |field: &str| raw.get(field).and_then(|v| v.as_str()).map(str::to_owned);
            HistoryEntry {
                at: text("at").unwrap_or_default(),
                kind: text("kind").unwrap_or_else(|| "unknown".into()),
                device: raw
                    .get("device")
                    .and_then(|d| serde_json::from_value(d.clone()).ok()),
                ..HistoryEntry::default()
            }
        })
    }
}

#[derive(Debug, Clone, Deserialize)]
pub struct HistoryDevice {
    pub device_id: String,
    #[serde(default)]
    pub device_type: Option<String>,
    /// The display name the play carried; empty when none.
    #[serde(default)]
    pub device_meta: String,
}

impl HistoryDevice {
    /// What support reads out: the display name, else the device id.
    pub fn name(&self) -> &str {
        if self.device_meta.trim().is_empty() {
            &self.device_id
        } else {
            &self.device_meta
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_entry_of_a_kind_or_shape_unknown_here_is_read_as_its_time_and_kind() {
        let history: AccountHistory = serde_json::from_value(serde_json::json!({
            "account_id": "acct-1",
            "entries": [
                {"at": "2026-12-05T20:15:00Z", "kind": "paused", "limit": "soon",
                 "device": {"device_id": "tv-1", "device_meta": "TV"}, "holders": {"n": 2}},
                {"at": "2026-12-05T20:14:00Z", "kind": "shadow_refused", "rule": "plan_limit",
                 "limit": 2, "device": {"device_id": "tab", "device_type": "tablet"},
                 "holders": [{"device_id": "tv-1"}]},
                {"limit": -1},
            ]
        }))
        .expect("the history reads");
        let [paused, shadow, bare] = &history.entries[..] else {
            panic!("three entries: {history:?}");
        };
        assert_eq!(paused.kind, "paused");
        assert_eq!(paused.device.as_ref().map(HistoryDevice::name), Some("TV"));
        assert!(paused.limit.is_none() && paused.holders.is_empty());
        assert_eq!(shadow.kind, "shadow_refused");
        assert_eq!(shadow.limit, Some(2));
        assert_eq!(shadow.holders[0].name(), "tv-1");
        assert_eq!((bare.kind.as_str(), bare.at.as_str()), ("unknown", ""));
    }
}
