//! The support role's temporary-limit form: its bounds, presets and what was typed.

use serde::Deserialize;

use super::reason::MAX_REASON_BYTES;
use crate::limiter::AccountStreams;

/// Highest temporary limit the limiter accepts (its largest plan).
pub const MAX_OVERRIDE_STREAMS: u32 = screenlimit_limiter::config::MAX_STREAMS_CEILING;

/// Longest temporary limit the limiter accepts: 30 days.
pub use screenlimit_limiter::api::limits::MAX_OVERRIDE_SEC;

/// The durations the grant form offers, in seconds.
pub const OVERRIDE_PRESETS: [(u64, &str); 5] = [
    (3600, "1 hour"),
    (24 * 3600, "24 hours"),
    (3 * 24 * 3600, "3 days"),
    (7 * 24 * 3600, "7 days"),
    (MAX_OVERRIDE_SEC, "30 days"),
];

/// The preset the grant form starts on.
const DEFAULT_OVERRIDE_SEC: u64 = 24 * 3600;

/// One choice of the duration list.
pub struct Preset {
    pub seconds: u64,
    pub label: &'static str,
    pub selected: bool,
}

/// The support role's "temporary limit" form under the device table.
pub struct LimitsForm {
    /// Whether an override is active now (the remove button shows).
    pub active: bool,
    /// The screens field, as typed (or the suggestion).
    pub max_streams: String,
    pub presets: Vec<Preset>,
    /// The reason field, as typed (it goes to the audit log).
    pub reason: String,
    pub error: Option<String>,
}

impl LimitsForm {
    pub fn new(streams: &AccountStreams) -> LimitsForm {
        let suggestion = match &streams.limit_override {
            Some(o) => o.max_streams,
            None => (streams.limit + 1).min(MAX_OVERRIDE_STREAMS),
        };
        LimitsForm {
            active: streams.limit_override.is_some(),
            max_streams: suggestion.to_string(),
            presets: presets(DEFAULT_OVERRIDE_SEC),
            reason: String::new(),
            error: None,
        }
    }

    /// The form again with what was typed and why it was refused.
    pub fn refused(streams: &AccountStreams, input: &OverrideForm, error: String) -> LimitsForm {
        let chosen = input
            .expires_in
            .trim()
            .parse()
            .unwrap_or(DEFAULT_OVERRIDE_SEC);
        LimitsForm {
            max_streams: input.max_streams.chars().take(20).collect(),
            presets: presets(chosen),
            reason: input.reason.chars().take(MAX_REASON_BYTES).collect(),
            error: Some(error),
            ..LimitsForm::new(streams)
        }
    }
}

fn presets(selected: u64) -> Vec<Preset> {
    OVERRIDE_PRESETS
        .iter()
        .map(|&(seconds, label)| Preset {
            seconds,
            label,
            selected: seconds == selected,
        })
        .collect()
}

#[derive(Deserialize)]
pub struct OverrideForm {
    /// Text, not a number, so that "abc" gets a sentence rather than a bare 422.
    #[serde(default)]
    pub max_streams: String,
    /// Seconds, one of `OVERRIDE_PRESETS` (any value in range is accepted).
    #[serde(default)]
    pub expires_in: String,
    /// Why, for the audit log (optional).
    #[serde(default)]
    pub reason: String,
}

#[derive(Deserialize)]
pub struct RemoveForm {
    /// Why, for the audit log (optional).
    #[serde(default)]
    pub reason: String,
}

/// Checks the grant form; says in words what is wrong, if anything.
pub fn parse_override(max_streams: &str, expires_in: &str) -> Result<(u32, u64), String> {
    let typed = max_streams.trim();
    let streams = match typed.parse::<u32>() {
        Ok(n) if (1..=MAX_OVERRIDE_STREAMS).contains(&n) => n,
        _ if typed.is_empty() => {
            return Err(format!(
                "Enter how many screens the account may use at once: a whole number from 1 to \
                 {MAX_OVERRIDE_STREAMS}."
            ));
        }
        _ => {
            let shown: String = typed.chars().take(20).collect();
            return Err(format!(
                "“{shown}” is not a number of screens the limiter accepts. Enter a whole number \
                 from 1 to {MAX_OVERRIDE_STREAMS}."
            ));
        }
    };
    let seconds = match expires_in.trim().parse::<u64>() {
        Ok(s) if (1..=MAX_OVERRIDE_SEC).contains(&s) => s,
        _ => {
            return Err(
                "Choose how long the temporary limit lasts, from 1 hour to 30 days.".to_owned(),
            );
        }
    };
    Ok((streams, seconds))
}
