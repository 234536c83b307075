//! The lease rules for one account, as pure functions over its records: what the embedded store
//! runs, and `store/redis/lua/*.lua` and the module implement inside Redis.

use super::audit::{AuditKind, LimitChange};
use super::commands::{
    AcquireCmd, AcquireOutcome, ForceStopOutcome, HeartbeatOutcome, ReleaseOutcome,
};
use super::history::{HistoryDevice, HistoryEvent, RefusalRule};
use super::lease::{DenyRule, Device, Lease, LimitOverride, Millis, Plan, Timing};
use crate::ids::{Nonce, PlanTag, StreamRef};

#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
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
    /// History events of the operation at hand, oldest first, for the store to keep
    /// (`take_events`).
    events: Vec<HistoryEvent>,
}

impl AccountState {
    pub fn new(plan: Plan) -> Self {
        AccountState {
            plan,
            limit_override: None,
            records: Vec::new(),
            events: Vec::new(),
        }
    }

    /// Drops what is past remembering; the same reaping the Redis scripts do on load. A live
    /// lease forgotten here ended without a stop: an `expired` event.
    pub fn prune(&mut self, now: Millis, timing: Timing) {
        let events = &mut self.events;
        self.records.retain(|r| {
            let kept = r.forget_at(timing) > now;
            if !kept && r.state == RecordState::Live {
                events.push(HistoryEvent::Expired {
                    device: HistoryDevice::from(&r.device),
                    ended_at: r.until,
                });
            }
            kept
        });
        self.limit_override = self.limit_override.filter(|o| o.until > now);
    }

    /// The history events since the last call, oldest first.
    pub fn take_events(&mut self) -> Vec<HistoryEvent> {
        std::mem::take(&mut self.events)
    }

    /// When the whole account may be forgotten; `None` when nothing is left.
    pub fn forget_at(&self, timing: Timing) -> Option<Millis> {
        let records = self.records.iter().map(|r| r.forget_at(timing));
        records.chain(self.limit_override.map(|o| o.until)).max()
    }

    /// Whether a temporary limit is in force at `now`.
    fn override_active(&self, now: Millis) -> bool {
        self.limit_override.is_some_and(|o| o.until > now)
    }

    /// The limit in force for `plan` at `now`: an unexpired override wins.
    fn limit_at(&self, plan: &Plan, now: Millis) -> u32 {
        match self.limit_override {
            Some(o) if o.until > now => o.limit,
            _ => plan.limit,
        }
    }

    /// Sets (or with `None` clears) the account's temporary limit, `actor`'s change. Returns
    /// what changed, for the audit log; `None` when a removal found no temporary limit in force.
    pub fn set_override(
        &mut self,
        limit_override: Option<LimitOverride>,
        actor: &str,
        now: Millis,
    ) -> Option<LimitChange> {
        let before = self.limit_at(&self.plan, now);
        let active = self.limit_override.filter(|o| o.until > now);
        self.limit_override = limit_override;
        let actor = actor.to_owned();
        self.events.extend(match (limit_override, active) {
            (Some(granted), _) => Some(HistoryEvent::LimitGranted {
                limit: granted.limit,
                until: granted.until,
                actor,
            }),
            (None, Some(removed)) => Some(HistoryEvent::LimitRemoved {
                limit: removed.limit,
                until: removed.until,
                actor,
            }),
            (None, None) => None,
        });
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
        let mut replaced = None;
        if let Some(r) = records.iter_mut().find(|r| is_target(r)) {
            replaced = Some(HistoryDevice::from(&r.device));
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
            let (rule_of, at) = match rule {
                DenyRule::MaxStreams if self.override_active(now) => {
                    (RefusalRule::TemporaryLimit, limit)
                }
                DenyRule::MaxStreams => (RefusalRule::PlanLimit, limit),
                DenyRule::DeviceTypeCap { cap, .. } => (RefusalRule::DeviceTypeCap, cap),
            };
            let device = HistoryDevice::from(&cmd.device);
            let holders = live().map(|r| HistoryDevice::from(&r.device)).collect();
            if cmd.shadow {
                // Let through as any other play: the store holds the truth, over the limit.
                self.events.push(HistoryEvent::ShadowRefused {
                    device,
                    rule: rule_of,
                    limit: at,
                    holders,
                });
            } else {
                self.events.push(HistoryEvent::Refused {
                    device,
                    rule: rule_of,
                    limit: at,
                    holders,
                });
                let active = live().map(Record::lease).collect();
                return AcquireOutcome::Denied {
                    plan: plan.tag(),
                    limit,
                    rule,
                    active,
                };
            }
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
        if let Some(replaced) = replaced {
            self.events.push(HistoryEvent::TakeOver {
                device: HistoryDevice::from(&cmd.device),
                replaced,
            });
        }
        AcquireOutcome::Granted {
            plan: self.plan.tag(),
            limit,
            active_count: active + 1,
            expires_at,
            would_refuse: rule,
        }
    }

    /// Renews the stream's lease, or takes a lost one back when the account has room; while
    /// `learning` (the account's home just moved here, and holds none of its leases yet) it is
    /// taken back even without room. A revoked or released stream is told so either way.
    pub fn heartbeat(
        &mut self,
        stream: &StreamRef,
        learning: bool,
        now: Millis,
        timing: Timing,
    ) -> HeartbeatOutcome {
        let found = self.find_device(&stream.device_id);
        if let Some(i) = found {
            let record = &mut self.records[i];
            if record.nonce != stream.nonce || record.state == RecordState::Revoked {
                self.events.push(HistoryEvent::Revoked {
                    device_id: stream.device_id.clone(),
                });
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
        // The lease is gone: take the slot back if the account has room (or is learning).
        if !learning && self.active_count(now) >= self.limit_at(&self.plan, now) {
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

    /// Revokes the stream; `actor` (who stopped it) goes into the account's history.
    pub fn force_stop(
        &mut self,
        stream: &StreamRef,
        actor: &str,
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
                let device = HistoryDevice::from(&r.device);
                r.entomb(RecordState::Revoked, now, timing);
                self.events.push(HistoryEvent::ForceStop {
                    device,
                    actor: actor.to_owned(),
                });
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
