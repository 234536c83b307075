//! Sending commands: to an account's shard (by the ring, or a cluster slot's primary, following
//! `MOVED`, `ASK` and `TRYAGAIN`), in the shard's next batch (`batch.rs`), under its circuit
//! breaker and the store deadline; scripts a server lost are loaded again.

use std::sync::Arc;
use std::time::Duration;

use redis::aio::ConnectionLike;
use redis::{Cmd, Value};
use tokio::time::Instant;

use super::batch::{Job, LeaseRenewal, Priority, Pushed};
use super::cluster::{Redirect, Topology};
use super::hold::Holding;
use super::keys::FLEET_AUDIT_KEY;
use super::reply::{malformed, server_error};
use super::shard::Shard;
use super::{RedisStore, Shards, Target};
use super::{access, cluster, health, path, renewals, ring};
use crate::store::error::StoreError;

/// How many redirections one command follows before it gives up (within its deadline).
const MAX_REDIRECTIONS: usize = 5;

/// How long a command waits before it is sent again after `TRYAGAIN` (a slot in mid-migration).
const TRY_AGAIN_PAUSE: Duration = Duration::from_millis(2);

impl RedisStore {
    /// Sends one command to its shard in the shard's next batch; its reply within the store
    /// deadline (a server's refusal as an error). On a cluster, `MOVED`, `ASK` and `TRYAGAIN` are
    /// followed within that deadline.
    pub(super) async fn send(
        &self,
        target: Target<'_>,
        command: Cmd,
        priority: Priority,
    ) -> Result<Value, StoreError> {
        let (shard, reply) = self.send_raw(target, command, priority).await?;
        server_error(shard, reply)
    }

    /// A lease's renewal, `GETEX key PX ttl`, as a renewal in its shard's next batch; on a shard
    /// of a list it first waits for `window` (the renewal window of the rules its caller read:
    /// `hold.rs`), and may go inside one
    /// `SL.RENEW` with the batch's other renewals (`renewals.rs`). A cluster's batches mix slots,
    /// which one command may not: there it is always its own `GETEX`, sent as it comes.
    pub(super) async fn send_renewal(
        &self,
        account_id: &str,
        key: Vec<u8>,
        ttl_ms: u64,
        window: Duration,
    ) -> Result<Value, StoreError> {
        let mut command = redis::cmd("GETEX");
        command.arg(&key).arg("PX").arg(ttl_ms);
        let Shards::Ring(shards) = &self.shards else {
            return self
                .send(Target::Tag(account_id), command, Priority::Renewal)
                .await;
        };
        let shard = &shards[ring::shard_for(account_id, shards.len())];
        let renewal = Some(LeaseRenewal { key, ttl_ms });
        let reply = match window.is_zero() {
            true => {
                let until = Instant::now() + self.deadline;
                self.send_to(shard, command, until, Priority::Renewal, renewal)
                    .await?
            }
            false => self.send_held(shard, command, renewal, window).await?,
        };
        server_error(shard.index, reply)
    }

    /// A renewal held for `window` with the shard's other renewals (`hold.rs`), then queued with
    /// them; its reply by the window's end plus the store deadline.
    async fn send_held(
        &self,
        shard: &Arc<Shard>,
        command: Cmd,
        renewal: Option<LeaseRenewal>,
        window: Duration,
    ) -> Result<Value, StoreError> {
        if shard.breaker.is_open() {
            return Err(StoreError::CircuitOpen { shard: shard.index });
        }
        let until = Instant::now() + window + self.deadline;
        let (answer, reply) = tokio::sync::oneshot::channel();
        let job = Job {
            command,
            answer,
            until,
            priority: Priority::Renewal,
            renewal,
        };
        match shard.hold.hold(job) {
            Holding::OpenWindow => {
                // A task of its own, so that a request that goes away cannot strand the window.
                let store = self.me.upgrade().expect("the store outlives its requests");
                let shard = shard.clone();
                tokio::spawn(async move {
                    tokio::time::sleep(window).await;
                    store.enqueue(&shard, shard.hold.release());
                });
            }
            Holding::Held => {}
            Holding::Full(jobs) => self.enqueue(shard, jobs),
        }
        Self::answer_by(shard, reply, until).await
    }

    /// Jobs given to `shard`'s queue together; those it sheds are answered at once.
    fn enqueue(&self, shard: &Arc<Shard>, jobs: Vec<Job>) {
        for job in jobs {
            match shard.queue.push(job, self.admission.as_ref()) {
                Pushed::Lead => {
                    let store = self.me.upgrade().expect("the store outlives its requests");
                    tokio::spawn(store.send_batches(shard.clone()));
                }
                Pushed::Wait => {}
                Pushed::Shed(job) => {
                    let _ = job
                        .answer
                        .send(Err(StoreError::Shed { shard: shard.index }));
                }
            }
        }
    }

    /// [`RedisStore::send`], with a server's refusal as a value: the shard that answered and
    /// its reply.
    pub(super) async fn send_raw(
        &self,
        target: Target<'_>,
        command: Cmd,
        priority: Priority,
    ) -> Result<(usize, Value), StoreError> {
        let until = Instant::now() + self.deadline;
        let (shard, reply) = match &self.shards {
            Shards::Ring(shards) => {
                let index = match target {
                    Target::Tag(tag) | Target::FleetAudit(tag) => {
                        ring::shard_for(tag, shards.len())
                    }
                    Target::Shard(index) => index,
                };
                let shard = &shards[index];
                let reply = self.send_to(shard, command, until, priority, None).await?;
                (shard.index, reply)
            }
            Shards::Cluster(topology) => {
                let slot = match target {
                    Target::Tag(tag) => cluster::tag_slot(tag),
                    Target::FleetAudit(_) | Target::Shard(_) => {
                        cluster::key_slot(FLEET_AUDIT_KEY.as_bytes())
                    }
                };
                self.send_in_cluster(topology, slot, command, until, priority)
                    .await?
            }
        };
        Ok((shard, reply))
    }

    /// One command for `slot` on a cluster: to the slot's primary, then wherever the nodes
    /// redirect it. Returns the shard that answered and its reply.
    async fn send_in_cluster(
        &self,
        topology: &Topology,
        slot: u16,
        command: Cmd,
        until: Instant,
        priority: Priority,
    ) -> Result<(usize, Value), StoreError> {
        let mut asking: Option<Arc<Shard>> = None;
        for _ in 0..MAX_REDIRECTIONS {
            let (node, reply) = match asking.take() {
                Some(node) => {
                    let reply = self.send_asking(&node, &command, until).await;
                    (node, reply)
                }
                None => {
                    let Some(node) = topology.owner_by(slot, until).await else {
                        return Err(StoreError::Backend {
                            shard: usize::MAX,
                            message: format!(
                                "no cluster node serves slot {slot} (the slot map is being read)"
                            ),
                        });
                    };
                    let reply = self
                        .send_to(&node, command.clone(), until, priority, None)
                        .await;
                    (node, reply)
                }
            };
            let error = match reply {
                Ok(Value::ServerError(error)) => error,
                Ok(value) => return Ok((node.index, value)),
                Err(error) => {
                    // The node may be gone (a failover): the map is read again meanwhile.
                    if error.may_mean_a_new_topology() {
                        topology.stale();
                    }
                    return Err(error);
                }
            };
            let unusable = |e: String| StoreError::Backend {
                shard: node.index,
                message: e,
            };
            match Redirect::parse(&error) {
                Some(Redirect::Moved { slot, address }) => {
                    topology.moved(slot, &address).map_err(unusable)?;
                }
                Some(Redirect::Ask { address }) => {
                    asking = Some(topology.node_at(&address).map_err(unusable)?);
                }
                Some(Redirect::TryAgain) => {
                    tokio::time::sleep_until(until.min(Instant::now() + TRY_AGAIN_PAUSE)).await;
                    if Instant::now() >= until {
                        return Err(StoreError::Timeout { shard: node.index });
                    }
                }
                None => return Ok((node.index, Value::ServerError(error))),
            }
        }
        Err(StoreError::Backend {
            shard: usize::MAX,
            message: format!("slot {slot}: too many cluster redirections"),
        })
    }

    /// `ASKING` and the command, on their own right after each other on `node`'s connection (a
    /// slot being migrated to it), outside the batches; scripts it lacks are loaded first.
    async fn send_asking(
        &self,
        node: &Shard,
        command: &Cmd,
        until: Instant,
    ) -> Result<Value, StoreError> {
        let mut pipe = redis::pipe();
        pipe.cmd("ASKING").add_command(command.clone());
        let answer = async {
            let mut replies = self.pipeline(node, &pipe).await?;
            if matches!(&replies[1], Value::ServerError(e) if e.code() == "NOSCRIPT") {
                self.load_scripts(node).await?;
                replies = self.pipeline(node, &pipe).await?;
            }
            Ok(replies.swap_remove(1))
        };
        match tokio::time::timeout_at(until, answer).await {
            Ok(reply) => reply,
            Err(_) => Err(StoreError::Timeout { shard: node.index }),
        }
    }

    /// Sends one command to `shard` in its next batch; its reply (a server error as a value)
    /// by `until`, or at once `Shed` when the shard cannot answer it in time.
    async fn send_to(
        &self,
        shard: &Arc<Shard>,
        command: Cmd,
        until: Instant,
        priority: Priority,
        renewal: Option<LeaseRenewal>,
    ) -> Result<Value, StoreError> {
        if shard.breaker.is_open() {
            return Err(StoreError::CircuitOpen { shard: shard.index });
        }
        let (answer, reply) = tokio::sync::oneshot::channel();
        let job = Job {
            command,
            answer,
            until,
            priority,
            renewal,
        };
        match shard.queue.push(job, self.admission.as_ref()) {
            Pushed::Lead => {
                // A task of its own, so that a request that goes away cannot strand the batch.
                let store = self.me.upgrade().expect("the store outlives its requests");
                tokio::spawn(store.send_batches(shard.clone()));
            }
            Pushed::Wait => {}
            Pushed::Shed(_) => return Err(StoreError::Shed { shard: shard.index }),
        }
        Self::answer_by(shard, reply, until).await
    }

    /// A queued command's reply (a server error as a value), or the store deadline's error at
    /// `until`.
    async fn answer_by(
        shard: &Shard,
        reply: tokio::sync::oneshot::Receiver<Result<Value, StoreError>>,
        until: Instant,
    ) -> Result<Value, StoreError> {
        match tokio::time::timeout_at(until, reply).await {
            Ok(Ok(answer)) => answer.and_then(|reply| health::watch::classify(shard, reply)),
            Ok(Err(_)) => Err(StoreError::Backend {
                shard: shard.index,
                message: "the batch was dropped".into(),
            }),
            Err(_) => Err(StoreError::Timeout { shard: shard.index }),
        }
    }

    /// Sends the shard's waiting commands, batch after batch, until none wait.
    async fn send_batches(self: Arc<Self>, shard: Arc<Shard>) {
        let queue = &shard.queue;
        loop {
            // Every batch waits for company, not only one that finds the shard idle: fewer,
            // deeper round trips are what save the shard's CPU (a command waits at most about
            // two windows and a round trip).
            if !self.batch_window.is_zero() {
                tokio::time::sleep(self.batch_window).await;
            }
            let batch = queue.take_batch(self.admission.as_ref());
            // Answered at once: the failure policy decides for them, without the shard.
            for job in batch.dropped {
                let _ = job
                    .answer
                    .send(Err(StoreError::Shed { shard: shard.index }));
            }
            let mut planned = renewals::plan(batch.jobs, shard.path.renews_in_one());
            let commands = std::mem::take(&mut planned.commands);
            let (sent, started) = (planned.jobs(), Instant::now());
            // A batch that answered or ran out of time tells the shard's pace; a refused
            // connection does not.
            let result = match commands.is_empty() {
                true => Ok(Vec::new()),
                false => self.run_batch(&shard, commands).await,
            };
            let sample = match &result {
                Ok(_) | Err(StoreError::Timeout { .. }) => Some((sent, started.elapsed())),
                Err(_) => None,
            };
            // A command whose request went away no longer listens; that is fine.
            match result {
                Ok(replies) => {
                    let refused = planned.answer(replies);
                    if !refused.renewals.is_empty() {
                        self.renew_one_by_one(&shard, refused).await;
                    }
                }
                Err(error) => planned.fail(&error),
            }
            if !queue.finish_batch(sample) {
                return;
            }
        }
    }

    /// Renewals an `SL.RENEW` did not answer, sent again as their own `GETEX`es: the shard's
    /// module lacks the command (an older module, an ACL without it), so it is not merged again
    /// there until the shard is asked for its path again; one log line.
    async fn renew_one_by_one(&self, shard: &Shard, refused: renewals::Refused) {
        if shard.path.renew_refused() {
            let why = refused
                .why
                .as_ref()
                .map(|e| e.to_string())
                .unwrap_or_default();
            tracing::warn!(shard = shard.index, endpoint = %shard.endpoint(), why, "store shard: SL.RENEW refused; each renewal goes as its own GETEX until the shard is asked again");
        }
        let mut planned = refused.one_by_one();
        let commands = std::mem::take(&mut planned.commands);
        match self.run_batch(shard, commands).await {
            // `GETEX`es: nothing in them can be refused again.
            Ok(replies) => drop(planned.answer(replies)),
            Err(error) => planned.fail(&error),
        }
    }

    /// One pipeline of `commands` on `shard`: a reply per command, in order. Scripts the server
    /// lost (a restart, a failover, `SCRIPT FLUSH`) are loaded again and the commands it
    /// refused with `NOSCRIPT` sent once more.
    async fn run_batch(&self, shard: &Shard, commands: Vec<Cmd>) -> Result<Vec<Value>, StoreError> {
        let mut pipe = redis::pipe();
        for command in commands {
            pipe.add_command(command);
        }
        let mut replies = self.pipeline(shard, &pipe).await?;
        let lost: Vec<usize> = (0..replies.len())
            .filter(|&i| matches!(&replies[i], Value::ServerError(e) if e.code() == "NOSCRIPT"))
            .collect();
        if lost.is_empty() {
            return Ok(replies);
        }
        self.load_scripts(shard).await?;
        let mut again = redis::pipe();
        for (i, command) in pipe.cmd_iter().enumerate() {
            if lost.contains(&i) {
                again.add_command(command.clone());
            }
        }
        let again = self.pipeline(shard, &again).await?;
        for (i, reply) in lost.into_iter().zip(again) {
            replies[i] = reply;
        }
        Ok(replies)
    }

    /// Loads every script on `shard`. Within the first-contact deadline rather than the store's:
    /// compiling the scripts can take a busy server longer than one call may, and a load that
    /// timed out every time would leave the shard answering `NOSCRIPT` for good (no request
    /// waits on it beyond its own deadline: it runs in the batch's task).
    async fn load_scripts(&self, shard: &Shard) -> Result<(), StoreError> {
        let mut loads = redis::pipe();
        for (_, source) in &self.scripts.loaded {
            loads.cmd("SCRIPT").arg("LOAD").arg(source);
        }
        let deadline = access::contact_deadline(self.deadline);
        self.pipeline_within(shard, &loads, deadline)
            .await
            .map(drop)
    }

    /// `pipe` as one write and one read under the shard's breaker and deadline: a reply per
    /// command, in order.
    async fn pipeline(
        &self,
        shard: &Shard,
        pipe: &redis::Pipeline,
    ) -> Result<Vec<Value>, StoreError> {
        self.pipeline_within(shard, pipe, self.deadline).await
    }

    async fn pipeline_within(
        &self,
        shard: &Shard,
        pipe: &redis::Pipeline,
        deadline: Duration,
    ) -> Result<Vec<Value>, StoreError> {
        let count = pipe.len();
        let replies = self
            .guarded(shard, deadline, |mut connection| async move {
                connection.req_packed_commands(pipe, 0, count).await
            })
            .await?;
        match replies.len() == count {
            true => Ok(replies),
            false => Err(malformed("a pipeline answered the wrong number of replies")),
        }
    }

    /// Runs one call on the shard's master under its circuit breaker and `deadline`.
    async fn guarded<T, F, Fut>(
        &self,
        shard: &Shard,
        deadline: Duration,
        call: F,
    ) -> Result<T, StoreError>
    where
        F: FnOnce(redis::aio::ConnectionManager) -> Fut,
        Fut: Future<Output = redis::RedisResult<T>>,
    {
        let index = shard.index;
        if shard.breaker.is_open() {
            return Err(StoreError::CircuitOpen { shard: index });
        }
        let error = match shard.connection() {
            None => StoreError::Backend {
                shard: index,
                message: "no master known yet; asking Sentinel".into(),
            },
            Some(connection) => match tokio::time::timeout(deadline, call(connection)).await {
                Ok(Ok(value)) => {
                    shard.breaker.record_success();
                    return Ok(value);
                }
                Ok(Err(e)) => {
                    if path::broken(&e) {
                        // Reconnected on the next call, maybe to another server: ask it first.
                        shard.path.forget();
                    }
                    StoreError::Backend {
                        shard: index,
                        message: e.to_string(),
                    }
                }
                Err(_) => StoreError::Timeout { shard: index },
            },
        };
        if shard.breaker.record_failure() {
            tracing::warn!(shard = index, endpoint = %shard.endpoint(), %error, "store circuit opened");
        }
        Err(error)
    }
}
