//! The embedded store: the lease rules of [`crate::model`] over an in-process map.
//!
//! Used for local runs and as the local cap when the Redis store fails under `local_cap`. Accounts
//! are spread over lock stripes so concurrent requests for different accounts rarely contend;
//! each operation holds one stripe's lock for a few microseconds and never across an await.
//! Reaping is lazy (inside each operation) plus a sweeper that forgets idle accounts, so the map
//! never grows without bound.

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use super::error::StoreError;
use super::lease_store::LeaseStore;
use super::shard_health::ShardHealth;
use crate::ids::StreamRef;
use crate::model::{
    AUDIT_RECENT, AccountState, AccountView, AcquireCmd, AcquireOutcome, AuditEntry, AuditKind,
    ForceStopCmd, ForceStopOutcome, HeartbeatOutcome, HistoryEntry, HistoryEvent, HistoryLimits,
    LimitOverride, Millis, OverrideCmd, Plan, ReleaseOutcome, SessionEventCmd, SessionState,
    Timing,
};
use crate::rules::{LiveRules, Rules};

const STRIPES: usize = 64;

pub struct MemoryStore {
    stripes: Vec<Mutex<HashMap<String, AccountState>>>,
    /// The default plan and lease timing in force: a reload may change them (`rules.rs`).
    rules: LiveRules,
    /// Newest first, at most `AUDIT_RECENT` entries.
    audit: Mutex<VecDeque<AuditEntry>>,
    /// Dashboard users' session generations (only users who signed out have one; 0 otherwise)
    /// and their failed sign-ins still counted (how many, until when).
    sessions: Mutex<HashMap<String, UserSessions>>,
    /// Each account's recent history (only accounts that have one), as the Redis list keeps it.
    histories: Mutex<HashMap<String, AccountHistory>>,
}

/// One account's history: newest first, at most `max_events`, forgotten `retention` after the
/// newest entry (the Redis list's `LTRIM` and `PEXPIRE`).
#[derive(Debug, Default)]
struct AccountHistory {
    entries: VecDeque<HistoryEntry>,
    until: Millis,
}

impl AccountHistory {
    fn add(&mut self, event: HistoryEvent, now: Millis, limits: HistoryLimits) {
        if now >= self.until {
            self.entries.clear();
        }
        if event.repeats(self.entries.front().map(|e| &e.event)) {
            return;
        }
        self.entries.push_front(HistoryEntry { at: now, event });
        self.entries.truncate(limits.max_events as usize);
        self.until = now + limits.retention_ms;
    }
}

fn audit_entry(cmd: &ForceStopCmd, at: Millis, device_meta: String) -> AuditEntry {
    AuditEntry {
        at,
        kind: AuditKind::ForceStop,
        account_id: cmd.account_id.clone(),
        stream_id: cmd.stream_id.clone(),
        device_id: cmd.stream.device_id.clone(),
        device_meta,
        actor: cmd.actor.clone(),
        reason: cmd.reason.clone(),
        limit_from: None,
        limit_to: None,
        limit_until: None,
        address: String::new(),
    }
}

fn now_ms() -> Millis {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as Millis)
}

impl MemoryStore {
    pub fn new(default_plan: Plan, timing: Timing) -> Self {
        let book = crate::plan_book::PlanBook::new(default_plan, []);
        Self::with_rules(LiveRules::new(Rules::fixed(&book, timing)))
    }

    /// A store that reads its default plan and timing from `rules`.
    pub fn with_rules(rules: LiveRules) -> Self {
        MemoryStore {
            stripes: (0..STRIPES).map(|_| Mutex::new(HashMap::new())).collect(),
            rules,
            audit: Mutex::new(VecDeque::new()),
            sessions: Mutex::new(HashMap::new()),
            histories: Mutex::new(HashMap::new()),
        }
    }

    /// Starts the sweeper that forgets idle accounts; it stops when the store is dropped.
    pub fn spawn_sweeper(self: &Arc<Self>, every: Duration) {
        let store: Weak<Self> = Arc::downgrade(self);
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(every);
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                tick.tick().await;
                match store.upgrade() {
                    Some(store) => _ = store.sweep(),
                    None => return,
                }
            }
        });
    }

    /// Forgets what every account no longer remembers (a lease that ended unstopped goes into
    /// its history), every account with nothing left, and every history past its retention.
    /// Returns how many accounts were dropped.
    pub fn sweep(&self) -> usize {
        let now = now_ms();
        let rules = self.rules.load();
        let (timing, limits) = (rules.timing, rules.history());
        drop(rules);
        let mut dropped = 0;
        for stripe in &self.stripes {
            let mut map = stripe.lock().unwrap_or_else(|e| e.into_inner());
            let before = map.len();
            map.retain(|account_id, state| {
                state.prune(now, timing);
                self.keep_history(account_id, state.take_events(), now, limits);
                state.forget_at(timing).is_some_and(|t| t > now)
            });
            dropped += before - map.len();
        }
        let mut histories = self.histories.lock().unwrap_or_else(|e| e.into_inner());
        histories.retain(|_, history| history.until > now);
        dropped
    }

    /// Keeps the account's history events of one operation, in their order. Called under the
    /// account's stripe lock (lock order: stripe, then histories).
    fn keep_history(
        &self,
        account_id: &str,
        events: Vec<HistoryEvent>,
        now: Millis,
        limits: HistoryLimits,
    ) {
        if events.is_empty() {
            return;
        }
        let mut histories = self.histories.lock().unwrap_or_else(|e| e.into_inner());
        let history = histories.entry(account_id.to_owned()).or_default();
        for event in events {
            history.add(event, now, limits);
        }
    }

    /// Number of accounts held, expired or not.
    pub fn account_count(&self) -> usize {
        self.stripes
            .iter()
            .map(|s| s.lock().unwrap_or_else(|e| e.into_inner()).len())
            .sum()
    }

    /// Leases alive now, counted exactly (one pass over the accounts, a stripe lock at a time):
    /// for `/metrics` and the fleet view, never the request path.
    pub fn live_streams(&self) -> u64 {
        let now = now_ms();
        self.stripes
            .iter()
            .map(|s| {
                let map = s.lock().unwrap_or_else(|e| e.into_inner());
                map.values()
                    .map(|state| u64::from(state.active_count(now)))
                    .sum::<u64>()
            })
            .sum()
    }

    fn with_account<T>(
        &self,
        account_id: &str,
        op: impl FnOnce(&mut AccountState, Millis, Timing) -> T,
    ) -> T {
        self.with_account_or(account_id, None, op)
    }

    /// Adds an entry to the audit log. Called under the account's stripe lock, so the entry is
    /// written in the same step as the change it records (lock order: stripe, then audit).
    fn record(&self, entry: AuditEntry) {
        let mut audit = self.audit.lock().unwrap_or_else(|e| e.into_inner());
        audit.push_front(entry);
        audit.truncate(AUDIT_RECENT);
    }

    /// Runs `op` on the account, created under `fresh_plan` (else the default plan) if the store
    /// holds nothing for it, with the lease lengths of one snapshot of the rules (a reload
    /// meanwhile must not mix old and new in one step).
    fn with_account_or<T>(
        &self,
        account_id: &str,
        fresh_plan: Option<&Plan>,
        op: impl FnOnce(&mut AccountState, Millis, Timing) -> T,
    ) -> T {
        let rules = self.rules.load();
        let (timing, fresh_plan) = (rules.timing, fresh_plan.unwrap_or(&rules.book.default));
        let history = rules.history();
        let stripe = (xxhash_rust::xxh3::xxh3_64(account_id.as_bytes()) % STRIPES as u64) as usize;
        let mut map = self.stripes[stripe]
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        let now = now_ms();
        // Look up before inserting: the common case must not allocate the account id.
        if !map.contains_key(account_id) {
            map.insert(account_id.to_owned(), AccountState::new(fresh_plan.clone()));
        }
        let state = map.get_mut(account_id).expect("inserted above");
        state.prune(now, timing);
        let out = op(state, now, timing);
        let events = state.take_events();
        if state.forget_at(timing).is_none() {
            map.remove(account_id);
        }
        self.keep_history(account_id, events, now, history);
        out
    }

    /// A heartbeat, `learning` or not (`AccountState::heartbeat`).
    fn beat(&self, account_id: &str, stream: &StreamRef, learning: bool) -> HeartbeatOutcome {
        // A lease lost with its account comes back under the plan its stream id carries.
        let carried = (stream.plan.limit > 0).then(|| Plan::from(&stream.plan));
        self.with_account_or(account_id, carried.as_ref(), |state, now, timing| {
            state.heartbeat(stream, learning, now, timing)
        })
    }
}

impl LeaseStore for MemoryStore {
    async fn acquire(&self, cmd: &AcquireCmd) -> Result<AcquireOutcome, StoreError> {
        Ok(self.with_account(&cmd.account_id, |state, now, timing| {
            state.acquire(cmd, now, timing)
        }))
    }

    async fn heartbeat(
        &self,
        account_id: &str,
        stream: &StreamRef,
    ) -> Result<HeartbeatOutcome, StoreError> {
        Ok(self.beat(account_id, stream, false))
    }

    async fn learn(
        &self,
        account_id: &str,
        stream: &StreamRef,
    ) -> Result<HeartbeatOutcome, StoreError> {
        Ok(self.beat(account_id, stream, true))
    }

    async fn release(
        &self,
        account_id: &str,
        stream: &StreamRef,
    ) -> Result<ReleaseOutcome, StoreError> {
        Ok(self.with_account(account_id, |state, now, timing| {
            state.release(stream, now, timing)
        }))
    }

    async fn force_stop(&self, cmd: &ForceStopCmd) -> Result<ForceStopOutcome, StoreError> {
        Ok(self.with_account(&cmd.account_id, |state, now, timing| {
            let device_meta = state.device_meta(&cmd.stream.device_id);
            let outcome = state.force_stop(&cmd.stream, &cmd.actor, now, timing);
            if outcome == ForceStopOutcome::Stopped {
                self.record(audit_entry(cmd, now, device_meta));
            }
            outcome
        }))
    }

    async fn audit(
        &self,
        account_id: Option<&str>,
        kind: Option<AuditKind>,
        limit: usize,
    ) -> Result<Vec<AuditEntry>, StoreError> {
        let audit = self.audit.lock().unwrap_or_else(|e| e.into_inner());
        let matching = audit.iter().filter(|e| {
            account_id.is_none_or(|a| e.account_id == a) && kind.is_none_or(|k| e.kind == k)
        });
        Ok(matching.take(limit).cloned().collect())
    }

    async fn list(&self, account_id: &str) -> Result<AccountView, StoreError> {
        Ok(self.with_account(account_id, |state, now, _| state.view(now)))
    }

    async fn set_override(&self, cmd: &OverrideCmd) -> Result<Option<LimitOverride>, StoreError> {
        Ok(self.with_account(&cmd.account_id, |state, now, _| {
            let limit_override = cmd.grant.map(|g| LimitOverride {
                limit: g.limit,
                until: now + g.duration_ms,
            });
            if let Some(change) = state.set_override(limit_override, &cmd.actor, now) {
                self.record(change.entry(cmd, now));
            }
            limit_override
        }))
    }

    async fn history(
        &self,
        account_id: &str,
        limit: usize,
    ) -> Result<Vec<HistoryEntry>, StoreError> {
        let now = now_ms();
        let histories = self.histories.lock().unwrap_or_else(|e| e.into_inner());
        Ok(match histories.get(account_id) {
            Some(history) if history.until > now => {
                history.entries.iter().take(limit).cloned().collect()
            }
            _ => Vec::new(),
        })
    }

    async fn session_state(&self, user: &str) -> Result<SessionState, StoreError> {
        let sessions = self.sessions.lock().unwrap_or_else(|e| e.into_inner());
        Ok(sessions
            .get(user)
            .map_or_else(SessionState::default, |s| s.state(now_ms())))
    }

    async fn session_event(&self, cmd: &SessionEventCmd) -> Result<SessionState, StoreError> {
        let now = now_ms();
        let mut sessions = self.sessions.lock().unwrap_or_else(|e| e.into_inner());
        let mut user = sessions.remove(&cmd.user).unwrap_or_default();
        user.apply(cmd, now);
        let state = user.state(now);
        // Only what there is to remember is kept: names typed once and never again leave.
        if state != SessionState::default() {
            sessions.insert(cmd.user.clone(), user);
        }
        // Lock order: sessions, then audit (as stripe, then audit).
        self.record(cmd.entry(now));
        Ok(state)
    }

    async fn health(&self) -> Vec<ShardHealth> {
        vec![ShardHealth {
            shard: 0,
            endpoint: "memory".into(),
            reachable: true,
            circuit: "closed",
            keys: Some(self.account_count() as u64),
            overloaded: false,
            read_only: false,
            no_replicas: false,
            out_of_memory: false,
            memory: None,
            path: None,
        }]
    }
}

/// One dashboard user's state, as `session_event.lua` keeps it in two keys.
#[derive(Debug, Default)]
struct UserSessions {
    generation: u64,
    failures: u64,
    failures_until: Millis,
}

impl UserSessions {
    fn apply(&mut self, cmd: &SessionEventCmd, now: Millis) {
        match cmd.kind {
            AuditKind::SignOut => self.generation += 1,
            AuditKind::SignIn => self.failures = 0,
            AuditKind::SignInFailed if cmd.failure_window_ms > 0 => {
                self.failures = self.state(now).failures + 1;
                self.failures_until = now + cmd.failure_window_ms;
            }
            _ => {}
        }
    }

    fn state(&self, now: Millis) -> SessionState {
        SessionState {
            generation: self.generation,
            failures: if now < self.failures_until {
                self.failures
            } else {
                0
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ids::{PlanTag, StreamIdCodec};
    use crate::model::{Device, HistoryDevice};

    fn stop(actor: &str) -> HistoryEvent {
        HistoryEvent::ForceStop {
            device: HistoryDevice::default(),
            actor: actor.into(),
        }
    }

    #[test]
    fn an_account_history_is_capped_repeats_no_revocation_and_expires() {
        let limits = HistoryLimits {
            max_events: 2,
            retention_ms: 1_000,
        };
        let mut history = AccountHistory::default();
        for (at, actor) in [(10, "a"), (11, "b"), (12, "c")] {
            history.add(stop(actor), at, limits);
        }
        let actors = |h: &AccountHistory| -> Vec<HistoryEvent> {
            h.entries.iter().map(|e| e.event.clone()).collect()
        };
        assert_eq!(actors(&history), [stop("c"), stop("b")]);
        let revoked = HistoryEvent::Revoked {
            device_id: "tv".into(),
        };
        history.add(revoked.clone(), 13, limits);
        history.add(revoked.clone(), 14, limits);
        assert_eq!(actors(&history), [revoked.clone(), stop("c")]);
        assert_eq!(history.until, 1_013, "kept a retention past the newest");
        // Past its retention the old entries are gone before a new one is kept.
        history.add(stop("d"), 1_013, limits);
        assert_eq!(actors(&history), [stop("d")]);
    }

    fn stream(device: &str) -> StreamRef {
        StreamRef {
            device_id: device.into(),
            nonce: StreamIdCodec::new_nonce(),
            plan: PlanTag {
                name: "basic".into(),
                limit: 1,
            },
        }
    }

    #[tokio::test]
    async fn a_learning_heartbeat_re_registers_past_the_limit_but_not_a_revoked_stream() {
        let store = MemoryStore::new(
            Plan::new("basic", 1),
            Timing::from_ttl(Duration::from_secs(30)),
        );
        let tv = stream("tv");
        let play = AcquireCmd {
            account_id: "moved".into(),
            device: Device {
                id: tv.device_id.clone(),
                ..Device::default()
            },
            nonce: tv.nonce,
            plan: None,
            replace: None,
            shadow: false,
        };
        let granted = store.acquire(&play).await.unwrap();
        assert!(
            matches!(granted, AcquireOutcome::Granted { .. }),
            "{granted:?}"
        );
        // A live stream this store never saw, on an account at its limit.
        let phone = stream("phone");
        let heard = store.heartbeat("moved", &phone).await.unwrap();
        assert_eq!(heard, HeartbeatOutcome::Expired);
        let learnt = store.learn("moved", &phone).await.unwrap();
        assert!(
            matches!(learnt, HeartbeatOutcome::Reregistered { .. }),
            "{learnt:?}"
        );
        let mut devices: Vec<String> = (store.list("moved").await.unwrap().active)
            .into_iter()
            .map(|l| l.device.id)
            .collect();
        devices.sort();
        assert_eq!(devices, ["phone", "tv"]);
        // Held now: a plain renewal, learning or not.
        let renewed = store.learn("moved", &phone).await.unwrap();
        assert!(
            matches!(renewed, HeartbeatOutcome::Renewed { .. }),
            "{renewed:?}"
        );
        assert_eq!(store.history("moved", 10).await.unwrap(), []);
        // Revoked, or replaced by a newer play of its device: still told so.
        let stop = ForceStopCmd {
            account_id: "moved".into(),
            stream: phone.clone(),
            stream_id: "phone's".into(),
            actor: "support".into(),
            reason: String::new(),
        };
        assert_eq!(
            store.force_stop(&stop).await.unwrap(),
            ForceStopOutcome::Stopped
        );
        assert_eq!(
            store.learn("moved", &phone).await.unwrap(),
            HeartbeatOutcome::Revoked
        );
        let replaced = StreamRef {
            nonce: StreamIdCodec::new_nonce(),
            ..tv.clone()
        };
        assert_eq!(
            store.learn("moved", &replaced).await.unwrap(),
            HeartbeatOutcome::Revoked
        );
    }
}
