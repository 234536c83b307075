//! Prometheus metrics of the operator (prefix `screenlimit_operator_`).

use prometheus::{Histogram, HistogramOpts, IntCounter, IntCounterVec, IntGauge, Opts, Registry};

#[derive(Clone)]
pub struct Metrics {
    pub registry: Registry,
    pub reconciles: IntCounter,
    pub failures: IntCounterVec,
    pub duration: Histogram,
    pub leader: IntGauge,
}

impl Default for Metrics {
    fn default() -> Self {
        let registry = Registry::new_custom(Some("screenlimit_operator".into()), None)
            .expect("valid metric prefix");
        let reconciles = IntCounter::new("reconciles_total", "Reconciles started").expect("metric");
        let failures = IntCounterVec::new(
            Opts::new("reconcile_errors_total", "Reconciles that failed, by error"),
            &["error"],
        )
        .expect("metric");
        let duration = Histogram::with_opts(
            HistogramOpts::new("reconcile_duration_seconds", "Reconcile duration")
                .buckets(vec![0.01, 0.05, 0.1, 0.25, 0.5, 1.0, 5.0, 15.0]),
        )
        .expect("metric");
        let leader =
            IntGauge::new("leader", "1 while this replica holds the leader Lease").expect("metric");
        for m in [
            Box::new(reconciles.clone()) as Box<dyn prometheus::core::Collector>,
            Box::new(failures.clone()),
            Box::new(duration.clone()),
            Box::new(leader.clone()),
        ] {
            registry.register(m).expect("metric registers once");
        }
        Metrics {
            registry,
            reconciles,
            failures,
            duration,
            leader,
        }
    }
}

impl Metrics {
    /// The registry in the Prometheus text format.
    pub fn render(&self) -> String {
        let mut out = String::new();
        prometheus::TextEncoder::new()
            .encode_utf8(&self.registry.gather(), &mut out)
            .expect("text encoding");
        out
    }
}
