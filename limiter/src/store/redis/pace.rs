//! How fast a shard answers, learnt from its own batches, and what follows from it: how many
//! commands may wait for the shard so that the last of them is still answered within the store
//! deadline.
//!
//! A batch of `n` commands takes about `round trip + n × per command`. Deep batches (at least
//! [`MIN_SAMPLE`] commands) tell the per-command cost; shallow ones say more about the round trip,
//! so they are not counted (a quiet shard must not look slow and shed a burst it could answer).
//! The cost is the ratio of decayed sums (time over commands), so one slow batch among many
//! moves it a little and a shard that slows down for good moves it within a few dozen batches.
//! This is the latency-following limit of Netflix's concurrency-limits and Envoy's adaptive
//! concurrency, in the form a FIFO pipeline needs: the bound is the queue depth the shard can
//! drain within the target wait, at the pace it shows now.

use std::time::Duration;

/// Batches shorter than this are not counted: their time is mostly the round trip.
pub const MIN_SAMPLE: usize = 16;

/// The fewest commands a queue may hold whatever the pace says, so that a sample-sized batch can
/// always form and the pace can recover after a stall.
pub const FLOOR: usize = 2 * MIN_SAMPLE;

/// Weight the history keeps at each new sample: a memory of about 16 batches.
const DECAY: f64 = 15.0 / 16.0;

/// A shard's recent pace: decayed sums of the commands and seconds of its deep batches.
#[derive(Debug, Clone, Copy, Default)]
pub struct Pace {
    commands: f64,
    seconds: f64,
}

impl Pace {
    /// A batch of `commands` answered (or given up on) after `took`.
    pub fn observe(&mut self, commands: usize, took: Duration) {
        if commands < MIN_SAMPLE {
            return;
        }
        self.commands = self.commands * DECAY + commands as f64;
        self.seconds = self.seconds * DECAY + took.as_secs_f64();
    }

    /// What one more command in a deep batch costs, once a deep batch was seen.
    pub fn per_command(&self) -> Option<Duration> {
        (self.commands > 0.0).then(|| Duration::from_secs_f64(self.seconds / self.commands))
    }

    /// How many commands (waiting and in flight) may be ahead of a new one so that it is still
    /// answered within `target`, at least [`FLOOR`]; `None` while the pace is unknown (no
    /// bound yet).
    pub fn bound(&self, target: Duration) -> Option<usize> {
        let per_command = self.per_command()?.as_secs_f64();
        let fits = match per_command > 0.0 {
            true => target.as_secs_f64() / per_command,
            false => f64::MAX,
        };
        Some((fits.min(usize::MAX as f64) as usize).max(FLOOR))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: Duration = Duration::from_millis(1);

    #[test]
    fn unknown_until_a_deep_batch_is_seen() {
        let mut pace = Pace::default();
        assert_eq!(pace.bound(10 * MS), None, "no pace yet: no bound");
        pace.observe(1, 5 * MS);
        pace.observe(MIN_SAMPLE - 1, 5 * MS);
        assert_eq!(
            pace.bound(10 * MS),
            None,
            "shallow batches tell the round trip only"
        );
        pace.observe(100, 10 * MS);
        assert_eq!(pace.per_command(), Some(Duration::from_micros(100)));
    }

    #[test]
    fn the_bound_is_what_the_shard_drains_within_the_target() {
        let mut pace = Pace::default();
        pace.observe(128, 12800 * Duration::from_micros(1)); // 100 µs a command
        assert_eq!(pace.bound(25 * MS), Some(250));
        assert_eq!(pace.bound(MS), Some(FLOOR), "never below the floor");
    }

    #[test]
    fn the_pace_follows_a_shard_that_slows_down_and_recovers() {
        let mut pace = Pace::default();
        for _ in 0..100 {
            pace.observe(100, 2 * MS); // 20 µs a command: a fast shard
        }
        let fast = pace.bound(25 * MS).unwrap();
        assert!((1240..=1260).contains(&fast), "{fast}");
        pace.observe(100, 50 * MS); // one stalled batch
        let after_one = pace.bound(25 * MS).unwrap();
        assert!(
            after_one < fast && after_one > fast / 3,
            "one slow batch moves it a little: {after_one}"
        );
        for _ in 0..60 {
            pace.observe(100, 20 * MS); // 200 µs a command from now on
        }
        let slow = pace.bound(25 * MS).unwrap();
        assert!((125..=140).contains(&slow), "a shard slow for good: {slow}");
        for _ in 0..60 {
            pace.observe(100, 2 * MS);
        }
        let back = pace.bound(25 * MS).unwrap();
        assert!(back > 1000, "and fast again: {back}");
    }

    #[test]
    fn a_batch_that_took_no_time_does_not_divide_by_zero() {
        let mut pace = Pace::default();
        pace.observe(64, Duration::ZERO);
        assert_eq!(pace.bound(25 * MS), Some(usize::MAX));
    }
}
