//! The view models of the fleet page and panel: each instance, its shards and decisions, the
//! live streams over the fleet, and the whole view built from the instances' answers.

use std::collections::BTreeMap;

use super::chart::{self, Chart};
use super::history;
use super::range::{RECENT_PARAM, RangeLink};
use super::recent;
use super::regions::RegionsView;
use super::shadow::{Figures, InstanceEnforcement, ShadowView};
use crate::limiter::{Fleet, LiveStreams, plan_limit};
use crate::view;

pub struct ShardView {
    pub shard: usize,
    pub endpoint: String,
    pub reachable: bool,
    pub circuit: String,
    pub keys: String,
    /// Whether this instance sheds the shard's calls now (the shard answers all it can).
    pub overloaded: bool,
    /// This instance's live streams on the shard (its share, on Redis).
    pub live: String,
    /// Used of max memory, and the policy (`memory_text`).
    pub memory: String,
    /// Full, near full (80 %), evicting or read-only: shown as bad.
    pub memory_alarm: bool,
    /// `native`, `lua`, or "—" when the limiter does not say.
    pub path: String,
}

/// A shard's memory in words: "1.2 MiB of 3.0 MiB (40 %), noeviction", with what is wrong first.
fn memory_text(shard: &crate::limiter::Shard) -> (String, bool) {
    let mib = |bytes: u64| format!("{:.1} MiB", bytes as f64 / (1024.0 * 1024.0));
    let mut alarms = Vec::new();
    if shard.read_only {
        alarms.push("read-only replica".to_owned());
    }
    if shard.no_replicas {
        alarms.push("no replica in sync: writes refused".to_owned());
    }
    if shard.out_of_memory {
        alarms.push("full (OOM)".to_owned());
    }
    let Some(memory) = &shard.memory else {
        let text = match alarms.is_empty() {
            true => "—".to_owned(),
            false => alarms.join(", "),
        };
        return (text, !alarms.is_empty());
    };
    let policy = memory.policy.as_deref().unwrap_or("policy unknown");
    if memory.policy.as_deref().is_some_and(|p| p != "noeviction") {
        alarms.push(format!("{policy} evicts"));
    }
    let used = match memory.max_bytes {
        0 => format!("{} (no maxmemory), {policy}", mib(memory.used_bytes)),
        max => {
            let share = memory.used_bytes.saturating_mul(100) / max;
            if share >= 80 {
                alarms.push(format!("{share} % full"));
            }
            format!(
                "{} of {} ({share} %), {policy}",
                mib(memory.used_bytes),
                mib(max)
            )
        }
    };
    let alarm = !alarms.is_empty();
    alarms.push(used);
    (alarms.join(" · "), alarm)
}

pub struct DecisionView {
    pub name: String,
    pub total: u64,
    pub rate: String,
}

pub struct InstanceView {
    pub url: String,
    pub error: Option<String>,
    pub version: String,
    pub uptime: String,
    pub backend: String,
    pub policy: String,
    pub plans: String,
    pub lease: String,
    pub shards: Vec<ShardView>,
    pub decisions: Vec<DecisionView>,
    /// This instance's live streams: counted, or estimated from its heartbeats.
    pub active_estimate: String,
    /// How it was measured, in words (the figure's tooltip).
    pub active_how: String,
    live: Option<LiveStreams>,
    /// What it says of enforcement (none when it did not answer).
    enforcement: Option<InstanceEnforcement>,
    /// With several regions: its region and how each peer answers.
    pub regions: Option<RegionsView>,
}

/// A live-stream figure as text: exact, or `≈` an estimate (`measuring…` before one exists).
fn live_text(live: &LiveStreams, value: u64) -> String {
    match live.method.as_str() {
        "exact" => value.to_string(),
        _ if live.window_sec <= 0.0 => "measuring…".into(),
        _ => format!("≈ {value}"),
    }
}

fn live_how(method: &str) -> &'static str {
    match method {
        "exact" => "leases counted in the embedded store",
        _ => "heartbeats per second answered for the shard × heartbeat interval (Little's law)",
    }
}

impl InstanceView {
    pub(super) fn failed(url: &str, error: String) -> InstanceView {
        InstanceView {
            url: url.to_owned(),
            error: Some(error),
            version: String::new(),
            uptime: String::new(),
            backend: String::new(),
            policy: String::new(),
            plans: String::new(),
            lease: String::new(),
            shards: Vec::new(),
            decisions: Vec::new(),
            active_estimate: String::new(),
            active_how: String::new(),
            live: None,
            enforcement: None,
            regions: None,
        }
    }

    pub(super) fn new(
        url: &str,
        fleet: Fleet,
        rates: Option<BTreeMap<String, f64>>,
    ) -> InstanceView {
        const ORDER: [&str; 7] = [
            "allowed",
            "denied",
            "degraded",
            "revoked",
            "expired",
            "renewed",
            "reregistered",
        ];
        let mut names: Vec<&String> = fleet.decisions.keys().collect();
        names.sort_by_key(|n| ORDER.iter().position(|o| o == n).unwrap_or(ORDER.len()));
        let rate_of = |name: &str| rates.as_ref().and_then(|r| r.get(name).copied());
        let decisions = names
            .into_iter()
            .map(|name| DecisionView {
                name: name.clone(),
                total: fleet.decisions[name],
                rate: rate_of(name).map_or_else(|| "measuring…".into(), |r| format!("{r:.1}/s")),
            })
            .collect();
        let heartbeats = rate_of("renewed")
            .zip(rate_of("reregistered"))
            .map(|(a, b)| a + b);
        // Limiters older than `live_streams`: estimate from the instance-wide heartbeat rate.
        let (active_estimate, active_how) = match &fleet.live_streams {
            Some(live) => (
                live_text(live, live.shards.iter().sum()),
                live_how(&live.method).to_owned(),
            ),
            None => (
                heartbeats.map_or_else(
                    || "measuring…".into(),
                    |hb| format!("≈ {:.0}", hb * fleet.heartbeat_interval_sec),
                ),
                "heartbeats per second × heartbeat interval".to_owned(),
            ),
        };
        let live = fleet.live_streams;
        let enforcement = Some(InstanceEnforcement {
            enforcement: fleet.enforcement,
            plans: fleet.plans.keys().cloned().collect(),
        });
        InstanceView {
            url: url.to_owned(),
            error: None,
            version: fleet.instance.version,
            uptime: view::span(fleet.instance.uptime_sec as i64),
            backend: fleet.instance.backend,
            policy: fleet.failure_policy,
            plans: fleet
                .plans
                .iter()
                .map(|(name, rule)| {
                    let default = if *name == fleet.default_plan {
                        " (default)"
                    } else {
                        ""
                    };
                    let n = plan_limit(rule).map_or_else(|| "?".into(), |n| n.to_string());
                    format!("{name} {n}{default}")
                })
                .collect::<Vec<_>>()
                .join(" · "),
            lease: format!(
                "heartbeat every {} s, lease {} s",
                fleet.heartbeat_interval_sec, fleet.lease_ttl_sec
            ),
            shards: fleet
                .shards
                .into_iter()
                .map(|s| (memory_text(&s), s))
                .map(|((memory, memory_alarm), s)| ShardView {
                    memory,
                    memory_alarm,
                    shard: s.shard,
                    endpoint: s.endpoint,
                    reachable: s.reachable,
                    circuit: s.circuit,
                    keys: s.keys.map_or_else(|| "—".into(), |k| k.to_string()),
                    overloaded: s.overloaded,
                    path: s.path.clone().unwrap_or_else(|| "—".into()),
                    live: live
                        .as_ref()
                        .and_then(|l| l.shards.get(s.shard).map(|v| live_text(l, *v)))
                        .unwrap_or_else(|| "—".into()),
                })
                .collect(),
            decisions,
            active_estimate,
            active_how,
            live,
            enforcement,
            regions: fleet.regions.map(RegionsView::new),
        }
    }
}

/// One shard's live streams summed over the instances that report it.
pub struct LiveShardView {
    pub shard: usize,
    pub streams: String,
}

pub struct FleetView {
    pub instances: Vec<InstanceView>,
    pub reachable: usize,
    pub shards_up: usize,
    pub shards: usize,
    pub updated: String,
    /// Live streams over every reachable instance (`—` when none reports them).
    pub live_total: String,
    pub live_how: String,
    pub live_shards: Vec<LiveShardView>,
    pub charts: Vec<Chart>,
    /// What the charts cover and where from: "The last 10 minutes, sampled by this dashboard".
    pub charts_heading: String,
    /// The range choices (only where a Prometheus is configured).
    pub ranges: Vec<RangeLink>,
    /// The `range` parameter the panel's refresh keeps.
    pub range: &'static str,
    /// Why Prometheus could not draw the chosen range (the dashboard's own 10 minutes instead).
    pub prometheus_error: Option<String>,
    /// The enforcement in force and the plays let through in shadow.
    pub shadow: ShadowView,
}

impl FleetView {
    /// The "Shadow refusals" panel with `figures`, the enforcement as the instances say it.
    pub(super) fn set_shadow(&mut self, figures: Figures) {
        let instances: Vec<InstanceEnforcement> = self
            .instances
            .iter()
            .filter_map(|i| i.enforcement.clone())
            .collect();
        self.shadow = ShadowView::new(&instances, figures);
    }
}

/// Live streams per shard over the instances: each instance's share added up (on Redis the
/// shards are shared; on the embedded store each instance's own store is its shard 0).
fn live_over(instances: &[InstanceView]) -> (String, String, Vec<LiveShardView>) {
    let reports: Vec<&LiveStreams> = instances.iter().filter_map(|i| i.live.as_ref()).collect();
    let Some(first) = reports.first() else {
        return ("—".into(), String::new(), Vec::new());
    };
    let measuring = reports
        .iter()
        .any(|l| l.method != "exact" && l.window_sec <= 0.0);
    let exact = reports.iter().all(|l| l.method == "exact");
    let text = |value: u64| match (measuring, exact) {
        (true, _) => "measuring…".to_owned(),
        (false, true) => value.to_string(),
        (false, false) => format!("≈ {value}"),
    };
    let shards = reports.iter().map(|l| l.shards.len()).max().unwrap_or(0);
    let per_shard: Vec<u64> = (0..shards)
        .map(|i| reports.iter().filter_map(|l| l.shards.get(i)).sum())
        .collect();
    (
        text(per_shard.iter().sum()),
        live_how(&first.method).to_owned(),
        per_shard
            .iter()
            .enumerate()
            .map(|(shard, v)| LiveShardView {
                shard,
                streams: text(*v),
            })
            .collect(),
    )
}

/// The fleet view of the instances' answers and the charts' history.
pub(super) fn view_of(instances: Vec<InstanceView>, history: &history::Buckets) -> FleetView {
    let (live_total, live_how, live_shards) = live_over(&instances);
    let mut view = FleetView {
        live_total,
        live_how,
        live_shards,
        charts: recent::charts(history),
        charts_heading: format!(
            "The last {}, all instances, sampled by this dashboard",
            chart::span_words(history::HISTORY.as_secs())
        ),
        ranges: Vec::new(),
        range: RECENT_PARAM,
        prometheus_error: None,
        shadow: ShadowView::new(&[], Figures::NoPrometheus),
        reachable: instances.iter().filter(|i| i.error.is_none()).count(),
        shards: instances.iter().map(|i| i.shards.len()).max().unwrap_or(0),
        shards_up: instances.iter().find(|i| i.error.is_none()).map_or(0, |i| {
            i.shards
                .iter()
                .filter(|s| s.reachable && s.circuit == "closed")
                .count()
        }),
        updated: view::clock(
            &time::OffsetDateTime::now_utc()
                .format(&time::format_description::well_known::Rfc3339)
                .unwrap_or_default(),
        ),
        instances,
    };
    // Without Prometheus (`gather` asks it where there is one).
    view.set_shadow(Figures::NoPrometheus);
    view
}

#[cfg(test)]
mod memory_tests {
    use super::memory_text;
    use crate::limiter::{Shard, ShardMemory};

    fn shard(used: u64, max: u64, policy: &str) -> Shard {
        Shard {
            shard: 0,
            endpoint: "redis-0:6379".into(),
            reachable: true,
            circuit: "closed".into(),
            keys: Some(1),
            overloaded: false,
            read_only: false,
            no_replicas: false,
            out_of_memory: false,
            path: None,
            memory: Some(ShardMemory {
                used_bytes: used,
                max_bytes: max,
                policy: Some(policy.into()),
            }),
        }
    }

    #[test]
    fn memory_says_how_full_and_alarms_from_80_percent_or_an_evicting_policy() {
        let mib = 1024 * 1024;
        assert_eq!(
            memory_text(&shard(mib, 4 * mib, "noeviction")),
            ("1.0 MiB of 4.0 MiB (25 %), noeviction".into(), false)
        );
        assert_eq!(
            memory_text(&shard(7 * mib / 2, 4 * mib, "noeviction")),
            (
                "87 % full · 3.5 MiB of 4.0 MiB (87 %), noeviction".into(),
                true
            )
        );
        let (text, alarm) = memory_text(&shard(mib, 0, "volatile-lru"));
        assert!(alarm && text.starts_with("volatile-lru evicts"), "{text}");
        let mut replica = shard(mib, 4 * mib, "noeviction");
        replica.read_only = true;
        replica.memory = None;
        assert_eq!(memory_text(&replica), ("read-only replica".into(), true));
        let mut alone = shard(mib, 4 * mib, "noeviction");
        alone.no_replicas = true;
        alone.memory = None;
        assert_eq!(
            memory_text(&alone),
            ("no replica in sync: writes refused".into(), true)
        );
    }
}
