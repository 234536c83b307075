//! The fleet overview: each limiter instance, its store's shards and circuits, and decisions
//! per second (from two samples of the limiter's counters).

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use askama::Template;
use askama_web::WebTemplate;
use axum::Router;
use axum::extract::State;
use axum::response::{IntoResponse, Response};
use axum::routing::get;

use super::AppState;
use super::ctx::{Ctx, Nav};
use crate::limiter::{Fleet, LimiterClient, plan_limit};
use crate::view;

pub fn router() -> Router<AppState> {
    Router::new()
        .route("/fleet", get(fleet))
        .route("/fleet/panel", get(panel))
}

type Counters = BTreeMap<String, u64>;

/// Recent counter samples per instance, to turn totals into rates.
#[derive(Default)]
pub struct Samples {
    by_url: Mutex<HashMap<String, VecDeque<(Instant, Counters)>>>,
}

/// Samples older than this are forgotten.
const WINDOW: Duration = Duration::from_secs(60);
/// A rate needs two samples at least this far apart.
const MIN_SPAN: Duration = Duration::from_secs(1);

impl Samples {
    /// Records `counters` and returns per-second rates since the oldest sample in the window,
    /// once one is at least a second old.
    pub fn rates(
        &self,
        url: &str,
        now: Instant,
        counters: &Counters,
    ) -> Option<BTreeMap<String, f64>> {
        let mut by_url = self.by_url.lock().expect("samples lock");
        let samples = by_url.entry(url.to_owned()).or_default();
        // A counter that went down means the instance restarted: start over.
        if samples.back().is_some_and(|(_, last)| {
            last.iter()
                .any(|(k, v)| counters.get(k).copied().unwrap_or(0) < *v)
        }) {
            samples.clear();
        }
        samples.retain(|(at, _)| now.duration_since(*at) <= WINDOW);
        let rates = samples.front().and_then(|(at, base)| {
            let span = now.duration_since(*at);
            (span >= MIN_SPAN).then(|| {
                counters
                    .iter()
                    .map(|(k, v)| {
                        let delta = v.saturating_sub(base.get(k).copied().unwrap_or(0));
                        (k.clone(), delta as f64 / span.as_secs_f64())
                    })
                    .collect()
            })
        });
        if samples
            .back()
            .is_none_or(|(at, _)| now.duration_since(*at) >= MIN_SPAN)
        {
            samples.push_back((now, counters.clone()));
        }
        rates
    }
}

pub struct ShardView {
    pub shard: usize,
    pub endpoint: String,
    pub reachable: bool,
    pub circuit: String,
    pub keys: String,
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
    /// Heartbeats per second × heartbeat interval ≈ streams alive.
    pub active_estimate: String,
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
        let active_estimate = heartbeats.map_or_else(
            || "measuring…".into(),
            |hb| format!("≈ {:.0}", hb * fleet.heartbeat_interval_sec),
        );
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
                .map(|s| ShardView {
                    shard: s.shard,
                    endpoint: s.endpoint,
                    reachable: s.reachable,
                    circuit: s.circuit,
                    keys: s.keys.map_or_else(|| "—".into(), |k| k.to_string()),
                })
                .collect(),
            decisions,
            active_estimate,
        }
    }
}

pub struct FleetView {
    pub instances: Vec<InstanceView>,
    pub reachable: usize,
    pub shards_up: usize,
    pub shards: usize,
    pub updated: String,
}

async fn gather(state: &AppState) -> FleetView {
    let urls: Vec<String> = if state.settings.fleet_urls.is_empty() {
        vec![state.limiter.base_url().to_owned()]
    } else {
        state.settings.fleet_urls.clone()
    };
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
    FleetView {
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

async fn fleet(State(state): State<AppState>, ctx: Ctx) -> Response {
    FleetPage {
        nav: ctx.nav("fleet"),
        fleet: gather(&state).await,
    }
    .into_response()
}

async fn panel(State(state): State<AppState>, _ctx: Ctx) -> Response {
    FleetPanel {
        fleet: gather(&state).await,
    }
    .into_response()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn counters(allowed: u64) -> Counters {
        [("allowed".to_owned(), allowed)].into_iter().collect()
    }

    #[test]
    fn rates_need_two_samples_a_second_apart() {
        let samples = Samples::default();
        let t0 = Instant::now();
        assert!(samples.rates("a", t0, &counters(10)).is_none());
        assert!(
            samples
                .rates("a", t0 + Duration::from_millis(300), &counters(12))
                .is_none()
        );
        let rates = samples
            .rates("a", t0 + Duration::from_secs(2), &counters(30))
            .unwrap();
        assert_eq!(rates["allowed"], 10.0);
        // A restart (counters went down) starts over.
        assert!(
            samples
                .rates("a", t0 + Duration::from_secs(3), &counters(1))
                .is_none()
        );
    }
}
