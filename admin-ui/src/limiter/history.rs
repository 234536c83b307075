//! `GET /v1/accounts/{id}/history` as the dashboard reads it: kinds and rules as text, so that an
//! entry of a kind a newer limiter adds still shows (as itself) instead of failing the page.

use serde::Deserialize;

#[derive(Debug, Clone, Deserialize)]
pub struct AccountHistory {
    pub account_id: String,
    #[serde(default)]
    pub entries: Vec<HistoryEntry>,
}

/// One event of an account's history; the fields its kind does not use are absent.
#[derive(Debug, Clone, Deserialize)]
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
