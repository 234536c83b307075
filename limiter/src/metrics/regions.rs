//! The calls between regions, per peer: `screenlimit_region_calls_total{peer,op,outcome}`,
//! `screenlimit_region_call_seconds{peer}`, `screenlimit_region_bytes_total{peer,direction}`,
//! `screenlimit_region_forwarded_total{peer,op}` (operations carried: a heartbeats call carries
//! several) and `screenlimit_region_peer_up{peer}` (its last call answered).

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
        };
        for metric in [
            Box::new(metrics.calls.clone()) as Box<dyn prometheus::core::Collector>,
            Box::new(metrics.seconds.clone()),
            Box::new(metrics.bytes.clone()),
            Box::new(metrics.forwarded.clone()),
            Box::new(metrics.up.clone()),
        ] {
            registry.register(metric).expect("metric registered once");
        }
        metrics
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
