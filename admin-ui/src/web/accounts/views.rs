//! The view models of the account page and its live device table.

use time::OffsetDateTime;

use super::super::ctx::Ctx;
use super::super::state::AppState;
use crate::limiter::{AccountStreams, ActiveStream, LimitOverride};
use crate::view;

/// One active stream as the table shows it.
pub struct DeviceRow {
    pub stream_id: String,
    pub short_stream_id: String,
    pub name: String,
    pub device_id: String,
    pub kind: &'static str,
    pub profile: String,
    pub title: String,
    pub started: String,
    pub started_ago: String,
    pub last_seen_ago: String,
    pub expires_in: String,
}

impl DeviceRow {
    pub fn new(stream: &ActiveStream, now: OffsetDateTime) -> DeviceRow {
        let or_dash = |s: &str| {
            if s.is_empty() {
                "—".to_owned()
            } else {
                s.to_owned()
            }
        };
        DeviceRow {
            stream_id: stream.stream_id.clone(),
            short_stream_id: view::short_id(&stream.stream_id),
            name: stream.label().to_owned(),
            device_id: stream.device_id.clone(),
            kind: view::device_type_label(&stream.device_type),
            profile: or_dash(&stream.profile_id),
            title: or_dash(&stream.title_id),
            started: view::clock(&stream.started_at),
            started_ago: view::ago(now, &stream.started_at),
            last_seen_ago: view::ago(now, &stream.last_seen),
            expires_in: view::until(now, &stream.expires_at),
        }
    }
}

/// An active temporary limit as people read it.
pub struct OverrideView {
    pub max_streams: u32,
    /// `22:00 UTC`, or with the date when it is not today.
    pub until: String,
    /// `in 2 h 0 min`.
    pub until_in: String,
    /// The exact time, for a tooltip.
    pub expires_at: String,
}

impl OverrideView {
    pub fn new(o: &LimitOverride, now: OffsetDateTime) -> OverrideView {
        OverrideView {
            max_streams: o.max_streams,
            until: view::clock_short(now, &o.expires_at),
            until_in: view::until(now, &o.expires_at),
            expires_at: view::clock(&o.expires_at),
        }
    }
}

/// The live part of the account page, re-fetched by htmx every few seconds.
pub struct DevicesView {
    pub account_id: String,
    pub plan: String,
    /// The limit in force (the override's while one is active).
    pub limit: u32,
    pub limit_override: Option<OverrideView>,
    /// The account is in shadow: plays over its limit are let through and counted.
    pub in_shadow: bool,
    /// With several regions: the region whose store decides the account's count.
    pub home_region: Option<String>,
    pub in_use: usize,
    pub rows: Vec<DeviceRow>,
    pub can_force_stop: bool,
    pub refresh_secs: u64,
    pub updated: String,
    /// Set when the limiter did not answer (the fragment keeps polling and recovers).
    pub error: Option<String>,
}

impl DevicesView {
    pub fn new(state: &AppState, ctx: &Ctx, account_id: &str) -> DevicesView {
        DevicesView {
            account_id: account_id.to_owned(),
            plan: String::new(),
            limit: 0,
            limit_override: None,
            in_shadow: false,
            home_region: None,
            in_use: 0,
            rows: Vec::new(),
            can_force_stop: ctx.user.can_force_stop(),
            refresh_secs: state.settings.refresh.as_secs().max(1),
            updated: view::clock(&now_rfc3339()),
            error: None,
        }
    }

    pub fn fill(mut self, streams: &AccountStreams) -> DevicesView {
        let now = OffsetDateTime::now_utc();
        self.plan = streams.plan.clone();
        self.limit = streams.limit;
        self.limit_override = streams
            .limit_override
            .as_ref()
            .map(|o| OverrideView::new(o, now));
        self.in_shadow = streams.in_shadow();
        self.home_region = streams.home_region.clone();
        self.in_use = streams.active.len();
        self.rows = streams
            .active
            .iter()
            .map(|s| DeviceRow::new(s, now))
            .collect();
        self
    }
}

fn now_rfc3339() -> String {
    OffsetDateTime::now_utc()
        .format(&time::format_description::well_known::Rfc3339)
        .unwrap_or_default()
}
