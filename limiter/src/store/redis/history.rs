//! The entries of an account's history list (`sl:history:{<account_id>}`) as the scripts
//! (`history_push` in `lua/fast.lua`) and the module write them, decoded in this one place.
//! Compact and binary, like the records: a script copies a device's bytes straight out of the
//! account value and never formats text.
//!
//! entry:  B version (1), B kind, I6 at (ms), then by kind:
//!   1 refused        B rule (0 the plan's limit, 1 a temporary limit, 2 a device-type cap),
//!                    B the limit (the cap for rule 2), device, then the devices that held the
//!                    slots, to the end
//!   2 take-over      device (the one that took over), device (the one it replaced)
//!   3 force-stop     device, then the actor, to the end
//!   4 revoked        B device length, device
//!   5 expired        I6 the lease's end (ms), device
//!   6 limit granted  B limit, I6 until (ms), then the actor, to the end
//!   7 limit removed  B the limit removed, I6 when it would have ended (ms), then the actor
//!   8 shadow-refused as refused: a play the limits would have refused, let through in shadow
//! device: B id length, id, B type code, B display name length, display name

use crate::model::{DeviceType, HistoryDevice, HistoryEntry, HistoryEvent, Millis, RefusalRule};

/// The version of the entries this limiter writes and reads.
pub const ENTRY_VERSION: u8 = 1;

/// A reader over one entry's bytes; every read is bounds-checked.
struct Reader<'a> {
    raw: &'a [u8],
    at: usize,
}

impl<'a> Reader<'a> {
    fn byte(&mut self) -> Option<u8> {
        let b = *self.raw.get(self.at)?;
        self.at += 1;
        Some(b)
    }

    fn bytes(&mut self, n: usize) -> Option<&'a [u8]> {
        let out = self.raw.get(self.at..self.at + n)?;
        self.at += n;
        Some(out)
    }

    fn u48(&mut self) -> Option<Millis> {
        let bytes = self.bytes(6)?;
        Some(bytes.iter().fold(0, |acc, &b| (acc << 8) | Millis::from(b)))
    }

    /// Length-prefixed text.
    fn text(&mut self) -> Option<String> {
        let len = self.byte()? as usize;
        String::from_utf8(self.bytes(len)?.to_vec()).ok()
    }

    /// Everything left, as text.
    fn rest(&mut self) -> Option<String> {
        let bytes = self.raw.get(self.at..)?;
        self.at = self.raw.len();
        String::from_utf8(bytes.to_vec()).ok()
    }

    fn device(&mut self) -> Option<HistoryDevice> {
        let device_id = self.text()?;
        let device_type = DeviceType::from_code(self.byte()?);
        let device_meta = self.text()?;
        Some(HistoryDevice {
            device_id,
            device_type,
            device_meta,
        })
    }

    fn done(&self) -> bool {
        self.at == self.raw.len()
    }
}

/// Decodes one entry; `None` for an entry of another version, an unknown kind, or bytes that do
/// not follow the layout.
pub fn decode(raw: &[u8]) -> Option<HistoryEntry> {
    let mut r = Reader { raw, at: 0 };
    if r.byte()? != ENTRY_VERSION {
        return None;
    }
    let kind = r.byte()?;
    let at = r.u48()?;
    let event = match kind {
        1 | 8 => {
            let rule = match r.byte()? {
                0 => RefusalRule::PlanLimit,
                1 => RefusalRule::TemporaryLimit,
                2 => RefusalRule::DeviceTypeCap,
                _ => return None,
            };
            let limit = u32::from(r.byte()?);
            let device = r.device()?;
            let mut holders = Vec::new();
            while !r.done() {
                holders.push(r.device()?);
            }
            match kind {
                1 => HistoryEvent::Refused {
                    device,
                    rule,
                    limit,
                    holders,
                },
                _ => HistoryEvent::ShadowRefused {
                    device,
                    rule,
                    limit,
                    holders,
                },
            }
        }
        2 => HistoryEvent::TakeOver {
            device: r.device()?,
            replaced: r.device()?,
        },
        3 => HistoryEvent::ForceStop {
            device: r.device()?,
            actor: r.rest()?,
        },
        4 => HistoryEvent::Revoked {
            device_id: r.text()?,
        },
        5 => {
            let ended_at = r.u48()?;
            HistoryEvent::Expired {
                device: r.device()?,
                ended_at,
            }
        }
        6 | 7 => {
            let limit = u32::from(r.byte()?);
            let until = r.u48()?;
            let actor = r.rest()?;
            match kind {
                6 => HistoryEvent::LimitGranted {
                    limit,
                    until,
                    actor,
                },
                _ => HistoryEvent::LimitRemoved {
                    limit,
                    until,
                    actor,
                },
            }
        }
        _ => return None,
    };
    r.done().then_some(HistoryEntry { at, event })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn device(out: &mut Vec<u8>, id: &str, kind: u8, meta: &str) {
        out.push(id.len() as u8);
        out.extend_from_slice(id.as_bytes());
        out.extend_from_slice(&[kind, meta.len() as u8]);
        out.extend_from_slice(meta.as_bytes());
    }

    fn head(kind: u8, at: Millis) -> Vec<u8> {
        let mut out = vec![ENTRY_VERSION, kind];
        out.extend_from_slice(&at.to_be_bytes()[2..]);
        out
    }

    fn dev(id: &str, kind: DeviceType, meta: &str) -> HistoryDevice {
        HistoryDevice {
            device_id: id.into(),
            device_type: kind,
            device_meta: meta.into(),
        }
    }

    #[test]
    fn a_refusal_decodes_with_its_rule_and_the_devices_that_held_the_slots() {
        let mut raw = head(1, 1_795_986_163_540);
        raw.extend_from_slice(&[2, 1]);
        device(&mut raw, "phone-2", 1, "Mom's 📱");
        device(&mut raw, "phone-1", 1, "");
        device(&mut raw, "tv", 0, "Living room");
        let entry = decode(&raw).unwrap();
        assert_eq!(entry.at, 1_795_986_163_540);
        assert_eq!(
            entry.event,
            HistoryEvent::Refused {
                device: dev("phone-2", DeviceType::Mobile, "Mom's 📱"),
                rule: RefusalRule::DeviceTypeCap,
                limit: 1,
                holders: vec![
                    dev("phone-1", DeviceType::Mobile, ""),
                    dev("tv", DeviceType::Tv, "Living room")
                ],
            }
        );
    }

    #[test]
    fn every_other_kind_decodes() {
        let mut take_over = head(2, 7);
        device(&mut take_over, "tv", 0, "TV");
        device(&mut take_over, "web", 3, "");
        let mut force_stop = head(3, 7);
        device(&mut force_stop, "tv", 0, "TV");
        force_stop.extend_from_slice("alice@support".as_bytes());
        let mut revoked = head(4, 7);
        revoked.extend_from_slice(b"\x02tv");
        let mut expired = head(5, 7);
        expired.extend_from_slice(&5u64.to_be_bytes()[2..]);
        device(&mut expired, "tv", 5, "");
        let mut granted = head(6, 7);
        granted.push(4);
        granted.extend_from_slice(&9u64.to_be_bytes()[2..]);
        granted.extend_from_slice(b"bo");
        let mut removed = granted.clone();
        removed[1] = 7;
        let events: Vec<_> = [take_over, force_stop, revoked, expired, granted, removed]
            .iter()
            .map(|raw| decode(raw).unwrap().event)
            .collect();
        assert_eq!(
            events,
            [
                HistoryEvent::TakeOver {
                    device: dev("tv", DeviceType::Tv, "TV"),
                    replaced: dev("web", DeviceType::Web, ""),
                },
                HistoryEvent::ForceStop {
                    device: dev("tv", DeviceType::Tv, "TV"),
                    actor: "alice@support".into(),
                },
                HistoryEvent::Revoked {
                    device_id: "tv".into()
                },
                HistoryEvent::Expired {
                    device: dev("tv", DeviceType::Other, ""),
                    ended_at: 5,
                },
                HistoryEvent::LimitGranted {
                    limit: 4,
                    until: 9,
                    actor: "bo".into(),
                },
                HistoryEvent::LimitRemoved {
                    limit: 4,
                    until: 9,
                    actor: "bo".into(),
                },
            ]
        );
    }

    #[test]
    fn cut_or_foreign_entries_are_refused() {
        let mut raw = head(2, 7);
        device(&mut raw, "tv", 0, "TV");
        device(&mut raw, "web", 3, "");
        assert!(decode(&raw).is_some());
        for cut in 0..raw.len() {
            assert!(decode(&raw[..cut]).is_none(), "cut at {cut}");
        }
        let mut trailing = raw.clone();
        trailing.push(0);
        assert!(decode(&trailing).is_none());
        let mut other_version = raw.clone();
        other_version[0] = 2;
        assert!(decode(&other_version).is_none());
        let mut unknown_kind = raw;
        unknown_kind[1] = 99;
        assert!(decode(&unknown_kind).is_none());
    }
}
