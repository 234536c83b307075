//! The fleet overview: each limiter instance, its store's shards and circuits, live streams per
//! shard, decisions per second (from samples of the limiter's counters) and charts of the last
//! minutes ([`sampler`] takes the samples in the background, [`history`] keeps them, [`chart`]
//! draws them), or of the last hours from Prometheus ([`long_range`]), and the plays let through
//! in shadow per plan and rule over the last hour and day, from Prometheus too ([`shadow`]).
//!
//! One file per job; this one routes, gathers the instances' answers and renders the page and
//! panel. `views.rs` holds the view models, `range.rs` the range chosen, `recent.rs` the
//! 10-minute charts, `drawn.rs` the decision kinds both ranges draw.

pub mod chart;
mod drawn;
pub mod history;
pub mod long_range;
mod range;
mod recent;
mod regions;
pub mod sampler;
pub mod shadow;
mod views;

use std::time::Instant;

use askama::Template;
use askama_web::WebTemplate;
use axum::Router;
use axum::extract::{Query, State};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use serde::Deserialize;

use super::ctx::Ctx;
use super::nav::Nav;
use super::state::AppState;
use crate::limiter::LimiterClient;
pub use history::Samples;
use range::{ChartRange, range_links};
use shadow::Figures;
use views::{FleetView, InstanceView, view_of};

pub fn router() -> Router<AppState> {
    Router::new()
        .route("/fleet", get(fleet))
        .route("/fleet/panel", get(panel))
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
    // Rounded up to the second: the newest point then covers the newest scrape, which a floor
    // could leave just after it (a chart empty for a second after Prometheus has a rate).
    let now_utc = time::OffsetDateTime::now_utc();
    let unix_now = (now_utc.unix_timestamp() + i64::from(now_utc.nanosecond() > 0)).max(0) as u64;
    // The charts of a longer range and the shadow refusals (whatever the range), at once.
    let charts = async {
        match range {
            ChartRange::Long(long) => {
                Some((long, long_range::charts(prometheus, long, unix_now).await))
            }
            ChartRange::Recent => None,
        }
    };
    let (charts, counted) = tokio::join!(charts, shadow::count(prometheus, unix_now));
    let mut failure = None;
    match charts {
        Some((long, Ok(charts))) => {
            view.charts = charts;
            view.charts_heading = format!(
                "The last {}, all instances, from Prometheus",
                chart::span_words(long.seconds())
            );
        }
        Some((_, Err(error))) => {
            // Said on the page at every refresh while it lasts; logged once per change.
            view.prometheus_error = Some(format!(
                "{error}. The charts below are this dashboard's own samples of the last {} \
                 minutes instead.",
                history::HISTORY.as_secs() / 60
            ));
            failure = Some(error);
        }
        None => {}
    }
    match counted {
        Ok(counted) => view.set_shadow(Figures::Counted(counted)),
        Err(error) => {
            view.set_shadow(Figures::Failed(error.to_string()));
            failure = failure.or(Some(error));
        }
    }
    state.prometheus_health.report(failure.as_ref());
    view
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
    use crate::limiter::Fleet;

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
