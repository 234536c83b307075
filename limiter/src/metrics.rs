//! Prometheus metrics, all prefixed `screenlimit_`.

use prometheus::{
    Encoder, HistogramOpts, HistogramVec, IntCounter, IntCounterVec, IntGauge, IntGaugeVec, Opts,
    Registry, TextEncoder,
};

mod plays;
mod regions;

pub use plays::{PlayCounter, PlayOutcome};
pub use regions::{CallOutcome, CallRecord, RegionMetrics};

use crate::live::LiveStreams;
use crate::overload::{Deadline, Overload, Route};
use crate::store::redis::{Admission, Priority, ShedReason};
use crate::store::{ShardStateView, StoreError};

/// Every decision the limiter reports, the values of the `decision` label.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Decision {
    /// A play-start admitted by the store.
    Allowed,
    /// A play-start refused because the account is full.
    Denied,
    /// A play-start or heartbeat answered by the failure policy, not the store.
    Degraded,
    /// A heartbeat told to stop: force-stopped, taken over or replaced.
    Revoked,
    /// A heartbeat told to play again: lease gone and account full, or released.
    Expired,
    /// A heartbeat renewed its lease.
    Renewed,
    /// A heartbeat took back a lost lease.
    Reregistered,
}

impl Decision {
    pub const ALL: [Decision; 7] = [
        Decision::Allowed,
        Decision::Denied,
        Decision::Degraded,
        Decision::Revoked,
        Decision::Expired,
        Decision::Renewed,
        Decision::Reregistered,
    ];

    pub fn label(self) -> &'static str {
        match self {
            Decision::Allowed => "allowed",
            Decision::Denied => "denied",
            Decision::Degraded => "degraded",
            Decision::Revoked => "revoked",
            Decision::Expired => "expired",
            Decision::Renewed => "renewed",
            Decision::Reregistered => "reregistered",
        }
    }
}

pub struct Metrics {
    registry: Registry,
    decisions: IntCounterVec,
    /// Play-starts by decision, plan and rule.
    pub plays: PlayCounter,
    /// The calls to other regions, per peer.
    pub regions: RegionMetrics,
    latency: HistogramVec,
    store_errors: IntCounterVec,
    circuit_open: IntGaugeVec,
    store_batches: IntCounterVec,
    store_batched_commands: IntCounterVec,
    shed: IntCounterVec,
    shed_behind: IntCounter,
    connections_refused: IntCounter,
    connection_timeouts: IntCounterVec,
    open_connections: IntGauge,
    in_flight: IntGauge,
    live_streams: IntGaugeVec,
    shard_state: ShardGauges,
    admission: AdmissionMetrics,
    unusable_cluster_nodes: IntGauge,
}

/// A gauge per shard, registered.
fn shard_gauge(registry: &Registry, name: &str, help: &str) -> IntGaugeVec {
    let gauge = IntGaugeVec::new(Opts::new(name, help), &["shard"]).expect("valid metric");
    registry
        .register(Box::new(gauge.clone()))
        .expect("metric registered once");
    gauge
}

/// Each shard's admission (`store/redis/batch.rs`): what is queued, the bound, the pace, what was
/// shed and why.
struct AdmissionMetrics {
    queued: IntGaugeVec,
    bound: IntGaugeVec,
    per_command: prometheus::GaugeVec,
    overloaded: IntGaugeVec,
    shed: IntCounterVec,
}

impl AdmissionMetrics {
    fn new(registry: &Registry) -> Self {
        let gauge = |name: &str, help: &str| shard_gauge(registry, name, help);
        let per_command = prometheus::GaugeVec::new(
            Opts::new(
                "store_per_command_seconds",
                "What one command of a deep batch costs a shard, as this instance last measured it (its pace)",
            ),
            &["shard"],
        )
        .expect("valid metric");
        let shed = IntCounterVec::new(
            Opts::new(
                "store_shed_total",
                "Store calls not sent to an overloaded shard and decided by the failure policy, by priority (decision, renewal) and reason (bound: refused on arrival; late: its deadline would pass before its batch is answered; abandoned: its caller had stopped waiting)",
            ),
            &["shard", "priority", "reason"],
        )
        .expect("valid metric");
        for metric in [
            Box::new(per_command.clone()) as Box<dyn prometheus::core::Collector>,
            Box::new(shed.clone()),
        ] {
            registry.register(metric).expect("metric registered once");
        }
        AdmissionMetrics {
            queued: gauge(
                "store_queued",
                "Store calls waiting for a shard or in its batch in flight",
            ),
            bound: gauge(
                "store_queue_bound",
                "How many calls may be ahead of a play-start at a shard so that it is answered within half the store deadline, at the shard's pace (absent until measured)",
            ),
            per_command,
            overloaded: gauge(
                "store_overloaded",
                "1 while a shard is shedding what it cannot answer within the store deadline",
            ),
            shed,
        }
    }

    fn sync(&self, shards: &[(usize, Admission)]) {
        for gauge in [&self.queued, &self.bound, &self.overloaded] {
            gauge.reset();
        }
        self.per_command.reset();
        for (shard, admission) in shards {
            let shard = shard.to_string();
            let labels = [shard.as_str()];
            let count = |n: usize| i64::try_from(n).unwrap_or(i64::MAX);
            self.queued
                .with_label_values(&labels)
                .set(count(admission.queued));
            if let Some(bound) = admission.bound {
                self.bound.with_label_values(&labels).set(count(bound));
            }
            if let Some(per_command) = admission.per_command {
                self.per_command
                    .with_label_values(&labels)
                    .set(per_command.as_secs_f64());
            }
            self.overloaded
                .with_label_values(&labels)
                .set(i64::from(admission.overloaded));
            for (priority, by_reason) in Priority::ALL.iter().zip(admission.shed) {
                for (reason, total) in ShedReason::ALL.iter().zip(by_reason) {
                    let counter =
                        self.shed
                            .with_label_values(&[&shard, priority.label(), reason.label()]);
                    counter.inc_by(total.saturating_sub(counter.get()));
                }
            }
        }
    }
}

impl Metrics {
    pub fn new() -> Self {
        let registry =
            Registry::new_custom(Some("screenlimit".into()), None).expect("valid prefix");
        let decisions = IntCounterVec::new(
            Opts::new("decisions_total", "Decisions by kind: allowed, denied, degraded, revoked, expired, renewed, reregistered"),
            &["decision"],
        )
        .expect("valid metric");
        let latency = HistogramVec::new(
            HistogramOpts::new(
                "operation_duration_seconds",
                "Time to answer one stream API operation",
            )
            .buckets(vec![
                0.0002, 0.0005, 0.001, 0.002, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25,
            ]),
            &["operation"],
        )
        .expect("valid metric");
        let store_errors = IntCounterVec::new(
            Opts::new(
                "store_errors_total",
                "Store calls that failed, by shard and kind (timeout, circuit_open, backend, oom, read_only, no_replicas, shed)",
            ),
            &["shard", "kind"],
        )
        .expect("valid metric");
        let circuit_open = IntGaugeVec::new(
            Opts::new(
                "store_circuit_open",
                "1 while a shard's circuit is open (failing fast)",
            ),
            &["shard"],
        )
        .expect("valid metric");
        let store_batches = IntCounterVec::new(
            Opts::new(
                "store_batches_total",
                "Batches (pipelines, one round trip each) sent to a shard",
            ),
            &["shard"],
        )
        .expect("valid metric");
        let store_batched_commands = IntCounterVec::new(
            Opts::new(
                "store_batched_commands_total",
                "Commands sent in those batches; divided by store_batches_total, the mean batch depth",
            ),
            &["shard"],
        )
        .expect("valid metric");
        let shed = IntCounterVec::new(
            Opts::new(
                "shed_total",
                "Requests shed beyond http.max_in_flight or on a lane behind by more than http.max_queue_delay, by route (play_start, heartbeat, release: answered by the failure policy; other: 503)",
            ),
            &["route"],
        )
        .expect("valid metric");
        let shed_behind = IntCounter::new(
            "shed_lane_behind_total",
            "Of the requests shed, those shed because their serving lane was more than http.max_queue_delay behind (CPU cannot keep up: scale out)",
        )
        .expect("valid metric");
        let connections_refused = IntCounter::new(
            "connections_refused_total",
            "Connections closed at once because http.max_connections were open",
        )
        .expect("valid metric");
        let connection_timeouts = IntCounterVec::new(
            Opts::new(
                "connection_timeouts_total",
                "Connections closed by a deadline: idle, header (read), body (answered 408) or write (the client did not read)",
            ),
            &["kind"],
        )
        .expect("valid metric");
        let open_connections =
            IntGauge::new("open_connections", "Connections open on this instance")
                .expect("valid metric");
        let in_flight = IntGauge::new(
            "in_flight_requests",
            "Requests being served by this instance (bounded by http.max_in_flight)",
        )
        .expect("valid metric");
        let live_streams = IntGaugeVec::new(
            Opts::new(
                "live_streams",
                "Live streams by shard. method=\"exact\" (embedded store): leases alive now, counted. \
                 method=\"heartbeat_rate\" (Redis): Little's law, heartbeats per second this instance \
                 answered keep-playing for the shard, averaged over at least two heartbeat intervals, \
                 times the heartbeat interval; this instance's share, sum over instances for the \
                 fleet; within a few percent while players heartbeat on schedule, it trails changes \
                 by one window",
            ),
            &["shard", "method"],
        )
        .expect("valid metric");
        let unusable_cluster_nodes = IntGauge::new(
            "store_cluster_unusable_nodes",
            "Redis Cluster nodes the last slot map names whose address this instance cannot use (their slots are not served; the log says which, once)",
        )
        .expect("valid metric");
        for metric in [
            Box::new(decisions.clone()) as Box<dyn prometheus::core::Collector>,
            Box::new(unusable_cluster_nodes.clone()),
            Box::new(shed.clone()),
            Box::new(shed_behind.clone()),
            Box::new(connections_refused.clone()),
            Box::new(connection_timeouts.clone()),
            Box::new(open_connections.clone()),
            Box::new(in_flight.clone()),
            Box::new(latency.clone()),
            Box::new(store_errors.clone()),
            Box::new(circuit_open.clone()),
            Box::new(store_batches.clone()),
            Box::new(store_batched_commands.clone()),
            Box::new(live_streams.clone()),
        ] {
            registry.register(metric).expect("metric registered once");
        }
        let admission = AdmissionMetrics::new(&registry);
        let shard_state = ShardGauges::register(&registry);
        let plays = PlayCounter::register(&registry);
        let regions = RegionMetrics::register(&registry);
        Metrics {
            regions,
            shard_state,
            plays,
            registry,
            decisions,
            latency,
            store_errors,
            circuit_open,
            store_batches,
            store_batched_commands,
            shed,
            shed_behind,
            connections_refused,
            connection_timeouts,
            open_connections,
            in_flight,
            live_streams,
            admission,
            unusable_cluster_nodes,
        }
    }

    /// Brings each shard's admission gauges and shed counters up to the store's state.
    pub fn sync_admission(&self, shards: &[(usize, Admission)]) {
        self.admission.sync(shards);
    }

    /// Brings the load counters and gauges up to `overload`'s atomics.
    pub fn sync_overload(&self, overload: &Overload) {
        for route in Route::SHEDDABLE {
            let counter = self.shed.with_label_values(&[route.label()]);
            counter.inc_by(overload.shed_total(route).saturating_sub(counter.get()));
        }
        for deadline in Deadline::ALL {
            let counter = self
                .connection_timeouts
                .with_label_values(&[deadline.label()]);
            counter.inc_by(overload.timeouts(deadline).saturating_sub(counter.get()));
        }
        self.shed_behind.inc_by(
            overload
                .shed_behind()
                .saturating_sub(self.shed_behind.get()),
        );
        let refused = overload.refused_connections();
        self.connections_refused
            .inc_by(refused.saturating_sub(self.connections_refused.get()));
        let view = overload.view();
        self.open_connections
            .set(i64::try_from(view.connections).unwrap_or(i64::MAX));
        self.in_flight
            .set(i64::try_from(view.in_flight).unwrap_or(i64::MAX));
    }

    pub fn decision(&self, decision: Decision) {
        self.decisions.with_label_values(&[decision.label()]).inc();
    }

    /// Every decision counter's total so far, for the fleet view (clients derive rates).
    pub fn decision_totals(&self) -> Vec<(&'static str, u64)> {
        Decision::ALL
            .iter()
            .map(|d| {
                (
                    d.label(),
                    self.decisions.with_label_values(&[d.label()]).get(),
                )
            })
            .collect()
    }

    pub fn observe(&self, operation: &str, elapsed: std::time::Duration) {
        self.latency
            .with_label_values(&[operation])
            .observe(elapsed.as_secs_f64());
    }

    pub fn store_error(&self, error: &StoreError) {
        // A home region that did not answer is named by its region, not a shard of this one.
        let shard = match error {
            StoreError::Region { region, .. } => format!("region:{region}"),
            error => error.shard().to_string(),
        };
        self.store_errors
            .with_label_values(&[&shard, error.kind()])
            .inc();
    }

    /// The circuit of every shard there is now, and of no other: a Redis Cluster primary that
    /// left (failed over, drained) loses its series instead of showing its last state forever.
    pub fn set_circuits(&self, circuits: &[(usize, bool)]) {
        self.circuit_open.reset();
        for &(shard, open) in circuits {
            self.circuit_open
                .with_label_values(&[&shard.to_string()])
                .set(i64::from(open));
        }
    }

    /// How many cluster nodes of the last slot map have an unusable address.
    pub fn set_unusable_cluster_nodes(&self, count: usize) {
        self.unusable_cluster_nodes
            .set(i64::try_from(count).unwrap_or(i64::MAX));
    }

    /// Each shard's memory and flags as last seen, for the shards there are now.
    pub fn set_shard_states(&self, states: &[(usize, ShardStateView)]) {
        self.shard_state.set(states);
    }

    /// Brings the batch counters up to the store's running totals.
    pub fn sync_batches(&self, shard: usize, batches: u64, commands: u64) {
        let shard = shard.to_string();
        for (counter, total) in [
            (&self.store_batches, batches),
            (&self.store_batched_commands, commands),
        ] {
            let counter = counter.with_label_values(&[&shard]);
            counter.inc_by(total.saturating_sub(counter.get()));
        }
    }

    /// Sets the live-stream gauges to `live`, one per shard.
    pub fn set_live_streams(&self, live: &LiveStreams) {
        for (shard, streams) in live.shards.iter().enumerate() {
            self.live_streams
                .with_label_values(&[&shard.to_string(), live.method.label()])
                .set(i64::try_from(*streams).unwrap_or(i64::MAX));
        }
    }

    /// The Prometheus text exposition of every metric.
    pub fn render(&self) -> String {
        let mut out = Vec::new();
        TextEncoder::new()
            .encode(&self.registry.gather(), &mut out)
            .expect("text encoding");
        String::from_utf8(out).expect("prometheus text is UTF-8")
    }
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

/// What a shard says about its own health (`store/redis/health.rs`): memory against its limit,
/// an evicting policy, read-only, full. Alert on used / max before it is full (the operator's
/// PrometheusRule does at 80 %).
struct ShardGauges {
    used_memory: IntGaugeVec,
    max_memory: IntGaugeVec,
    evicting: IntGaugeVec,
    read_only: IntGaugeVec,
    no_replicas: IntGaugeVec,
    out_of_memory: IntGaugeVec,
    /// 1 for the path a shard's lease operations take (`native` or `lua`), 0 for the other.
    path: IntGaugeVec,
}

impl ShardGauges {
    fn register(registry: &Registry) -> Self {
        let gauge = |name: &str, help: &str| shard_gauge(registry, name, help);
        ShardGauges {
            used_memory: gauge(
                "store_used_memory_bytes",
                "A shard's used_memory (INFO memory, sampled every 5 s)",
            ),
            max_memory: gauge("store_maxmemory_bytes", "A shard's maxmemory (0: no limit)"),
            evicting: gauge(
                "store_evicting_policy",
                "1 while a shard's maxmemory-policy evicts keys (accepted by store.allow_eviction): plays may be admitted past the cap when it is full",
            ),
            read_only: gauge(
                "store_read_only",
                "1 while a shard answers READONLY (a replica): its circuit is open",
            ),
            no_replicas: gauge(
                "store_no_replicas",
                "1 while a shard answers NOREPLICAS (fewer replicas in sync than its min-replicas-to-write): its circuit is open",
            ),
            out_of_memory: gauge(
                "store_out_of_memory",
                "1 while a shard answers OOM: new state goes to the failure policy",
            ),
            path: {
                let opts = Opts::new(
                    "store_path",
                    "1 for the path a shard's lease operations take: native (the screenlimit module's commands) or lua (the scripts)",
                );
                let gauge = IntGaugeVec::new(opts, &["shard", "path"]).expect("valid metric");
                registry
                    .register(Box::new(gauge.clone()))
                    .expect("metric registered once");
                gauge
            },
        }
    }

    fn set(&self, states: &[(usize, ShardStateView)]) {
        for gauge in [
            &self.used_memory,
            &self.max_memory,
            &self.evicting,
            &self.read_only,
            &self.no_replicas,
            &self.out_of_memory,
            &self.path,
        ] {
            gauge.reset();
        }
        for (shard, view) in states {
            let shard = [shard.to_string()];
            let set = |gauge: &IntGaugeVec, value: u64| {
                gauge
                    .with_label_values(&shard)
                    .set(i64::try_from(value).unwrap_or(i64::MAX));
            };
            set(&self.read_only, u64::from(view.read_only));
            set(&self.no_replicas, u64::from(view.no_replicas));
            set(&self.out_of_memory, u64::from(view.out_of_memory));
            if let Some(path) = view.path {
                for label in ["native", "lua"] {
                    self.path
                        .with_label_values(&[shard[0].as_str(), label])
                        .set(i64::from(label == path));
                }
            }
            if let Some(memory) = &view.memory {
                set(&self.used_memory, memory.used_bytes);
                set(&self.max_memory, memory.max_bytes);
                let evicting = memory
                    .policy
                    .as_deref()
                    .is_some_and(crate::store::redis::health::is_evicting);
                set(&self.evicting, u64::from(evicting));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn live_streams_are_a_gauge_per_shard_named_by_method() {
        let metrics = Metrics::new();
        metrics.set_live_streams(&LiveStreams {
            method: crate::live::LiveMethod::HeartbeatRate,
            window_sec: 20.0,
            shards: vec![300, 7],
        });
        let text = metrics.render();
        for line in [
            "screenlimit_live_streams{method=\"heartbeat_rate\",shard=\"0\"} 300",
            "screenlimit_live_streams{method=\"heartbeat_rate\",shard=\"1\"} 7",
        ] {
            assert!(text.contains(line), "{line}: {text}");
        }
    }

    #[test]
    fn batch_counters_follow_the_store_totals() {
        let metrics = Metrics::new();
        metrics.sync_batches(0, 5, 20);
        metrics.sync_batches(0, 7, 30);
        metrics.sync_batches(1, 1, 1);
        let text = metrics.render();
        assert!(
            text.contains("screenlimit_store_batches_total{shard=\"0\"} 7"),
            "{text}"
        );
        assert!(
            text.contains("screenlimit_store_batched_commands_total{shard=\"0\"} 30"),
            "{text}"
        );
        assert!(
            text.contains("screenlimit_store_batched_commands_total{shard=\"1\"} 1"),
            "{text}"
        );
    }
}
