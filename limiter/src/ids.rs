//! Identifiers: the character and length rules for client-supplied ids, and stream ids that carry
//! their own proof of which account and device they were issued for.
//!
//! A stream id is `<body><mac>.<device_id>`: base64url of 128 random bits plus the plan it was
//! issued under, 16 characters for an HMAC-SHA256 tag (96 bits) over account, device and body,
//! then the device id. The limiter checks the tag without a store lookup, so an id presented with
//! another account's id is refused before anything is read or written.

use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use hmac::{Hmac, Mac};
use sha2::Sha256;

/// A rule for client-supplied text: the one definition both its validator (below) and the
/// OpenAPI schema (`api::schema`) read, so the document cannot drift from what is enforced.
/// `ids::tests` checks each validator against its pattern.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TextRule {
    /// In characters (Unicode scalar values), as JSON Schema's `minLength` counts.
    pub min_chars: usize,
    /// In characters, as JSON Schema's `maxLength` counts.
    pub max_chars: usize,
    /// A pattern read alike by ECMA-262 (JSON Schema), Python's `re` and Rust's `regex`: anchors,
    /// classes and `\uXXXX` escapes only, no lookaround and no `\d \w \s`.
    pub pattern: &'static str,
    /// The rule in words, for error messages and the schema's description.
    pub words: &'static str,
}

/// Account, device, profile, title and plan ids: 1-64 of `A-Z a-z 0-9 . _ : -`, not only dots
/// (`.` and `..` read as path steps in every URL that carries an id).
pub const ID: TextRule = TextRule {
    min_chars: 1,
    max_chars: 64,
    pattern: "^[A-Za-z0-9._:-]*[A-Za-z0-9_:-][A-Za-z0-9._:-]*$",
    words: "1-64 characters of A-Z a-z 0-9 . _ : -, not only dots",
};

/// Longest account, device, profile, title or plan id.
pub const MAX_ID_LEN: usize = ID.max_chars;

/// `device_meta`, a display name such as "Living Room TV". Counted in characters, as JSON Schema
/// counts; 30 is the most that fits the Redis record in the worst case (see `DETAILS_BUDGET`).
pub const DEVICE_META: TextRule = TextRule {
    min_chars: 0,
    max_chars: 30,
    pattern: r"^[^\u0000-\u001F\u007F-\u009F]*$",
    words: "at most 30 characters, no control characters",
};

/// A person's name, as the audit log's `actor` and the dashboard's user names.
pub const DISPLAY_NAME: TextRule = TextRule {
    min_chars: 0,
    max_chars: 64,
    pattern: r"^[^\u0000-\u001F\u007F-\u009F]*$",
    words: "at most 64 characters, no control characters",
};

// A Redis lease record keeps type, display name, profile and title behind one length byte
// (`store/redis/record.rs`); a display name of 4-byte characters must still fit beside two
// longest ids.
const DETAILS_BUDGET: usize = 255;
const _: () =
    assert!(1 + (1 + 4 * DEVICE_META.max_chars) + 2 * (1 + ID.max_chars) <= DETAILS_BUDGET);

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum IdError {
    #[error("must not be empty")]
    Empty,
    #[error("is longer than {max} characters")]
    TooLong { max: usize },
    #[error("may hold only A-Z a-z 0-9 . _ : -")]
    BadCharacter,
    #[error("must not be made only of dots (`.`, `..` name no account, device or plan)")]
    OnlyDots,
    #[error("may not hold control characters")]
    ControlCharacter,
}

fn id_byte(b: u8) -> bool {
    b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b':' | b'-')
}

/// Checks an id by the `ID` rule: safe in URLs, keys and logs, and never a path step.
pub fn validate_token(id: &str) -> Result<(), IdError> {
    if id.is_empty() {
        return Err(IdError::Empty);
    }
    // Every allowed character is one byte, so bytes count characters once the alphabet holds.
    if !id.bytes().all(id_byte) {
        return Err(IdError::BadCharacter);
    }
    if id.len() > ID.max_chars {
        return Err(IdError::TooLong { max: ID.max_chars });
    }
    if id.bytes().all(|b| b == b'.') {
        return Err(IdError::OnlyDots);
    }
    Ok(())
}

/// Checks text by a display-name rule (`DEVICE_META`, `DISPLAY_NAME`): any characters but
/// control characters, at most `rule.max_chars` of them.
pub fn validate_text(rule: &TextRule, text: &str) -> Result<(), IdError> {
    if text.chars().any(char::is_control) {
        return Err(IdError::ControlCharacter);
    }
    if text.chars().count() > rule.max_chars {
        return Err(IdError::TooLong {
            max: rule.max_chars,
        });
    }
    Ok(())
}

/// Checks a person's display name (`DISPLAY_NAME`).
pub fn validate_display_name(text: &str) -> Result<(), IdError> {
    validate_text(&DISPLAY_NAME, text)
}

pub const NONCE_LEN: usize = 16;
const MAC_LEN: usize = 12;
const MAC_CHARS: usize = 16;

pub type Nonce = [u8; NONCE_LEN];

/// The shape of every stream id the codec issues: base64url of nonce, plan limit and plan name
/// (17 to 81 bytes: 23 to 108 characters), the tag's 16 characters, `.`, a device id. An id of
/// another shape names no stream (`decode` refuses it first); the API answers it 404.
pub const STREAM_ID: TextRule = TextRule {
    min_chars: 23 + MAC_CHARS + 1 + ID.min_chars,
    max_chars: 108 + MAC_CHARS + 1 + ID.max_chars,
    pattern: "^[A-Za-z0-9_-]{39,124}[.][A-Za-z0-9._:-]*[A-Za-z0-9_:-][A-Za-z0-9._:-]*$",
    words: "a stream id as the play-start answer gave it",
};

/// Whether `stream_id` has the `STREAM_ID` shape: a base64url head, `.`, a valid device id.
pub fn has_stream_id_shape(stream_id: &str) -> bool {
    let Some((head, device_id)) = stream_id.split_once('.') else {
        return false;
    };
    (39..=124).contains(&head.len())
        && head
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
        && validate_token(device_id).is_ok()
}

/// The device a stream id names, unverified: the part after its first `.`. The id's MAC binds
/// it to the device, so a call whose id names another device than its MAC can act on no stream.
pub fn device_of(stream_id: &str) -> Option<&str> {
    stream_id.split_once('.').map(|(_, device_id)| device_id)
}

/// The plan a stream was issued under. Its id carries it, so a lease lost with the store (a
/// restart, a reshard) comes back under the right limit, not the default plan's.
#[derive(Debug, Clone, PartialEq, Eq, Default, serde::Serialize, serde::Deserialize)]
pub struct PlanTag {
    pub name: String,
    pub limit: u32,
}

/// A nonce in what regions send each other: 22 characters of base64url, not an array of 16
/// numbers (a renewal's largest field).
pub mod nonce_text {
    use base64::Engine;
    use base64::engine::general_purpose::URL_SAFE_NO_PAD;
    use serde::{Deserialize, Deserializer, Serializer};

    use super::{NONCE_LEN, Nonce};

    pub fn serialize<S: Serializer>(nonce: &Nonce, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(&URL_SAFE_NO_PAD.encode(nonce))
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Nonce, D::Error> {
        let text = String::deserialize(deserializer)?;
        let bytes = URL_SAFE_NO_PAD
            .decode(text)
            .map_err(serde::de::Error::custom)?;
        Nonce::try_from(bytes.as_slice()).map_err(|_| {
            serde::de::Error::custom(format!("a nonce is {NONCE_LEN} bytes, not {}", bytes.len()))
        })
    }
}

/// What a verified stream id names: the device it was issued to, its random part, its plan.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct StreamRef {
    pub device_id: String,
    #[serde(with = "crate::ids::nonce_text")]
    pub nonce: Nonce,
    pub plan: PlanTag,
}

/// Mints and verifies stream ids with one shared secret.
#[derive(Clone)]
pub struct StreamIdCodec {
    mac: Hmac<Sha256>,
}

impl std::fmt::Debug for StreamIdCodec {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("StreamIdCodec(..)")
    }
}

impl StreamIdCodec {
    pub fn new(secret: &[u8]) -> Self {
        StreamIdCodec {
            mac: Hmac::new_from_slice(secret).expect("HMAC takes keys of any length"),
        }
    }

    /// A codec with a random secret, for a single process on the embedded store.
    pub fn random() -> Self {
        Self::new(&rand::random::<[u8; 32]>())
    }

    pub fn new_nonce() -> Nonce {
        rand::random()
    }

    fn tag(&self, account_id: &str, device_id: &str, body: &[u8]) -> Hmac<Sha256> {
        let mut mac = self.mac.clone();
        // Length prefixes keep ("ab","c") and ("a","bc") apart.
        mac.update(&[account_id.len() as u8]);
        mac.update(account_id.as_bytes());
        mac.update(&[device_id.len() as u8]);
        mac.update(device_id.as_bytes());
        mac.update(body);
        mac
    }

    /// The stream id for this account and stream; the same inputs give the same id:
    /// `base64url(nonce ‖ plan limit ‖ plan name) ‖ base64url(tag) "." device_id`.
    pub fn encode(&self, account_id: &str, stream: &StreamRef) -> String {
        let mut body = Vec::with_capacity(NONCE_LEN + 1 + stream.plan.name.len());
        body.extend_from_slice(&stream.nonce);
        body.push(u8::try_from(stream.plan.limit).unwrap_or(u8::MAX));
        body.extend_from_slice(stream.plan.name.as_bytes());
        let tag = self
            .tag(account_id, &stream.device_id, &body)
            .finalize()
            .into_bytes();
        let mut id = String::with_capacity(2 * body.len() + MAC_CHARS + 1 + stream.device_id.len());
        URL_SAFE_NO_PAD.encode_string(&body, &mut id);
        URL_SAFE_NO_PAD.encode_string(&tag[..MAC_LEN], &mut id);
        id.push('.');
        id.push_str(&stream.device_id);
        id
    }

    /// The stream `stream_id` names if it was issued for `account_id`, else `None`.
    pub fn decode(&self, account_id: &str, stream_id: &str) -> Option<StreamRef> {
        if !has_stream_id_shape(stream_id) {
            return None;
        }
        let (head, device_id) = stream_id.split_once('.')?;
        let (body_b64, mac_b64) = head.split_at_checked(head.len().checked_sub(MAC_CHARS)?)?;
        let body = URL_SAFE_NO_PAD.decode(body_b64).ok()?;
        let tag = URL_SAFE_NO_PAD.decode(mac_b64).ok()?;
        self.tag(account_id, device_id, &body)
            .verify_truncated_left(&tag)
            .ok()?;
        let nonce: Nonce = body.get(..NONCE_LEN)?.try_into().ok()?;
        let limit = u32::from(*body.get(NONCE_LEN)?);
        let name = String::from_utf8(body.get(NONCE_LEN + 1..)?.to_vec()).ok()?;
        Some(StreamRef {
            device_id: device_id.to_owned(),
            nonce,
            plan: PlanTag { name, limit },
        })
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// Whether `text` is valid by the rule as a JSON Schema reads it: `minLength`, `maxLength`
    /// (in characters) and `pattern` (compiled by `regex`, which reads these patterns as ECMA-262).
    pub(crate) fn schema_accepts(rule: &TextRule, text: &str) -> bool {
        let chars = text.chars().count();
        let pattern = regex::Regex::new(rule.pattern).expect("the rule's pattern compiles");
        (rule.min_chars..=rule.max_chars).contains(&chars) && pattern.is_match(text)
    }

    /// Every string of up to `len` characters over `alphabet`, plus `extra`.
    pub(crate) fn samples(alphabet: &[char], len: usize, extra: &[String]) -> Vec<String> {
        let mut all = vec![String::new()];
        let mut last = vec![String::new()];
        for _ in 0..len {
            last = last
                .iter()
                .flat_map(|s| alphabet.iter().map(move |c| format!("{s}{c}")))
                .collect();
            all.extend(last.iter().cloned());
        }
        all.extend(extra.iter().cloned());
        all
    }

    /// Fails with the first sample on which the validator and the schema disagree.
    pub(crate) fn assert_agree(rule: &TextRule, valid: impl Fn(&str) -> bool, samples: &[String]) {
        for sample in samples {
            assert_eq!(
                valid(sample),
                schema_accepts(rule, sample),
                "validator and schema disagree on {sample:?} ({})",
                rule.words
            );
        }
    }

    #[test]
    fn ids_allow_a_safe_alphabet_only() {
        assert!(validate_token("acct-42_eu:1.x").is_ok());
        assert!(validate_token(".a").is_ok() && validate_token("a..").is_ok());
        assert_eq!(validate_token(""), Err(IdError::Empty));
        assert_eq!(
            validate_token(&"a".repeat(65)),
            Err(IdError::TooLong { max: 64 })
        );
        for bad in ["a b", "a/b", "{a}", "é", "a\u{0}"] {
            assert_eq!(validate_token(bad), Err(IdError::BadCharacter), "{bad:?}");
        }
        for dots in [".", "..", "...", &".".repeat(64)] {
            assert_eq!(validate_token(dots), Err(IdError::OnlyDots), "{dots:?}");
        }
    }

    #[test]
    fn the_id_validator_and_the_id_schema_agree() {
        let extra: Vec<String> = [
            "a".repeat(63),
            "a".repeat(64),
            "a".repeat(65),
            ".".repeat(64),
            format!("{}a", ".".repeat(63)),
            format!("{}a", ".".repeat(64)),
            "é".repeat(10),
            "a\n".into(),
            "\na".into(),
            "a\r\n".into(),
            "acct-42_eu:1.x".into(),
        ]
        .into();
        let alphabet = ['a', 'Z', '0', '.', '_', ':', '-', '/', ' ', '\n', 'é', '%'];
        assert_agree(
            &ID,
            |s| validate_token(s).is_ok(),
            &samples(&alphabet, 3, &extra),
        );
    }

    #[test]
    fn display_names_take_text_but_no_control_characters() {
        assert!(validate_display_name("Mom's iPhone 📱 <script>").is_ok());
        assert_eq!(
            validate_display_name("a\nb"),
            Err(IdError::ControlCharacter)
        );
        assert!(validate_display_name(&"x".repeat(65)).is_err());
        assert!(validate_text(&DEVICE_META, &"📺".repeat(30)).is_ok());
        assert_eq!(
            validate_text(&DEVICE_META, &"x".repeat(31)),
            Err(IdError::TooLong { max: 30 })
        );
    }

    #[test]
    fn the_display_name_validators_and_schemas_agree() {
        let alphabet = [
            'a', ' ', '📺', '\u{0}', '\u{1f}', '\u{7f}', '\u{9f}', '\u{a0}', '\n',
        ];
        for rule in [DEVICE_META, DISPLAY_NAME] {
            let extra: Vec<String> = [
                "é".repeat(rule.max_chars),
                "é".repeat(rule.max_chars + 1),
                "📺".repeat(rule.max_chars),
                format!("{}\u{7}", "a".repeat(rule.max_chars - 1)),
            ]
            .into();
            assert_agree(
                &rule,
                |s| validate_text(&rule, s).is_ok(),
                &samples(&alphabet, 2, &extra),
            );
        }
    }

    #[test]
    fn every_issued_stream_id_has_the_documented_shape() {
        let codec = StreamIdCodec::new(b"a test secret of some length");
        for (plan, device) in [
            ("", "d"),
            ("basic", "tv-1"),
            (&*"p".repeat(64), &*"d".repeat(64)),
        ] {
            let stream = StreamRef {
                device_id: device.into(),
                nonce: [0xff; 16],
                plan: PlanTag {
                    name: plan.into(),
                    limit: 4,
                },
            };
            let id = codec.encode("acct", &stream);
            assert!(has_stream_id_shape(&id), "{id}");
            assert!(schema_accepts(&STREAM_ID, &id), "{id}");
        }
        let shortest = codec.encode(
            "a",
            &StreamRef {
                device_id: "d".into(),
                nonce: [0; 16],
                plan: PlanTag::default(),
            },
        );
        assert_eq!(shortest.chars().count(), STREAM_ID.min_chars);
        let head = "A".repeat(39);
        let extra: Vec<String> = [
            format!("{head}.d"),
            format!("{head}.."),
            format!("{head}..."),
            format!("{head}.a.b"),
            format!("{}.d", "A".repeat(38)),
            format!("{}.d", "A".repeat(124)),
            format!("{}.d", "A".repeat(125)),
            format!("{}.{}", "A".repeat(124), "d".repeat(64)),
            format!("{}.{}", "A".repeat(124), "d".repeat(65)),
            format!("{head}.d\n"),
            format!("{head}/.d"),
            shortest,
        ]
        .into();
        assert_agree(
            &STREAM_ID,
            has_stream_id_shape,
            &samples(&['A', '.', 'd'], 3, &extra),
        );
    }

    #[test]
    fn a_stream_id_round_trips_for_its_own_account_only() {
        let codec = StreamIdCodec::new(b"a test secret of some length");
        let plan = PlanTag {
            name: "premium".into(),
            limit: 4,
        };
        let stream = StreamRef {
            device_id: "tv-1".into(),
            nonce: StreamIdCodec::new_nonce(),
            plan,
        };
        let id = codec.encode("acct-1", &stream);
        assert_eq!(id.len(), 32 + 16 + 1 + 4, "{id}");
        assert_eq!(codec.decode("acct-1", &id), Some(stream.clone()));
        assert_eq!(
            codec.decode("acct-2", &id),
            None,
            "another account's id must not verify"
        );
        let other_secret = StreamIdCodec::new(b"another secret entirely");
        assert_eq!(other_secret.decode("acct-1", &id), None);
    }

    #[test]
    fn a_tampered_stream_id_does_not_verify() {
        let codec = StreamIdCodec::new(b"a test secret of some length");
        let stream = StreamRef {
            device_id: "tv-1".into(),
            nonce: [7; 16],
            plan: PlanTag::default(),
        };
        let id = codec.encode("acct-1", &stream);
        let moved_device = id.replace(".tv-1", ".tv-2");
        assert_eq!(codec.decode("acct-1", &moved_device), None);
        let mut flipped = id.clone().into_bytes();
        flipped[3] = if flipped[3] == b'A' { b'B' } else { b'A' };
        assert_eq!(
            codec.decode("acct-1", &String::from_utf8(flipped).unwrap()),
            None
        );
        let head = id.split_once('.').unwrap().0;
        for junk in [
            "",
            "short",
            ".tv-1",
            head,
            &format!("{head}x.tv-1"),
            &format!("{}.tv-1", &head[1..]),
        ] {
            assert_eq!(codec.decode("acct-1", junk), None, "{junk:?}");
        }
    }
}
