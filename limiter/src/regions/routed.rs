//! The store the service calls: an account homed in this region is decided by this region's
//! store ([`AnyStore`]); one homed elsewhere has each of its operations sent to its home
//! (`map.rs`), whose store alone decides its count. The service and the API do not branch on
//! regions: a peer's failure is a [`StoreError`] like a shard's, and the failure policy decides.

use std::sync::Arc;

use super::map::RegionMap;
use super::wire::{AccountQuery, AccountStream, AuditQuery, Op};
use crate::ids::StreamRef;
use crate::model::{
    AccountView, AcquireCmd, AcquireOutcome, AuditEntry, AuditKind, ForceStopCmd, ForceStopOutcome,
    HeartbeatOutcome, HistoryEntry, LimitOverride, OverrideCmd, ReleaseOutcome, SessionEventCmd,
    SessionState,
};
use crate::store::{AnyStore, LeaseStore, ShardHealth, StoreError};

pub struct RoutedStore {
    local: AnyStore,
    regions: Option<Arc<RegionMap>>,
}

impl RoutedStore {
    pub fn new(local: AnyStore, regions: Option<Arc<RegionMap>>) -> RoutedStore {
        RoutedStore { local, regions }
    }

    /// This region's own store: what decides the accounts homed here, and what the calls of
    /// other regions reach.
    pub fn local(&self) -> &AnyStore {
        &self.local
    }

    pub fn regions(&self) -> Option<&RegionMap> {
        self.regions.as_deref()
    }

    fn home(&self, account_id: &str) -> Option<&super::map::PeerLink> {
        self.regions.as_ref()?.home(account_id)
    }
}

fn stream_of(account_id: &str, stream: &StreamRef) -> AccountStream {
    AccountStream {
        account_id: account_id.to_owned(),
        stream: stream.clone(),
    }
}

impl LeaseStore for RoutedStore {
    async fn acquire(&self, cmd: &AcquireCmd) -> Result<AcquireOutcome, StoreError> {
        match self.home(&cmd.account_id) {
            Some(link) => link.peer.call(Op::Acquire, cmd, 1).await,
            None => self.local.acquire(cmd).await,
        }
    }

    async fn heartbeat(
        &self,
        account_id: &str,
        stream: &StreamRef,
    ) -> Result<HeartbeatOutcome, StoreError> {
        match self.home(account_id) {
            Some(link) => link.heartbeats.renew(stream_of(account_id, stream)).await,
            None => self.local.heartbeat(account_id, stream).await,
        }
    }

    async fn release(
        &self,
        account_id: &str,
        stream: &StreamRef,
    ) -> Result<ReleaseOutcome, StoreError> {
        match self.home(account_id) {
            Some(link) => {
                let body = stream_of(account_id, stream);
                link.peer.call(Op::Release, &body, 1).await
            }
            None => self.local.release(account_id, stream).await,
        }
    }

    async fn force_stop(&self, cmd: &ForceStopCmd) -> Result<ForceStopOutcome, StoreError> {
        match self.home(&cmd.account_id) {
            Some(link) => link.peer.call(Op::ForceStop, cmd, 1).await,
            None => self.local.force_stop(cmd).await,
        }
    }

    async fn audit(
        &self,
        account_id: Option<&str>,
        kind: Option<AuditKind>,
        limit: usize,
    ) -> Result<Vec<AuditEntry>, StoreError> {
        // The fleet's audit log is each region's own; an account's is kept at its home.
        match account_id.and_then(|a| self.home(a).map(|link| (a, link))) {
            Some((account_id, link)) => {
                let query = AuditQuery {
                    account_id: account_id.to_owned(),
                    kind,
                    limit,
                };
                link.peer.call(Op::Audit, &query, 1).await
            }
            None => self.local.audit(account_id, kind, limit).await,
        }
    }

    async fn list(&self, account_id: &str) -> Result<AccountView, StoreError> {
        match self.home(account_id) {
            Some(link) => {
                let query = AccountQuery {
                    account_id: account_id.to_owned(),
                    limit: 0,
                };
                link.peer.call(Op::List, &query, 1).await
            }
            None => self.local.list(account_id).await,
        }
    }

    async fn history(
        &self,
        account_id: &str,
        limit: usize,
    ) -> Result<Vec<HistoryEntry>, StoreError> {
        match self.home(account_id) {
            Some(link) => {
                let query = AccountQuery {
                    account_id: account_id.to_owned(),
                    limit,
                };
                link.peer.call(Op::History, &query, 1).await
            }
            None => self.local.history(account_id, limit).await,
        }
    }

    async fn set_override(&self, cmd: &OverrideCmd) -> Result<Option<LimitOverride>, StoreError> {
        match self.home(&cmd.account_id) {
            Some(link) => link.peer.call(Op::Override, cmd, 1).await,
            None => self.local.set_override(cmd).await,
        }
    }

    /// Dashboard sessions are each region's own, like its dashboard.
    async fn session_state(&self, user: &str) -> Result<SessionState, StoreError> {
        self.local.session_state(user).await
    }

    async fn session_event(&self, cmd: &SessionEventCmd) -> Result<SessionState, StoreError> {
        self.local.session_event(cmd).await
    }

    async fn health(&self) -> Vec<ShardHealth> {
        self.local.health().await
    }
}
