//! Heartbeats wait for company (`store.renewal_window`): a lease's renewal needs no answer for
//! seconds (a player heartbeats every interval against a lease of at least two), so on a shard of
//! a list each renewal is held for a window of its own, or until a batch is full, and the
//! renewals held together enter the shard's queue together: one round trip, and on the native
//! path one `SL.RENEW`, for all of them. A held renewal's deadline is the window plus the store
//! deadline. Play-starts, stops and the heartbeat's full script never wait here: they go to the
//! shard's queue as they come (`batch.rs`), under `store.batch_window` alone.

use std::sync::{Mutex, MutexGuard};

use super::batch::{Job, MAX_BATCH};

/// The renewals held for one shard's next window.
#[derive(Default)]
pub struct RenewalHold {
    state: Mutex<Held>,
}

#[derive(Default)]
struct Held {
    jobs: Vec<Job>,
    /// A window is open: a task will release what is held when it ends.
    window_open: bool,
}

/// What a renewal given to the hold asks of its caller.
pub enum Holding {
    /// The first of a window: the caller opens the window (a task that releases the held
    /// renewals when it ends).
    OpenWindow,
    /// Held until the open window ends.
    Held,
    /// The hold is full: these go to the shard's queue now (the window stays open for what
    /// comes next).
    Full(Vec<Job>),
}

impl RenewalHold {
    /// The held renewals. Every change under the lock leaves them whole (a push or a take), so a
    /// panic elsewhere while it was held poisons nothing they depend on: go on with them rather
    /// than fail every later heartbeat of the shard.
    fn state(&self) -> MutexGuard<'_, Held> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub fn hold(&self, job: Job) -> Holding {
        let mut state = self.state();
        state.jobs.push(job);
        if state.jobs.len() >= MAX_BATCH {
            return Holding::Full(std::mem::take(&mut state.jobs));
        }
        match std::mem::replace(&mut state.window_open, true) {
            true => Holding::Held,
            false => Holding::OpenWindow,
        }
    }

    /// At the end of a window: what was held, and the window is closed.
    pub fn release(&self) -> Vec<Job> {
        let mut state = self.state();
        state.window_open = false;
        std::mem::take(&mut state.jobs)
    }

    /// Renewals held now.
    pub fn held(&self) -> usize {
        self.state().jobs.len()
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use tokio::time::Instant;

    use super::*;
    use crate::store::redis::batch::Priority;

    fn renewal() -> Job {
        let (answer, reply) = tokio::sync::oneshot::channel();
        std::mem::forget(reply);
        Job {
            command: redis::cmd("GETEX"),
            answer,
            until: Instant::now() + Duration::from_secs(1),
            priority: Priority::Renewal,
            renewal: None,
        }
    }

    #[test]
    fn the_first_renewal_opens_a_window_and_the_next_ones_join_it() {
        let hold = RenewalHold::default();
        assert!(matches!(hold.hold(renewal()), Holding::OpenWindow));
        assert!(matches!(hold.hold(renewal()), Holding::Held));
        assert!(matches!(hold.hold(renewal()), Holding::Held));
        assert_eq!(hold.held(), 3);
        assert_eq!(hold.release().len(), 3, "the window's end releases all");
        assert_eq!(hold.held(), 0);
        assert!(
            matches!(hold.hold(renewal()), Holding::OpenWindow),
            "the next renewal opens a new window"
        );
    }

    #[test]
    fn a_full_hold_goes_at_once_and_the_open_window_takes_the_rest() {
        let hold = RenewalHold::default();
        let mut full = None;
        for _ in 0..MAX_BATCH {
            if let Holding::Full(jobs) = hold.hold(renewal()) {
                full = Some(jobs);
            }
        }
        assert_eq!(full.map(|jobs| jobs.len()), Some(MAX_BATCH));
        assert!(
            matches!(hold.hold(renewal()), Holding::Held),
            "the window is still open"
        );
        assert_eq!(hold.release().len(), 1);
    }
}
