//! Support's actions as the audit log records them, and the sign-in events that end dashboard
//! sessions.

use super::commands::OverrideCmd;
use super::lease::Millis;

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
/// `user`; a sign-out also ends every session of `user` (bumps its session generation). With a
/// failure window, a failed sign-in counts against the name for every dashboard replica, and a
/// sign-in clears the count.
#[derive(Debug, Clone)]
pub struct SessionEventCmd {
    pub user: String,
    pub kind: AuditKind,
    pub address: String,
    pub reason: String,
    /// How long a failed sign-in is counted (the dashboards' lockout); 0: not counted.
    pub failure_window_ms: u64,
}

/// A dashboard user's state in the store, shared by every dashboard replica.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct SessionState {
    /// Starts at 0; every sign-out adds one: sessions issued under an older one have ended.
    pub generation: u64,
    /// Failed sign-ins under this name still within their window, from any replica.
    pub failures: u64,
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
