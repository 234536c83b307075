//! The calls between regions, per peer: `screenlimit_region_calls_total{peer,op,outcome}`,
//! `screenlimit_region_call_seconds{peer}`, `screenlimit_region_bytes_total{peer,direction}`,
//! `screenlimit_region_forwarded_total{peer,op}` (operations carried: a heartbeats call carries
//! several), `screenlimit_region_peer_up{peer}` (its last call answered),
//! `screenlimit_region_last_call_seconds{peer}` (its last answered call's time),
//! `screenlimit_region_provisional_total{peer,op}` (plays and heartbeats of its accounts decided
//! here while it did not answer) and `screenlimit_region_reconciled_total{peer,outcome}` (those
//! streams once it answered again: `kept` by the home, `revoked` over the limit), and for a home
//! moved here, `screenlimit_region_learned_total` (live streams of its accounts re-registered by
//! heartbeat while learning, at the limit or not), and `screenlimit_region_unknown_home_total{source}`
//! (homes a source named that are no region of this install: the hash decided).

use prometheus::{HistogramOpts, HistogramVec, IntCounterVec, IntGaugeVec, Opts, Registry};

/// A call's end, the `outcome` label: answered (the home's store may still have refused), or
/// no answer (deadline, connection, a reply that is not one).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CallOutcome {
    Answered,
    Failed,
}

#[derive(Clone)]
pub struct RegionMetrics {
    calls: IntCounterVec,
    seconds: HistogramVec,
    bytes: IntCounterVec,
    forwarded: IntCounterVec,
    up: IntGaugeVec,
    last_call: prometheus::GaugeVec,
    provisional: IntCounterVec,
    reconciled: IntCounterVec,
    learned: prometheus::IntCounter,
    unknown_home: IntCounterVec,
}

impl RegionMetrics {
    pub fn register(registry: &Registry) -> RegionMetrics {
        let counter = |name: &str, help: &str, labels: &[&str]| {
            IntCounterVec::new(Opts::new(name, help), labels).expect("valid metric")
        };
        let metrics = RegionMetrics {
            calls: counter(
                "region_calls_total",
                "Calls to another region's limiters, by peer, operation and outcome (answered, failed)",
                &["peer", "op", "outcome"],
            ),
            seconds: HistogramVec::new(
                HistogramOpts::new(
                    "region_call_seconds",
                    "Time of one call to another region, answered or not",
                )
                .buckets(vec![
                    0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.5, 1.0, 2.5,
                ]),
                &["peer"],
            )
            .expect("valid metric"),
            bytes: counter(
                "region_bytes_total",
                "Body bytes of the calls to another region, by peer and direction (sent, received)",
                &["peer", "direction"],
            ),
            forwarded: counter(
                "region_forwarded_total",
                "Operations of accounts homed in another region sent there, by peer and operation (a heartbeats call carries several)",
                &["peer", "op"],
            ),
            up: IntGaugeVec::new(
                Opts::new(
                    "region_peer_up",
                    "Whether another region answered its last call (1) or not (0)",
                ),
                &["peer"],
            )
            .expect("valid metric"),
            last_call: prometheus::GaugeVec::new(
                Opts::new(
                    "region_last_call_seconds",
                    "Time of the last call to another region that it answered",
                ),
                &["peer"],
            )
            .expect("valid metric"),
            provisional: counter(
                "region_provisional_total",
                "Plays and heartbeats of accounts homed at a peer decided by this region's store while the peer did not answer, by peer and operation",
                &["peer", "op"],
            ),
            reconciled: counter(
                "region_reconciled_total",
                "Streams let play while their home did not answer, once it answered again: kept by the home, or revoked over the account's limit",
                &["peer", "outcome"],
            ),
            learned: prometheus::IntCounter::new(
                "region_learned_total",
                "Streams of accounts whose home moved here re-registered by heartbeat in the lease TTL after the move (learning), at the limit or not",
            )
            .expect("valid metric"),
            unknown_home: counter(
                "region_unknown_home_total",
                "Calls whose home a source named as a region this install does not know (the hash decided instead), by source",
                &["source"],
            ),
        };
        for metric in [
            Box::new(metrics.calls.clone()) as Box<dyn prometheus::core::Collector>,
            Box::new(metrics.seconds.clone()),
            Box::new(metrics.bytes.clone()),
            Box::new(metrics.forwarded.clone()),
            Box::new(metrics.up.clone()),
            Box::new(metrics.last_call.clone()),
            Box::new(metrics.provisional.clone()),
            Box::new(metrics.reconciled.clone()),
            Box::new(metrics.learned.clone()),
            Box::new(metrics.unknown_home.clone()),
        ] {
            registry.register(metric).expect("metric registered once");
        }
        metrics
    }

    /// A stream of an account whose home moved here, re-registered while it learns.
    pub fn learned(&self) {
        self.learned.inc();
    }

    /// A home named by `source` that is no region of this install.
    pub fn unknown_home(&self, source: &str) {
        self.unknown_home.with_label_values(&[source]).inc();
    }

    /// One call: its operation, how it ended, how long it took, the bytes each way, and how many
    /// operations it carried.
    pub fn call(&self, peer: &str, op: &str, call: &CallRecord) {
        let outcome = match call.outcome {
            CallOutcome::Answered => "answered",
            CallOutcome::Failed => "failed",
        };
        self.calls.with_label_values(&[peer, op, outcome]).inc();
        self.seconds
            .with_label_values(&[peer])
            .observe(call.elapsed.as_secs_f64());
        self.bytes
            .with_label_values(&[peer, "sent"])
            .inc_by(call.sent as u64);
        self.bytes
            .with_label_values(&[peer, "received"])
            .inc_by(call.received as u64);
        self.forwarded
            .with_label_values(&[peer, op])
            .inc_by(call.carried as u64);
        self.up
            .with_label_values(&[peer])
            .set(i64::from(call.outcome == CallOutcome::Answered));
        if call.outcome == CallOutcome::Answered {
            self.last_call
                .with_label_values(&[peer])
                .set(call.elapsed.as_secs_f64());
        }
    }
}

impl RegionMetrics {
    /// An operation of an account homed at `peer` decided here while `peer` did not answer.
    pub fn provisional(&self, peer: &str, op: &str) {
        self.provisional.with_label_values(&[peer, op]).inc();
    }

    /// Provisional streams reported home: how many it kept and how many were revoked.
    pub fn reconciled(&self, peer: &str, kept: usize, revoked: usize) {
        for (outcome, count) in [("kept", kept), ("revoked", revoked)] {
            self.reconciled
                .with_label_values(&[peer, outcome])
                .inc_by(count as u64);
        }
    }
}

/// What one call to a peer did.
#[derive(Debug, Clone, Copy)]
pub struct CallRecord {
    pub outcome: CallOutcome,
    pub elapsed: std::time::Duration,
    pub sent: usize,
    pub received: usize,
    pub carried: usize,
}
