//! Waiting for a condition, with a deadline.

use std::time::{Duration, Instant};

/// Polls `check` every 100 ms until it holds; panics naming `what` after `timeout`.
pub fn wait_for(timeout: Duration, what: &str, mut check: impl FnMut() -> bool) {
    let deadline = Instant::now() + timeout;
    while !check() {
        assert!(Instant::now() < deadline, "no {what} after {timeout:?}");
        std::thread::sleep(Duration::from_millis(100));
    }
}
