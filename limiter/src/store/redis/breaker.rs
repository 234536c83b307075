//! A per-shard circuit breaker. After `threshold` consecutive failures the circuit opens and
//! requests fail at once instead of each paying the store deadline; a background probe pings the
//! shard every `probe_interval` and closes the circuit when it answers.

use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};

pub struct Breaker {
    threshold: u32,
    consecutive_failures: AtomicU32,
    open: AtomicBool,
}

impl Breaker {
    pub fn new(threshold: u32) -> Self {
        Breaker {
            threshold,
            consecutive_failures: AtomicU32::new(0),
            open: AtomicBool::new(false),
        }
    }

    pub fn is_open(&self) -> bool {
        self.open.load(Ordering::Relaxed)
    }

    pub fn record_success(&self) {
        self.consecutive_failures.store(0, Ordering::Relaxed);
    }

    /// Counts a failure; returns true when this failure opened the circuit.
    pub fn record_failure(&self) -> bool {
        let failures = self.consecutive_failures.fetch_add(1, Ordering::Relaxed) + 1;
        failures >= self.threshold && !self.open.swap(true, Ordering::Relaxed)
    }

    /// Opens the circuit now, whatever the count (the shard said it cannot serve: `READONLY`).
    pub fn trip(&self) {
        self.open.store(true, Ordering::Relaxed);
    }

    /// The probe got an answer: let traffic through again.
    pub fn close(&self) {
        self.consecutive_failures.store(0, Ordering::Relaxed);
        self.open.store(false, Ordering::Relaxed);
    }

    pub fn state(&self) -> &'static str {
        if self.is_open() { "open" } else { "closed" }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn opens_after_threshold_consecutive_failures_and_closes_on_probe() {
        let breaker = Breaker::new(3);
        assert!(!breaker.record_failure());
        breaker.record_success();
        assert!(!breaker.record_failure());
        assert!(!breaker.record_failure());
        assert!(!breaker.is_open());
        assert!(
            breaker.record_failure(),
            "the third failure in a row opens the circuit"
        );
        assert!(breaker.is_open());
        assert!(!breaker.record_failure(), "opening is reported once");
        breaker.close();
        assert!(!breaker.is_open());
        assert_eq!(breaker.state(), "closed");
    }
}
