//! An account's recent history: the few events a customer calls support about ("too many
//! screens", "another device took over"), kept per account, newest first, bounded in count and
//! age. Only these rare events are written; a granted play or a renewal writes nothing.

use super::lease::{Device, DeviceType, Millis};

/// How much history each account keeps (`history` in the config).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HistoryLimits {
    /// The newest entries kept; older ones are dropped as new ones arrive.
    pub max_events: u32,
    /// How long an account's history outlives its newest entry (ms).
    pub retention_ms: Millis,
}

impl HistoryLimits {
    /// The bounds as the scripts and the module read them, one argument:
    /// `<max_events>:<retention_ms>` (`50:604800000`).
    pub fn bounds_arg(&self) -> Vec<u8> {
        format!("{}:{}", self.max_events, self.retention_ms).into_bytes()
    }
}

impl Default for HistoryLimits {
    fn default() -> Self {
        HistoryLimits {
            max_events: 50,
            retention_ms: 7 * 24 * 3600 * 1000,
        }
    }
}

/// One event of an account's history, at `at` on the store's clock.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct HistoryEntry {
    pub at: Millis,
    #[serde(flatten)]
    pub event: HistoryEvent,
}

/// A device as the history shows it: its id, type and display name (empty when the play
/// carried none).
#[derive(Debug, Clone, PartialEq, Eq, Default, serde::Serialize, serde::Deserialize)]
pub struct HistoryDevice {
    pub device_id: String,
    pub device_type: DeviceType,
    pub device_meta: String,
}

impl From<&Device> for HistoryDevice {
    fn from(device: &Device) -> Self {
        HistoryDevice {
            device_id: device.id.clone(),
            device_type: device.kind,
            device_meta: device.meta.clone(),
        }
    }
}

/// The rule that refused a play.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize, utoipa::ToSchema,
)]
#[serde(rename_all = "snake_case")]
pub enum RefusalRule {
    /// The account held as many streams as its plan allows.
    PlanLimit,
    /// The account held as many streams as the temporary limit support granted.
    TemporaryLimit,
    /// The plan allows no more streams on this type of device.
    DeviceTypeCap,
}

/// What happened, by kind (`kind` in JSON, snake_case).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum HistoryEvent {
    /// A play was refused: by `rule`, at `limit` streams (the device-type cap for that rule),
    /// while `holders` held the slots.
    Refused {
        device: HistoryDevice,
        rule: RefusalRule,
        limit: u32,
        holders: Vec<HistoryDevice>,
    },
    /// A play the limits would have refused (as `Refused`) was let through: its account was
    /// in shadow (`enforcement`).
    ShadowRefused {
        device: HistoryDevice,
        rule: RefusalRule,
        limit: u32,
        holders: Vec<HistoryDevice>,
    },
    /// A play took the slot of another device's stream, which was stopped.
    TakeOver {
        device: HistoryDevice,
        replaced: HistoryDevice,
    },
    /// Support force-stopped the device's stream.
    ForceStop {
        device: HistoryDevice,
        actor: String,
    },
    /// A heartbeat of the device was told its stream was revoked (force-stopped, taken over or
    /// replaced by a newer play of the same device).
    Revoked { device_id: String },
    /// The device's lease ended without a stop (the player went silent, e.g. it crashed) and
    /// the store has forgotten it.
    Expired {
        device: HistoryDevice,
        ended_at: Millis,
    },
    /// Support granted a temporary limit of `limit` streams until `until`.
    LimitGranted {
        limit: u32,
        until: Millis,
        actor: String,
    },
    /// Support removed the temporary limit `limit`, which would have ended at `until`.
    LimitRemoved {
        limit: u32,
        until: Millis,
        actor: String,
    },
}

/// The kinds of history events, for filters and counts.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize, utoipa::ToSchema,
)]
#[serde(rename_all = "snake_case")]
pub enum HistoryKind {
    Refused,
    ShadowRefused,
    TakeOver,
    ForceStop,
    Revoked,
    Expired,
    LimitGranted,
    LimitRemoved,
}

impl HistoryEvent {
    pub fn kind(&self) -> HistoryKind {
        match self {
            HistoryEvent::Refused { .. } => HistoryKind::Refused,
            HistoryEvent::ShadowRefused { .. } => HistoryKind::ShadowRefused,
            HistoryEvent::TakeOver { .. } => HistoryKind::TakeOver,
            HistoryEvent::ForceStop { .. } => HistoryKind::ForceStop,
            HistoryEvent::Revoked { .. } => HistoryKind::Revoked,
            HistoryEvent::Expired { .. } => HistoryKind::Expired,
            HistoryEvent::LimitGranted { .. } => HistoryKind::LimitGranted,
            HistoryEvent::LimitRemoved { .. } => HistoryKind::LimitRemoved,
        }
    }

    /// Whether a revocation repeats the newest entry: a player keeps heartbeating until it hears
    /// it was revoked, so one revocation is told to each of its late heartbeats, and the history
    /// keeps the first.
    pub fn repeats(&self, newest: Option<&HistoryEvent>) -> bool {
        matches!(self, HistoryEvent::Revoked { .. }) && newest == Some(self)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_bounds_go_as_one_argument_of_digits() {
        assert_eq!(HistoryLimits::default().bounds_arg(), b"50:604800000");
        let limits = HistoryLimits {
            max_events: 1000,
            retention_ms: 7_776_000_000,
        };
        assert_eq!(limits.bounds_arg(), b"1000:7776000000");
    }

    #[test]
    fn entries_serialize_flat_with_a_snake_case_kind() {
        let entry = HistoryEntry {
            at: 5,
            event: HistoryEvent::Refused {
                device: HistoryDevice {
                    device_id: "tv".into(),
                    device_type: DeviceType::Tv,
                    device_meta: "Living room".into(),
                },
                rule: RefusalRule::TemporaryLimit,
                limit: 3,
                holders: vec![HistoryDevice::default()],
            },
        };
        let json = serde_json::to_value(&entry).unwrap();
        assert_eq!(json["kind"], "refused");
        assert_eq!(json["rule"], "temporary_limit");
        assert_eq!(json["device"]["device_type"], "tv");
        assert_eq!(json["holders"][0]["device_type"], "other");
        let back: HistoryEntry = serde_json::from_value(json).unwrap();
        assert_eq!(back, entry);
        let revoked = serde_json::to_value(HistoryEntry {
            at: 1,
            event: HistoryEvent::Revoked {
                device_id: "tv".into(),
            },
        })
        .unwrap();
        assert_eq!(
            revoked,
            serde_json::json!({"at": 1, "kind": "revoked", "device_id": "tv"})
        );
    }

    #[test]
    fn only_a_revocation_of_the_same_device_repeats() {
        let revoked = |id: &str| HistoryEvent::Revoked {
            device_id: id.into(),
        };
        assert!(revoked("tv").repeats(Some(&revoked("tv"))));
        assert!(!revoked("tv").repeats(Some(&revoked("phone"))));
        assert!(!revoked("tv").repeats(None));
        let stop = HistoryEvent::ForceStop {
            device: HistoryDevice::default(),
            actor: "a".into(),
        };
        assert!(!stop.repeats(Some(&stop)));
    }
}
