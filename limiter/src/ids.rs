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

/// Longest account, device, profile, title or plan id.
pub const MAX_ID_LEN: usize = 64;
/// Longest `device_meta` (a display name), in bytes of UTF-8.
pub const MAX_DEVICE_META_BYTES: usize = 64;

pub const NONCE_LEN: usize = 16;
const MAC_LEN: usize = 12;
const MAC_CHARS: usize = 16;

pub type Nonce = [u8; NONCE_LEN];

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum IdError {
    #[error("must not be empty")]
    Empty,
    #[error("is longer than {max} characters")]
    TooLong { max: usize },
    #[error("may hold only A-Z a-z 0-9 . _ : -")]
    BadCharacter,
    #[error("may not hold control characters")]
    ControlCharacter,
}

/// Checks an id: 1-64 characters of `A-Z a-z 0-9 . _ : -`, safe in URLs, keys and logs.
pub fn validate_token(id: &str) -> Result<(), IdError> {
    if id.is_empty() {
        return Err(IdError::Empty);
    }
    if id.len() > MAX_ID_LEN {
        return Err(IdError::TooLong { max: MAX_ID_LEN });
    }
    if !id
        .bytes()
        .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b':' | b'-'))
    {
        return Err(IdError::BadCharacter);
    }
    Ok(())
}

/// Checks a display name: any text without control characters, at most 64 bytes.
pub fn validate_display_name(text: &str) -> Result<(), IdError> {
    if text.len() > MAX_DEVICE_META_BYTES {
        return Err(IdError::TooLong {
            max: MAX_DEVICE_META_BYTES,
        });
    }
    if text.chars().any(char::is_control) {
        return Err(IdError::ControlCharacter);
    }
    Ok(())
}

/// The plan a stream was issued under. Its id carries it, so a lease lost with the store (a
/// restart, a reshard) comes back under the right limit, not the default plan's.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct PlanTag {
    pub name: String,
    pub limit: u32,
}

/// What a verified stream id names: the device it was issued to, its random part, its plan.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StreamRef {
    pub device_id: String,
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
        let (head, device_id) = stream_id.split_once('.')?;
        validate_token(device_id).ok()?;
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
mod tests {
    use super::*;

    #[test]
    fn ids_allow_a_safe_alphabet_only() {
        assert!(validate_token("acct-42_eu:1.x").is_ok());
        assert_eq!(validate_token(""), Err(IdError::Empty));
        assert_eq!(
            validate_token(&"a".repeat(65)),
            Err(IdError::TooLong { max: 64 })
        );
        for bad in ["a b", "a/b", "{a}", "é", "a\u{0}"] {
            assert_eq!(validate_token(bad), Err(IdError::BadCharacter), "{bad:?}");
        }
    }

    #[test]
    fn display_names_take_text_but_no_control_characters() {
        assert!(validate_display_name("Mom's iPhone 📱 <script>").is_ok());
        assert_eq!(
            validate_display_name("a\nb"),
            Err(IdError::ControlCharacter)
        );
        assert!(validate_display_name(&"x".repeat(65)).is_err());
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
