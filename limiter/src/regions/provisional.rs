//! Plays let through while an account's home does not answer, and what happens to them once it
//! does. Unless the failure policy is `closed`, a roaming play whose home is unreachable is decided
//! by this region's own store: a **provisional** lease, capped at the account's limit in this
//! region (so during a partition an account holds at most N streams per region). The accounts
//! that got one are noted per peer, and their heartbeats stay with this region's store until
//! they are reconciled. When the peer answers again ([`Peer::healed`], or within a second while
//! it answers), their provisional leases are reported home oldest first ([`Op::Report`]): each is
//! taken over by the home while the account has room, and the rest (the newest) are revoked,
//! each told at its next heartbeat (`410 stream_revoked`, reason `over_limit_after_partition`), so
//! within one heartbeat interval of healing the account is back at N. A revoked lease stays in
//! this region's store until its TTL: an instance that did not decide it tells its heartbeat why
//! too ([`held_here`]).

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use super::peer::Peer;
use super::wire::{AccountStream, Heartbeats, MAX_BATCH, Op};
use crate::ids::Nonce;
use crate::model::HeartbeatOutcome;
use crate::store::{AnyStore, LeaseStore, StoreError};

/// The provisional accounts of one peer, and the streams revoked once it answered again.
#[derive(Default)]
pub struct ProvisionalBook {
    accounts: Mutex<HashSet<String>>,
    /// (account, nonce) → until when its heartbeat is answered "revoked".
    revoked: Mutex<HashMap<(String, Nonce), Instant>>,
}

impl ProvisionalBook {
    /// Notes that `account_id` holds provisional leases in this region's store.
    pub fn note(&self, account_id: &str) {
        let mut accounts = self.accounts.lock().unwrap_or_else(|p| p.into_inner());
        if !accounts.contains(account_id) {
            accounts.insert(account_id.to_owned());
        }
    }

    /// Whether the account holds provisional leases not yet reported home.
    pub fn is_pending(&self, account_id: &str) -> bool {
        let accounts = self.accounts.lock().unwrap_or_else(|p| p.into_inner());
        !accounts.is_empty() && accounts.contains(account_id)
    }

    /// Whether the stream was revoked once its home answered again.
    pub fn is_revoked(&self, account_id: &str, nonce: &Nonce) -> bool {
        let revoked = self.revoked.lock().unwrap_or_else(|p| p.into_inner());
        revoked
            .get(&(account_id.to_owned(), *nonce))
            .is_some_and(|until| *until > Instant::now())
    }

    fn pending(&self) -> Vec<String> {
        let accounts = self.accounts.lock().unwrap_or_else(|p| p.into_inner());
        accounts.iter().cloned().collect()
    }

    fn reconciled(&self, account_id: &str) {
        let mut accounts = self.accounts.lock().unwrap_or_else(|p| p.into_inner());
        accounts.remove(account_id);
    }

    fn revoke(&self, account_id: &str, nonce: Nonce, remembered: Duration) {
        let now = Instant::now();
        let mut revoked = self.revoked.lock().unwrap_or_else(|p| p.into_inner());
        revoked.retain(|_, until| *until > now);
        revoked.insert((account_id.to_owned(), nonce), now + remembered);
    }
}

/// Whether this region's store holds `stream` of an account homed at a peer: only a provisional
/// lease is, and once its home answers again only a revoked one stays (until its TTL), so a
/// heartbeat its home does not renew is told it was revoked, by whichever instance it reaches.
pub async fn held_here(local: &AnyStore, account_id: &str, stream: &crate::ids::StreamRef) -> bool {
    local
        .list(account_id)
        .await
        .is_ok_and(|view| view.active.iter().any(|lease| lease.nonce == stream.nonce))
}

/// Each time `peer` answers again, reports this region's provisional leases of its accounts.
/// `remembered`: how long a revoked stream is answered so (its player's heartbeats stop sooner).
pub async fn reconcile_on_heal(
    peer: Arc<Peer>,
    book: Arc<ProvisionalBook>,
    local: AnyStore,
    remembered: impl Fn() -> Duration,
) {
    loop {
        // At once when the peer answers again; else a second at most after an account was let
        // play through a call that failed alone (the peer still taken as answering).
        tokio::select! {
            () = peer.healed.notified() => {}
            () = tokio::time::sleep(super::peer::PROBE_INTERVAL) => {}
        }
        if !peer.reachable() || book.pending().is_empty() {
            continue;
        }
        let (kept, revoked) = reconcile(&peer, &book, &local, remembered()).await;
        peer.metrics().reconciled(&peer.name, kept, revoked);
        if kept + revoked > 0 {
            tracing::info!(peer = %peer.name, kept, revoked, "provisional streams reported to their home region");
        }
    }
}

/// Reports the provisional leases home; returns how many it kept and how many were revoked.
async fn reconcile(
    peer: &Arc<Peer>,
    book: &ProvisionalBook,
    local: &AnyStore,
    remembered: Duration,
) -> (usize, usize) {
    let mut reports = Vec::new();
    let accounts = book.pending();
    let mut unanswered = HashSet::new();
    for account_id in &accounts {
        let Ok(view) = local.list(account_id).await else {
            // This region's store did not answer: the account waits for the next round.
            unanswered.insert(account_id.clone());
            continue;
        };
        let mut leases = view.active;
        leases.sort_by_key(|lease| (lease.started_at, lease.nonce));
        reports.extend(leases.iter().map(|lease| AccountStream {
            account_id: account_id.clone(),
            stream: lease.stream(&view.plan),
            learning: false,
        }));
    }
    let (mut kept, mut revoked) = (0, 0);
    for batch in reports.chunks(MAX_BATCH) {
        let body = Heartbeats {
            renewals: batch.to_vec(),
        };
        let answer = peer.call::<_, Vec<Result<HeartbeatOutcome, StoreError>>>(
            Op::Report,
            &body,
            batch.len(),
        );
        let outcomes = match answer.await {
            Ok(outcomes) if outcomes.len() == batch.len() => outcomes,
            _ => {
                // Not answered: these accounts wait for the next round.
                unanswered.extend(batch.iter().map(|r| r.account_id.clone()));
                continue;
            }
        };
        for (report, outcome) in batch.iter().zip(outcomes) {
            match outcome {
                Ok(HeartbeatOutcome::Renewed { .. } | HeartbeatOutcome::Reregistered { .. }) => {
                    kept += 1;
                }
                Ok(_) => {
                    book.revoke(&report.account_id, report.stream.nonce, remembered);
                    revoked += 1;
                }
                Err(_) => {
                    unanswered.insert(report.account_id.clone());
                    continue;
                }
            }
            // The home holds it now: this region's copy goes. A revoked one stays until its TTL,
            // so that every instance of this region can tell its heartbeat why (`held_here`).
            if !book.is_revoked(&report.account_id, &report.stream.nonce) {
                let _ = local.release(&report.account_id, &report.stream).await;
            }
        }
    }
    for account_id in accounts.iter().filter(|a| !unanswered.contains(*a)) {
        book.reconciled(account_id);
    }
    (kept, revoked)
}
