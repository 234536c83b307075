//! The fleet overview: each limiter instance, its store's shards and circuits, live streams per
//! shard, decisions per second (from samples of the limiter's counters) and charts of the last
//! minutes ([`sampler`] takes the samples in the background, [`history`] keeps them, [`chart`]
//! draws them), or of the last hours from Prometheus ([`long_range`]).

pub mod chart;
pub mod history;
pub mod long_range;
pub mod sampler;

use std::collections::BTreeMap;
use std::time::Instant;

use askama::Template;
use askama_web::WebTemplate;
use axum::Router;
use axum::extract::{Query, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use serde::Deserialize;

use super::AppState;
use super::ctx::Ctx;
use super::error::PageError;
use super::nav::Nav;
use crate::limiter::{Fleet, LimiterClient, LiveStreams, plan_limit};
use crate::view;
use chart::{Chart, SeriesInput, Unit};
pub use history::Samples;
use long_range::Range;

pub fn router() -> Router<AppState> {
    Router::new()
        .route("/fleet", get(fleet))
        .route("/fleet/panel", get(panel))
}

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
    fn failed(url: &str, error: String) -> InstanceView {
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
        }
    }

    fn new(url: &str, fleet: Fleet, rates: Option<BTreeMap<String, f64>>) -> InstanceView {
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
}

/// One choice of the charts' range selector.
pub struct RangeLink {
    pub param: &'static str,
    pub label: &'static str,
    pub current: bool,
}

/// What the charts show: the dashboard's own samples, or a longer range from Prometheus.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum ChartRange {
    Recent,
    Long(Range),
}

const RECENT_PARAM: &str = "10m";

impl ChartRange {
    /// The range asked for in the address (`?range=`); without Prometheus only the recent one.
    fn chosen(asked: Option<&str>, prometheus: bool) -> Result<ChartRange, PageError> {
        let long = match asked {
            // With Prometheus the charts open on its hour.
            None | Some("") => Range::Hour,
            Some(RECENT_PARAM) => return Ok(ChartRange::Recent),
            Some(text) => Range::parse(text).ok_or_else(|| {
                PageError::new(
                    StatusCode::BAD_REQUEST,
                    "Unknown chart range",
                    format!(
                        "“{}” is not a range of the fleet charts: choose 10m, 1h, 6h or 24h.",
                        text.chars().take(40).collect::<String>()
                    ),
                )
            })?,
        };
        Ok(match prometheus {
            true => ChartRange::Long(long),
            false => ChartRange::Recent,
        })
    }

    fn param(self) -> &'static str {
        match self {
            ChartRange::Recent => RECENT_PARAM,
            ChartRange::Long(range) => range.param(),
        }
    }
}

fn range_links(current: ChartRange) -> Vec<RangeLink> {
    let mut links = vec![RangeLink {
        param: RECENT_PARAM,
        label: "10 min",
        current: current == ChartRange::Recent,
    }];
    links.extend(Range::ALL.into_iter().map(|range| RangeLink {
        param: range.param(),
        label: match range {
            Range::Hour => "1 h",
            Range::SixHours => "6 h",
            Range::Day => "24 h",
        },
        current: current == ChartRange::Long(range),
    }));
    links
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

/// The decision kinds drawn, with their CSS classes (the table lists every kind).
pub const DRAWN: [(&str, &str); 4] = [
    ("allowed", "allowed"),
    ("denied", "denied"),
    ("degraded", "degraded"),
    ("renewed", "renewed"),
];

/// Decisions per second and the degraded share over the last minutes, fleet-wide.
fn charts(history: &history::Buckets) -> Vec<Chart> {
    let span = history::HISTORY.as_secs();
    let decisions = DRAWN
        .iter()
        .map(|(name, class)| SeriesInput {
            name,
            class,
            values: history
                .iter()
                .map(|b| b.as_ref().map(|r| r.get(*name).copied().unwrap_or(0.0)))
                .collect(),
        })
        .collect();
    let degraded = vec![SeriesInput {
        name: "degraded",
        class: "degraded",
        values: history
            .iter()
            .map(|b| {
                let rates = b.as_ref()?;
                let all: f64 = rates.values().sum();
                (all > 0.0).then(|| rates.get("degraded").copied().unwrap_or(0.0) / all * 100.0)
            })
            .collect(),
    }];
    vec![
        Chart::new(
            "chart-decisions",
            "Decisions per second",
            Unit::PerSecond,
            span,
            decisions,
        ),
        Chart::new(
            "chart-degraded",
            "Share of decisions answered degraded",
            Unit::Percent,
            span,
            degraded,
        ),
    ]
}

/// The limiter instances of the fleet: `--fleet-url`, else `--limiter-url`.
pub fn fleet_urls(state: &AppState) -> Vec<String> {
    if state.settings.fleet_urls.is_empty() {
        vec![state.limiter.base_url().to_owned()]
    } else {
        state.settings.fleet_urls.clone()
    }
}

async fn gather(state: &AppState, range: ChartRange) -> FleetView {
    let urls = fleet_urls(state);
    let mut tasks = tokio::task::JoinSet::new();
    for (index, url) in urls.iter().enumerate() {
        let client: LimiterClient = state.limiter.at(url);
        tasks.spawn(async move { (index, client.fleet().await) });
    }
    let mut answers: Vec<_> = tasks.join_all().await;
    answers.sort_by_key(|(index, _)| *index);
    let now = Instant::now();
    let instances: Vec<InstanceView> = answers
        .into_iter()
        .map(|(index, answer)| {
            let url = &urls[index];
            match answer {
                Ok(fleet) => {
                    let rates = state.fleet_samples.rates(url, now, &fleet.decisions);
                    InstanceView::new(url, fleet, rates)
                }
                Err(error) => InstanceView::failed(url, error.to_string()),
            }
        })
        .collect();
    let mut view = view_of(instances, &state.fleet_samples.history(now));
    let Some(prometheus) = &state.prometheus else {
        return view;
    };
    view.ranges = range_links(range);
    view.range = range.param();
    let ChartRange::Long(long) = range else {
        return view;
    };
    let unix_now = time::OffsetDateTime::now_utc().unix_timestamp().max(0) as u64;
    match long_range::charts(prometheus, long, unix_now).await {
        Ok(charts) => {
            view.charts = charts;
            view.charts_heading = format!(
                "The last {}, all instances, from Prometheus",
                chart::span_words(long.seconds())
            );
        }
        Err(error) => {
            // Said on the page at every refresh while it lasts; logged once per change.
            state.prometheus_health.report(Some(&error));
            view.prometheus_error = Some(format!(
                "{error}. The charts below are this dashboard's own samples of the last {} \
                 minutes instead.",
                history::HISTORY.as_secs() / 60
            ));
            return view;
        }
    }
    state.prometheus_health.report(None);
    view
}

/// The fleet view of the instances' answers and the charts' history.
fn view_of(instances: Vec<InstanceView>, history: &history::Buckets) -> FleetView {
    let (live_total, live_how, live_shards) = live_over(&instances);
    FleetView {
        live_total,
        live_how,
        live_shards,
        charts: charts(history),
        charts_heading: format!(
            "The last {}, all instances, sampled by this dashboard",
            chart::span_words(history::HISTORY.as_secs())
        ),
        ranges: Vec::new(),
        range: RECENT_PARAM,
        prometheus_error: None,
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
    }
}

#[derive(Template, WebTemplate)]
#[template(path = "pages/fleet.html")]
struct FleetPage {
    nav: Nav,
    fleet: FleetView,
}

#[derive(Template, WebTemplate)]
#[template(path = "partials/fleet_panel.html")]
struct FleetPanel {
    fleet: FleetView,
}

#[derive(Deserialize)]
struct RangeQuery {
    range: Option<String>,
}

async fn fleet(
    State(state): State<AppState>,
    ctx: Ctx,
    Query(query): Query<RangeQuery>,
) -> Response {
    let range = match ChartRange::chosen(query.range.as_deref(), state.prometheus.is_some()) {
        Ok(range) => range,
        Err(error) => return error.with_nav(ctx.nav("fleet")).into_response(),
    };
    FleetPage {
        nav: ctx.nav("fleet"),
        fleet: gather(&state, range).await,
    }
    .into_response()
}

async fn panel(
    State(state): State<AppState>,
    ctx: Ctx,
    Query(query): Query<RangeQuery>,
) -> Response {
    let range = match ChartRange::chosen(query.range.as_deref(), state.prometheus.is_some()) {
        Ok(range) => range,
        Err(error) => return error.with_nav(ctx.nav("fleet")).into_response(),
    };
    FleetPanel {
        fleet: gather(&state, range).await,
    }
    .into_response()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The panel as drawn for one instance that sent `fleet` (a `/v1/fleet` document).
    fn panel_for(fleet: serde_json::Value) -> String {
        let fleet: Fleet = serde_json::from_value(fleet).expect("a fleet document");
        let instances = vec![InstanceView::new("http://limiter-0", fleet, None)];
        let history = vec![None; history::BUCKETS];
        FleetPanel {
            fleet: view_of(instances, &history),
        }
        .render()
        .expect("the panel renders")
    }

    fn fleet_with_shard(overloaded: Option<bool>) -> serde_json::Value {
        let mut shard = serde_json::json!({
            "shard": 0, "endpoint": "redis://10.0.0.1:6379", "reachable": true,
            "circuit": "closed", "keys": 12
        });
        if let Some(overloaded) = overloaded {
            shard["overloaded"] = overloaded.into();
            shard["path"] = "native".into();
        }
        serde_json::json!({
            "instance": { "version": "0.1.0", "uptime_sec": 5, "backend": "redis" },
            "failure_policy": "open",
            "shards": [shard],
        })
    }

    #[test]
    fn a_shard_that_sheds_is_shown_shedding() {
        let panel = panel_for(fleet_with_shard(Some(true)));
        assert!(panel.contains("<th>Load</th>"), "{panel}");
        assert!(
            panel.contains(r#"<td class="bad" title="the shard answers all it can; what it cannot answer within the store deadline is decided by the failure policy">shedding</td>"#),
            "{panel}"
        );
        assert!(panel.contains("<th>Path</th>"), "{panel}");
        assert!(
            panel.contains(r#"title="the store path of its lease operations">native</td>"#),
            "{panel}"
        );
        let calm = panel_for(fleet_with_shard(Some(false)));
        assert!(!calm.contains(">shedding<"), "{calm}");
        // A limiter older than the field: not shedding, as far as it says.
        let older = panel_for(fleet_with_shard(None));
        assert!(
            older.contains(r#"every call reaches the shard">ok</td>"#),
            "{older}"
        );
        assert!(older.contains(r#"lease operations">—</td>"#), "{older}");
    }
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
    }
}
