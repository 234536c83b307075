//! The fleet charts' longer ranges from a real Prometheus (Debian's `prometheus`, installed by
//! `scripts/install-test-deps.sh`) that scrapes a real limiter every second, while plays and
//! heartbeats go on: over HTTP the page draws 1 h from Prometheus by default and 6 h and 24 h on
//! request, refuses an unknown range with a 400 page; in headless Chromium the range selector
//! switches the charts and the page passes axe-core; with Prometheus gone, the page says so
//! and draws the dashboard's own samples instead.

mod common;

use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use common::browser::{
    Locator, assert_accessible, browser, click, screenshot, start_driver, text_of, wait_for,
};
use common::{Agent, VIEWER, heartbeat, play};
use reqwest::StatusCode;
use screenlimit_admin_ui::config::Settings;

const PATIENCE: Duration = Duration::from_secs(60);

/// Prometheus, killed when dropped.
struct Prometheus {
    child: Child,
    url: String,
    _dir: tempfile::TempDir,
}

impl Drop for Prometheus {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A Prometheus on a free loopback port scraping `/metrics` of the limiter at `target`
/// (`host:port`) every second; ready once it says so (started again on another port if the one
/// found free was taken meanwhile).
async fn start_prometheus(target: &str) -> Prometheus {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("prometheus.yaml");
    std::fs::write(
        &config,
        format!(
            "global: {{scrape_interval: 1s, scrape_timeout: 1s}}\n\
             scrape_configs:\n  - job_name: limiter\n    static_configs:\n      - targets: ['{target}']\n"
        ),
    )
    .unwrap();
    for _ in 0..5 {
        let port = common::free_listener().await.local_addr().unwrap().port();
        let mut child = Command::new("prometheus")
            .arg(format!("--config.file={}", config.display()))
            .arg(format!(
                "--storage.tsdb.path={}",
                dir.path().join("data").display()
            ))
            .arg(format!("--web.listen-address=127.0.0.1:{port}"))
            .arg("--log.level=warn")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("prometheus (Debian's prometheus package; run scripts/install-test-deps.sh)");
        let url = format!("http://127.0.0.1:{port}");
        let deadline = Instant::now() + PATIENCE;
        loop {
            if let Ok(Some(_)) = child.try_wait() {
                break;
            }
            let ready = common::http().get(format!("{url}/-/ready")).send().await;
            if ready.is_ok_and(|r| r.status() == StatusCode::OK) {
                return Prometheus {
                    child,
                    url,
                    _dir: dir,
                };
            }
            assert!(Instant::now() < deadline, "prometheus never became ready");
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
    panic!("prometheus would not start");
}

/// Plays and heartbeats against the limiter until aborted.
async fn traffic(limiter: String) {
    let mut streams = std::collections::VecDeque::new();
    for i in 0u64.. {
        let account = format!("acct-prom-{i}");
        let stream = play(&limiter, &account, &format!("tv-{i}"), "TV", "tv").await;
        streams.push_back((account, stream));
        for (account, stream) in streams.iter().take(10) {
            heartbeat(&limiter, account, stream).await;
        }
        if streams.len() > 10 {
            streams.pop_front();
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Whether Prometheus has a rate of the limiter's allowed decisions yet.
async fn has_rates(prometheus: &str) -> bool {
    let answer = common::http()
        .get(format!("{prometheus}/api/v1/query"))
        .query(&[(
            "query",
            "sum(rate(screenlimit_decisions_total{decision=\"allowed\"}[2m])) > 0",
        )])
        .send()
        .await;
    let Ok(answer) = answer else { return false };
    let body: serde_json::Value = answer.json().await.unwrap_or_default();
    body["data"]["result"]
        .as_array()
        .is_some_and(|r| !r.is_empty())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_fleet_charts_draw_hours_from_a_real_prometheus_and_say_when_it_is_gone() {
    let limiter = common::limiter(None).await;
    let load = tokio::spawn(traffic(limiter.clone()));
    let mut prometheus = Some(start_prometheus(limiter.trim_start_matches("http://")).await);
    let prometheus_url = prometheus.as_ref().unwrap().url.clone();
    let deadline = Instant::now() + PATIENCE;
    while !has_rates(&prometheus_url).await {
        assert!(Instant::now() < deadline, "Prometheus never had a rate");
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    let mut settings = Settings::with_users(&limiter, common::users());
    settings.prometheus_url = Some(format!("{prometheus_url}/"));
    settings.prometheus_timeout = Duration::from_secs(2);
    let dashboard = common::dashboard(settings).await;
    let mut agent = Agent::signed_in(&dashboard, VIEWER).await;

    // The default range: the last hour, from Prometheus, drawn at once.
    let page = agent.get("/fleet").await;
    assert_eq!(page.status, StatusCode::OK);
    for text in [
        "The last 1 hour, all instances, from Prometheus",
        r#"<figure class="chart" id="chart-decisions" data-empty="false">"#,
        r#"<figure class="chart" id="chart-degraded" data-empty="false">"#,
        r#"hx-get="/fleet/panel?range=1h""#,
        r#"<a href="/fleet?range=1h" id="range-1h" aria-current="page">1 h</a>"#,
        r#"<a href="/fleet?range=10m" id="range-10m">10 min</a>"#,
        "degraded <strong>0%</strong>",
        "−30 min",
    ] {
        assert!(page.body.contains(text), "{text}: {}", page.body);
    }
    assert!(!page.body.contains("prometheus-error"), "{}", page.body);
    let panel = agent.get("/fleet/panel?range=24h").await;
    for text in [
        "The last 24 hours, all instances, from Prometheus",
        r#"data-empty="false""#,
        "−12 h",
        r#"hx-get="/fleet/panel?range=24h""#,
    ] {
        assert!(panel.body.contains(text), "{text}: {}", panel.body);
    }
    let recent = agent.get("/fleet?range=10m").await;
    assert!(
        recent
            .body
            .contains("The last 10 minutes, all instances, sampled by this dashboard"),
        "{}",
        recent.body
    );
    let unknown = agent.get("/fleet?range=7d").await;
    assert_eq!(unknown.status, StatusCode::BAD_REQUEST);
    assert!(unknown.body.contains("is not a range of the fleet charts"));

    // In a browser: the selector switches to 6 h; the page passes axe-core.
    let driver = start_driver().await;
    let profile = tempfile::tempdir().unwrap();
    let client = browser(&driver, profile.path()).await;
    let outcome = async {
        client.goto(&format!("{dashboard}/fleet")).await?;
        wait_for(&client, Locator::Id("user")).await?;
        common::browser::type_into(&client, Locator::Id("user"), VIEWER.0).await?;
        common::browser::type_into(&client, Locator::Id("password"), VIEWER.1).await?;
        click(&client, Locator::Id("sign-in")).await?;
        wait_for(
            &client,
            Locator::Css(r#"#chart-decisions[data-empty="false"]"#),
        )
        .await?;
        assert_accessible(&client, "the Fleet page with charts from Prometheus").await;
        click(&client, Locator::Id("range-6h")).await?;
        wait_for(&client, Locator::Css(r#"#range-6h[aria-current="page"]"#)).await?;
        let heading = text_of(&client, Locator::Id("charts-heading")).await?;
        assert_eq!(heading, "The last 6 hours, all instances, from Prometheus");
        wait_for(
            &client,
            Locator::Css(r#"#chart-decisions[data-empty="false"]"#),
        )
        .await?;
        screenshot(&client, "12-fleet-prometheus-6h").await;
        assert_accessible(&client, "the Fleet page over 6 hours").await;
        Ok::<(), common::browser::CmdError>(())
    }
    .await;
    client.close().await.ok();
    outcome.unwrap();

    // Prometheus gone: the page says which and why, and draws its own samples.
    drop(prometheus.take());
    let page = agent.get("/fleet?range=6h").await;
    assert_eq!(page.status, StatusCode::OK);
    for text in [
        r#"<p class="alert" role="alert" id="prometheus-error">Prometheus at http://127.0.0.1:"#,
        "cannot be reached",
        "The charts below are this dashboard&#39;s own samples of the last 10 minutes instead.",
        "The last 10 minutes, all instances, sampled by this dashboard",
        r#"<a href="/fleet?range=6h" id="range-6h" aria-current="page">6 h</a>"#,
    ] {
        assert!(page.body.contains(text), "{text}: {}", page.body);
    }
    load.abort();
}
