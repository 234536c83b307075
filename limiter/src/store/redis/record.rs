//! The byte layout of a lease record inside an account's Redis value (see `lua/common.lua`).
//! Rust builds the details a script only copies, and decodes the records a script returns, so
//! the Lua side never parses more than state, expiry, device and nonce.
//!
//! record: B state, I6 ends (ms), I6 started (ms), 16 nonce, B device length, device,
//!         B details length, details = B type, then B length + bytes of meta, profile, title

use crate::ids::NONCE_LEN;
use crate::model::{Device, DeviceType, Lease, Millis};

/// The length-prefixed details of a new lease: type, display name, profile and title.
pub fn encode_details(device: &Device) -> Vec<u8> {
    let fields = [
        device.meta.as_bytes(),
        device.profile_id.as_bytes(),
        device.title_id.as_bytes(),
    ];
    let body_len = 1 + fields.iter().map(|f| 1 + f.len()).sum::<usize>();
    let mut out = Vec::with_capacity(1 + body_len);
    // Input validation bounds the fields so that they fit behind one length byte even in the
    // worst case (`ids::DEVICE_META`, `ids::ID`; a const assertion there checks the sum).
    out.push(u8::try_from(body_len).expect("details fit in 255 bytes"));
    out.push(device.kind.code());
    for field in fields {
        out.push(u8::try_from(field.len()).expect("each field fits in 255 bytes"));
        out.extend_from_slice(field);
    }
    out
}

fn u48(bytes: &[u8]) -> Millis {
    bytes.iter().fold(0, |acc, &b| (acc << 8) | Millis::from(b))
}

/// Reads length-prefixed text at `*at`, advancing past it.
fn text(raw: &[u8], at: &mut usize) -> Option<String> {
    let len = *raw.get(*at)? as usize;
    let bytes = raw.get(*at + 1..*at + 1 + len)?;
    *at += 1 + len;
    String::from_utf8(bytes.to_vec()).ok()
}

/// Decodes a live record as the scripts return it.
pub fn decode_lease(raw: &[u8]) -> Option<Lease> {
    let expires_at = u48(raw.get(1..7)?);
    let started_at = u48(raw.get(7..13)?);
    let nonce: [u8; NONCE_LEN] = raw.get(13..29)?.try_into().ok()?;
    let mut at = 29;
    let id = text(raw, &mut at)?;
    let details_len = *raw.get(at)? as usize;
    let mut device = Device {
        id,
        ..Device::default()
    };
    if details_len > 0 {
        let mut at = at + 2;
        device.kind = DeviceType::from_code(*raw.get(at - 1)?);
        device.meta = text(raw, &mut at)?;
        device.profile_id = text(raw, &mut at)?;
        device.title_id = text(raw, &mut at)?;
    }
    Some(Lease {
        device,
        nonce,
        started_at,
        expires_at,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Builds a record the way `new_record` in common.lua does.
    fn record(ends: Millis, started: Millis, nonce: [u8; 16], device: &Device) -> Vec<u8> {
        let mut raw = vec![0u8];
        raw.extend_from_slice(&ends.to_be_bytes()[2..]);
        raw.extend_from_slice(&started.to_be_bytes()[2..]);
        raw.extend_from_slice(&nonce);
        raw.push(device.id.len() as u8);
        raw.extend_from_slice(device.id.as_bytes());
        raw.extend_from_slice(&encode_details(device));
        raw
    }

    #[test]
    fn a_record_round_trips() {
        let device = Device {
            id: "tv-1".into(),
            kind: DeviceType::Console,
            meta: "Grandma's TV 📺".into(),
            profile_id: "p".into(),
            title_id: String::new(),
        };
        let raw = record(1_795_986_163_540, 1_795_986_073_540, [9; 16], &device);
        let lease = decode_lease(&raw).unwrap();
        assert_eq!(lease.device, device);
        assert_eq!(
            (lease.expires_at, lease.started_at, lease.nonce),
            (1_795_986_163_540, 1_795_986_073_540, [9; 16])
        );
    }

    #[test]
    fn a_record_without_details_decodes_with_defaults() {
        let mut raw = record(
            5,
            4,
            [1; 16],
            &Device {
                id: "tv".into(),
                ..Device::default()
            },
        );
        raw.truncate(29 + 1 + 2);
        raw.push(0);
        let lease = decode_lease(&raw).unwrap();
        assert_eq!(
            lease.device,
            Device {
                id: "tv".into(),
                ..Device::default()
            }
        );
    }

    #[test]
    fn truncated_records_are_refused() {
        let raw = record(
            5,
            4,
            [1; 16],
            &Device {
                id: "tv".into(),
                meta: "m".into(),
                ..Device::default()
            },
        );
        for cut in [0, 10, 29, 31, raw.len() - 1] {
            assert!(decode_lease(&raw[..cut]).is_none(), "cut at {cut}");
        }
    }
}
