//! The lease rules for one account, as pure functions over its records.
//!
//! The embedded store runs these directly; `store/redis/lua/*.lua` implements the same rules
//! inside Redis. The conformance suite (`tests/conformance.rs`) holds both to one behaviour.
//!
//! An account keeps one record per device. A record is *live* while its lease is unexpired; an
//! expired live record lingers for one more TTL so a late heartbeat can tell "expired" from
//! "revoked". Revoked and released records are tombstones kept for two TTLs. A stream id names a
//! device and a nonce: a heartbeat whose nonce differs from the device's record belongs to a
//! stream that was replaced, and is revoked.

pub use crate::ids::PlanTag;
use crate::ids::{Nonce, StreamRef};

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

    pub fn from_code(code: u8) -> DeviceType {
        Self::ALL
            .get(code as usize)
            .copied()
            .unwrap_or(DeviceType::Other)
    }
}

/// What a play-start tells about the device; kept with the lease for lists and the dashboard.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Device {
    pub id: String,
    pub kind: DeviceType,
    pub meta: String,
    pub profile_id: String,
    pub title_id: String,
}

/// Caps per device type inside a plan, indexed by [`DeviceType::code`]; 0 means no cap.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
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

#[derive(Debug, Clone, PartialEq, Eq)]
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
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LimitOverride {
    pub limit: u32,
    pub until: Millis,
}

/// What support asks for: `limit` streams for `duration_ms` from now (store time).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OverrideGrant {
    pub limit: u32,
    pub duration_ms: Millis,
}

/// Which rule refused a play.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DenyRule {
    /// The account holds as many streams as its limit.
    MaxStreams,
    /// The plan allows at most `cap` streams on this kind of device.
    DeviceTypeCap { kind: DeviceType, cap: u32 },
}

/// A live lease as lists and denials show it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Lease {
    pub device: Device,
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

#[derive(Debug, Clone)]
pub struct AcquireCmd {
    pub account_id: String,
    pub device: Device,
    pub nonce: Nonce,
    /// The plan the request named; `None` keeps the account's remembered plan.
    pub plan: Option<Plan>,
    /// A stream to stop so the caller takes its slot.
    pub replace: Option<StreamRef>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AcquireOutcome {
    Granted {
        /// The plan the account is now held to (its id carries it).
        plan: PlanTag,
        limit: u32,
        active_count: u32,
        expires_at: Millis,
    },
    Denied {
        plan: PlanTag,
        limit: u32,
        rule: DenyRule,
        active: Vec<Lease>,
    },
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HeartbeatOutcome {
    Renewed {
        expires_at: Millis,
    },
    /// The lease was gone (expired or lost with the store) and the account had room.
    Reregistered {
        expires_at: Millis,
    },
    /// The lease is gone and the account is full, or the stream was released: play again.
    Expired,
    /// Force-stopped, taken over or replaced by a newer play: stop playing.
    Revoked,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReleaseOutcome {
    Released,
    NotHeld,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ForceStopOutcome {
    Stopped,
    AlreadyStopped,
    Unknown,
}

/// A force-stop as support asks for it; the audit log records who and why.
#[derive(Debug, Clone)]
pub struct ForceStopCmd {
    pub account_id: String,
    pub stream: StreamRef,
    /// The stream id as the caller named it, for the audit log.
    pub stream_id: String,
    pub actor: String,
    pub reason: String,
}

/// A temporary-limit change as support asks for it: grant `grant`, or with `None` remove the
/// account's temporary limit; the audit log records who and why.
#[derive(Debug, Clone)]
pub struct OverrideCmd {
    pub account_id: String,
    pub grant: Option<OverrideGrant>,
    pub actor: String,
    pub reason: String,
}

/// What support did, as the audit log names it.
#[derive(
    Debug,
    Clone,
    Copy,
    PartialEq,
    Eq,
    Default,
    serde::Serialize,
    serde::Deserialize,
    utoipa::ToSchema,
)]
#[serde(rename_all = "snake_case")]
pub enum AuditKind {
    /// A stream was force-stopped. Entries written before kinds existed are force-stops.
    #[default]
    ForceStop,
    /// A temporary limit was granted (or replaced).
    LimitGranted,
    /// A temporary limit was removed before its end.
    LimitRemoved,
    /// Someone signed in to the dashboard (`actor`, from `address`).
    SignIn,
    /// A dashboard sign-in was refused: wrong user name or password.
    SignInFailed,
    /// Dashboard sign-ins were paused for a user name or an address after too many failures.
    SignInThrottled,
    /// Someone signed out of the dashboard: every session of `actor` ended, on every replica.
    SignOut,
}

impl AuditKind {
    pub const ALL: [AuditKind; 7] = [
        AuditKind::ForceStop,
        AuditKind::LimitGranted,
        AuditKind::LimitRemoved,
        AuditKind::SignIn,
        AuditKind::SignInFailed,
        AuditKind::SignInThrottled,
        AuditKind::SignOut,
    ];

    /// The kinds a dashboard reports about its own sign-ins (`POST
    /// /v1/dashboard-sessions/{user}/events`).
    pub const SESSION_EVENTS: [AuditKind; 4] = [
        AuditKind::SignIn,
        AuditKind::SignInFailed,
        AuditKind::SignInThrottled,
        AuditKind::SignOut,
    ];

    /// Whether this kind is a dashboard sign-in event rather than a support action.
    pub fn is_session_event(self) -> bool {
        Self::SESSION_EVENTS.contains(&self)
    }

    /// The snake_case name of the API and the stored entries.
    pub fn as_str(self) -> &'static str {
        match self {
            AuditKind::ForceStop => "force_stop",
            AuditKind::LimitGranted => "limit_granted",
            AuditKind::LimitRemoved => "limit_removed",
            AuditKind::SignIn => "sign_in",
            AuditKind::SignInFailed => "sign_in_failed",
            AuditKind::SignInThrottled => "sign_in_throttled",
            AuditKind::SignOut => "sign_out",
        }
    }

    /// The kind named `name`, if there is one.
    pub fn parse(name: &str) -> Option<AuditKind> {
        Self::ALL.into_iter().find(|k| k.as_str() == name)
    }
}

/// One support action in the audit log. Stored as JSON (in Redis lists), newest first.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct AuditEntry {
    pub at: Millis,
    #[serde(default)]
    pub kind: AuditKind,
    pub account_id: String,
    /// Force-stops: the stream, its device and its display name; empty for limit changes.
    #[serde(default)]
    pub stream_id: String,
    #[serde(default)]
    pub device_id: String,
    #[serde(default)]
    pub device_meta: String,
    pub actor: String,
    pub reason: String,
    /// Limit changes: the limit in force before and after.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub limit_from: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub limit_to: Option<u32>,
    /// Limit changes: when the granted limit ends, or when the removed one would have ended.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub limit_until: Option<Millis>,
    /// Sign-in events: the client's address as the dashboard saw it.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub address: String,
}

/// A dashboard's report of a sign-in event (`kind` one of [`AuditKind::SESSION_EVENTS`]) for
/// `user`; a sign-out also ends every session of `user` (bumps its session generation).
#[derive(Debug, Clone)]
pub struct SessionEventCmd {
    pub user: String,
    pub kind: AuditKind,
    pub address: String,
    pub reason: String,
}

impl SessionEventCmd {
    /// The audit entry of this event, at `at`. Sign-in events belong to no account.
    pub fn entry(&self, at: Millis) -> AuditEntry {
        AuditEntry {
            at,
            kind: self.kind,
            account_id: String::new(),
            stream_id: String::new(),
            device_id: String::new(),
            device_meta: String::new(),
            actor: self.user.clone(),
            reason: self.reason.clone(),
            limit_from: None,
            limit_to: None,
            limit_until: None,
            address: self.address.clone(),
        }
    }
}

/// What a temporary-limit change did to the account, for its audit entry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LimitChange {
    pub kind: AuditKind,
    /// The limit in force before and after.
    pub from: u32,
    pub to: u32,
    /// When the granted limit ends, or when the removed one would have ended.
    pub until: Millis,
}

impl LimitChange {
    /// The audit entry of this change, made at `at` by `cmd`.
    pub fn entry(self, cmd: &OverrideCmd, at: Millis) -> AuditEntry {
        AuditEntry {
            at,
            kind: self.kind,
            account_id: cmd.account_id.clone(),
            stream_id: String::new(),
            device_id: String::new(),
            device_meta: String::new(),
            actor: cmd.actor.clone(),
            reason: cmd.reason.clone(),
            limit_from: Some(self.from),
            limit_to: Some(self.to),
            limit_until: Some(self.until),
            address: String::new(),
        }
    }
}

/// Longest dashboard session the stores' session generations cover: a generation is kept this
/// long (and a day more) after its user's last sign-in event.
pub const MAX_DASHBOARD_SESSION_SEC: u64 = 30 * 24 * 3600;

/// Entries kept in the fleet-wide audit log (per Redis shard).
pub const AUDIT_RECENT: usize = 1000;
/// Entries kept per account.
pub const AUDIT_PER_ACCOUNT: usize = 50;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AccountView {
    pub plan: PlanTag,
    /// The limit in force: the override's while one is active, else the plan's.
    pub limit: u32,
    pub limit_override: Option<LimitOverride>,
    pub active: Vec<Lease>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum RecordState {
    Live,
    Revoked,
    Released,
}

#[derive(Debug, Clone)]
struct Record {
    device: Device,
    nonce: Nonce,
    state: RecordState,
    /// Lease expiry while live; the time to forget the tombstone otherwise.
    until: Millis,
    started_at: Millis,
}

impl Record {
    fn is_active(&self, now: Millis) -> bool {
        self.state == RecordState::Live && self.until > now
    }

    fn forget_at(&self, timing: Timing) -> Millis {
        match self.state {
            RecordState::Live => self.until + timing.ttl_ms,
            RecordState::Revoked | RecordState::Released => self.until,
        }
    }

    fn entomb(&mut self, state: RecordState, now: Millis, timing: Timing) {
        self.state = state;
        self.until = now + timing.revocation_ms;
        // A tombstone needs only device and nonce; drop the rest to keep it small.
        self.device = Device {
            id: std::mem::take(&mut self.device.id),
            ..Device::default()
        };
    }

    fn lease(&self) -> Lease {
        Lease {
            device: self.device.clone(),
            nonce: self.nonce,
            started_at: self.started_at,
            expires_at: self.until,
        }
    }
}

/// Everything one account holds.
#[derive(Debug, Clone)]
pub struct AccountState {
    plan: Plan,
    limit_override: Option<LimitOverride>,
    records: Vec<Record>,
}

impl AccountState {
    pub fn new(plan: Plan) -> Self {
        AccountState {
            plan,
            limit_override: None,
            records: Vec::new(),
        }
    }

    /// Drops what is past remembering; the same reaping the Redis scripts do on load.
    pub fn prune(&mut self, now: Millis, timing: Timing) {
        self.records.retain(|r| r.forget_at(timing) > now);
        self.limit_override = self.limit_override.filter(|o| o.until > now);
    }

    /// When the whole account may be forgotten; `None` when nothing is left.
    pub fn forget_at(&self, timing: Timing) -> Option<Millis> {
        let records = self.records.iter().map(|r| r.forget_at(timing));
        records.chain(self.limit_override.map(|o| o.until)).max()
    }

    /// The limit in force for `plan` at `now`: an unexpired override wins.
    fn limit_at(&self, plan: &Plan, now: Millis) -> u32 {
        match self.limit_override {
            Some(o) if o.until > now => o.limit,
            _ => plan.limit,
        }
    }

    /// Sets (or with `None` clears) the account's temporary limit. Returns what changed, for
    /// the audit log; `None` when a removal found no temporary limit in force.
    pub fn set_override(
        &mut self,
        limit_override: Option<LimitOverride>,
        now: Millis,
    ) -> Option<LimitChange> {
        let before = self.limit_at(&self.plan, now);
        let active = self.limit_override.filter(|o| o.until > now);
        self.limit_override = limit_override;
        match (limit_override, active) {
            (Some(granted), _) => Some(LimitChange {
                kind: AuditKind::LimitGranted,
                from: before,
                to: granted.limit,
                until: granted.until,
            }),
            (None, Some(removed)) => Some(LimitChange {
                kind: AuditKind::LimitRemoved,
                from: removed.limit,
                to: self.plan.limit,
                until: removed.until,
            }),
            (None, None) => None,
        }
    }

    /// Leases alive at `now`.
    pub fn active_count(&self, now: Millis) -> u32 {
        self.records.iter().filter(|r| r.is_active(now)).count() as u32
    }

    fn find_device(&self, device_id: &str) -> Option<usize> {
        self.records.iter().position(|r| r.device.id == device_id)
    }

    pub fn acquire(&mut self, cmd: &AcquireCmd, now: Millis, timing: Timing) -> AcquireOutcome {
        let plan = cmd.plan.clone().unwrap_or_else(|| self.plan.clone());
        // Work on a copy so a denial leaves the account exactly as it was.
        let mut records: Vec<Record> = self
            .records
            .iter()
            .filter(|r| r.device.id != cmd.device.id)
            .cloned()
            .collect();
        let is_target = |r: &Record| {
            cmd.replace.as_ref().is_some_and(|t| {
                r.device.id == t.device_id && r.nonce == t.nonce && r.state == RecordState::Live
            })
        };
        if let Some(r) = records.iter_mut().find(|r| is_target(r)) {
            r.entomb(RecordState::Revoked, now, timing);
        }
        let limit = self.limit_at(&plan, now);
        let live = || records.iter().filter(|r| r.is_active(now));
        let active = live().count() as u32;
        let kind = cmd.device.kind;
        let rule = if active >= limit {
            Some(DenyRule::MaxStreams)
        } else {
            plan.device_caps
                .cap(kind)
                .filter(|&cap| live().filter(|r| r.device.kind == kind).count() as u32 >= cap)
                .map(|cap| DenyRule::DeviceTypeCap { kind, cap })
        };
        if let Some(rule) = rule {
            let active = live().map(Record::lease).collect();
            return AcquireOutcome::Denied {
                plan: plan.tag(),
                limit,
                rule,
                active,
            };
        }
        let expires_at = now + timing.ttl_ms;
        records.push(Record {
            device: cmd.device.clone(),
            nonce: cmd.nonce,
            state: RecordState::Live,
            until: expires_at,
            started_at: now,
        });
        self.records = records;
        self.plan = plan;
        AcquireOutcome::Granted {
            plan: self.plan.tag(),
            limit,
            active_count: active + 1,
            expires_at,
        }
    }

    pub fn heartbeat(
        &mut self,
        stream: &StreamRef,
        now: Millis,
        timing: Timing,
    ) -> HeartbeatOutcome {
        let found = self.find_device(&stream.device_id);
        if let Some(i) = found {
            let record = &mut self.records[i];
            if record.nonce != stream.nonce || record.state == RecordState::Revoked {
                return HeartbeatOutcome::Revoked;
            }
            if record.state == RecordState::Released {
                return HeartbeatOutcome::Expired;
            }
            if record.until > now {
                record.until = now + timing.ttl_ms;
                return HeartbeatOutcome::Renewed {
                    expires_at: record.until,
                };
            }
        }
        // The lease is gone: take the slot back if the account has room.
        if self.active_count(now) >= self.limit_at(&self.plan, now) {
            return HeartbeatOutcome::Expired;
        }
        let expires_at = now + timing.ttl_ms;
        match found {
            Some(i) => self.records[i].until = expires_at,
            None => self.records.push(Record {
                device: Device {
                    id: stream.device_id.clone(),
                    ..Device::default()
                },
                nonce: stream.nonce,
                state: RecordState::Live,
                until: expires_at,
                started_at: now,
            }),
        }
        HeartbeatOutcome::Reregistered { expires_at }
    }

    pub fn release(&mut self, stream: &StreamRef, now: Millis, timing: Timing) -> ReleaseOutcome {
        match self
            .find_device(&stream.device_id)
            .map(|i| &mut self.records[i])
        {
            Some(r) if r.nonce == stream.nonce && r.state == RecordState::Live => {
                r.entomb(RecordState::Released, now, timing);
                ReleaseOutcome::Released
            }
            _ => ReleaseOutcome::NotHeld,
        }
    }

    pub fn force_stop(
        &mut self,
        stream: &StreamRef,
        now: Millis,
        timing: Timing,
    ) -> ForceStopOutcome {
        match self
            .find_device(&stream.device_id)
            .map(|i| &mut self.records[i])
        {
            None => ForceStopOutcome::Unknown,
            Some(r) if r.nonce != stream.nonce || r.state == RecordState::Revoked => {
                ForceStopOutcome::AlreadyStopped
            }
            Some(r) => {
                r.entomb(RecordState::Revoked, now, timing);
                ForceStopOutcome::Stopped
            }
        }
    }

    /// The display name of a device's current record, for the audit log.
    pub fn device_meta(&self, device_id: &str) -> String {
        self.find_device(device_id)
            .map(|i| self.records[i].device.meta.clone())
            .unwrap_or_default()
    }

    pub fn view(&self, now: Millis) -> AccountView {
        AccountView {
            plan: self.plan.tag(),
            limit: self.limit_at(&self.plan, now),
            limit_override: self.limit_override.filter(|o| o.until > now),
            active: self
                .records
                .iter()
                .filter(|r| r.is_active(now))
                .map(Record::lease)
                .collect(),
        }
    }
}
