//! The fleet charts' longer ranges from a real Prometheus (Debian's `prometheus`, installed by
//! `scripts/install-test-deps.sh`) that scrapes a real limiter every second, while plays and
//! heartbeats go on: over HTTP the page draws 1 h from Prometheus by default and 6 h and 24 h on
//! request, refuses an unknown range with a 400 page; in headless Chromium the range selector
//! switches the charts and the page passes axe-core; with Prometheus gone, the page says so
//! and draws the dashboard's own samples instead. A limiter with a plan in shadow, plays over
//! its limit and cap: in Chromium the account page marks the account and reads the play let
//! through, and the fleet page shows the plan's share of plays that would be refused and the
//! split by rule, from Prometheus's counts.

mod common;

use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use common::browser::{
    Locator, assert_accessible, browser, click, screenshot, start_driver, text_of, wait_for,
};
use common::{Agent, SUPPORT, VIEWER, heartbeat, play, play_plan};
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

/// The value of a PromQL instant query with one series (none when it has none).
async fn instant(prometheus: &str, query: &str) -> Option<f64> {
    let answer = common::http()
        .get(format!("{prometheus}/api/v1/query"))
        .query(&[("query", query)])
        .send()
        .await
        .ok()?;
    let body: serde_json::Value = answer.json().await.ok()?;
    body["data"]["result"][0]["value"][1].as_str()?.parse().ok()
}

/// Waits until `query` answers at least `least`.
async fn until_prometheus_has(prometheus: &str, query: &str, least: f64) {
    let deadline = Instant::now() + PATIENCE;
    while instant(prometheus, query).await.is_none_or(|v| v < least) {
        assert!(
            Instant::now() < deadline,
            "Prometheus never had {query} >= {least}"
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

/// One account of the shadow plan playing past its cap and its limit: a phone (allowed), a
/// second phone (over the mobile cap of 1), a tablet and a TV (over the limit of 2), all let
/// through.
async fn over_the_limits(limiter: &str, account: &str) {
    for (device, rule) in [
        (("phone-1", "Phone", "mobile"), None),
        (
            ("phone-2", "Second Phone", "mobile"),
            Some("device_type_cap"),
        ),
        (("tablet", "Tablet", "tablet"), Some("max_streams")),
        (("tv", "TV", "tv"), Some("max_streams")),
    ] {
        let (status, body) = play_plan(limiter, account, device, "standard").await;
        assert_eq!(status, 200, "{body}");
        assert_eq!(body["shadow"]["would_refuse"], rule.is_some(), "{body}");
        if let Some(rule) = rule {
            assert_eq!(body["shadow"]["rule"], rule, "{body}");
        }
    }
}

/// A share in the page's words ("75 %", "0.4 %") as a number.
fn share_in(text: &str, before: &str) -> f64 {
    let start = text
        .find(before)
        .unwrap_or_else(|| panic!("{before:?} in {text:?}"))
        + before.len();
    let rest = &text[start..];
    rest[..rest
        .find(" %")
        .unwrap_or_else(|| panic!("a share after {before:?} in {text:?}"))]
        .parse()
        .unwrap_or_else(|_| panic!("a share after {before:?} in {text:?}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_shadow_refusals_show_on_the_account_and_per_plan_and_rule_from_a_real_prometheus() {
    let limiter = common::limiter_with(common::SHADOW_PLANS).await;
    let mut prometheus = Some(start_prometheus(limiter.trim_start_matches("http://")).await);
    let prometheus_url = prometheus.as_ref().unwrap().url.clone();

    // First the account the support agent opens, one account over both limits, and an enforced
    // plan's refusal: every series Prometheus then counts from exists and is scraped twice
    // (`increase` counts from a series' first sample).
    for device in [
        ("tv", "Living Room TV", "tv"),
        ("phone", "Mom's iPhone", "mobile"),
        ("tablet", "Kids Tablet", "tablet"),
    ] {
        assert_eq!(
            play_plan(&limiter, "acct-s", device, "standard").await.0,
            200
        );
    }
    over_the_limits(&limiter, "acct-w").await;
    assert_eq!(
        play_plan(&limiter, "acct-b", ("tv", "TV", "tv"), "basic")
            .await
            .0,
        200
    );
    let (status, _) = play_plan(&limiter, "acct-b", ("phone", "Phone", "mobile"), "basic").await;
    assert_eq!(status, 409, "basic is enforced");
    until_prometheus_has(
        &prometheus_url,
        "count(count_over_time(screenlimit_plays_total{plan=\"standard\"}[5m]) >= 2)",
        3.0,
    )
    .await;
    // Then 20 accounts: per account 1 play allowed, 1 over the mobile cap, 2 over the limit.
    for i in 0..20 {
        over_the_limits(&limiter, &format!("acct-shadow-{i}")).await;
    }
    // Prometheus has scraped them all: 3 + 4 + 80 plays of standard.
    until_prometheus_has(
        &prometheus_url,
        "sum(screenlimit_plays_total{plan=\"standard\"})",
        87.0,
    )
    .await;

    let mut settings = Settings::with_users(&limiter, common::users());
    settings.prometheus_url = Some(prometheus_url.clone());
    settings.prometheus_timeout = Duration::from_secs(2);
    settings.refresh = Duration::from_secs(1);
    let dashboard = common::dashboard(settings).await;
    let driver = start_driver().await;
    let profile = tempfile::tempdir().unwrap();
    let client = browser(&driver, profile.path()).await;
    let outcome = shadow_run(&client, &dashboard).await;
    client.close().await.ok();
    outcome.unwrap();

    // Prometheus gone: the panel says why, and still says what is in shadow.
    drop(prometheus.take());
    let mut agent = Agent::signed_in(&dashboard, VIEWER).await;
    let page = agent.get("/fleet").await;
    assert_eq!(page.status, StatusCode::OK);
    for text in [
        r#"<p id="enforcement">Enforcement: every account; Standard: shadow</p>"#,
        r#"<p class="alert" role="alert" id="shadow-error">Prometheus at http://127.0.0.1:"#,
        "cannot be reached",
        "The plays that would be refused cannot be counted now.",
    ] {
        assert!(page.body.contains(text), "{text}: {}", page.body);
    }
    assert!(!page.body.contains("shadow-sentence"), "{}", page.body);
}

async fn shadow_run(
    client: &common::browser::Client,
    dashboard: &str,
) -> Result<(), common::browser::CmdError> {
    client.goto(&format!("{dashboard}/accounts/acct-s")).await?;
    wait_for(client, Locator::Id("user")).await?;
    common::browser::type_into(client, Locator::Id("user"), SUPPORT.0).await?;
    common::browser::type_into(client, Locator::Id("password"), SUPPORT.1).await?;
    click(client, Locator::Id("sign-in")).await?;

    // The account page: the mark beside the plan, and the play let through in Recent.
    wait_for(client, Locator::Id("shadow-mark")).await?;
    assert_eq!(
        text_of(client, Locator::Id("shadow-mark")).await?,
        "In shadow: plays over the limit are let through and counted, not refused."
    );
    assert_eq!(text_of(client, Locator::Id("in-use")).await?, "3");
    let line = r#"#recent li[data-kind="shadow_refused"] .sentence"#;
    wait_for(client, Locator::Css(line)).await?;
    let sentence = text_of(client, Locator::Css(line)).await?;
    assert!(
        [
            "Kids Tablet would have been refused: Standard allows 2, Living Room TV and Mom's \
             iPhone were playing. It was let through (shadow).",
            "Kids Tablet would have been refused: Standard allows 2, Mom's iPhone and Living \
             Room TV were playing. It was let through (shadow).",
        ]
        .contains(&sentence.as_str()),
        "{sentence}"
    );
    // Still there after the table's refresh (the mark is in the refreshed part).
    tokio::time::sleep(Duration::from_millis(1500)).await;
    wait_for(client, Locator::Id("shadow-mark")).await?;
    screenshot(client, "13-account-in-shadow").await;
    assert_accessible(client, "an account's page in shadow").await;

    // The fleet page: what is in shadow, and per plan and window the share and its rules.
    client.goto(&format!("{dashboard}/fleet")).await?;
    let hour = r#"#shadow li[data-plan="standard"] li[data-window="1 h"]"#;
    wait_for(client, Locator::Css(hour)).await?;
    assert_eq!(
        text_of(client, Locator::Id("enforcement")).await?,
        "Enforcement: every account; Standard: shadow"
    );
    for window in ["1 h", "24 h"] {
        let sentence = text_of(
            client,
            Locator::Css(&format!(
                r#"#shadow li[data-plan="standard"] li[data-window="{window}"]"#
            )),
        )
        .await?;
        // 80 plays counted, 60 of them let through: 20 over the cap, 40 over the limit.
        // Prometheus extrapolates each series over the window on its own: near, not exact.
        assert!(
            sentence.starts_with("Standard would refuse ")
                && sentence.contains(&format!(" of plays ({window}), ")),
            "{sentence}"
        );
        let share = share_in(&sentence, "Standard would refuse ");
        let limit = share_in(&sentence, &format!("({window}), "));
        let cap = share_in(&sentence, "of them by the stream limit and ");
        assert!((68.0..=82.0).contains(&share), "{share}: {sentence}");
        assert!((58.0..=76.0).contains(&limit), "{limit}: {sentence}");
        assert!((24.0..=42.0).contains(&cap), "{cap}: {sentence}");
        assert!(sentence.ends_with(" by the mobile cap"), "{sentence}");
    }
    // Only the plan in shadow: the enforced plans let nothing through.
    for plan in ["basic", "premium"] {
        let found = client
            .find_all(Locator::Css(&format!(r#"#shadow li[data-plan="{plan}"]"#)))
            .await?;
        assert!(found.is_empty(), "{plan} is enforced");
    }
    // The numbers (read as text: the panel's refresh may close them again meanwhile).
    click(client, Locator::Css("#shadow details summary")).await?;
    let row = client
        .execute(
            r#"return document.querySelector('#shadow-numbers tr[data-plan="standard"][data-window="1 h"]').textContent"#,
            vec![],
        )
        .await?;
    let row = row.as_str().unwrap_or_default();
    assert!(
        row.contains("mobile cap") && row.contains("stream limit"),
        "{row}"
    );
    client
        .execute("document.getElementById('shadow').scrollIntoView()", vec![])
        .await?;
    screenshot(client, "14-fleet-shadow-refusals").await;
    assert_accessible(client, "the Fleet page with shadow refusals").await;
    Ok(())
}
