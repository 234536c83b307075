//! The bounds of the API's own fields, beside the id rules of `ids.rs`: what the validators in
//! `types.rs` enforce and what `schema.rs` publishes, from one place.

use crate::ids::{DISPLAY_NAME, TextRule};

/// Force-stop `actor`: a display name (`DISPLAY_NAME`) that is not blank. The pattern's middle
/// class is every character but the control characters and the White_Space ones
/// (`char::is_whitespace`); `tests` checks it against the validator character by character.
pub const ACTOR: TextRule = TextRule {
    min_chars: 1,
    max_chars: DISPLAY_NAME.max_chars,
    pattern: concat!(
        r"^[^\u0000-\u001F\u007F-\u009F]*",
        r"[^\u0000-\u0020\u007F-\u00A0\u1680\u2000-\u200A\u2028\u2029\u202F\u205F\u3000]",
        r"[^\u0000-\u001F\u007F-\u009F]*$"
    ),
    words: "1-64 characters, no control characters, not only spaces",
};

/// Force-stop `reason`: text with line breaks (`\n`) but no other control characters.
pub const REASON: TextRule = TextRule {
    min_chars: 0,
    max_chars: 200,
    pattern: r"^[^\u0000-\u0009\u000B-\u001F\u007F-\u009F]*$",
    words: "at most 200 characters, no control characters but line breaks (\\n)",
};

/// A client address as a dashboard saw it: an IPv4 or IPv6 address in text.
pub const ADDRESS: TextRule = TextRule {
    min_chars: 0,
    max_chars: 45,
    pattern: "^[0-9A-Fa-f:.]*$",
    words: "an IPv4 or IPv6 address (at most 45 characters of 0-9 A-F a-f : .)",
};

/// Longest override support may grant: 30 days.
pub const MAX_OVERRIDE_SEC: u64 = 30 * 24 * 3600;
