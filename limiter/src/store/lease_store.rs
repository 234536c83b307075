//! The lease store interface both backends implement ([`LeaseStore`]): each operation is atomic
//! per account; the store's own clock decides expiry.

use std::future::Future;

use super::error::StoreError;
use super::shard_health::ShardHealth;
use crate::ids::StreamRef;
use crate::model::{
    AccountView, AcquireCmd, AcquireOutcome, AuditEntry, AuditKind, ForceStopCmd, ForceStopOutcome,
    HeartbeatOutcome, HistoryEntry, LimitOverride, OverrideCmd, ReleaseOutcome, SessionEventCmd,
    SessionState,
};

pub trait LeaseStore: Send + Sync + 'static {
    fn acquire(
        &self,
        cmd: &AcquireCmd,
    ) -> impl Future<Output = Result<AcquireOutcome, StoreError>> + Send;

    fn heartbeat(
        &self,
        account_id: &str,
        stream: &StreamRef,
    ) -> impl Future<Output = Result<HeartbeatOutcome, StoreError>> + Send;

    /// A heartbeat for an account whose home just moved here (learning mode): as `heartbeat`,
    /// except that a lease this store does not hold (or holds expired) is re-registered even when
    /// the account is at its limit or a device-type cap. A revoked or replaced stream is still
    /// told so.
    fn learn(
        &self,
        account_id: &str,
        stream: &StreamRef,
    ) -> impl Future<Output = Result<HeartbeatOutcome, StoreError>> + Send;

    fn release(
        &self,
        account_id: &str,
        stream: &StreamRef,
    ) -> impl Future<Output = Result<ReleaseOutcome, StoreError>> + Send;

    /// Revokes the stream and, when it was playing, records the stop in the audit log.
    fn force_stop(
        &self,
        cmd: &ForceStopCmd,
    ) -> impl Future<Output = Result<ForceStopOutcome, StoreError>> + Send;

    /// The newest audit entries, of one account or of the whole fleet, of one kind or all.
    fn audit(
        &self,
        account_id: Option<&str>,
        kind: Option<AuditKind>,
        limit: usize,
    ) -> impl Future<Output = Result<Vec<AuditEntry>, StoreError>> + Send;

    fn list(
        &self,
        account_id: &str,
    ) -> impl Future<Output = Result<AccountView, StoreError>> + Send;

    /// The account's newest `limit` history entries, newest first: refused plays, take-overs,
    /// force-stops, revocations told, leases that expired, temporary limits granted or removed.
    fn history(
        &self,
        account_id: &str,
        limit: usize,
    ) -> impl Future<Output = Result<Vec<HistoryEntry>, StoreError>> + Send;

    /// Gives the account a temporary limit, or clears it with `None`, and records the change
    /// (if any) in the audit log in the same step. Returns the temporary limit now in force.
    fn set_override(
        &self,
        cmd: &OverrideCmd,
    ) -> impl Future<Output = Result<Option<LimitOverride>, StoreError>> + Send;

    /// A dashboard user's session generation (sessions issued under an older one have ended; 0
    /// until the user first signs out) and failed sign-ins still counted.
    fn session_state(
        &self,
        user: &str,
    ) -> impl Future<Output = Result<SessionState, StoreError>> + Send;

    /// Records a dashboard sign-in event in the audit log; in the same step a sign-out bumps the
    /// user's session generation, a failed sign-in (with a window) counts against the name and a
    /// sign-in clears that count. Returns the state now in force.
    fn session_event(
        &self,
        cmd: &SessionEventCmd,
    ) -> impl Future<Output = Result<SessionState, StoreError>> + Send;

    /// Checks every shard now, within the deadline.
    fn health(&self) -> impl Future<Output = Vec<ShardHealth>> + Send;
}
