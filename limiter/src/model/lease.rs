//! A lease and what it is made of: the device, the plan and its caps, a temporary limit, the
//! lease lengths, and the store's clock.

use crate::ids::{Nonce, PlanTag, StreamRef};

/// Milliseconds since the Unix epoch, on the store's clock.
pub type Millis = u64;

#[derive(
    Debug,
    Clone,
    Copy,
    PartialEq,
    Eq,
    PartialOrd,
    Ord,
    Hash,
    Default,
    serde::Serialize,
    serde::Deserialize,
    utoipa::ToSchema,
)]
#[serde(rename_all = "snake_case")]
pub enum DeviceType {
    Tv,
    Mobile,
    Tablet,
    Web,
    Console,
    #[default]
    Other,
}

impl DeviceType {
    pub const ALL: [DeviceType; 6] = [
        DeviceType::Tv,
        DeviceType::Mobile,
        DeviceType::Tablet,
        DeviceType::Web,
        DeviceType::Console,
        DeviceType::Other,
    ];

    /// One-byte code used in the Redis encoding.
    pub fn code(self) -> u8 {
        self as u8
    }

    /// The type as JSON and metrics name it (its serde name).
    pub fn name(self) -> &'static str {
        match self {
            DeviceType::Tv => "tv",
            DeviceType::Mobile => "mobile",
            DeviceType::Tablet => "tablet",
            DeviceType::Web => "web",
            DeviceType::Console => "console",
            DeviceType::Other => "other",
        }
    }

    pub fn from_code(code: u8) -> DeviceType {
        Self::ALL
            .get(code as usize)
            .copied()
            .unwrap_or(DeviceType::Other)
    }
}

/// What a play-start tells about the device; kept with the lease for lists and the dashboard.
#[derive(Debug, Clone, PartialEq, Eq, Default, serde::Serialize, serde::Deserialize)]
pub struct Device {
    pub id: String,
    pub kind: DeviceType,
    pub meta: String,
    pub profile_id: String,
    pub title_id: String,
}

/// Caps per device type inside a plan, indexed by [`DeviceType::code`]; 0 means no cap.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize, serde::Deserialize)]
pub struct DeviceCaps(pub [u8; 6]);

impl DeviceCaps {
    pub fn cap(&self, kind: DeviceType) -> Option<u32> {
        match self.0[kind.code() as usize] {
            0 => None,
            cap => Some(u32::from(cap)),
        }
    }

    pub fn with(mut self, kind: DeviceType, cap: u8) -> Self {
        self.0[kind.code() as usize] = cap;
        self
    }
}

#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Plan {
    pub name: String,
    pub limit: u32,
    pub device_caps: DeviceCaps,
}

impl Plan {
    pub fn new(name: &str, limit: u32) -> Plan {
        Plan {
            name: name.into(),
            limit,
            device_caps: DeviceCaps::default(),
        }
    }

    pub fn tag(&self) -> PlanTag {
        PlanTag {
            name: self.name.clone(),
            limit: self.limit,
        }
    }
}

impl From<&PlanTag> for Plan {
    fn from(tag: &PlanTag) -> Plan {
        Plan::new(&tag.name, tag.limit)
    }
}

/// A temporary limit support granted an account, replacing its plan's limit until `until`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct LimitOverride {
    pub limit: u32,
    pub until: Millis,
}

/// What support asks for: `limit` streams for `duration_ms` from now (store time).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct OverrideGrant {
    pub limit: u32,
    pub duration_ms: Millis,
}

/// Which rule refused a play.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum DenyRule {
    /// The account holds as many streams as its limit.
    MaxStreams,
    /// The plan allows at most `cap` streams on this kind of device.
    DeviceTypeCap { kind: DeviceType, cap: u32 },
}

impl DenyRule {
    /// The rule as answers and metrics name it: `max_streams` or `device_type_cap`.
    pub fn name(self) -> &'static str {
        match self {
            DenyRule::MaxStreams => "max_streams",
            DenyRule::DeviceTypeCap { .. } => "device_type_cap",
        }
    }
}

/// A live lease as lists and denials show it.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Lease {
    pub device: Device,
    #[serde(with = "crate::ids::nonce_text")]
    pub nonce: Nonce,
    pub started_at: Millis,
    pub expires_at: Millis,
}

impl Lease {
    /// The stream as its id names it, under the account's plan.
    pub fn stream(&self, plan: &PlanTag) -> StreamRef {
        StreamRef {
            device_id: self.device.id.clone(),
            nonce: self.nonce,
            plan: plan.clone(),
        }
    }
}

/// Lease lengths every store operation needs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Timing {
    pub ttl_ms: Millis,
    /// How long a revocation is remembered: two TTLs.
    pub revocation_ms: Millis,
}

impl Timing {
    pub fn from_ttl(ttl: std::time::Duration) -> Timing {
        let ttl_ms = ttl.as_millis() as Millis;
        Timing {
            ttl_ms,
            revocation_ms: 2 * ttl_ms,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_device_types_name_is_its_json_name() {
        for kind in DeviceType::ALL {
            assert_eq!(serde_json::to_value(kind).unwrap(), kind.name());
        }
    }
}
