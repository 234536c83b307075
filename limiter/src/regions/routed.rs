//! The store the service calls: an account homed in this region is decided by this region's
//! store ([`AnyStore`]); one homed elsewhere has each of its operations sent to its home
//! (`map.rs`), whose store alone decides its count. The service and the API do not branch on
//! regions: a peer's failure is a [`StoreError`] like a shard's, and the failure policy decides,
//! except that unless it is `closed` a play or heartbeat whose home does not answer is decided
//! by this region's store, capped at the account's limit here (`provisional.rs`).
//!
//! A call sees the store through [`RoutedStore::at`]: the home a source names for its account
//! (`named.rs`), or none (the hash decides), and whether that home just moved.

use std::sync::Arc;

use super::map::{CallHome, PeerLink, RegionMap};
use super::provisional;
use super::wire::{AccountQuery, AccountStream, AuditQuery, Op};
use crate::config::FailurePolicy;
use crate::ids::StreamRef;
use crate::model::{
    AccountView, AcquireCmd, AcquireOutcome, AuditEntry, AuditKind, ForceStopCmd, ForceStopOutcome,
    HeartbeatOutcome, HistoryEntry, LimitOverride, OverrideCmd, ReleaseOutcome, SessionEventCmd,
    SessionState,
};
use crate::rules::LiveRules;
use crate::store::{AnyStore, LeaseStore, ShardHealth, StoreError};

pub struct RoutedStore {
    local: AnyStore,
    regions: Option<Arc<RegionMap>>,
    rules: LiveRules,
}

impl RoutedStore {
    /// With regions, starts each peer's reconciliation (inside a Tokio runtime).
    pub fn new(local: AnyStore, regions: Option<Arc<RegionMap>>, rules: LiveRules) -> RoutedStore {
        for link in regions.iter().flat_map(|r| r.links()) {
            let rules = rules.clone();
            tokio::spawn(super::provisional::reconcile_on_heal(
                link.peer.clone(),
                link.provisional.clone(),
                local.clone(),
                move || std::time::Duration::from_millis(rules.load().timing.revocation_ms),
            ));
        }
        RoutedStore {
            local,
            regions,
            rules,
        }
    }

    /// Whether a play or heartbeat whose home does not answer is decided here, provisionally.
    fn provisional(&self, link: &PeerLink, op: Op, account_id: &str, error: &StoreError) -> bool {
        let decide = matches!(error, StoreError::Region { .. })
            && self.rules.load().policy != FailurePolicy::Closed;
        if decide {
            link.provisional.note(account_id);
            link.peer.metrics().provisional(&link.peer.name, op.name());
        }
        decide
    }

    /// This region's own store: what decides the accounts homed here, and what the calls of
    /// other regions reach.
    pub fn local(&self) -> &AnyStore {
        &self.local
    }

    pub fn regions(&self) -> Option<&RegionMap> {
        self.regions.as_deref()
    }

    /// Dashboard sessions are each region's own, like its dashboard.
    pub async fn session_state(&self, user: &str) -> Result<SessionState, StoreError> {
        self.local.session_state(user).await
    }

    pub async fn session_event(&self, cmd: &SessionEventCmd) -> Result<SessionState, StoreError> {
        self.local.session_event(cmd).await
    }

    /// This region's shards: a peer's health is its own (`/v1/fleet` shows how it answers).
    pub async fn health(&self) -> Vec<ShardHealth> {
        self.local.health().await
    }

    /// The store for a call whose account's home is `home` (none named: the hash decides).
    pub fn at(&self, home: CallHome) -> Routed<'_> {
        Routed { store: self, home }
    }

    /// A heartbeat of an account homed here, from this region or another. `learning`: its home
    /// moved here less than a lease TTL ago, so its live streams re-register even at its limit.
    pub async fn heartbeat_here(
        &self,
        account_id: &str,
        stream: &StreamRef,
        learning: bool,
    ) -> Result<HeartbeatOutcome, StoreError> {
        if !learning {
            return self.local.heartbeat(account_id, stream).await;
        }
        let outcome = self.local.learn(account_id, stream).await?;
        if let (Some(regions), HeartbeatOutcome::Reregistered { .. }) = (&self.regions, outcome) {
            regions.learned();
        }
        Ok(outcome)
    }
}

/// The store as one call sees it: the account's home as a source named it, if one did.
pub struct Routed<'a> {
    store: &'a RoutedStore,
    home: CallHome,
}

impl Routed<'_> {
    fn home(&self, account_id: &str) -> Option<&PeerLink> {
        self.store
            .regions
            .as_ref()?
            .home(account_id, self.home.named.as_deref())
    }

    /// The name of the account's home region, with several regions.
    pub fn home_region(&self, account_id: &str) -> Option<String> {
        let regions = self.store.regions.as_ref()?;
        Some(regions.home_name(account_id, self.home.named.as_deref()))
    }

    /// Whether the account's home moved less than a lease TTL ago (its new home learns it).
    fn learning(&self, account_id: &str) -> bool {
        (self.store.regions.as_ref()).is_some_and(|r| r.learning(account_id, &self.home))
    }
}

fn is_renewal(outcome: HeartbeatOutcome) -> bool {
    matches!(
        outcome,
        HeartbeatOutcome::Renewed { .. } | HeartbeatOutcome::Reregistered { .. }
    )
}

fn stream_of(account_id: &str, stream: &StreamRef) -> AccountStream {
    AccountStream {
        account_id: account_id.to_owned(),
        stream: stream.clone(),
        learning: false,
    }
}

/// The store's operations, each decided at the account's home.
impl Routed<'_> {
    pub async fn acquire(&self, cmd: &AcquireCmd) -> Result<AcquireOutcome, StoreError> {
        let Some(link) = self.home(&cmd.account_id) else {
            return self.store.local.acquire(cmd).await;
        };
        match link.peer.call(Op::Acquire, cmd, 1).await {
            Err(error)
                if self
                    .store
                    .provisional(link, Op::Acquire, &cmd.account_id, &error) =>
            {
                self.store.local.acquire(cmd).await
            }
            answer => answer,
        }
    }

    pub async fn heartbeat(
        &self,
        account_id: &str,
        stream: &StreamRef,
    ) -> Result<HeartbeatOutcome, StoreError> {
        let Some(link) = self.home(account_id) else {
            let learning = self.learning(account_id);
            return self
                .store
                .heartbeat_here(account_id, stream, learning)
                .await;
        };
        let revoked = || link.provisional.is_revoked(account_id, &stream.nonce);
        if revoked() {
            return Ok(HeartbeatOutcome::RevokedOverLimit);
        }
        // An account let play here while its home did not answer stays here until its streams
        // are reported home in their order (`provisional.rs`).
        if link.provisional.is_pending(account_id)
            && let Ok(renewed) = self.store.local.heartbeat(account_id, stream).await
            && is_renewal(renewed)
        {
            return Ok(renewed);
        }
        let renewal = AccountStream {
            learning: self.learning(account_id),
            ..stream_of(account_id, stream)
        };
        let answer = match link.heartbeats.renew(renewal).await {
            Err(error)
                if self
                    .store
                    .provisional(link, Op::Heartbeats, account_id, &error) =>
            {
                // Kept here while the home does not answer; a stream this region has no room
                // for keeps the home's error, so the failure policy lets it play on.
                match self.store.local.heartbeat(account_id, stream).await {
                    Ok(renewed) if is_renewal(renewed) => Ok(renewed),
                    _ => Err(error),
                }
            }
            answer => answer,
        };
        // Reported home and revoked (while this heartbeat was on its way, or by another instance
        // of this region, which leaves the revoked leases in this region's store until their
        // TTL): it is told why.
        match answer {
            Ok(outcome)
                if !is_renewal(outcome)
                    && (revoked()
                        || provisional::held_here(&self.store.local, account_id, stream).await) =>
            {
                Ok(HeartbeatOutcome::RevokedOverLimit)
            }
            answer => answer,
        }
    }

    pub async fn release(
        &self,
        account_id: &str,
        stream: &StreamRef,
    ) -> Result<ReleaseOutcome, StoreError> {
        let Some(link) = self.home(account_id) else {
            return self.store.local.release(account_id, stream).await;
        };
        let body = stream_of(account_id, stream);
        match link.peer.call(Op::Release, &body, 1).await {
            Err(error)
                if self
                    .store
                    .provisional(link, Op::Release, account_id, &error) =>
            {
                self.store.local.release(account_id, stream).await
            }
            answer => answer,
        }
    }

    pub async fn force_stop(&self, cmd: &ForceStopCmd) -> Result<ForceStopOutcome, StoreError> {
        match self.home(&cmd.account_id) {
            Some(link) => link.peer.call(Op::ForceStop, cmd, 1).await,
            None => self.store.local.force_stop(cmd).await,
        }
    }

    pub async fn audit(
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
            None => self.store.local.audit(account_id, kind, limit).await,
        }
    }

    pub async fn list(&self, account_id: &str) -> Result<AccountView, StoreError> {
        match self.home(account_id) {
            Some(link) => {
                let query = AccountQuery {
                    account_id: account_id.to_owned(),
                    limit: 0,
                };
                link.peer.call(Op::List, &query, 1).await
            }
            None => self.store.local.list(account_id).await,
        }
    }

    pub async fn history(
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
            None => self.store.local.history(account_id, limit).await,
        }
    }

    pub async fn set_override(
        &self,
        cmd: &OverrideCmd,
    ) -> Result<Option<LimitOverride>, StoreError> {
        match self.home(&cmd.account_id) {
            Some(link) => link.peer.call(Op::Override, cmd, 1).await,
            None => self.store.local.set_override(cmd).await,
        }
    }
}
