//! Heartbeats bound for one shard are renewed in batches: while one `renew` call is in flight,
//! the heartbeats that arrive wait, and the next call takes all of them (up to [`MAX_BATCH`]).
//! Redis then pays the script's entry and its clock read once per batch rather than once per
//! heartbeat, and the limiter makes one round trip for many. Nobody waits for a batch to fill:
//! a heartbeat that finds nothing in flight goes at once, so a quiet shard sees batches of one.

use std::sync::Mutex;

use tokio::sync::oneshot;

use super::super::StoreError;
use crate::ids::Nonce;

/// Keys per `renew` call: large enough to amortise the call, small enough to stay a short script.
pub const MAX_BATCH: usize = 64;

/// One heartbeat waiting for a batch: its account key, device and nonce, and where its answer
/// goes (the new lease end, or 0 when only the full heartbeat script can answer).
pub struct Renewal {
    pub key: String,
    pub device: String,
    pub nonce: Nonce,
    pub answer: oneshot::Sender<Result<u64, StoreError>>,
}

/// The heartbeats waiting for one shard, and whether a batch is in flight there.
#[derive(Default)]
pub struct RenewalQueue {
    state: Mutex<QueueState>,
}

#[derive(Default)]
struct QueueState {
    waiting: Vec<Renewal>,
    in_flight: bool,
    /// Batches taken so far and the heartbeats in them, for the metrics.
    batches: u64,
    batched: u64,
}

impl RenewalQueue {
    /// Queues a heartbeat. Returns true when the caller must send the next batch itself because
    /// none is in flight.
    pub fn push(&self, renewal: Renewal) -> bool {
        let mut state = self.state.lock().expect("renewal queue poisoned");
        state.waiting.push(renewal);
        !std::mem::replace(&mut state.in_flight, true)
    }

    /// The next batch, oldest first.
    pub fn take_batch(&self) -> Vec<Renewal> {
        let mut state = self.state.lock().expect("renewal queue poisoned");
        let n = state.waiting.len().min(MAX_BATCH);
        state.batches += 1;
        state.batched += n as u64;
        state.waiting.drain(..n).collect()
    }

    /// Batches taken so far and the heartbeats they carried.
    pub fn totals(&self) -> (u64, u64) {
        let state = self.state.lock().expect("renewal queue poisoned");
        (state.batches, state.batched)
    }

    /// After a batch: true when more heartbeats wait and the caller must send the next batch
    /// (the queue stays in flight); false when the queue is idle again.
    pub fn finish_batch(&self) -> bool {
        let mut state = self.state.lock().expect("renewal queue poisoned");
        state.in_flight = !state.waiting.is_empty();
        state.in_flight
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn renewal(key: &str) -> (Renewal, oneshot::Receiver<Result<u64, StoreError>>) {
        let (answer, rx) = oneshot::channel();
        let renewal = Renewal {
            key: key.into(),
            device: "tv".into(),
            nonce: [0; 16],
            answer,
        };
        (renewal, rx)
    }

    #[test]
    fn the_first_heartbeat_leads_and_later_ones_wait_for_the_next_batch() {
        let queue = RenewalQueue::default();
        assert!(queue.push(renewal("a").0), "an idle queue: send at once");
        assert_eq!(queue.take_batch().len(), 1);
        assert!(!queue.push(renewal("b").0), "a batch is in flight: wait");
        assert!(!queue.push(renewal("c").0));
        assert!(queue.finish_batch(), "two wait: the next batch must go");
        let next: Vec<String> = queue.take_batch().into_iter().map(|r| r.key).collect();
        assert_eq!(next, ["b", "c"]);
        assert!(!queue.finish_batch(), "nothing waits: idle");
        assert!(queue.push(renewal("d").0), "idle again: send at once");
        assert_eq!(queue.totals(), (2, 3), "two batches, three heartbeats");
    }

    #[test]
    fn a_batch_holds_at_most_max_batch_heartbeats() {
        let queue = RenewalQueue::default();
        for i in 0..MAX_BATCH + 5 {
            queue.push(renewal(&i.to_string()).0);
        }
        assert_eq!(queue.take_batch().len(), MAX_BATCH);
        assert!(queue.finish_batch());
        assert_eq!(queue.take_batch().len(), 5);
        assert!(!queue.finish_batch());
    }
}
