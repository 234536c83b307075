//! The account page's "Recent" panel: the account's history (what the customer saw) as sentences
//! a support agent can read out, newest first.

use time::OffsetDateTime;

use crate::limiter::{AccountHistory, HistoryDevice, HistoryEntry, LimiterError};
use crate::view;

/// How many events the panel shows: what an account keeps by default.
pub const RECENT_EVENTS: usize = 50;

/// The panel: its lines, or why there are none.
pub struct RecentView {
    pub lines: Vec<RecentLine>,
    pub error: Option<String>,
    /// Sent with the device table's refresh, to replace the panel in place (htmx out of band).
    pub out_of_band: bool,
}

/// One event: when (UTC, made local by the page's script) and what, in words.
pub struct RecentLine {
    pub at: Moment,
    pub kind: String,
    pub sentence: String,
    /// A temporary limit granted: when it ends, shown after the sentence.
    pub until: Option<Moment>,
}

/// A time as the panel shows it.
pub struct Moment {
    /// RFC 3339, for `<time datetime>`.
    pub at: String,
    /// `20:14 UTC`, or with the date when it is not today: what shows without the script.
    pub utc: String,
}

impl Moment {
    fn new(now: OffsetDateTime, at: &str) -> Moment {
        Moment {
            at: at.to_owned(),
            utc: view::clock_short(now, at),
        }
    }
}

impl RecentView {
    pub fn new(
        history: Result<AccountHistory, LimiterError>,
        plan: &str,
        now: OffsetDateTime,
    ) -> RecentView {
        match history {
            Ok(history) => RecentView {
                lines: history
                    .entries
                    .iter()
                    .map(|entry| RecentLine {
                        at: Moment::new(now, &entry.at),
                        kind: entry.kind.clone(),
                        sentence: sentence(entry, plan),
                        until: entry
                            .until
                            .as_deref()
                            .filter(|_| entry.kind == "limit_granted")
                            .map(|until| Moment::new(now, until)),
                    })
                    .collect(),
                error: None,
                out_of_band: false,
            },
            Err(error) => RecentView {
                lines: Vec::new(),
                error: Some(format!(
                    "The account's history cannot be shown now: {error}."
                )),
                out_of_band: false,
            },
        }
    }
}

/// "Kids Tablet was refused: Standard allows 2, Living Room TV and Mom's iPhone were playing".
pub fn sentence(entry: &HistoryEntry, plan: &str) -> String {
    let device = entry
        .device
        .as_ref()
        .map_or("A device", HistoryDevice::name);
    let actor = entry.actor.as_deref().unwrap_or("support");
    let limit = entry.limit.unwrap_or(0);
    match entry.kind.as_str() {
        "refused" => format!("{device} was refused: {}", refusal(entry, plan)),
        "shadow_refused" => format!(
            "{device} would have been refused: {}. It was let through (shadow).",
            refusal(entry, plan)
        ),
        "take_over" => {
            let replaced = entry
                .replaced
                .as_ref()
                .map_or("another device", HistoryDevice::name);
            format!("{device} took over from {replaced}, which was told to stop")
        }
        "force_stop" => format!("{actor} force-stopped {device}"),
        "revoked" => format!("{device} was told its stream had ended and stopped playing"),
        "expired" => format!(
            "{device} stopped sending heartbeats (the app closed, crashed or lost its \
             connection); its screen was freed"
        ),
        "limit_granted" => format!(
            "{actor} granted a temporary limit of {limit} screen{}",
            if limit == 1 { "" } else { "s" }
        ),
        "limit_removed" => format!(
            "{actor} removed the temporary limit of {limit} screen{}",
            if limit == 1 { "" } else { "s" }
        ),
        other => format!("{device}: {other}"),
    }
}

/// Why a play was refused, or would have been: "Standard allows 2, Living Room TV and Mom's
/// iPhone were playing".
fn refusal(entry: &HistoryEntry, plan: &str) -> String {
    let limit = entry.limit.unwrap_or(0);
    let allows = match entry.rule.as_deref() {
        Some("temporary_limit") => format!("the temporary limit allows {limit}"),
        Some("device_type_cap") => {
            let kind = entry
                .device
                .as_ref()
                .and_then(|d| d.device_type.as_deref())
                .map_or("of this type", |k| view::device_type_label(k));
            format!("{} allows {limit} {kind} at once", view::plan_name(plan))
        }
        _ => format!("{} allows {limit}", view::plan_name(plan)),
    };
    match entry.holders.as_slice() {
        [] => allows,
        [one] => format!("{allows}, {} was playing", one.name()),
        many => format!("{allows}, {} were playing", names(many)),
    }
}

/// "A", "A and B", "A, B and C".
fn names(devices: &[HistoryDevice]) -> String {
    match devices {
        [] => String::new(),
        [one] => one.name().to_owned(),
        [rest @ .., last] => {
            let rest: Vec<&str> = rest.iter().map(HistoryDevice::name).collect();
            format!("{} and {}", rest.join(", "), last.name())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn device(id: &str, meta: &str, kind: &str) -> HistoryDevice {
        HistoryDevice {
            device_id: id.into(),
            device_type: Some(kind.into()),
            device_meta: meta.into(),
        }
    }

    fn entry(kind: &str) -> HistoryEntry {
        HistoryEntry {
            at: "2026-12-05T20:14:00Z".into(),
            kind: kind.into(),
            device: Some(device("tablet-1", "Kids Tablet", "tablet")),
            ..HistoryEntry::default()
        }
    }

    #[test]
    fn a_refusal_reads_as_the_customer_lived_it() {
        let refused = HistoryEntry {
            rule: Some("plan_limit".into()),
            limit: Some(2),
            holders: vec![
                device("tv-1", "Living Room TV", "tv"),
                device("phone-1", "Mom's iPhone", "mobile"),
            ],
            ..entry("refused")
        };
        assert_eq!(
            sentence(&refused, "standard"),
            "Kids Tablet was refused: Standard allows 2, Living Room TV and Mom's iPhone were playing"
        );
        let capped = HistoryEntry {
            rule: Some("device_type_cap".into()),
            limit: Some(1),
            holders: vec![device("tab-2", "", "tablet")],
            ..entry("refused")
        };
        assert_eq!(
            sentence(&capped, "premium"),
            "Kids Tablet was refused: Premium allows 1 Tablet at once, tab-2 was playing"
        );
        let temporary = HistoryEntry {
            rule: Some("temporary_limit".into()),
            limit: Some(3),
            holders: vec![
                device("a", "A", "tv"),
                device("b", "B", "tv"),
                device("c", "C", "tv"),
            ],
            ..entry("refused")
        };
        assert_eq!(
            sentence(&temporary, ""),
            "Kids Tablet was refused: the temporary limit allows 3, A, B and C were playing"
        );
    }

    #[test]
    fn a_play_let_through_in_shadow_reads_as_the_refusal_it_would_have_been() {
        let shadow = HistoryEntry {
            rule: Some("plan_limit".into()),
            limit: Some(2),
            holders: vec![
                device("tv-1", "Living Room TV", "tv"),
                device("phone-1", "Mom's iPhone", "mobile"),
            ],
            ..entry("shadow_refused")
        };
        assert_eq!(
            sentence(&shadow, "standard"),
            "Kids Tablet would have been refused: Standard allows 2, Living Room TV and Mom's \
             iPhone were playing. It was let through (shadow)."
        );
        let capped = HistoryEntry {
            device: Some(device("phone-2", "Dad's Phone", "mobile")),
            rule: Some("device_type_cap".into()),
            limit: Some(1),
            holders: vec![device("phone-1", "Mom's iPhone", "mobile")],
            ..entry("shadow_refused")
        };
        assert_eq!(
            sentence(&capped, "standard"),
            "Dad's Phone would have been refused: Standard allows 1 Mobile at once, Mom's iPhone \
             was playing. It was let through (shadow)."
        );
        let temporary = HistoryEntry {
            rule: Some("temporary_limit".into()),
            limit: Some(3),
            ..entry("shadow_refused")
        };
        assert_eq!(
            sentence(&temporary, "standard"),
            "Kids Tablet would have been refused: the temporary limit allows 3. It was let \
             through (shadow)."
        );
    }

    #[test]
    fn an_unknown_kind_keeps_the_panel_and_shows_as_itself() {
        let history: AccountHistory = serde_json::from_value(serde_json::json!({
            "account_id": "acct-1",
            "entries": [
                {"at": "2026-12-05T20:15:00Z", "kind": "paused", "limit": "soon",
                 "device": {"device_id": "tv-1", "device_meta": "Living Room TV"}},
                {"at": "2026-12-05T20:14:00Z", "kind": "shadow_refused", "rule": "plan_limit",
                 "limit": 2, "device": {"device_id": "tab", "device_meta": "Kids Tablet"},
                 "holders": [{"device_id": "tv-1", "device_meta": "Living Room TV"}]},
            ]
        }))
        .unwrap();
        let now = view::parse_time("2026-12-05T21:00:00Z").unwrap();
        let view = RecentView::new(Ok(history), "standard", now);
        assert!(view.error.is_none());
        let sentences: Vec<&str> = view.lines.iter().map(|l| l.sentence.as_str()).collect();
        assert_eq!(
            sentences,
            [
                "Living Room TV: paused",
                "Kids Tablet would have been refused: Standard allows 2, Living Room TV was \
                 playing. It was let through (shadow).",
            ]
        );
        assert_eq!(view.lines[1].kind, "shadow_refused");
    }

    #[test]
    fn every_kind_names_who_and_what() {
        let took = HistoryEntry {
            replaced: Some(device("tv-1", "Living Room TV", "tv")),
            ..entry("take_over")
        };
        assert_eq!(
            sentence(&took, "standard"),
            "Kids Tablet took over from Living Room TV, which was told to stop"
        );
        let stopped = HistoryEntry {
            actor: Some("sam".into()),
            ..entry("force_stop")
        };
        assert_eq!(sentence(&stopped, "basic"), "sam force-stopped Kids Tablet");
        let revoked = HistoryEntry {
            device: Some(HistoryDevice {
                device_id: "tablet-1".into(),
                device_type: None,
                device_meta: String::new(),
            }),
            ..entry("revoked")
        };
        assert!(sentence(&revoked, "basic").starts_with("tablet-1 was told"));
        assert!(sentence(&entry("expired"), "basic").starts_with("Kids Tablet stopped sending"));
        let granted = HistoryEntry {
            device: None,
            actor: Some("sam".into()),
            limit: Some(3),
            ..entry("limit_granted")
        };
        assert_eq!(
            sentence(&granted, "basic"),
            "sam granted a temporary limit of 3 screens"
        );
        // A kind a newer limiter adds still shows.
        assert_eq!(sentence(&entry("paused"), "basic"), "Kids Tablet: paused");
    }

    #[test]
    fn a_granted_limit_shows_when_it_ends_and_times_fall_back_to_utc() {
        let now = view::parse_time("2026-12-05T21:00:00Z").unwrap();
        let granted = HistoryEntry {
            until: Some("2026-12-06T20:14:00Z".into()),
            ..entry("limit_granted")
        };
        let removed = HistoryEntry {
            until: Some("2026-12-06T20:14:00Z".into()),
            ..entry("limit_removed")
        };
        let history = AccountHistory {
            account_id: "acct-1".into(),
            entries: vec![granted, removed],
        };
        let view = RecentView::new(Ok(history), "basic", now);
        let granted = &view.lines[0];
        assert_eq!(granted.at.utc, "20:14 UTC");
        let until = granted.until.as_ref().expect("the end of the limit");
        assert_eq!(until.utc, "2026-12-06 20:14 UTC");
        assert_eq!(until.at, "2026-12-06T20:14:00Z");
        assert!(view.lines[1].until.is_none(), "a removed limit ends now");
    }
}
