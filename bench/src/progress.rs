//! The progress line a long run prints on stderr every `--progress` (off with `--no-progress`):
//! elapsed of total, operations done, the rate since the previous line, p99, errors.
//!
//! A run shorter than one period prints none, so CI smoke runs stay quiet.

use std::collections::BTreeMap;
use std::io::Write;
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::task::JoinHandle;

use crate::stats::Recorder;

/// One operation's figures at a tick.
#[derive(Debug, Clone, PartialEq)]
pub struct OpProgress {
    pub done: u64,
    /// Per second since the previous line (since the start for the first).
    pub rate: f64,
    pub p99_ms: f64,
}

/// What one progress line says.
#[derive(Debug, Clone, PartialEq)]
pub struct Snapshot {
    pub elapsed: Duration,
    pub total: Option<Duration>,
    pub ops: BTreeMap<String, OpProgress>,
    pub errors: u64,
    pub violations: u64,
}

impl Snapshot {
    /// `steady [ 12s/60s] heartbeat 35000 (2998/s, p99 1.2 ms) · play_start 1200 (98/s, p99 2.0 ms) | errors 0 violations 0`
    pub fn line(&self, label: &str) -> String {
        let elapsed = self.elapsed.as_secs_f64();
        let clock = match self.total {
            Some(total) => format!("[{elapsed:>5.0}s/{:.0}s]", total.as_secs_f64()),
            None => format!("[{elapsed:>5.0}s]"),
        };
        let ops: Vec<String> = self
            .ops
            .iter()
            .map(|(op, p)| format!("{op} {} ({:.0}/s, p99 {:.1} ms)", p.done, p.rate, p.p99_ms))
            .collect();
        let ops = if ops.is_empty() {
            "no operations yet".to_owned()
        } else {
            ops.join(" · ")
        };
        format!(
            "{label} {clock} {ops} | errors {} violations {}",
            self.errors, self.violations
        )
    }
}

/// Counts at the previous line, to give the current rate.
struct Previous {
    at: Instant,
    done: BTreeMap<String, u64>,
}

/// The figures of `rec` now, rates since `previous` (which is then moved to now).
fn snapshot(
    rec: &Recorder,
    started: Instant,
    total: Option<Duration>,
    previous: &mut Previous,
    now: Instant,
) -> Snapshot {
    let span = now.saturating_duration_since(previous.at).as_secs_f64();
    let ops: BTreeMap<String, OpProgress> = rec
        .op_progress()
        .into_iter()
        .map(|(op, (done, p99_ms))| {
            let before = previous.done.get(&op).copied().unwrap_or(0);
            let rate = if span > 0.0 {
                done.saturating_sub(before) as f64 / span
            } else {
                0.0
            };
            (op, OpProgress { done, rate, p99_ms })
        })
        .collect();
    previous.at = now;
    previous.done = ops.iter().map(|(op, p)| (op.clone(), p.done)).collect();
    Snapshot {
        elapsed: now.saturating_duration_since(started),
        total,
        ops,
        errors: rec.total_failures(),
        violations: rec.total_violations(),
    }
}

/// Prints a line for `rec` every `every` (`None`: never) to `out` until aborted. `total` is the
/// phase's planned length, when it has one.
pub fn spawn(
    rec: Arc<Recorder>,
    every: Option<Duration>,
    label: &'static str,
    total: Option<Duration>,
    mut out: impl Write + Send + 'static,
) -> JoinHandle<()> {
    tokio::spawn(async move {
        let Some(every) = every.filter(|e| !e.is_zero()) else {
            return;
        };
        let started = Instant::now();
        let mut previous = Previous {
            at: started,
            done: BTreeMap::new(),
        };
        let mut tick = tokio::time::interval_at(tokio::time::Instant::now() + every, every);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tick.tick().await;
            let line = snapshot(&rec, started, total, &mut previous, Instant::now()).line(label);
            // A closed stderr must not end the run.
            let _ = writeln!(out, "{line}");
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_line_says_elapsed_of_total_done_rate_and_errors() {
        let mut ops = BTreeMap::new();
        ops.insert(
            "heartbeat".to_owned(),
            OpProgress {
                done: 35_000,
                rate: 2998.4,
                p99_ms: 1.23,
            },
        );
        let snap = Snapshot {
            elapsed: Duration::from_secs(12),
            total: Some(Duration::from_secs(60)),
            ops,
            errors: 3,
            violations: 0,
        };
        assert_eq!(
            snap.line("steady"),
            "steady [   12s/60s] heartbeat 35000 (2998/s, p99 1.2 ms) | errors 3 violations 0"
        );
        let open = Snapshot {
            total: None,
            ops: BTreeMap::new(),
            ..snap
        };
        assert_eq!(
            open.line("race"),
            "race [   12s] no operations yet | errors 3 violations 0"
        );
    }

    #[test]
    fn the_rate_is_since_the_previous_line() {
        let rec = Recorder::new();
        let t0 = Instant::now();
        let mut previous = Previous {
            at: t0,
            done: BTreeMap::new(),
        };
        for _ in 0..100 {
            rec.record("play_start", Duration::from_millis(1), "granted");
        }
        let first = snapshot(&rec, t0, None, &mut previous, t0 + Duration::from_secs(10));
        assert_eq!(first.ops["play_start"].rate, 10.0);
        for _ in 0..50 {
            rec.record("play_start", Duration::from_millis(1), "granted");
        }
        rec.fail("transport");
        let second = snapshot(&rec, t0, None, &mut previous, t0 + Duration::from_secs(15));
        assert_eq!(second.ops["play_start"].done, 150);
        assert_eq!(second.ops["play_start"].rate, 10.0, "50 in the last 5 s");
        assert_eq!(second.errors, 1);
        assert_eq!(second.elapsed, Duration::from_secs(15));
    }
}
