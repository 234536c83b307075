//! One queue per shard per process: every command bound for a shard, from every serving lane,
//! waits here while a batch is in flight, and the next batch takes all that wait (up to
//! [`MAX_BATCH`]) as one pipeline: one write, one read. What a shard can serve is set by its main
//! thread's CPU, and for a short command most of that is the network I/O of its round trip, so
//! commands that share a round trip cost Redis much less each. A command that finds nothing in
//! flight goes at once (after the configured window, if any), so a quiet shard adds no delay.

use std::sync::Mutex;

use redis::{Cmd, Value};
use tokio::sync::oneshot;

use super::super::StoreError;

/// Commands per batch: deep enough to amortise a round trip many times over, short enough that
/// one batch never holds up the shard's other clients for long.
pub const MAX_BATCH: usize = 128;

/// One command waiting for a batch, and where its reply goes.
pub struct Job {
    pub command: Cmd,
    pub answer: oneshot::Sender<Result<Value, StoreError>>,
}

/// The commands waiting for one shard, and whether a batch is in flight there.
#[derive(Default)]
pub struct ShardQueue {
    state: Mutex<QueueState>,
}

#[derive(Default)]
struct QueueState {
    waiting: Vec<Job>,
    in_flight: bool,
    /// Batches taken so far and the commands in them, for the metrics.
    batches: u64,
    commands: u64,
}

impl ShardQueue {
    /// Queues a command. Returns true when the caller must send the next batch itself because
    /// none is in flight.
    pub fn push(&self, job: Job) -> bool {
        let mut state = self.state.lock().expect("shard queue poisoned");
        state.waiting.push(job);
        !std::mem::replace(&mut state.in_flight, true)
    }

    /// The next batch, oldest first.
    pub fn take_batch(&self) -> Vec<Job> {
        let mut state = self.state.lock().expect("shard queue poisoned");
        let n = state.waiting.len().min(MAX_BATCH);
        state.batches += 1;
        state.commands += n as u64;
        state.waiting.drain(..n).collect()
    }

    /// Batches taken so far and the commands they carried.
    pub fn totals(&self) -> (u64, u64) {
        let state = self.state.lock().expect("shard queue poisoned");
        (state.batches, state.commands)
    }

    /// After a batch: true when more commands wait and the caller must send the next batch
    /// (the queue stays in flight); false when the queue is idle again.
    pub fn finish_batch(&self) -> bool {
        let mut state = self.state.lock().expect("shard queue poisoned");
        state.in_flight = !state.waiting.is_empty();
        state.in_flight
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn job(key: &str) -> Job {
        let (answer, _) = oneshot::channel();
        Job {
            command: redis::cmd("GET").arg(key).clone(),
            answer,
        }
    }

    fn keys(batch: Vec<Job>) -> Vec<String> {
        batch
            .into_iter()
            .map(|j| String::from_utf8_lossy(&j.command.get_packed_command()).into_owned())
            .map(|packed| packed.rsplit("\r\n").nth(1).unwrap_or_default().to_owned())
            .collect()
    }

    #[test]
    fn the_first_command_leads_and_later_ones_wait_for_the_next_batch() {
        let queue = ShardQueue::default();
        assert!(queue.push(job("a")), "an idle queue: send at once");
        assert_eq!(queue.take_batch().len(), 1);
        assert!(!queue.push(job("b")), "a batch is in flight: wait");
        assert!(!queue.push(job("c")));
        assert!(queue.finish_batch(), "two wait: the next batch must go");
        assert_eq!(keys(queue.take_batch()), ["b", "c"]);
        assert!(!queue.finish_batch(), "nothing waits: idle");
        assert!(queue.push(job("d")), "idle again: send at once");
        assert_eq!(queue.totals(), (2, 3), "two batches, three commands");
    }

    #[test]
    fn a_batch_holds_at_most_max_batch_commands() {
        let queue = ShardQueue::default();
        for i in 0..MAX_BATCH + 5 {
            queue.push(job(&i.to_string()));
        }
        assert_eq!(queue.take_batch().len(), MAX_BATCH);
        assert!(queue.finish_batch());
        assert_eq!(queue.take_batch().len(), 5);
        assert!(!queue.finish_batch());
    }
}
