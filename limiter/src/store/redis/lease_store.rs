//! The store's operations (`LeaseStore`): each built as its script's call or the module's
//! command, sent to its account's shard, and its reply read; the heartbeat's `GETEX` renewal; the
//! audit lists and the accounts' history lists.

use std::time::Duration;

use redis::Value;

use super::batch::Priority;
use super::call::{Call, Op};
use super::keys::{
    AUDIT_RETENTION, FLEET_AUDIT_KEY, SESSION_GENERATION_LIFE, account_audit_key, account_key,
    history_key, lease_key, session_key, signin_failures_key,
};
use super::reply::{bytes, int, leases, malformed, text};
use super::shard;
use super::{RedisStore, Shards, Target};
use super::{history, record};
use crate::ids::{PlanTag, StreamRef};
use crate::model::{
    AUDIT_PER_ACCOUNT, AUDIT_RECENT, AccountView, AcquireCmd, AcquireOutcome, AuditEntry,
    AuditKind, DenyRule, DeviceType, ForceStopCmd, ForceStopOutcome, HeartbeatOutcome,
    HistoryEntry, LimitOverride, OverrideCmd, ReleaseOutcome, SessionEventCmd, SessionState,
    Timing,
};
use crate::store::error::StoreError;
use crate::store::lease_store::LeaseStore;
use crate::store::shard_health::ShardHealth;

impl RedisStore {
    /// The newest `limit` entries (of `kind`, if given) of one audit list.
    async fn audit_list(
        &self,
        target: Target<'_>,
        key: &str,
        kind: Option<AuditKind>,
        limit: usize,
    ) -> Result<Vec<AuditEntry>, StoreError> {
        // Filtered by kind, the whole list is read: it is capped (AUDIT_RECENT at most).
        let last = match kind {
            Some(_) => -1,
            None => limit.saturating_sub(1) as i64,
        };
        let mut command = redis::cmd("LRANGE");
        command.arg(key).arg(0).arg(last);
        let reply = self.send(target, command, Priority::Decision).await?;
        let raw: Vec<String> =
            redis::from_redis_value(reply).map_err(|e| malformed(&e.to_string()))?;
        Ok(raw
            .iter()
            .filter_map(|json| serde_json::from_str::<AuditEntry>(json).ok())
            .filter(|e| kind.is_none_or(|k| e.kind == k))
            .take(limit)
            .collect())
    }

    /// The fleet audit lists: one per shard of a list, the one of a cluster.
    fn fleet_audit_targets(&self) -> Vec<Target<'static>> {
        match &self.shards {
            Shards::Ring(shards) => (0..shards.len()).map(Target::Shard).collect(),
            Shards::Cluster(_) => vec![Target::FleetAudit("")],
        }
    }

    /// Adds an entry the account's or user's script logged to the fleet audit list, a second
    /// call after the script (on a cluster the list is in another slot). The action itself is
    /// done and in the account's own list by then: a failure here is logged, not returned.
    async fn push_fleet_audit(&self, tag: &str, entry: &Value) {
        let mut invocation = self.scripts.fleet_audit.call(&[FLEET_AUDIT_KEY]);
        let Ok(entry) = bytes(entry) else { return };
        invocation.arg(entry).arg(AUDIT_RECENT);
        if let Err(error) = self
            .send(
                Target::FleetAudit(tag),
                invocation.into_command(),
                Priority::Decision,
            )
            .await
        {
            tracing::warn!(%error, "an audit entry could not be added to the fleet audit list; it is in the account's own list");
        }
    }

    /// The audit arguments every support action's script ends with: cap and retention.
    fn audit_args(invocation: &mut Call) -> &mut Call {
        invocation
            .arg(AUDIT_PER_ACCOUNT)
            .arg(AUDIT_RETENTION.as_millis() as u64)
    }

    /// The common heartbeat, on both paths one plain command in the shard's next batch: `GETEX`
    /// of the lease key with a new life of one TTL (cheaper for Redis than `SL.HEARTBEAT` or a
    /// script: BENCHMARKS.md, "Native commands"; where the module has `SL.RENEW`, the batch's
    /// renewals go as one of those: `renewals.rs`). Its value says until when the account key
    /// surely lives: at least two TTLs ahead of this host's clock (a TTL to spare for clock
    /// skew), the lease is renewed and that is all; nearer, the account key's life must be
    /// renewed too (about one heartbeat in twelve with its six-TTL life).
    async fn renew(&self, account_id: &str, stream: &StreamRef) -> Result<Renewal, StoreError> {
        let rules = self.rules.load();
        let (timing, window) = (rules.timing, rules.renewal_window);
        drop(rules);
        let key = lease_key(account_id, &stream.nonce);
        let renewal = self
            .send_renewal(account_id, key, timing.ttl_ms, window)
            .await?;
        let account_until = match renewal {
            Value::BulkString(bytes) => std::str::from_utf8(&bytes)
                .ok()
                .and_then(|text| text.parse::<u64>().ok()),
            _ => return Ok(Renewal::LeaseGone),
        };
        Ok(match account_until {
            Some(until) if until >= now_ms() + 2 * timing.ttl_ms => Renewal::Done,
            _ => Renewal::AccountNearItsEnd,
        })
    }

    /// The account key's life renewed for a lease `GETEX` just renewed, by the small `touch`
    /// script (the Lua path). False: the lease or the account key is gone after all.
    async fn touch(&self, account_id: &str, stream: &StreamRef) -> Result<bool, StoreError> {
        let timing = self.rules.load().timing;
        let mut call = self.scripts.touch.call(&[
            account_key(account_id).into_bytes(),
            lease_key(account_id, &stream.nonce),
        ]);
        call.arg(timing.revocation_ms);
        let touched: u64 = self.run_as(account_id, call, Priority::Renewal).await?;
        Ok(touched == 1)
    }

    /// The lease lengths every script starts its arguments with, from one snapshot of the rules
    /// (a reload between two reads must not mix old and new).
    fn timing_args(invocation: &mut Call, timing: Timing) -> &mut Call {
        invocation.arg(timing.ttl_ms).arg(timing.revocation_ms)
    }

    /// The history's bounds every script that may write the account's history ends with, one
    /// argument: `<max_events>:<retention_ms>` (`50:604800000`), formatted once per rules snapshot
    /// (`Rules::history_bounds`). One, not two: a call that writes no history (a granted play, a
    /// renewal) still carries it, and Redis pays for each argument of every call. The scripts name
    /// the list from the account key, and read the bounds and touch the list only for an event
    /// (`history_of` in `common.lua`).
    fn history_args<'a>(invocation: &'a mut Call, bounds: &[u8]) -> &'a mut Call {
        invocation.arg(bounds)
    }

    /// A heartbeat, `learning` or not. A lease whose key lives is renewed the same either way (a
    /// batch's `GETEX`es or `SL.RENEW`); only the full heartbeat carries `LEARNING_ARG`.
    async fn beat(
        &self,
        account_id: &str,
        stream: &StreamRef,
        learning: bool,
    ) -> Result<HeartbeatOutcome, StoreError> {
        // The common case on both paths is a renewal by Redis's own `GETEX`. The rest goes to
        // the full heartbeat: on the native path `SL.HEARTBEAT` (which renews the account key's
        // life too, so no `touch`), on Lua the `touch` script first, then the heartbeat script.
        let renewal = self.renew(account_id, stream).await?;
        if renewal == Renewal::Done {
            // `expires_at` is not read for a renewal: the store's clock is not asked for it.
            return Ok(HeartbeatOutcome::Renewed { expires_at: 0 });
        }
        // Which path, only now: the common renewal above is the same `GETEX` on both.
        let native = self.native_for(account_id);
        let priority = match (renewal, native) {
            (Renewal::AccountNearItsEnd, false) if self.touch(account_id, stream).await? => {
                return Ok(HeartbeatOutcome::Renewed { expires_at: 0 });
            }
            // A live lease whose account key needs its life renewed: still a renewal.
            (Renewal::AccountNearItsEnd, true) => Priority::Renewal,
            // The lease is gone: a re-registration or a 410, a decision.
            _ => Priority::Decision,
        };
        let rules = self.rules.load();
        let mut invocation = match native {
            true => Op::Heartbeat.call(&[account_key(account_id)]),
            false => self.scripts.heartbeat.call(&[account_key(account_id)]),
        };
        let default = rules.book.default.tag();
        let plan = if stream.plan.limit > 0 {
            &stream.plan
        } else {
            &default
        };
        Self::timing_args(&mut invocation, rules.timing)
            .arg(&plan.name)
            .arg(plan.limit)
            .arg(&stream.device_id)
            .arg(&stream.nonce[..]);
        Self::history_args(&mut invocation, rules.history_bounds());
        // Learning, one more argument: an ordinary heartbeat's call is as it was before.
        if learning {
            invocation.arg(LEARNING_ARG);
        }
        drop(rules);
        let reply: Vec<Value> = self.run_as(account_id, invocation, priority).await?;
        match reply.as_slice() {
            [code, expires] if int(code)? == 1 => Ok(HeartbeatOutcome::Renewed {
                expires_at: int(expires)?,
            }),
            [code, expires] if int(code)? == 2 => Ok(HeartbeatOutcome::Reregistered {
                expires_at: int(expires)?,
            }),
            [code] if int(code)? == 3 => Ok(HeartbeatOutcome::Expired),
            [code] if int(code)? == 4 => Ok(HeartbeatOutcome::Revoked),
            _ => Err(malformed("heartbeat")),
        }
    }
}

/// The acquire script's last argument for an account in shadow (`AcquireCmd::shadow`): a play
/// the limits would refuse is granted, answered `{2, …, rule, cap}`, and recorded as a refusal
/// that would have been. Absent for an enforced account.
pub const SHADOW_ARG: &str = "shadow";

/// The full heartbeat's last argument for an account in learning mode (its home just moved
/// here): a lost or expired lease is taken back even on a full account. Absent for an ordinary
/// heartbeat.
pub const LEARNING_ARG: &str = "learning";

/// What the `GETEX` renewal of a lease key found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Renewal {
    /// The lease is renewed and its account key lives long enough: the heartbeat is done.
    Done,
    /// The lease is renewed, but its account key's life ends within two TTLs.
    AccountNearItsEnd,
    /// No lease key: expired, stopped or revoked; the full heartbeat decides.
    LeaseGone,
}

/// This host's wall clock in ms since the epoch (0 if it is before the epoch).
fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

impl LeaseStore for RedisStore {
    async fn acquire(&self, cmd: &AcquireCmd) -> Result<AcquireOutcome, StoreError> {
        let rules = self.rules.load();
        let mut invocation = self.lease_call(
            &cmd.account_id,
            Op::Acquire,
            &[account_key(&cmd.account_id)],
        );
        Self::timing_args(&mut invocation, rules.timing);
        match &cmd.plan {
            Some(plan) => invocation.arg(&plan.name).arg(plan.limit),
            None => invocation.arg("").arg(0),
        };
        invocation
            .arg(&rules.book.default.name)
            .arg(rules.book.default.limit)
            .arg(&cmd.device.id)
            .arg(&cmd.nonce[..])
            .arg(record::encode_details(&cmd.device));
        match &cmd.replace {
            Some(target) => invocation.arg(&target.device_id).arg(&target.nonce[..]),
            None => invocation.arg("").arg(""),
        };
        // The named plan's caps; with no plan named, the account's remembered plan (or the
        // default, for a new account) is found in the caps book inside the script.
        match &cmd.plan {
            Some(plan) => invocation.arg(&plan.device_caps.0[..]).arg(""),
            None => invocation.arg("").arg(&rules.caps_book[..]),
        };
        Self::history_args(&mut invocation, rules.history_bounds());
        // In shadow, one more argument: an enforced play's call is as it was before shadows.
        if cmd.shadow {
            invocation.arg(SHADOW_ARG);
        }
        drop(rules);
        let reply: Vec<Value> = self.run(&cmd.account_id, invocation).await?;
        // The rule as the scripts answer it: 0 the account's limit, else 1 + the capped type.
        let deny_rule = |rule: &Value, cap: &Value| -> Result<DenyRule, StoreError> {
            Ok(match int(rule)? {
                0 => DenyRule::MaxStreams,
                kind => DenyRule::DeviceTypeCap {
                    kind: DeviceType::from_code(kind as u8 - 1),
                    cap: int(cap)? as u32,
                },
            })
        };
        match reply.as_slice() {
            [
                granted,
                limit,
                count,
                expires,
                plan,
                plan_limit,
                shadow @ ..,
            ] if matches!(int(granted)?, 1 | 2) => {
                let would_refuse = match shadow {
                    [] => None,
                    [rule, cap] => Some(deny_rule(rule, cap)?),
                    _ => return Err(malformed("acquire")),
                };
                Ok(AcquireOutcome::Granted {
                    plan: PlanTag {
                        name: text(plan)?,
                        limit: int(plan_limit)? as u32,
                    },
                    limit: int(limit)? as u32,
                    active_count: int(count)? as u32,
                    expires_at: int(expires)?,
                    would_refuse,
                })
            }
            [denied, limit, rule, cap, plan, plan_limit, active @ ..] if int(denied)? == 0 => {
                let rule = deny_rule(rule, cap)?;
                Ok(AcquireOutcome::Denied {
                    plan: PlanTag {
                        name: text(plan)?,
                        limit: int(plan_limit)? as u32,
                    },
                    limit: int(limit)? as u32,
                    rule,
                    active: leases(active)?,
                })
            }
            _ => Err(malformed("acquire")),
        }
    }

    async fn heartbeat(
        &self,
        account_id: &str,
        stream: &StreamRef,
    ) -> Result<HeartbeatOutcome, StoreError> {
        self.beat(account_id, stream, false).await
    }

    async fn learn(
        &self,
        account_id: &str,
        stream: &StreamRef,
    ) -> Result<HeartbeatOutcome, StoreError> {
        self.beat(account_id, stream, true).await
    }

    async fn release(
        &self,
        account_id: &str,
        stream: &StreamRef,
    ) -> Result<ReleaseOutcome, StoreError> {
        let mut invocation = self.lease_call(account_id, Op::Release, &[account_key(account_id)]);
        let rules = self.rules.load();
        Self::timing_args(&mut invocation, rules.timing)
            .arg(&stream.device_id)
            .arg(&stream.nonce[..]);
        Self::history_args(&mut invocation, rules.history_bounds());
        drop(rules);
        let code: u64 = self.run(account_id, invocation).await?;
        Ok(if code == 1 {
            ReleaseOutcome::Released
        } else {
            ReleaseOutcome::NotHeld
        })
    }

    async fn force_stop(&self, cmd: &ForceStopCmd) -> Result<ForceStopOutcome, StoreError> {
        let keys = [
            account_key(&cmd.account_id),
            account_audit_key(&cmd.account_id),
        ];
        let mut invocation = self.lease_call(&cmd.account_id, Op::ForceStop, &keys);
        let rules = self.rules.load();
        Self::timing_args(&mut invocation, rules.timing)
            .arg(&cmd.stream.device_id)
            .arg(&cmd.stream.nonce[..])
            .arg(&cmd.account_id)
            .arg(&cmd.stream_id)
            .arg(&cmd.actor)
            .arg(&cmd.reason);
        Self::audit_args(&mut invocation);
        Self::history_args(&mut invocation, rules.history_bounds());
        drop(rules);
        let reply: Vec<Value> = self.run(&cmd.account_id, invocation).await?;
        match reply.as_slice() {
            [code, entry] if int(code)? == 1 => {
                self.push_fleet_audit(&cmd.account_id, entry).await;
                Ok(ForceStopOutcome::Stopped)
            }
            [code] if int(code)? == 2 => Ok(ForceStopOutcome::AlreadyStopped),
            [code] if int(code)? == 0 => Ok(ForceStopOutcome::Unknown),
            _ => Err(malformed("force_stop")),
        }
    }

    async fn audit(
        &self,
        account_id: Option<&str>,
        kind: Option<AuditKind>,
        limit: usize,
    ) -> Result<Vec<AuditEntry>, StoreError> {
        if let Some(account_id) = account_id {
            return self
                .audit_list(
                    Target::Tag(account_id),
                    &account_audit_key(account_id),
                    kind,
                    limit,
                )
                .await;
        }
        let lists = self
            .fleet_audit_targets()
            .into_iter()
            .map(|target| self.audit_list(target, FLEET_AUDIT_KEY, kind, limit));
        let mut merged = Vec::new();
        for entries in futures::future::join_all(lists).await {
            merged.extend(entries?);
        }
        merged.sort_by_key(|e| std::cmp::Reverse(e.at));
        merged.truncate(limit);
        Ok(merged)
    }

    async fn list(&self, account_id: &str) -> Result<AccountView, StoreError> {
        let rules = self.rules.load();
        let mut invocation = self.lease_call(account_id, Op::List, &[account_key(account_id)]);
        invocation
            .arg(rules.timing.ttl_ms)
            .arg(&rules.book.default.name)
            .arg(rules.book.default.limit);
        drop(rules);
        let reply: Vec<Value> = self.run(account_id, invocation).await?;
        match reply.as_slice() {
            [
                plan,
                limit,
                override_limit,
                override_ends,
                plan_limit,
                active @ ..,
            ] => Ok(AccountView {
                plan: PlanTag {
                    name: text(plan)?,
                    limit: int(plan_limit)? as u32,
                },
                limit: int(limit)? as u32,
                limit_override: match int(override_limit)? {
                    0 => None,
                    limit => Some(LimitOverride {
                        limit: limit as u32,
                        until: int(override_ends)?,
                    }),
                },
                active: leases(active)?,
            }),
            _ => Err(malformed("list")),
        }
    }

    async fn history(
        &self,
        account_id: &str,
        limit: usize,
    ) -> Result<Vec<HistoryEntry>, StoreError> {
        if limit == 0 {
            return Ok(Vec::new());
        }
        let mut command = redis::cmd("LRANGE");
        command
            .arg(history_key(account_id))
            .arg(0)
            .arg(limit.saturating_sub(1) as i64);
        let reply = self
            .send(Target::Tag(account_id), command, Priority::Decision)
            .await?;
        let raw: Vec<Vec<u8>> =
            redis::from_redis_value(reply).map_err(|e| malformed(&e.to_string()))?;
        // An entry of another version (a limiter rolled back past it) is left out, not an error.
        Ok(raw
            .iter()
            .filter_map(|entry| history::decode(entry))
            .collect())
    }

    async fn set_override(&self, cmd: &OverrideCmd) -> Result<Option<LimitOverride>, StoreError> {
        let keys = [
            account_key(&cmd.account_id),
            account_audit_key(&cmd.account_id),
        ];
        let mut invocation = self.lease_call(&cmd.account_id, Op::SetOverride, &keys);
        let (limit, duration_ms) = cmd.grant.map_or((0, 0), |g| (g.limit, g.duration_ms));
        let rules = self.rules.load();
        Self::timing_args(&mut invocation, rules.timing)
            .arg(&rules.book.default.name)
            .arg(rules.book.default.limit)
            .arg(limit)
            .arg(duration_ms)
            .arg(&cmd.account_id)
            .arg(&cmd.actor)
            .arg(&cmd.reason);
        Self::audit_args(&mut invocation);
        Self::history_args(&mut invocation, rules.history_bounds());
        drop(rules);
        let reply: Vec<Value> = self.run(&cmd.account_id, invocation).await?;
        let (limit, until) = match reply.as_slice() {
            [limit, until] => (int(limit)?, int(until)?),
            [limit, until, entry] => {
                self.push_fleet_audit(&cmd.account_id, entry).await;
                (int(limit)?, int(until)?)
            }
            _ => return Err(malformed("set_override")),
        };
        Ok((limit > 0).then_some(LimitOverride {
            limit: limit as u32,
            until,
        }))
    }

    async fn session_state(&self, user: &str) -> Result<SessionState, StoreError> {
        // Two GETs of the user's slot, sent together: they share the shard's next batch.
        let read = |key: String, what: &'static str| async move {
            let mut command = redis::cmd("GET");
            command.arg(key);
            match self
                .send(Target::Tag(user), command, Priority::Decision)
                .await?
            {
                Value::Nil => Ok(0),
                value => text(&value)?.parse().map_err(|_| malformed(what)),
            }
        };
        let (generation, failures) = tokio::try_join!(
            read(session_key(user), "session generation"),
            read(signin_failures_key(user), "sign-in failures"),
        )?;
        Ok(SessionState {
            generation,
            failures,
        })
    }

    async fn session_event(&self, cmd: &SessionEventCmd) -> Result<SessionState, StoreError> {
        let mut invocation = self
            .scripts
            .session_event
            .call(&[session_key(&cmd.user), signin_failures_key(&cmd.user)]);
        invocation
            .arg(u8::from(cmd.kind == AuditKind::SignOut))
            .arg(cmd.kind.as_str())
            .arg(&cmd.user)
            .arg(&cmd.address)
            .arg(&cmd.reason)
            .arg(SESSION_GENERATION_LIFE.as_millis() as u64)
            .arg(cmd.failure_window_ms);
        let reply: Vec<Value> = self.run(&cmd.user, invocation).await?;
        let [generation, entry, failures] = reply.as_slice() else {
            return Err(malformed("session_event"));
        };
        self.push_fleet_audit(&cmd.user, entry).await;
        Ok(SessionState {
            generation: int(generation)?,
            failures: int(failures)?,
        })
    }

    async fn health(&self) -> Vec<ShardHealth> {
        let shards = self.shards_now();
        if let (Shards::Cluster(topology), true) = (&self.shards, shards.is_empty()) {
            // No slot map yet: the cluster is not reachable, whatever its nodes are.
            return vec![ShardHealth {
                shard: 0,
                endpoint: format!(
                    "cluster (no slot map yet; seeds {})",
                    topology.seed_addresses()
                ),
                reachable: false,
                circuit: "open",
                keys: None,
                overloaded: false,
                read_only: false,
                no_replicas: false,
                out_of_memory: false,
                memory: None,
                path: None,
            }];
        }
        let checks = shards.into_iter().map(|shard| async move {
            let keys =
                shard::key_count(&shard, self.deadline.max(Duration::from_millis(100))).await;
            ShardHealth {
                shard: shard.index,
                endpoint: shard.endpoint(),
                reachable: keys.is_some(),
                circuit: shard.breaker.state(),
                keys,
                overloaded: shard.queue.overloaded(),
                read_only: shard.state.read_only(),
                no_replicas: shard.state.no_replicas(),
                out_of_memory: shard.state.out_of_memory(),
                memory: shard.state.memory(),
                path: Some(shard.path.label()),
            }
        });
        futures::future::join_all(checks).await
    }
}
