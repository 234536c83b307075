//! Latency histograms per operation, outcome counters, failures and invariant checks, and the
//! report (a human table and JSON).

use std::collections::BTreeMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use hdrhistogram::Histogram;
use serde::Serialize;

/// Latencies are recorded in microseconds, 1 µs to 10 min, 3 significant digits.
pub fn histogram() -> Histogram<u64> {
    Histogram::new_with_bounds(1, 600_000_000, 3).expect("valid bounds")
}

struct OpStats {
    hist: Histogram<u64>,
    outcomes: BTreeMap<String, u64>,
}

#[derive(Default)]
struct Inner {
    ops: BTreeMap<&'static str, OpStats>,
    failures: BTreeMap<String, u64>,
    violations: BTreeMap<String, u64>,
    checks: BTreeMap<String, u64>,
}

/// Shared by every task of a run.
pub struct Recorder {
    inner: Mutex<Inner>,
    /// The heartbeat interval the limiter announced (seconds), once a play was granted.
    interval: Mutex<Option<f64>>,
    pub started: Instant,
}

impl Default for Recorder {
    fn default() -> Self {
        Self::new()
    }
}

#[derive(Debug, Clone, Serialize)]
pub struct OpSummary {
    pub op: String,
    pub count: u64,
    pub rate_per_sec: f64,
    pub p50_ms: f64,
    pub p99_ms: f64,
    pub p999_ms: f64,
    pub max_ms: f64,
    pub outcomes: BTreeMap<String, u64>,
}

pub fn summarize(op: &str, hist: &Histogram<u64>, secs: f64) -> OpSummary {
    let ms = |us: u64| us as f64 / 1000.0;
    OpSummary {
        op: op.to_owned(),
        count: hist.len(),
        rate_per_sec: if secs > 0.0 {
            hist.len() as f64 / secs
        } else {
            0.0
        },
        p50_ms: ms(hist.value_at_quantile(0.5)),
        p99_ms: ms(hist.value_at_quantile(0.99)),
        p999_ms: ms(hist.value_at_quantile(0.999)),
        max_ms: ms(hist.max()),
        outcomes: BTreeMap::new(),
    }
}

impl Recorder {
    pub fn new() -> Self {
        Recorder {
            inner: Mutex::new(Inner::default()),
            interval: Mutex::new(None),
            started: Instant::now(),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// One answered (or failed) call: its latency from the moment it was meant to be sent.
    pub fn record(&self, op: &'static str, latency: Duration, outcome: &str) {
        let us = (latency.as_micros() as u64).clamp(1, 600_000_000);
        let mut inner = self.lock();
        let stats = inner.ops.entry(op).or_insert_with(|| OpStats {
            hist: histogram(),
            outcomes: BTreeMap::new(),
        });
        let _ = stats.hist.record(us);
        match stats.outcomes.get_mut(outcome) {
            Some(n) => *n += 1,
            None => {
                stats.outcomes.insert(outcome.to_owned(), 1);
            }
        }
    }

    /// Something that must not happen in a healthy run (transport error, 5xx, degraded answer,
    /// an answer the scenario did not expect).
    pub fn fail(&self, what: &str) {
        self.fail_n(what, 1);
    }

    /// `n` failures of one kind at once (e.g. carried over from another recorder).
    pub fn fail_n(&self, what: &str, n: u64) {
        *self.lock().failures.entry(what.to_owned()).or_default() += n;
    }

    /// An invariant was checked `n` times (violations are counted apart).
    pub fn checked(&self, invariant: &str, n: u64) {
        *self.lock().checks.entry(invariant.to_owned()).or_default() += n;
        self.lock()
            .violations
            .entry(invariant.to_owned())
            .or_default();
    }

    pub fn violated(&self, invariant: &str) {
        self.violated_n(invariant, 1);
    }

    pub fn violated_n(&self, invariant: &str, n: u64) {
        *self
            .lock()
            .violations
            .entry(invariant.to_owned())
            .or_default() += n;
    }

    /// Carries `other`'s failures (prefixed) and invariant checks over into this recorder.
    pub fn absorb(&self, other: &Recorder, prefix: &str) {
        let mut tmp = Report::default();
        other.fill(&mut tmp, 1.0);
        for (what, n) in tmp.failures {
            self.fail_n(&format!("{prefix}: {what}"), n);
        }
        for (name, inv) in tmp.invariants {
            self.checked(&name, inv.checks);
            self.violated_n(&name, inv.violations);
        }
    }

    pub fn note_interval(&self, secs: f64) {
        *self.interval.lock().unwrap_or_else(|e| e.into_inner()) = Some(secs);
    }

    pub fn heartbeat_interval(&self) -> Option<f64> {
        *self.interval.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub fn failures_snapshot(&self) -> BTreeMap<String, u64> {
        self.lock().failures.clone()
    }

    pub fn count(&self, op: &str) -> u64 {
        self.lock().ops.get(op).map_or(0, |s| s.hist.len())
    }

    pub fn total_failures(&self) -> u64 {
        self.lock().failures.values().sum()
    }

    /// Per operation: calls recorded so far and their p99 in milliseconds (progress lines).
    pub fn op_progress(&self) -> BTreeMap<String, (u64, f64)> {
        self.lock()
            .ops
            .iter()
            .map(|(op, s)| {
                let p99 = s.hist.value_at_quantile(0.99) as f64 / 1000.0;
                ((*op).to_owned(), (s.hist.len(), p99))
            })
            .collect()
    }

    pub fn total_violations(&self) -> u64 {
        self.lock().violations.values().sum()
    }

    /// Fills the report's ops, failures and invariants from what was recorded.
    pub fn fill(&self, report: &mut Report, secs: f64) {
        let inner = self.lock();
        for (op, s) in &inner.ops {
            let mut summary = summarize(op, &s.hist, secs);
            summary.outcomes = s.outcomes.clone();
            report.ops.push(summary);
        }
        report.failures = inner.failures.clone();
        for (name, checks) in &inner.checks {
            report.invariants.insert(
                name.clone(),
                Invariant {
                    checks: *checks,
                    violations: inner.violations.get(name).copied().unwrap_or(0),
                },
            );
        }
        for (name, v) in &inner.violations {
            report.invariants.entry(name.clone()).or_insert(Invariant {
                checks: 0,
                violations: *v,
            });
        }
    }
}

#[derive(Debug, Clone, Copy, Serialize, Default)]
pub struct Invariant {
    pub checks: u64,
    pub violations: u64,
}

#[derive(Debug, Clone, Serialize, Default)]
pub struct Machine {
    pub cpus: usize,
    pub loadavg_start: String,
    pub loadavg_end: String,
    pub kernel: String,
}

pub fn loadavg() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|s| s.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_default()
}

impl Machine {
    pub fn now() -> Self {
        Machine {
            cpus: std::thread::available_parallelism().map_or(0, |n| n.get()),
            loadavg_start: loadavg(),
            loadavg_end: String::new(),
            kernel: std::fs::read_to_string("/proc/sys/kernel/osrelease")
                .unwrap_or_default()
                .trim()
                .to_owned(),
        }
    }
}

#[derive(Debug, Clone, Serialize, Default)]
pub struct Report {
    pub scenario: String,
    pub command: String,
    pub started_at: String,
    pub duration_sec: f64,
    pub machine: Machine,
    pub ops: Vec<OpSummary>,
    pub failures: BTreeMap<String, u64>,
    pub invariants: BTreeMap<String, Invariant>,
    /// Scenario-specific figures (rates, memory, CPU per request, ratios ...).
    pub figures: BTreeMap<String, serde_json::Value>,
    /// Scenario-specific rows (one per concurrency level, per phase ...).
    pub rows: Vec<serde_json::Value>,
    /// Preformatted tables of a scenario (printed after the rows); when present, figures that
    /// are JSON objects are left to the JSON report.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub text: String,
}

impl Report {
    pub fn new(scenario: &str) -> Self {
        Report {
            scenario: scenario.to_owned(),
            command: std::env::args().collect::<Vec<_>>().join(" "),
            started_at: time::OffsetDateTime::now_utc()
                .format(&time::format_description::well_known::Rfc3339)
                .unwrap_or_default(),
            machine: Machine::now(),
            ..Report::default()
        }
    }

    pub fn figure(&mut self, key: &str, value: impl Serialize) {
        self.figures.insert(
            key.to_owned(),
            serde_json::to_value(value).unwrap_or_default(),
        );
    }

    /// No failures and no invariant violated.
    pub fn ok(&self) -> bool {
        self.failures.values().all(|&n| n == 0)
            && self.invariants.values().all(|i| i.violations == 0)
    }

    pub fn table(&self) -> String {
        let mut out = format!(
            "scenario {} — {:.1} s, {} CPUs, load {} -> {}\n",
            self.scenario,
            self.duration_sec,
            self.machine.cpus,
            self.machine.loadavg_start,
            self.machine.loadavg_end
        );
        out.push_str(&format!(
            "{:<16} {:>10} {:>10} {:>8} {:>8} {:>8} {:>8}  outcomes\n",
            "op", "count", "rate/s", "p50 ms", "p99 ms", "p999 ms", "max ms"
        ));
        for op in &self.ops {
            let outcomes: Vec<String> = op
                .outcomes
                .iter()
                .map(|(k, v)| format!("{k}={v}"))
                .collect();
            out.push_str(&format!(
                "{:<16} {:>10} {:>10.0} {:>8.2} {:>8.2} {:>8.2} {:>8.2}  {}\n",
                op.op,
                op.count,
                op.rate_per_sec,
                op.p50_ms,
                op.p99_ms,
                op.p999_ms,
                op.max_ms,
                outcomes.join(" ")
            ));
        }
        for row in &self.rows {
            out.push_str(&format!("  {row}\n"));
        }
        out.push_str(&self.text);
        if self.failures.values().all(|&n| n == 0) {
            out.push_str("failures: none\n");
        } else {
            out.push_str(&format!("failures: {:?}\n", self.failures));
        }
        for (name, inv) in &self.invariants {
            out.push_str(&format!(
                "invariant {name}: {} violations in {} checks\n",
                inv.violations, inv.checks
            ));
        }
        for (k, v) in &self.figures {
            if !self.text.is_empty() && v.is_object() {
                continue;
            }
            out.push_str(&format!("{k} = {v}\n"));
        }
        out.push_str(if self.ok() {
            "RESULT: ok\n"
        } else {
            "RESULT: FAILED\n"
        });
        out
    }
}
