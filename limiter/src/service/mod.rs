//! The stream use cases: resolve the plan, verify stream ids, call the store, and when the store
//! cannot answer, decide by the failure policy. Handlers stay thin; this is where the soft-gate
//! invariant lives.

use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::config::{Config, FailurePolicy};
use crate::ids::{PlanTag, StreamIdCodec, StreamRef};
use crate::live::{HeartbeatRate, LiveMethod, LiveStreams};
use crate::metrics::{Decision, Metrics, PlayOutcome};
use crate::model::{
    AccountView, AcquireCmd, AcquireOutcome, AuditEntry, AuditKind, ForceStopCmd, ForceStopOutcome,
    HeartbeatOutcome, HistoryEntry, Lease, LimitOverride, OverrideCmd, ReleaseOutcome,
    SessionEventCmd, SessionState, Timing,
};
use crate::plans::PlanSource;
use crate::regions::map::CallHome;
use crate::regions::routed::{Routed, RoutedStore};
use crate::rules::{LiveRules, Rules};
use crate::store::memory::MemoryStore;
use crate::store::{AnyStore, LeaseStore, ShardHealth, StoreError};

mod types;

pub use types::*;

/// Why the store gave no answer: it failed, or it was not asked because the call was shed.
/// Both are answered by the failure policy, by the same code.
enum NoAnswer {
    Store(StoreError),
    Shed,
}

/// The store's answer to `call`, or, when the call was shed, no answer without asking it (a
/// future is not run until awaited).
async fn unless_shed<T>(
    load: Load,
    call: impl std::future::Future<Output = Result<T, StoreError>>,
) -> Result<T, NoAnswer> {
    match load {
        Load::Normal => call.await.map_err(NoAnswer::Store),
        Load::Shed => Err(NoAnswer::Shed),
    }
}

/// The use cases over the shared store, with this instance's own store for `local_cap`.
pub struct StreamService {
    /// This region's store, or for an account homed in another region, that region's.
    store: RoutedStore,
    /// This instance's own store, used under `local_cap` when the shared store fails.
    local: Arc<MemoryStore>,
    codec: StreamIdCodec,
    plans: PlanSource,
    /// Plans, lease timing, heartbeat interval and failure policy in force; `reload/` swaps
    /// them when the config file changes.
    pub rules: LiveRules,
    /// What the config reloads did: the generation in force, refusals, pending restarts.
    pub reload: Arc<crate::reload::status::ReloadStatus>,
    pub metrics: Arc<Metrics>,
    /// The bounds on connections and requests in flight, and what was shed.
    pub overload: Arc<crate::overload::Overload>,
    /// Heartbeats answered "keep playing", per shard: the live-stream estimate on Redis.
    heartbeats: HeartbeatRate,
    started: Instant,
    /// Set when a shutdown signal starts the drain: `/readyz` answers 503.
    pub draining: crate::lifecycle::Draining,
}

impl StreamService {
    /// Builds the service from a validated config. Must run inside a Tokio runtime.
    pub fn from_config(config: &Config) -> anyhow::Result<Self> {
        let rules = LiveRules::new(Rules::from_config(config, 1));
        let plans = PlanSource::from_config(config, rules.clone())?;
        let local = Arc::new(MemoryStore::with_rules(rules.clone()));
        local.spawn_sweeper(config.lease.ttl);
        let own = AnyStore::from_config(&config.store, local.clone(), rules.clone())?;
        let metrics = Arc::new(Metrics::new());
        let regions = match &config.regions {
            Some(regions) => Some(Arc::new(crate::regions::map::RegionMap::from_config(
                regions,
                &regions.read_tokens()?,
                (
                    config.plan_source.cache_capacity,
                    config.plan_source.cache_max_stale,
                ),
                &metrics.regions,
            )?)),
            None => None,
        };
        let store = RoutedStore::new(own, regions, rules.clone());
        let heartbeats = HeartbeatRate::new(
            store.local().shard_indices(),
            config.lease.heartbeat_interval,
            Instant::now(),
        );
        let codec = match config.resolve_stream_id_secret()? {
            Some(secret) => StreamIdCodec::new(&secret),
            None => StreamIdCodec::random(),
        };
        Ok(StreamService {
            store,
            local,
            codec,
            plans,
            reload: Arc::new(crate::reload::status::ReloadStatus::new(&rules.load())),
            rules,
            metrics,
            overload: Arc::new(crate::overload::Overload::new(&config.http)),
            heartbeats,
            started: Instant::now(),
            draining: Default::default(),
        })
    }

    fn active_streams(
        &self,
        account_id: &str,
        plan: &PlanTag,
        leases: Vec<Lease>,
    ) -> Vec<ActiveStream> {
        leases
            .into_iter()
            .map(|lease| ActiveStream {
                stream_id: self.codec.encode(account_id, &lease.stream(plan)),
                lease,
            })
            .collect()
    }

    fn verify(&self, account_id: &str, stream_id: &str) -> Result<StreamRef, ServiceError> {
        self.codec
            .decode(account_id, stream_id)
            .ok_or(ServiceError::UnknownStream)
    }

    /// This region's own store: what the calls of other regions reach (`api/regions.rs`).
    pub fn home_store(&self) -> &AnyStore {
        self.store.local()
    }

    /// The store that routes by home, for the region calls that decide here with its rules
    /// (a heartbeat of an account learning, `api/regions.rs`).
    pub fn routed_store(&self) -> &RoutedStore {
        &self.store
    }

    /// This region and its peers, when the install is one of several regions.
    pub fn regions(&self) -> Option<&crate::regions::map::RegionMap> {
        self.store.regions()
    }

    /// At start: stops on store credentials, permissions or TLS that cannot work.
    pub async fn check_store_access(&self) -> Result<(), crate::config::ConfigError> {
        self.store.local().check_access().await
    }

    /// The store for a call on `account_id`: with several regions, at the home a source names
    /// for it (the plan database not asked for a call shed), else where the hash puts it.
    async fn store_for(&self, account_id: &str, hint: &HomeHint, load: Load) -> Routed<'_> {
        self.store
            .at(self.call_home(account_id, hint, load == Load::Shed).await)
    }

    async fn call_home(&self, account_id: &str, hint: &HomeHint, cached_only: bool) -> CallHome {
        let Some(regions) = self.store.regions() else {
            return CallHome::default();
        };
        let ttl = Duration::from_millis(self.rules.load().timing.ttl_ms);
        regions
            .call_home(account_id, hint, &self.plans, cached_only, ttl)
            .await
    }

    /// Counts a store failure or a shed call and says whether the policy lets the operation go
    /// on without the store.
    fn on_no_answer(&self, why: NoAnswer) -> Result<(), ServiceError> {
        let error = match why {
            NoAnswer::Store(error) => {
                self.metrics.store_error(&error);
                tracing::debug!(%error, policy = ?self.policy(), "store call failed; applying the failure policy");
                ServiceError::StoreUnavailable(error)
            }
            NoAnswer::Shed => ServiceError::Overloaded,
        };
        match self.policy() {
            FailurePolicy::Closed => Err(error),
            FailurePolicy::Open | FailurePolicy::LocalCap => Ok(()),
        }
    }

    /// A play-start; when `load` is `Shed`, the store is not asked (nor the plan database: its
    /// cache or the fallback plan answers) and the failure policy decides.
    pub async fn play_start(
        &self,
        request: PlayStart,
        load: Load,
    ) -> Result<PlayDecision, ServiceError> {
        let started = Instant::now();
        let resolved = match load {
            Load::Normal => {
                self.plans
                    .resolve(&request.account_id, request.plan.as_deref())
                    .await?
            }
            Load::Shed => {
                self.plans
                    .resolve_cached(&request.account_id, request.plan.as_deref())
                    .await?
            }
        };
        let replace = match &request.replace_stream_id {
            Some(id) => Some(self.verify(&request.account_id, id)?),
            None => None,
        };
        let shadow = !self.rules.load().enforcement.enforces(
            &request.account_id,
            resolved.plan.as_ref().map(|p| p.name.as_str()),
        );
        let cmd = AcquireCmd {
            account_id: request.account_id,
            device: request.device,
            nonce: StreamIdCodec::new_nonce(),
            plan: resolved.plan,
            replace,
            shadow,
        };
        let store = self.store_for(&cmd.account_id, &request.home, load).await;
        let stored = unless_shed(load, store.acquire(&cmd)).await;
        let (outcome, degraded) = match stored {
            Ok(outcome) => (Some(outcome), resolved.degraded),
            Err(why) => {
                self.on_no_answer(why)?;
                match self.policy() {
                    FailurePolicy::LocalCap => (Some(self.local_acquire(&cmd).await), true),
                    _ => (None, true),
                }
            }
        };
        let stream = |plan: PlanTag| StreamRef {
            device_id: cmd.device.id.clone(),
            nonce: cmd.nonce,
            plan,
        };
        let verdict = |would_refuse| cmd.shadow.then_some(ShadowVerdict { would_refuse });
        let (decision, plan, counted) = match outcome {
            Some(AcquireOutcome::Granted {
                plan,
                limit,
                active_count,
                would_refuse,
                ..
            }) => {
                let counted = match (degraded, would_refuse) {
                    (true, _) => (PlayOutcome::Degraded, None),
                    (false, None) => (PlayOutcome::Allowed, None),
                    (false, Some(rule)) => (PlayOutcome::ShadowRefused, Some(rule)),
                };
                let decision = PlayDecision::Granted {
                    stream_id: self.codec.encode(&cmd.account_id, &stream(plan.clone())),
                    limit,
                    active_count: Some(active_count),
                    degraded,
                    shadow: verdict(would_refuse),
                };
                (decision, plan.name, counted)
            }
            Some(AcquireOutcome::Denied {
                plan,
                limit,
                rule,
                active,
            }) => {
                let decision = PlayDecision::Denied {
                    limit,
                    rule,
                    active: self.active_streams(&cmd.account_id, &plan, active),
                };
                (decision, plan.name, (PlayOutcome::Denied, Some(rule)))
            }
            // Fail open: the stream id is real, so once the store is back the stream's next
            // heartbeat re-registers it (under the plan the id carries) and the cap applies again.
            None => {
                let rules = self.rules.load();
                let plan = cmd.plan.as_ref().unwrap_or(&rules.book.default);
                let decision = PlayDecision::Granted {
                    stream_id: self.codec.encode(&cmd.account_id, &stream(plan.tag())),
                    limit: plan.limit,
                    active_count: None,
                    degraded: true,
                    shadow: verdict(None),
                };
                (decision, plan.name.clone(), (PlayOutcome::Degraded, None))
            }
        };
        self.metrics.plays.count(counted.0, &plan, counted.1);
        self.metrics.decision(match &decision {
            PlayDecision::Granted { degraded: true, .. } => Decision::Degraded,
            PlayDecision::Granted { .. } => Decision::Allowed,
            PlayDecision::Denied { .. } => Decision::Denied,
        });
        self.metrics.observe("acquire", started.elapsed());
        Ok(decision)
    }

    async fn local_acquire(&self, cmd: &AcquireCmd) -> AcquireOutcome {
        self.local
            .acquire(cmd)
            .await
            .expect("the memory store does not fail")
    }

    /// A heartbeat; when `load` is `Shed`, the store is not asked and the failure policy
    /// answers.
    pub async fn heartbeat(
        &self,
        account_id: &str,
        stream_id: &str,
        home: &HomeHint,
        load: Load,
    ) -> Result<Renewal, ServiceError> {
        let started = Instant::now();
        let stream = self.verify(account_id, stream_id)?;
        let store = self.store_for(account_id, home, load).await;
        let stored = unless_shed(load, store.heartbeat(account_id, &stream)).await;
        let renewal = match stored {
            Ok(outcome) => Renewal {
                outcome,
                degraded: false,
            },
            Err(why) => {
                self.on_no_answer(why)?;
                let outcome = match self.policy() {
                    FailurePolicy::LocalCap => self
                        .local
                        .heartbeat(account_id, &stream)
                        .await
                        .expect("the memory store does not fail"),
                    _ => HeartbeatOutcome::Renewed { expires_at: 0 },
                };
                Renewal {
                    outcome,
                    degraded: true,
                }
            }
        };
        if let HeartbeatOutcome::Renewed { .. } | HeartbeatOutcome::Reregistered { .. } =
            renewal.outcome
            && let Some(shard) = self.store.local().shard_of(account_id)
        {
            self.heartbeats.heartbeat(shard);
        }
        self.metrics.decision(match renewal.outcome {
            _ if renewal.degraded => Decision::Degraded,
            HeartbeatOutcome::Renewed { .. } => Decision::Renewed,
            HeartbeatOutcome::Reregistered { .. } => Decision::Reregistered,
            HeartbeatOutcome::Expired => Decision::Expired,
            HeartbeatOutcome::Revoked | HeartbeatOutcome::RevokedOverLimit => Decision::Revoked,
        });
        self.metrics.observe("heartbeat", started.elapsed());
        Ok(renewal)
    }

    /// Frees the stream's slot; answers the same whether or not it was held (idempotent).
    /// Returns whether the answer is degraded. When `load` is `Shed`, the shared store is not
    /// asked and the failure policy answers (the lease then ends with its TTL).
    pub async fn release(
        &self,
        account_id: &str,
        stream_id: &str,
        home: &HomeHint,
        load: Load,
    ) -> Result<bool, ServiceError> {
        let started = Instant::now();
        let stream = self.verify(account_id, stream_id)?;
        if self.policy() == FailurePolicy::LocalCap
            && matches!(self.store.local(), AnyStore::Redis(_))
        {
            // The local store may hold the stream from an earlier outage; free it there too.
            let _: ReleaseOutcome = self
                .local
                .release(account_id, &stream)
                .await
                .expect("infallible");
        }
        let store = self.store_for(account_id, home, load).await;
        let stored = unless_shed(load, store.release(account_id, &stream)).await;
        let degraded = match stored {
            Ok(_) => false,
            Err(why) => {
                self.on_no_answer(why)?;
                true
            }
        };
        self.metrics.observe("release", started.elapsed());
        Ok(degraded)
    }

    /// Revokes a stream for support; `actor` and `reason` go to the audit log.
    pub async fn force_stop(
        &self,
        account_id: &str,
        stream_id: &str,
        actor: &str,
        reason: &str,
    ) -> Result<ForceStopOutcome, ServiceError> {
        let started = Instant::now();
        let cmd = ForceStopCmd {
            account_id: account_id.to_owned(),
            stream: self.verify(account_id, stream_id)?,
            stream_id: stream_id.to_owned(),
            actor: actor.to_owned(),
            reason: reason.to_owned(),
        };
        let store = self
            .store_for(account_id, &HomeHint::NONE, Load::Normal)
            .await;
        let outcome = store
            .force_stop(&cmd)
            .await
            .map_err(|e| self.unavailable(e))?;
        self.metrics.observe("force_stop", started.elapsed());
        match outcome {
            ForceStopOutcome::Unknown => Err(ServiceError::UnknownStream),
            stopped => Ok(stopped),
        }
    }

    /// Gives the account `grant.limit` streams for a while, or with no grant clears the
    /// override; the store logs the change with `actor` and `reason` in the audit log.
    pub async fn set_override(
        &self,
        cmd: &OverrideCmd,
    ) -> Result<Option<LimitOverride>, ServiceError> {
        let account_id = &cmd.account_id;
        let store = self
            .store_for(account_id, &HomeHint::NONE, Load::Normal)
            .await;
        let result = store
            .set_override(cmd)
            .await
            .map_err(|e| self.unavailable(e))?;
        tracing::info!(
            account_id = cmd.account_id,
            grant = ?cmd.grant,
            actor = cmd.actor,
            reason = cmd.reason,
            "limit override changed"
        );
        Ok(result)
    }

    /// The newest support actions, of one account or of the whole fleet, of one kind or all.
    pub async fn audit(
        &self,
        account_id: Option<&str>,
        kind: Option<AuditKind>,
        limit: usize,
    ) -> Result<Vec<AuditEntry>, ServiceError> {
        let store = match account_id {
            Some(account_id) => {
                self.store_for(account_id, &HomeHint::NONE, Load::Normal)
                    .await
            }
            None => self.store.at(CallHome::default()),
        };
        store
            .audit(account_id, kind, limit)
            .await
            .map_err(|e| self.unavailable(e))
    }

    /// The account's recent history, newest first (see `api::history`).
    pub async fn history(
        &self,
        account_id: &str,
        limit: usize,
    ) -> Result<Vec<HistoryEntry>, ServiceError> {
        let store = self
            .store_for(account_id, &HomeHint::NONE, Load::Normal)
            .await;
        store
            .history(account_id, limit)
            .await
            .map_err(|e| self.unavailable(e))
    }

    /// A dashboard user's session generation and failed sign-ins (see `api::sessions`).
    pub async fn session_state(&self, user: &str) -> Result<SessionState, ServiceError> {
        self.store
            .session_state(user)
            .await
            .map_err(|e| self.unavailable(e))
    }

    /// Records a dashboard sign-in event; a sign-out also ends the user's sessions, a failed
    /// sign-in counts against the name. Returns the state now in force.
    pub async fn session_event(&self, cmd: &SessionEventCmd) -> Result<SessionState, ServiceError> {
        let state = self
            .store
            .session_event(cmd)
            .await
            .map_err(|e| self.unavailable(e))?;
        tracing::info!(
            user = cmd.user,
            event = cmd.kind.as_str(),
            address = cmd.address,
            "dashboard session event"
        );
        Ok(state)
    }

    fn unavailable(&self, error: StoreError) -> ServiceError {
        self.metrics.store_error(&error);
        ServiceError::StoreUnavailable(error)
    }

    pub async fn list(
        &self,
        account_id: &str,
        home: &HomeHint,
    ) -> Result<AccountStreams, ServiceError> {
        let started = Instant::now();
        let store = self.store_for(account_id, home, Load::Normal).await;
        let AccountView {
            plan,
            limit,
            limit_override,
            active,
        } = store
            .list(account_id)
            .await
            .map_err(|e| self.unavailable(e))?;
        self.metrics.observe("list", started.elapsed());
        let enforced = self
            .rules
            .load()
            .enforcement
            .enforces(account_id, Some(&plan.name));
        Ok(AccountStreams {
            active: self.active_streams(account_id, &plan, active),
            enforced,
            plan: plan.name,
            limit,
            limit_override,
            home_region: store.home_region(account_id),
        })
    }

    pub async fn health(&self) -> Vec<ShardHealth> {
        self.store.health().await
    }

    /// Whether this instance can answer play-starts: always, unless it is draining before a
    /// stop, or the policy is `closed` and a shard is down or read-only (then its accounts would
    /// get 503s).
    pub fn ready(&self, health: &[ShardHealth]) -> bool {
        !self.draining.is_draining()
            && (self.policy() != FailurePolicy::Closed
                || health.iter().all(|s| s.reachable && !s.read_only))
    }

    /// This instance, its shards and its decision counters.
    pub async fn fleet(&self) -> FleetView {
        let rules = self.rules.load_full();
        FleetView {
            instance: InstanceInfo {
                version: env!("CARGO_PKG_VERSION").into(),
                uptime_sec: self.started.elapsed().as_secs(),
                backend: match self.store.local() {
                    AnyStore::Memory(_) => "memory".into(),
                    AnyStore::Redis(_) => "redis".into(),
                },
            },
            failure_policy: rules.policy.label().into(),
            plans: rules.book.limits(),
            default_plan: rules.book.default.name.clone(),
            enforcement: EnforcementView {
                enforce_percent: rules.enforcement.default.enforced_percent(),
                plans: (rules.enforcement.plans.iter())
                    .map(|(plan, e)| (plan.clone(), e.enforced_percent()))
                    .collect(),
            },
            lease_ttl_sec: rules.timing.ttl_ms as f64 / 1000.0,
            heartbeat_interval_sec: rules.heartbeat_interval.as_secs_f64(),
            config: self.reload.view(&rules),
            shards: self.health().await,
            decisions: self
                .metrics
                .decision_totals()
                .into_iter()
                .map(|(k, v)| (k.to_owned(), v))
                .collect(),
            live_streams: self.live_streams(),
            regions: self.store.regions().map(|r| r.view()),
        }
    }

    /// Live streams per shard: exact on the embedded store, else the heartbeat-rate estimate.
    pub fn live_streams(&self) -> LiveStreams {
        match self.store.local() {
            AnyStore::Memory(store) => LiveStreams {
                method: LiveMethod::Exact,
                window_sec: 0.0,
                shards: vec![store.live_streams()],
            },
            AnyStore::Redis(_) => {
                let mut live = self.heartbeats.estimate(Instant::now());
                // A cluster's counts are kept for every index a primary may get: show those of
                // the shards there are now (and the ones below them).
                let shards = self
                    .store
                    .local()
                    .circuits()
                    .iter()
                    .map(|(i, _)| i + 1)
                    .max();
                live.shards.truncate(shards.unwrap_or(0));
                live
            }
        }
    }

    pub fn render_metrics(&self) -> String {
        self.metrics.set_circuits(&self.store.local().circuits());
        self.metrics
            .set_unusable_cluster_nodes(self.store.local().unusable_cluster_nodes());
        self.metrics
            .set_shard_states(&self.store.local().shard_states());
        for (shard, batches, commands) in self.store.local().batch_totals() {
            self.metrics.sync_batches(shard, batches, commands);
        }
        self.metrics.sync_admission(&self.store.local().admission());
        self.metrics.sync_overload(&self.overload);
        self.metrics.set_live_streams(&self.live_streams());
        let mut text = self.metrics.render();
        text.push_str(&self.reload.render());
        text
    }

    pub fn policy(&self) -> FailurePolicy {
        self.rules.load().policy
    }

    /// The lease timing in force (a reload may change it for the leases written after it).
    pub fn timing(&self) -> Timing {
        self.rules.load().timing
    }

    /// The heartbeat interval in force, told to every player at play-start.
    pub fn heartbeat_interval(&self) -> Duration {
        self.rules.load().heartbeat_interval
    }

    /// The plan names a play-start may give, or `None` when the plan database decides.
    pub fn requestable_plans(&self) -> Option<Vec<String>> {
        match &self.plans {
            PlanSource::Request(rules) => Some(rules.load().book.limits().into_keys().collect()),
            PlanSource::Postgres(_) => None,
        }
    }
}
