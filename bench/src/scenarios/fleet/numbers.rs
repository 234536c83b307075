//! The arithmetic the figures share: per-operation CPU, guarded ratios, rounding, quantiles,
//! and the latency summaries of a phase's operations.

use serde_json::{Value, json};

use crate::stats::{OpSummary, Recorder, Report};

pub(super) fn per_op_us(cpu_secs: f64, ops: u64) -> f64 {
    if ops == 0 {
        0.0
    } else {
        cpu_secs * 1e6 / ops as f64
    }
}

pub(super) fn ratio(a: f64, b: f64) -> f64 {
    if b == 0.0 { 0.0 } else { a / b }
}

pub(super) fn round3(x: f64) -> f64 {
    (x * 1000.0).round() / 1000.0
}

/// Latency summaries of a phase's operations, named `phase.op`.
pub(super) fn summaries(rec: &Recorder, secs: f64, phase: &str) -> Vec<OpSummary> {
    let mut tmp = Report::default();
    rec.fill(&mut tmp, secs);
    tmp.ops
        .into_iter()
        .map(|mut s| {
            s.op = format!("{phase}.{}", s.op);
            s
        })
        .collect()
}

pub(super) fn find<'a>(ops: &'a [OpSummary], name: &str) -> Option<&'a OpSummary> {
    ops.iter().find(|o| o.op == name)
}

pub(super) fn latency(ops: &[OpSummary], name: &str) -> Value {
    find(ops, name).map_or(Value::Null, |o| {
        json!({"count": o.count, "rate_per_sec": o.rate_per_sec.round(), "p50_ms": o.p50_ms,
               "p99_ms": o.p99_ms, "max_ms": o.max_ms})
    })
}

pub(super) fn quantile(sorted: &[u64], q: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    sorted[((sorted.len() - 1) as f64 * q).round() as usize] as f64
}
