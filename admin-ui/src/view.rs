//! Small presentation helpers: times as people read them, labels, URL pieces.

use time::OffsetDateTime;
use time::format_description::well_known::Rfc3339;
use time::macros::format_description;

pub fn parse_time(text: &str) -> Option<OffsetDateTime> {
    OffsetDateTime::parse(text, &Rfc3339).ok()
}

/// `2026-11-29 21:10:56 UTC`, or the text as given when it is not a time.
pub fn clock(text: &str) -> String {
    let format = format_description!("[year]-[month]-[day] [hour]:[minute]:[second] UTC");
    parse_time(text)
        .and_then(|t| t.to_offset(time::UtcOffset::UTC).format(&format).ok())
        .unwrap_or_else(|| text.to_owned())
}

/// `42 s`, `3 min 5 s`, `2 h 10 min`, `4 d 3 h`.
pub fn span(seconds: i64) -> String {
    let s = seconds.max(0);
    match s {
        0..60 => format!("{s} s"),
        60..3600 => match s % 60 {
            0 => format!("{} min", s / 60),
            r => format!("{} min {r} s", s / 60),
        },
        3600..86400 => format!("{} h {} min", s / 3600, s % 3600 / 60),
        _ => format!("{} d {} h", s / 86400, s % 86400 / 3600),
    }
}

/// `22:00 UTC` when `text` falls on `now`'s day (UTC), else `2026-12-06 22:00 UTC`.
pub fn clock_short(now: OffsetDateTime, text: &str) -> String {
    let Some(at) = parse_time(text).map(|t| t.to_offset(time::UtcOffset::UTC)) else {
        return text.to_owned();
    };
    let same_day = at.date() == now.to_offset(time::UtcOffset::UTC).date();
    let formatted = if same_day {
        at.format(format_description!("[hour]:[minute] UTC"))
    } else {
        at.format(format_description!(
            "[year]-[month]-[day] [hour]:[minute] UTC"
        ))
    };
    formatted.unwrap_or_else(|_| text.to_owned())
}

/// `12 s ago` (or `just now`).
pub fn ago(now: OffsetDateTime, text: &str) -> String {
    match parse_time(text) {
        Some(at) => {
            let seconds = (now - at).whole_seconds();
            if seconds < 1 {
                "just now".into()
            } else {
                format!("{} ago", span(seconds))
            }
        }
        None => text.to_owned(),
    }
}

/// `in 1 min 20 s` (or `now` when already due).
pub fn until(now: OffsetDateTime, text: &str) -> String {
    match parse_time(text) {
        Some(at) => {
            let seconds = (at - now).whole_seconds();
            if seconds < 1 {
                "now".into()
            } else {
                format!("in {}", span(seconds))
            }
        }
        None => text.to_owned(),
    }
}

pub fn device_type_label(kind: &str) -> &'static str {
    match kind {
        "tv" => "TV",
        "mobile" => "Mobile",
        "tablet" => "Tablet",
        "web" => "Web",
        "console" => "Console",
        _ => "Other",
    }
}

/// A plan's name as people read it: `standard` → `Standard`; no plan → `The plan`.
pub fn plan_name(plan: &str) -> String {
    let mut chars = plan.chars();
    match chars.next() {
        Some(first) => first.to_uppercase().chain(chars).collect(),
        None => "The plan".to_owned(),
    }
}

/// The first characters of a long id, for tables (the full id stays in a tooltip).
pub fn short_id(id: &str) -> String {
    match id.char_indices().nth(10) {
        Some((cut, _)) => format!("{}…", &id[..cut]),
        None => id.to_owned(),
    }
}

/// Percent-encodes a query-string value.
pub fn query_encode(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for byte in text.bytes() {
        if byte.is_ascii_alphanumeric() || matches!(byte, b'-' | b'_' | b'.' | b'~') {
            out.push(byte as char);
        } else {
            out.push_str(&format!("%{byte:02X}"));
        }
    }
    out
}

/// A redirect target only when it is a path on this site (no open redirects).
pub fn local_path(next: &str) -> Option<&str> {
    let ok = next.starts_with('/')
        && !next.starts_with("//")
        && !next.starts_with("/\\")
        && !next.chars().any(|c| c.is_control());
    ok.then_some(next)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spans_read_naturally() {
        assert_eq!(span(0), "0 s");
        assert_eq!(span(59), "59 s");
        assert_eq!(span(60), "1 min");
        assert_eq!(span(85), "1 min 25 s");
        assert_eq!(span(7260), "2 h 1 min");
        assert_eq!(span(90000), "1 d 1 h");
    }

    #[test]
    fn times_relative_to_now() {
        let now = parse_time("2026-11-29T21:10:56Z").unwrap();
        assert_eq!(ago(now, "2026-11-29T21:10:44.500Z"), "11 s ago");
        assert_eq!(until(now, "2026-11-29T21:12:26Z"), "in 1 min 30 s");
        assert_eq!(until(now, "2026-11-29T21:10:00Z"), "now");
        assert_eq!(clock("2026-11-29T21:10:56.344Z"), "2026-11-29 21:10:56 UTC");
        assert_eq!(clock_short(now, "2026-11-29T22:00:00Z"), "22:00 UTC");
        assert_eq!(
            clock_short(now, "2026-12-06T22:00:00Z"),
            "2026-12-06 22:00 UTC"
        );
        assert_eq!(clock_short(now, "soon"), "soon");
    }

    #[test]
    fn only_local_redirects() {
        assert_eq!(local_path("/accounts/a"), Some("/accounts/a"));
        assert_eq!(local_path("//evil.example"), None);
        assert_eq!(local_path("https://evil.example"), None);
        assert_eq!(local_path("/\\evil.example"), None);
        assert_eq!(query_encode("Mom's TV"), "Mom%27s%20TV");
    }
}
