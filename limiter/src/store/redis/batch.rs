//! One queue per shard per process: every command bound for a shard, from every serving lane,
//! waits here while a batch is in flight, and the next batch takes what waits (up to
//! [`MAX_BATCH`]) as one pipeline: one write, one read. What a shard can serve is set by its main
//! thread's CPU, and for a short command most of that is the network I/O of its round trip, so
//! commands that share a round trip cost Redis much less each. A command that finds nothing in
//! flight goes at once (after the configured window, if any), so a quiet shard adds no delay.
//!
//! The queue is also where a shard is kept from congestion collapse (`store.admission`): at the
//! pace the shard shows (`pace.rs`), a command that could not be answered within its target wait
//! is refused at once (the failure policy decides, without the store), and when a batch forms,
//! a command whose caller is gone, or whose deadline would pass before the batch is answered, is
//! not sent. So under a spike the shard's whole capacity goes into answers that arrive in time,
//! instead of into work done for callers that have given up.

use std::collections::VecDeque;
use std::sync::Mutex;
use std::time::Duration;

use redis::{Cmd, Value};
use tokio::sync::oneshot;
use tokio::time::Instant;

use super::pace::{MIN_SAMPLE, Pace};
use crate::store::error::StoreError;

/// Commands per batch: deep enough to amortise a round trip many times over, short enough that
/// one batch never holds up the shard's other clients for long.
pub const MAX_BATCH: usize = 128;

/// Which calls keep their place when a shard is full. A play-start's decision (and a stop's, a
/// force-stop's, the full heartbeat's re-registration) goes first; the native renewal of a live
/// lease is shed first: one shed renewal costs its stream nothing (the lease lives at least two
/// heartbeat intervals), while a shed play is admitted unchecked under `open` and refused under
/// `closed`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Priority {
    Decision,
    Renewal,
}

impl Priority {
    pub const ALL: [Priority; 2] = [Priority::Decision, Priority::Renewal];

    pub fn label(self) -> &'static str {
        match self {
            Priority::Decision => "decision",
            Priority::Renewal => "renewal",
        }
    }

    fn index(self) -> usize {
        self as usize
    }
}

/// Why a command was not sent.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ShedReason {
    /// Refused when it arrived: the shard could not answer it within its target wait.
    Bound,
    /// Taken out when its batch formed: its deadline would pass before the batch is answered.
    Late,
    /// Taken out when its batch formed: its caller had stopped waiting (deadline passed).
    Abandoned,
}

impl ShedReason {
    pub const ALL: [ShedReason; 3] = [ShedReason::Bound, ShedReason::Late, ShedReason::Abandoned];

    pub fn label(self) -> &'static str {
        match self {
            ShedReason::Bound => "bound",
            ShedReason::Late => "late",
            ShedReason::Abandoned => "abandoned",
        }
    }

    fn index(self) -> usize {
        self as usize
    }
}

/// The wait admission aims at, derived from the store deadline.
#[derive(Debug, Clone, Copy)]
pub struct Targets {
    /// The longest predicted wait a decision is admitted to: half the deadline (the other half
    /// is for its own batch and the pace's error). A renewal is admitted to half of that.
    pub decision: Duration,
}

impl Targets {
    pub fn for_deadline(deadline: Duration) -> Self {
        Targets {
            decision: deadline / 2,
        }
    }

    /// How many commands may be ahead of one of `priority` at `pace` (`None`: no bound yet).
    fn bound(&self, pace: &Pace, priority: Priority) -> Option<usize> {
        let bound = pace.bound(self.decision)?;
        Some(match priority {
            Priority::Decision => bound,
            Priority::Renewal => bound / 2,
        })
    }
}

/// One command waiting for a batch, and where its reply goes.
pub struct Job {
    pub command: Cmd,
    pub answer: oneshot::Sender<Result<Value, StoreError>>,
    /// When its caller stops waiting.
    pub until: Instant,
    pub priority: Priority,
    /// Set for a lease's `GETEX` renewal on a shard of a list: on a shard on the native path,
    /// the renewals of one batch go as one `SL.RENEW` (`renewals.rs`).
    pub renewal: Option<LeaseRenewal>,
}

/// A lease key's renewal (`GETEX key PX ttl`), as `SL.RENEW` takes it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LeaseRenewal {
    pub key: Vec<u8>,
    pub ttl_ms: u64,
}

/// What became of a command given to the queue.
pub enum Pushed {
    /// Queued, and no batch is in flight: the caller sends the next batch itself.
    Lead,
    /// Queued behind the batch in flight.
    Wait,
    /// Refused at once: the shard could not answer it in time. The job comes back, to be
    /// answered by whoever holds it.
    Shed(Job),
}

/// The commands waiting for one shard, and whether a batch is in flight there.
#[derive(Default)]
pub struct ShardQueue {
    state: Mutex<QueueState>,
}

#[derive(Default)]
struct QueueState {
    waiting: VecDeque<Job>,
    in_flight: bool,
    /// Commands in the batch in flight.
    sent: usize,
    pace: Pace,
    /// Batches taken so far and the commands in them, for the metrics.
    batches: u64,
    commands: u64,
    /// Commands not sent, by priority and reason.
    shed: [[u64; 3]; 2],
    /// The shed total at the last tick, and since when the shard has been shedding.
    shed_at_tick: u64,
    shedding_since: Option<Instant>,
    quiet_ticks: u32,
}

/// A batch to send, and the commands taken out of the queue without being sent (answer them).
pub struct Batch {
    pub jobs: Vec<Job>,
    pub dropped: Vec<Job>,
}

/// A shard's admission state, for the metrics, `/v1/fleet` and the log.
#[derive(Debug, Clone, Copy, Default)]
pub struct Admission {
    /// Commands waiting or in flight now.
    pub queued: usize,
    /// How many may be ahead of a decision (`None`: no pace yet, or admission off).
    pub bound: Option<usize>,
    /// What one command of a deep batch costs the shard, as last measured.
    pub per_command: Option<Duration>,
    /// Commands not sent, by priority ([`Priority::ALL`]) and reason ([`ShedReason::ALL`]).
    pub shed: [[u64; 3]; 2],
    /// Whether the shard is shedding now.
    pub overloaded: bool,
}

/// A change of a shard's overload state, seen by [`ShardQueue::tick`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Episode {
    Started,
    /// The shard has shed nothing for a while: how long the episode lasted.
    Ended {
        lasted: Duration,
    },
}

/// Ticks without a shed before an episode is over (with the maintenance tick of 0.5 s or less).
const QUIET_TICKS: u32 = 3;

impl ShardQueue {
    /// Queues a command, unless `targets` (admission on) say the shard cannot answer it in time.
    pub fn push(&self, job: Job, targets: Option<&Targets>) -> Pushed {
        let priority = job.priority;
        let mut state = self.state.lock().expect("shard queue poisoned");
        if let Some(targets) = targets {
            let ahead = state.waiting.len() + state.sent;
            if targets
                .bound(&state.pace, priority)
                .is_some_and(|bound| ahead >= bound)
            {
                state.shed[priority.index()][ShedReason::Bound.index()] += 1;
                return Pushed::Shed(job);
            }
        }
        state.waiting.push_back(job);
        match std::mem::replace(&mut state.in_flight, true) {
            true => Pushed::Wait,
            false => Pushed::Lead,
        }
    }

    /// The next batch, oldest first (up to [`MAX_BATCH`]). With admission on, commands whose
    /// callers are gone are taken out, and those whose deadline would pass before the batch is
    /// answered at the shard's pace; off, everything is sent.
    ///
    /// A batch is always as deep as what waits: a shard held to a CPU quota answers in slices,
    /// and what one slice can answer is one batch, however deep.
    pub fn take_batch(&self, targets: Option<&Targets>) -> Batch {
        let mut state = self.state.lock().expect("shard queue poisoned");
        let now = Instant::now();
        let depth = MAX_BATCH.min(state.waiting.len());
        let answered_by = now + state.pace.per_command().unwrap_or_default() * depth as u32;
        let mut batch = Batch {
            jobs: Vec::with_capacity(depth),
            dropped: Vec::new(),
        };
        let mut late = Vec::new();
        while batch.jobs.len() + late.len() < MAX_BATCH {
            let Some(job) = state.waiting.pop_front() else {
                break;
            };
            if targets.is_none() {
                // Admission off: everything is sent, as it came.
                batch.jobs.push(job);
            } else if job.answer.is_closed() || job.until <= now {
                state.shed[job.priority.index()][ShedReason::Abandoned.index()] += 1;
                batch.dropped.push(job);
            } else if job.until <= answered_by {
                late.push(job);
            } else {
                batch.jobs.push(job);
            }
        }
        // A pace that calls every command late could only be proved wrong by a batch deep enough
        // to be a sample, and none would be sent: the pace would stay wrong for good (under a CPU
        // quota one stalled batch is enough to get there). So the youngest of the late ones still
        // go, up to a sample's depth; at worst that is a sample's worth of work a shard does late.
        let probes = MIN_SAMPLE.saturating_sub(batch.jobs.len()).min(late.len());
        batch.jobs.extend(late.drain(late.len() - probes..));
        for job in late {
            state.shed[job.priority.index()][ShedReason::Late.index()] += 1;
            batch.dropped.push(job);
        }
        state.sent = batch.jobs.len();
        state.batches += 1;
        state.commands += batch.jobs.len() as u64;
        batch
    }

    /// Batches taken so far and the commands they carried.
    pub fn totals(&self) -> (u64, u64) {
        let state = self.state.lock().expect("shard queue poisoned");
        (state.batches, state.commands)
    }

    /// After a batch of `sent` commands answered (or timed out) after `took`, if it tells the
    /// shard's pace: true when more commands wait and the caller must send the next batch (the
    /// queue stays in flight); false when the queue is idle again.
    pub fn finish_batch(&self, sample: Option<(usize, Duration)>) -> bool {
        let mut state = self.state.lock().expect("shard queue poisoned");
        if let Some((sent, took)) = sample {
            state.pace.observe(sent, took);
        }
        state.sent = 0;
        state.in_flight = !state.waiting.is_empty();
        state.in_flight
    }

    /// The shard's admission state now.
    pub fn admission(&self, targets: Option<&Targets>) -> Admission {
        let state = self.state.lock().expect("shard queue poisoned");
        Admission {
            queued: state.waiting.len() + state.sent,
            bound: targets.and_then(|t| t.bound(&state.pace, Priority::Decision)),
            per_command: state.pace.per_command(),
            shed: state.shed,
            overloaded: state.shedding_since.is_some(),
        }
    }

    /// Whether the shard is shedding now.
    pub fn overloaded(&self) -> bool {
        let state = self.state.lock().expect("shard queue poisoned");
        state.shedding_since.is_some()
    }

    /// Called every maintenance tick: says when the shard starts shedding and when it has shed
    /// nothing for [`QUIET_TICKS`] ticks, so that the log has a line per episode, not per command.
    pub fn tick(&self) -> Option<Episode> {
        let mut state = self.state.lock().expect("shard queue poisoned");
        let shed: u64 = state.shed.iter().flatten().sum();
        let shed_now = shed > state.shed_at_tick;
        state.shed_at_tick = shed;
        match (state.shedding_since, shed_now) {
            (None, true) => {
                state.shedding_since = Some(Instant::now());
                state.quiet_ticks = 0;
                Some(Episode::Started)
            }
            (Some(_), true) => {
                state.quiet_ticks = 0;
                None
            }
            (Some(since), false) => {
                state.quiet_ticks += 1;
                (state.quiet_ticks >= QUIET_TICKS).then(|| {
                    state.shedding_since = None;
                    Episode::Ended {
                        lasted: since.elapsed(),
                    }
                })
            }
            (None, false) => None,
        }
    }
}

#[cfg(test)]
mod tests;
