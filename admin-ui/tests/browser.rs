//! End to end in a real browser: headless Chromium driven through chromedriver (Debian's
//! `chromium` and `chromium-driver`, installed by `scripts/install-test-deps.sh`).
//!
//! Signs in, finds an account with two streams started through the limiter API, sees both
//! devices, force-stops one through the confirmation page, sees it disappear, sees a new play
//! appear without a reload (htmx), and checks through the API that the stopped stream's
//! heartbeat is now `410 stream_revoked`. Screenshots go to `target/admin-ui-browser/`; the
//! README's `docs/images/dashboard.png` is written when missing or with
//! `SCREENLIMIT_UPDATE_SCREENSHOTS=1`.

mod common;

use std::time::{Duration, Instant};

use common::browser::{
    Client, CmdError, Locator, WAIT, assert_accessible, attr_of, browser, click, screenshot,
    start_driver, start_driver_with, text_of, type_into, wait_for, workspace_root,
};
use common::{SUPPORT, heartbeat, http, play, play_title};
use screenlimit_admin_ui::config::Settings;
use serde_json::json;

/// Polls `check` until it holds or the wait runs out.
async fn eventually<F, Fut>(what: &str, mut check: F)
where
    F: FnMut() -> Fut,
    Fut: Future<Output = bool>,
{
    let deadline = Instant::now() + WAIT;
    while !check().await {
        assert!(Instant::now() < deadline, "timed out waiting for: {what}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// Waits until the page shown is the one the filter asked for (the unfiltered page before it
/// may hold rows of that kind too).
async fn wait_for_query(client: &Client, part: &str) {
    eventually(&format!("an address with {part}"), || async {
        client
            .current_url()
            .await
            .is_ok_and(|url| url.query().is_some_and(|q| q.contains(part)))
    })
    .await;
}

async fn device_names(client: &Client) -> Vec<String> {
    let mut names = Vec::new();
    if let Ok(cells) = client
        .find_all(Locator::Css("tr.device-row .device-name"))
        .await
    {
        for cell in cells {
            if let Ok(text) = cell.text().await {
                names.push(text);
            }
        }
    }
    names
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn support_agent_force_stops_a_device_in_a_real_browser() {
    let limiter = common::limiter(None).await;
    let mut settings = Settings::with_users(&limiter, common::users());
    settings.refresh = Duration::from_secs(1);
    let dashboard = common::dashboard(settings).await;

    let tv = play_title(
        &limiter,
        "acct-42",
        "living-room-tv",
        "Living Room TV",
        "tv",
        ("dad", "the-expanse-s02e05"),
    )
    .await;
    let tablet = play_title(
        &limiter,
        "acct-42",
        "kids-tablet",
        "Kids Tablet",
        "tablet",
        ("kids", "bluey-s03e12"),
    )
    .await;

    let driver = start_driver().await;
    let profile = tempfile::tempdir().unwrap();
    let client = browser(&driver, profile.path()).await;
    let outcome = run(&client, &dashboard, &limiter, &tv, &tablet).await;
    client.close().await.ok();
    outcome.unwrap();
}

async fn run(
    client: &Client,
    dashboard: &str,
    limiter: &str,
    tv: &str,
    tablet: &str,
) -> Result<(), CmdError> {
    // Signed out: the dashboard sends us to sign in.
    client.goto(&format!("{dashboard}/accounts")).await?;
    wait_for(client, Locator::Id("user")).await?;
    assert!(client.current_url().await?.path() == "/sign-in");
    assert_accessible(client, "the sign-in page").await;
    type_into(client, Locator::Id("user"), SUPPORT.0).await?;
    type_into(client, Locator::Id("password"), SUPPORT.1).await?;
    screenshot(client, "0-sign-in").await;
    click(client, Locator::Id("sign-in")).await?;

    // Search the account.
    wait_for(client, Locator::Id("account_id")).await?;
    assert_accessible(client, "the Accounts page with no account chosen").await;
    type_into(client, Locator::Id("account_id"), "acct-42").await?;
    click(client, Locator::Id("search")).await?;
    wait_for(client, Locator::Css("tr.device-row")).await?;
    assert_eq!(client.current_url().await?.path(), "/accounts/acct-42");
    let mut names = device_names(client).await;
    names.sort();
    assert_eq!(names, ["Kids Tablet", "Living Room TV"]);
    let in_use = text_of(client, Locator::Id("in-use")).await?;
    assert_eq!(in_use, "2");
    // htmx (the embedded, pinned file) runs under the page's CSP.
    let version = client
        .execute("return window.htmx ? htmx.version : null", vec![])
        .await?;
    assert_eq!(
        version,
        json!(screenlimit_admin_ui::web::assets::HTMX_VERSION)
    );
    screenshot(client, "1-account").await;
    assert_accessible(client, "an account's page").await;

    // Force-stop the tablet: a confirmation that names it, a reason, confirm.
    click(
        client,
        Locator::Css(r#"tr[data-device-id="kids-tablet"] a.force-stop"#),
    )
    .await?;
    wait_for(client, Locator::Id("confirm-device")).await?;
    assert_eq!(
        text_of(client, Locator::Id("confirm-device")).await?,
        "Kids Tablet"
    );
    type_into(
        client,
        Locator::Id("reason"),
        "customer on the phone: tablet is off",
    )
    .await?;
    screenshot(client, "2-confirm").await;
    assert_accessible(client, "the force-stop confirmation").await;
    click(client, Locator::Id("confirm-force-stop")).await?;

    // Back on the account: a notice, and the tablet is gone.
    wait_for(client, Locator::Id("notice")).await?;
    let notice = text_of(client, Locator::Id("notice")).await?;
    assert!(notice.contains("Force-stopped “Kids Tablet”"), "{notice}");
    assert_eq!(device_names(client).await, ["Living Room TV"]);
    assert_eq!(text_of(client, Locator::Id("in-use")).await?, "1");

    // The stopped player is told to stop; the other one plays on.
    assert_eq!(
        heartbeat(limiter, "acct-42", tablet).await,
        (410, "stream_revoked".into())
    );
    assert_eq!(heartbeat(limiter, "acct-42", tv).await.0, 200);

    // A new play shows up by itself (htmx polling), no reload.
    play_title(
        limiter,
        "acct-42",
        "moms-phone",
        "Mom's iPhone",
        "mobile",
        ("mom", "the-crown-s01e01"),
    )
    .await;
    eventually("the new device to appear without a reload", || async {
        device_names(client)
            .await
            .contains(&"Mom's iPhone".to_owned())
    })
    .await;
    assert!(
        client.find(Locator::Id("notice")).await.is_ok(),
        "the page was not reloaded"
    );
    let png = screenshot(client, "3-after-force-stop").await;
    assert_accessible(client, "an account's page with a notice").await;

    let readme_image = workspace_root().join("docs/images/dashboard.png");
    if !readme_image.exists() || std::env::var_os("SCREENLIMIT_UPDATE_SCREENSHOTS").is_some() {
        std::fs::create_dir_all(readme_image.parent().unwrap()).unwrap();
        std::fs::write(&readme_image, &png).unwrap();
    }

    // The audit page lists it, with the agent's name and reason.
    client
        .goto(&format!("{dashboard}/audit?account_id=acct-42"))
        .await?;
    wait_for(client, Locator::Css("tr.audit-row")).await?;
    let row = text_of(client, Locator::Css("tr.audit-row")).await?;
    assert!(
        row.contains("Kids Tablet") && row.contains(SUPPORT.0) && row.contains("tablet is off"),
        "{row}"
    );
    screenshot(client, "4-audit").await;
    assert_accessible(client, "the Audit page of one account").await;
    client.goto(&format!("{dashboard}/fleet")).await?;
    wait_for(client, Locator::Css(".instance")).await?;
    screenshot(client, "5-fleet").await;
    assert_accessible(client, "the Fleet page").await;

    // Grant a temporary extra screen through the form (no JavaScript involved).
    client
        .goto(&format!("{dashboard}/accounts/acct-42"))
        .await?;
    let field = wait_for(client, Locator::Id("max_streams")).await?;
    field.clear().await?;
    field.send_keys("3").await?;
    click(client, Locator::Css(r#"#expires_in option[value="86400"]"#)).await?;
    type_into(client, Locator::Id("override-reason"), "family visit").await?;
    click(client, Locator::Id("grant-override")).await?;
    wait_for(client, Locator::Id("override-limit")).await?;
    let notice = text_of(client, Locator::Id("notice")).await?;
    assert!(notice.contains("Temporary limit granted"), "{notice}");
    let badge = text_of(client, Locator::Id("override")).await?;
    assert!(badge.starts_with("temporary limit 3 until "), "{badge}");
    assert_eq!(text_of(client, Locator::Id("limit")).await?, "3");
    screenshot(client, "6-temporary-limit").await;
    assert_accessible(client, "an account's page with a temporary limit").await;

    // The grant is in the audit log, found through the kind filter.
    client.goto(&format!("{dashboard}/audit")).await?;
    type_into(client, Locator::Id("audit-account"), "acct-42").await?;
    click(
        client,
        Locator::Css(r#"#audit-kind option[value="limit_granted"]"#),
    )
    .await?;
    click(client, Locator::Id("audit-filter")).await?;
    wait_for_query(client, "kind=limit_granted").await;
    wait_for(
        client,
        Locator::Css(r#"tr.audit-row[data-kind="limit_granted"]"#),
    )
    .await?;
    let rows = client.find_all(Locator::Css("tr.audit-row")).await?;
    assert_eq!(rows.len(), 1, "only the grant");
    let row = rows[0].text().await?;
    assert!(
        row.contains("Temporary limit granted")
            && row.contains("2 → 3 screens until")
            && row.contains(SUPPORT.0)
            && row.contains("family visit"),
        "{row}"
    );
    screenshot(client, "7-audit-limits").await;
    assert_accessible(client, "the Audit page filtered by kind").await;

    // A stream id that tries to climb out of its path segment to another account's stream is
    // refused with a page saying why, and that stream plays on.
    let other = play_title(
        limiter,
        "acct-43",
        "tv",
        "Neighbour TV",
        "tv",
        ("main", "title-1"),
    )
    .await;
    let sneaky =
        format!("/accounts/acct-42/streams/..%2F..%2Facct-43%2Fstreams%2F{other}/force-stop");
    client.goto(&format!("{dashboard}{sneaky}")).await?;
    let page = wait_for(client, Locator::Css(".error-page"))
        .await?
        .text()
        .await?;
    assert!(page.contains("is not a stream id"), "{page}");
    assert_accessible(client, "an error page").await;
    client.goto(&format!("{dashboard}/no-such-page")).await?;
    wait_for(client, Locator::Css(".error-page")).await?;
    assert_accessible(client, "the page-not-found page").await;
    client
        .goto(&format!("{dashboard}/accounts/acct-42"))
        .await?;
    wait_for(client, Locator::Id("grant-form")).await?;
    let status = client
        .execute(
            "const csrf = document.querySelector('input[name=csrf]').value; \
             return fetch(arguments[0], {method: 'POST', redirect: 'manual', \
               body: new URLSearchParams({csrf, reason: 'trick'})}).then(r => r.status);",
            vec![json!(sneaky)],
        )
        .await?;
    assert_eq!(status, json!(400));
    assert_eq!(heartbeat(limiter, "acct-43", &other).await.0, 200);
    Ok(())
}

/// "Why can't I watch?": the account page's Recent panel says what the customer saw, as sentences,
/// at the agent's own local time (the browser runs in India, UTC+05:30, so the local clock cannot
/// be the UTC one), and it refreshes with the device table, no reload.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_recent_panel_reads_out_what_the_customer_saw_in_the_agents_time_zone() {
    let limiter = common::limiter(None).await;
    let mut settings = Settings::with_users(&limiter, common::users());
    settings.refresh = Duration::from_secs(1);
    let dashboard = common::dashboard(settings).await;
    play(&limiter, "acct-7", "tv", "Living Room TV", "tv").await;
    let phone = play(&limiter, "acct-7", "phone", "Mom's iPhone", "mobile").await;
    let refused = http()
        .post(format!("{limiter}/v1/streams"))
        .json(
            &json!({"account_id": "acct-7", "device_id": "tablet", "plan": "standard",
                      "device_type": "tablet", "device_meta": "Kids Tablet"}),
        )
        .send()
        .await
        .unwrap();
    assert_eq!(refused.status(), 409);

    let driver = start_driver_with(&[("TZ", "Asia/Kolkata")]).await;
    let profile = tempfile::tempdir().unwrap();
    let client = browser(&driver, profile.path()).await;
    let outcome = recent_run(&client, &dashboard, &limiter, &phone).await;
    client.close().await.ok();
    outcome.unwrap();
}

async fn recent_run(
    client: &Client,
    dashboard: &str,
    limiter: &str,
    phone: &str,
) -> Result<(), CmdError> {
    client.goto(&format!("{dashboard}/accounts/acct-7")).await?;
    wait_for(client, Locator::Id("user")).await?;
    type_into(client, Locator::Id("user"), SUPPORT.0).await?;
    type_into(client, Locator::Id("password"), SUPPORT.1).await?;
    click(client, Locator::Id("sign-in")).await?;
    let refusal = r#"#recent li[data-kind="refused"]"#;
    wait_for(client, Locator::Css(refusal)).await?;
    let sentence = text_of(client, Locator::Css(&format!("{refusal} .sentence"))).await?;
    assert!(
        sentence
            == "Kids Tablet was refused: Standard allows 2, Living Room TV and Mom's iPhone were playing"
            || sentence
                == "Kids Tablet was refused: Standard allows 2, Mom's iPhone and Living Room TV were playing",
        "{sentence}"
    );

    // The time is the agent's: UTC + 05:30, as hours and minutes.
    let time = Locator::Css(r#"#recent li[data-kind="refused"] time"#);
    let at = attr_of(client, time, "datetime").await?.unwrap_or_default();
    let utc = time::OffsetDateTime::parse(&at, &time::format_description::well_known::Rfc3339)
        .expect("an RFC 3339 time");
    let local = utc.to_offset(time::macros::offset!(+5:30));
    let expected = format!("{:02}:{:02}", local.hour(), local.minute());
    eventually("the time shown in the agent's zone", || async {
        text_of(client, time)
            .await
            .is_ok_and(|shown| shown == expected)
    })
    .await;
    let zone = text_of(client, Locator::Id("recent-zone")).await?;
    // ICU may name the zone by its older alias.
    assert!(
        zone.contains("Asia/Kolkata") || zone.contains("Asia/Calcutta"),
        "{zone}"
    );
    screenshot(client, "recent-1-refused").await;
    assert_accessible(client, "an account's page with its recent events").await;

    // Support force-stops the phone elsewhere: the panel says so by itself, no reload.
    client.execute("window.notReloaded = true", vec![]).await?;
    let stopped = http()
        .post(format!(
            "{limiter}/v1/accounts/acct-7/streams/{phone}/force-stop"
        ))
        .json(&json!({"actor": "sam", "reason": "customer asked"}))
        .send()
        .await
        .unwrap();
    assert_eq!(stopped.status(), 200);
    let stop = r#"#recent li[data-kind="force_stop"] .sentence"#;
    wait_for(client, Locator::Css(stop)).await?;
    assert_eq!(
        text_of(client, Locator::Css(stop)).await?,
        "sam force-stopped Mom's iPhone"
    );
    assert_eq!(
        client
            .execute("return window.notReloaded === true", vec![])
            .await?,
        json!(true),
        "the panel was refreshed in place"
    );
    // The refreshed panel's times are local too.
    let first = Locator::Css("#recent li time");
    eventually(
        "the refreshed panel's times in the agent's zone",
        || async {
            text_of(client, first)
                .await
                .is_ok_and(|shown| shown.len() == 5 && !shown.contains("UTC"))
        },
    )
    .await;
    screenshot(client, "recent-2-force-stopped").await;
    assert_accessible(client, "an account's page with its recent events refreshed").await;
    Ok(())
}

/// Two replicas sharing a secret (cookies of 127.0.0.1 go to both ports, as one host name in
/// front of replicas would have it): a sign-out on one ends the session on the other, a copy of
/// the old cookie put back by hand is refused, and wrong passwords end in a pause the page
/// explains; the Audit page lists the failures.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sign_out_holds_on_the_other_replica_in_a_real_browser() {
    let limiter = common::limiter(None).await;
    let secret = screenlimit_admin_ui::auth::keys::random_bytes::<32>().to_vec();
    let replica = || {
        let mut settings = Settings::with_users(&limiter, common::users());
        settings.secret = secret.clone();
        settings.session_check_interval = Duration::from_millis(300);
        settings.throttle.address_lockout_after = 3;
        settings.throttle.base_delay = Duration::from_millis(100);
        settings
    };
    let a = common::dashboard(replica()).await;
    let b = common::dashboard(replica()).await;

    let driver = start_driver().await;
    let profile = tempfile::tempdir().unwrap();
    let client = browser(&driver, profile.path()).await;
    let outcome = sign_out_run(&client, &a, &b).await;
    client.close().await.ok();
    outcome.unwrap();
}

async fn sign_in_as(client: &Client, (user, password): (&str, &str)) -> Result<(), CmdError> {
    wait_for(client, Locator::Id("user")).await?;
    type_into(client, Locator::Id("user"), user).await?;
    type_into(client, Locator::Id("password"), password).await?;
    click(client, Locator::Id("sign-in")).await
}

async fn sign_out_run(client: &Client, a: &str, b: &str) -> Result<(), CmdError> {
    client.goto(&format!("{a}/accounts")).await?;
    sign_in_as(client, SUPPORT).await?;
    wait_for(client, Locator::Id("account_id")).await?;
    let old_cookie = client.get_named_cookie("sl_session").await?;

    // The same browser on replica B: signed in there too; sign out there.
    client.goto(&format!("{b}/accounts")).await?;
    wait_for(client, Locator::Id("account_id")).await?;
    click(client, Locator::Css(r#"form[action="/sign-out"] button"#)).await?;
    wait_for(client, Locator::Id("user")).await?;
    assert_eq!(client.current_url().await?.path(), "/sign-in");

    // The old cookie, put back (as a copied cookie would be), opens nothing on replica A.
    client.add_cookie(old_cookie).await?;
    tokio::time::sleep(Duration::from_millis(400)).await;
    client.goto(&format!("{a}/accounts")).await?;
    wait_for(client, Locator::Id("user")).await?;
    assert_eq!(client.current_url().await?.path(), "/sign-in");
    screenshot(client, "8-signed-out-elsewhere").await;
    assert_accessible(client, "the sign-in page after a sign-out").await;

    // Wrong passwords from a new browser (this one without its device cookie): refused, then
    // paused with a message that says for how long.
    let device_cookie = client.get_named_cookie("sl_device").await?;
    client.delete_cookie("sl_device").await?;
    let mut last = String::new();
    for _ in 0..4 {
        client.goto(&format!("{a}/sign-in")).await?;
        sign_in_as(client, (SUPPORT.0, "not the password")).await?;
        last = wait_for(client, Locator::Css(".alert"))
            .await?
            .text()
            .await?;
    }
    assert!(last.contains("Sign-in is paused for 15 minutes"), "{last}");
    screenshot(client, "9-sign-in-paused").await;
    assert_accessible(client, "the sign-in page with an error").await;
    client.goto(&format!("{a}/no-such-page")).await?;
    wait_for(client, Locator::Css(".error-page")).await?;
    assert_accessible(client, "the page-not-found page, signed out").await;

    // The browser that signed in before (its device cookie back) signs in at once all the same.
    client.add_cookie(device_cookie).await?;
    client.goto(&format!("{a}/sign-in")).await?;
    sign_in_as(client, SUPPORT).await?;
    wait_for(client, Locator::Id("account_id")).await?;
    client.goto(&format!("{a}/audit")).await?;
    click(
        client,
        Locator::Css(r#"#audit-kind option[value="sign_in_failed"]"#),
    )
    .await?;
    click(client, Locator::Id("audit-filter")).await?;
    wait_for_query(client, "kind=sign_in_failed").await;
    wait_for(
        client,
        Locator::Css(r#"tr.audit-row[data-kind="sign_in_failed"]"#),
    )
    .await?;
    let rows = client.find_all(Locator::Css("tr.audit-row")).await?;
    let mut texts = Vec::new();
    for row in &rows {
        texts.push(row.text().await?);
    }
    assert_eq!(rows.len(), 3, "three failures, then the pause: {texts:#?}");
    let row = rows[0].text().await?;
    assert!(
        row.contains("Sign-in failed") && row.contains("From 127.0.0.1") && row.contains(SUPPORT.0),
        "{row}"
    );
    screenshot(client, "10-audit-sign-ins").await;
    assert_accessible(client, "the Audit page of sign-ins").await;
    Ok(())
}

/// Play-starts, heartbeats and stops against the limiter until aborted: something to draw.
async fn traffic(limiter: String) {
    let mut streams = std::collections::VecDeque::new();
    for i in 0u64.. {
        let account = format!("acct-fleet-{i}");
        let stream = common::play(&limiter, &account, &format!("tv-{i}"), "TV", "tv").await;
        streams.push_back((account, stream));
        for (account, stream) in streams.iter().take(20) {
            heartbeat(&limiter, account, stream).await;
        }
        if streams.len() > 20 {
            streams.pop_front();
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// The newest value the decisions chart's legend gives for `kind`.
async fn latest(client: &Client, kind: &str) -> Result<String, CmdError> {
    text_of(
        client,
        Locator::Css(&format!("#chart-decisions .key.{kind} strong")),
    )
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_fleet_page_draws_its_charts_and_updates_them() {
    let limiter = common::limiter(None).await;
    let mut settings = Settings::with_users(&limiter, common::users());
    settings.fleet_sample_interval = Duration::from_millis(500);
    let dashboard = common::dashboard(settings).await;
    let load = tokio::spawn(traffic(limiter.clone()));
    // Nobody watches the fleet page for a while: the dashboard samples in the background.
    tokio::time::sleep(Duration::from_millis(4500)).await;
    let driver = start_driver().await;
    let profile = tempfile::tempdir().unwrap();
    let client = browser(&driver, profile.path()).await;
    let outcome = fleet_run(&client, &dashboard).await;
    client.close().await.ok();
    load.abort();
    outcome.unwrap();
}

async fn fleet_run(client: &Client, dashboard: &str) -> Result<(), CmdError> {
    client.goto(&format!("{dashboard}/fleet")).await?;
    sign_in_as(client, common::VIEWER).await?;
    wait_for(client, Locator::Id("chart-decisions")).await?;
    assert_eq!(client.current_url().await?.path(), "/fleet");
    // The first view already has the minutes before it (sampled in the background): drawn.
    let drawn = r#"#chart-decisions path.line.allowed, #chart-decisions circle.dot.allowed"#;
    assert!(
        client.find(Locator::Css(drawn)).await.is_ok(),
        "the charts are drawn when the page opens: {}",
        text_of(client, Locator::Css("#chart-decisions figcaption")).await?
    );
    assert!(
        client
            .find(Locator::Css(r#"#chart-degraded[data-empty="false"]"#))
            .await
            .is_ok()
    );
    let allowed = latest(client, "allowed").await?;
    assert!(allowed.ends_with("/s") && allowed != "0/s", "{allowed}");
    assert_eq!(
        text_of(client, Locator::Css("#chart-degraded .key.degraded strong")).await?,
        "0%",
        "the store answered every decision"
    );
    // The description carries the same numbers for a screen reader.
    let desc = client
        .find(Locator::Id("chart-decisions-desc"))
        .await?
        .html(true)
        .await?;
    assert!(desc.contains("Newest: allowed"), "{desc}");
    // Live streams: counted by the embedded store, per shard.
    let live = text_of(
        client,
        Locator::Css("#live-shards tbody tr td:nth-child(2)"),
    )
    .await?;
    assert!(live.parse::<u64>().is_ok_and(|n| n > 0), "{live}");
    // Later refreshes redraw the chart without a reload: the line grows.
    let before = client
        .find(Locator::Css("#chart-decisions"))
        .await?
        .html(false)
        .await?;
    eventually("the chart to be redrawn by a refresh", || async {
        match client.find(Locator::Css("#chart-decisions")).await {
            Ok(chart) => chart.html(false).await.is_ok_and(|now| now != before),
            Err(_) => false,
        }
    })
    .await;
    let path = client
        .find(Locator::Css("#chart-decisions path.line.allowed"))
        .await;
    let png = screenshot(client, "11-fleet-charts").await;
    assert_accessible(client, "the Fleet page with charts").await;
    assert!(
        path.is_ok(),
        "two refreshes make at least two points of a line"
    );
    let docs_image = workspace_root().join("docs/images/fleet-page.png");
    if !docs_image.exists() || std::env::var_os("SCREENLIMIT_UPDATE_SCREENSHOTS").is_some() {
        std::fs::create_dir_all(docs_image.parent().unwrap()).unwrap();
        std::fs::write(&docs_image, &png).unwrap();
    }
    Ok(())
}
