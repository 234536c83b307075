//! Handler tests: every page and role against a real limiter, over real HTTP.

mod common;

use common::{Agent, SUPPORT, VIEWER, active_devices, heartbeat, play, stack};
use reqwest::StatusCode;
use screenlimit_admin_ui::config::{AuthMode, Settings};

#[tokio::test]
async fn signed_out_requests_go_to_sign_in() {
    let stack = stack().await;
    let mut agent = Agent::new(&stack.url);
    for (path, next) in [
        ("/accounts/acct-1", "%2Faccounts%2Facct-1"),
        (
            "/accounts?account_id=acct-1",
            "%2Faccounts%3Faccount_id%3Dacct-1",
        ),
        ("/audit", "%2Faudit"),
        ("/fleet", "%2Ffleet"),
    ] {
        let page = agent.get(path).await;
        assert_eq!(page.status, StatusCode::SEE_OTHER, "{path}");
        assert_eq!(page.location(), format!("/sign-in?next={next}"), "{path}");
    }
    // A polling fragment sends the whole page to sign-in through htmx.
    let page = agent
        .get_with(
            "/accounts/acct-1/devices",
            &[
                ("hx-request", "true"),
                ("hx-current-url", &format!("{}/accounts/acct-1", stack.url)),
            ],
        )
        .await;
    assert_eq!(page.status, StatusCode::OK);
    assert_eq!(
        page.headers["hx-redirect"],
        "/sign-in?next=%2Faccounts%2Facct-1"
    );
    // A state change while signed out changes nothing.
    let csrf = agent.csrf().await;
    let page = agent
        .post("/accounts/acct-1/streams/x/force-stop", &[("csrf", &csrf)])
        .await;
    assert_eq!(page.status, StatusCode::SEE_OTHER);
    assert!(page.location().starts_with("/sign-in"));
}

#[tokio::test]
async fn sign_in_sets_a_strict_http_only_cookie_and_sign_out_ends_it() {
    let stack = stack().await;
    let mut agent = Agent::new(&stack.url);
    let csrf = agent.csrf().await;
    let wrong = agent
        .post(
            "/sign-in",
            &[("csrf", &csrf), ("user", SUPPORT.0), ("password", "nope")],
        )
        .await;
    assert_eq!(wrong.status, StatusCode::UNAUTHORIZED);
    assert!(wrong.body.contains("do not match"), "{}", wrong.body);
    assert!(!agent.cookies.contains_key("sl_session"));

    let page = agent
        .post(
            "/sign-in",
            &[
                ("csrf", &csrf),
                ("user", SUPPORT.0),
                ("password", SUPPORT.1),
                ("next", "/audit"),
            ],
        )
        .await;
    assert_eq!(page.status, StatusCode::SEE_OTHER);
    assert_eq!(page.location(), "/audit");
    let cookie = page.set_cookie("sl_session");
    assert!(
        cookie.contains("HttpOnly") && cookie.contains("SameSite=Strict"),
        "{cookie}"
    );
    assert!(!cookie.contains("Secure"), "plain HTTP: {cookie}");
    let session = agent.cookies["sl_session"].clone();

    let page = agent.get("/accounts").await;
    assert_eq!(page.status, StatusCode::OK);
    assert!(page.body.contains(SUPPORT.0) && page.body.contains("Sign out"));

    let csrf = page.csrf();
    let page = agent.post("/sign-out", &[("csrf", &csrf)]).await;
    assert_eq!(page.status, StatusCode::SEE_OTHER);
    assert_eq!(page.location(), "/sign-in?signed_out=1");
    // The old cookie, replayed, no longer works.
    agent.cookies.insert("sl_session".into(), session);
    assert_eq!(agent.get("/accounts").await.status, StatusCode::SEE_OTHER);
}

#[tokio::test]
async fn hsts_only_when_the_external_url_is_https() {
    let limiter = common::limiter(None).await;
    let mut https = Settings::with_users(&limiter, common::users());
    https.secure_cookies = true;
    let page = Agent::new(&common::dashboard(https).await)
        .get("/sign-in")
        .await;
    assert_eq!(
        page.headers
            .get("strict-transport-security")
            .map(|v| v.to_str().unwrap()),
        Some("max-age=31536000")
    );
    let plain = Settings::with_users(&limiter, common::users());
    let mut agent = Agent::new(&common::dashboard(plain).await);
    let page = agent
        .get_with("/sign-in", &[("x-forwarded-proto", "https")])
        .await;
    assert!(
        page.headers.get("strict-transport-security").is_none(),
        "a proxy's header alone does not pin the host to https"
    );
}

#[tokio::test]
async fn cookies_are_secure_behind_tls() {
    let stack = stack().await;
    let mut agent = Agent::new(&stack.url);
    let csrf = agent.csrf().await;
    let page = agent
        .post_with(
            "/sign-in",
            &[("csrf", &csrf), ("user", VIEWER.0), ("password", VIEWER.1)],
            &[("x-forwarded-proto", "https")],
        )
        .await;
    assert_eq!(page.status, StatusCode::SEE_OTHER);
    let cookie = page.set_cookie("sl_session");
    assert!(cookie.contains("; Secure"), "{cookie}");
}

#[tokio::test]
async fn offsite_redirects_after_sign_in_are_ignored() {
    let stack = stack().await;
    let mut agent = Agent::new(&stack.url);
    let csrf = agent.csrf().await;
    let page = agent
        .post(
            "/sign-in",
            &[
                ("csrf", &csrf),
                ("user", VIEWER.0),
                ("password", VIEWER.1),
                ("next", "//evil.example/"),
            ],
        )
        .await;
    assert_eq!(page.location(), "/accounts");
}

#[tokio::test]
async fn account_page_shows_plan_limit_and_devices_with_names_escaped() {
    let stack = stack().await;
    play(
        &stack.limiter,
        "acct-7",
        "living-room-tv",
        "Living Room TV",
        "tv",
    )
    .await;
    play(
        &stack.limiter,
        "acct-7",
        "evil",
        "<script>alert(1)</script>",
        "web",
    )
    .await;
    let mut agent = Agent::signed_in(&stack.url, VIEWER).await;

    let search = agent.get("/accounts?account_id=acct-7").await;
    assert_eq!(search.status, StatusCode::SEE_OTHER);
    assert_eq!(search.location(), "/accounts/acct-7");

    let page = agent.get("/accounts/acct-7").await;
    assert_eq!(page.status, StatusCode::OK);
    assert!(
        page.body.contains(r#"<strong id="plan">standard</strong>"#),
        "{}",
        page.body
    );
    assert!(
        page.body
            .contains(r#"<strong id="in-use">2</strong> of <strong id="limit">2</strong>"#)
    );
    assert!(page.body.contains("Living Room TV") && page.body.contains("living-room-tv"));
    assert!(
        page.body
            .contains("&#60;script&#62;alert(1)&#60;/script&#62;"),
        "{}",
        page.body
    );
    assert!(
        !page.body.contains("<script>alert"),
        "a device name became HTML"
    );
    // Refreshes itself through htmx; the fragment is the same section.
    assert!(
        page.body
            .contains(r#"hx-get="/accounts/acct-7/devices" hx-trigger="every 3s""#)
    );
    let fragment = agent.get("/accounts/acct-7/devices").await;
    assert_eq!(fragment.status, StatusCode::OK);
    assert!(
        fragment
            .body
            .trim_start()
            .starts_with(r#"<section id="devices""#)
    );
    assert!(fragment.body.contains("&#60;script&#62;") && !fragment.body.contains("<script>alert"));
    assert!(!fragment.body.contains("<html"), "a fragment, not a page");
}

#[tokio::test]
async fn the_recent_panel_says_why_a_play_was_refused_and_refreshes_with_the_table() {
    let stack = stack().await;
    play(&stack.limiter, "acct-r", "tv", "Living Room TV", "tv").await;
    play(&stack.limiter, "acct-r", "evil", "<b>Evil</b>", "web").await;
    let mut agent = Agent::signed_in(&stack.url, VIEWER).await;
    let quiet = agent.get("/accounts/acct-r").await;
    assert!(
        quiet.body.contains(r#"id="recent-empty""#),
        "{}",
        quiet.body
    );

    let refused = common::http()
        .post(format!("{}/v1/streams", stack.limiter))
        .json(
            &serde_json::json!({"account_id": "acct-r", "device_id": "tablet",
            "plan": "standard", "device_type": "tablet", "device_meta": "Kids Tablet"}),
        )
        .send()
        .await
        .unwrap();
    assert_eq!(refused.status(), StatusCode::CONFLICT);
    let page = agent.get("/accounts/acct-r").await;
    assert_eq!(page.status, StatusCode::OK);
    assert!(
        page.body
            .contains(r#"<li data-kind="refused"><time datetime=""#)
            && page.body.contains(" UTC</time>"),
        "{}",
        page.body
    );
    // A name from a play is text, never HTML, in the sentence too.
    let sentence = "Kids Tablet was refused: Standard allows 2, ";
    assert!(page.body.contains(sentence), "{}", page.body);
    assert!(page.body.contains("&#60;b&#62;Evil&#60;/b&#62;") && !page.body.contains("<b>Evil"));
    assert!(
        !page.body.contains("hx-swap-oob"),
        "the page holds the panel itself"
    );
    // The table's refresh carries the panel, to replace it in place.
    let fragment = agent.get("/accounts/acct-r/devices").await;
    assert!(
        fragment
            .body
            .contains(r#"<section id="recent" class="card recent" aria-labelledby="recent-title" hx-swap-oob="true">"#)
            && fragment.body.contains(sentence),
        "{}",
        fragment.body
    );
}

#[tokio::test]
async fn empty_account_says_so() {
    let stack = stack().await;
    let mut agent = Agent::signed_in(&stack.url, VIEWER).await;
    let page = agent.get("/accounts/acct-nobody").await;
    assert_eq!(page.status, StatusCode::OK);
    assert!(
        page.body.contains("No active streams on this account"),
        "{}",
        page.body
    );
    assert!(
        page.body.contains(r#"<strong id="limit">1</strong>"#),
        "default plan basic"
    );
}

#[tokio::test]
async fn malformed_account_ids_get_a_message() {
    let stack = stack().await;
    let mut agent = Agent::signed_in(&stack.url, VIEWER).await;
    for path in [
        "/accounts?account_id=acct%2042",
        "/accounts/acct!42",
        &format!("/accounts/{}", "a".repeat(65)),
        "/audit?account_id=%3Cb%3E",
    ] {
        let page = agent.get(path).await;
        assert_eq!(page.status, StatusCode::BAD_REQUEST, "{path}");
        assert!(
            page.body.contains("is not an account id"),
            "{path}: {}",
            page.body
        );
    }
    let page = agent.get("/audit?account_id=%3Cb%3E").await;
    assert!(page.body.contains("“&#60;b&#62;”") && !page.body.contains("<b>"));
}

// ---- ids taken from the address -------------------------------------------------------------

/// Two accounts with one stream each: `acct-7` (the page's) and `acct-8` (the target of every
/// trick below). Returns acct-8's stream id.
async fn two_accounts(stack: &common::Stack) -> String {
    play(&stack.limiter, "acct-7", "tv", "Seven TV", "tv").await;
    play(&stack.limiter, "acct-8", "tv", "Eight TV", "tv").await
}

/// acct-8's stream still plays: listed, and its heartbeat renews it.
async fn acct_8_still_plays(stack: &common::Stack, stream: &str, after: &str) {
    assert_eq!(
        active_devices(&stack.limiter, "acct-8").await,
        ["tv"],
        "after {after}"
    );
    assert_eq!(
        heartbeat(&stack.limiter, "acct-8", stream).await.0,
        200,
        "after {after}"
    );
}

#[tokio::test]
async fn a_path_traversal_in_a_stream_id_stops_nothing_and_says_why() {
    let stack = stack().await;
    let eight = two_accounts(&stack).await;
    let mut agent = Agent::signed_in(&stack.url, SUPPORT).await;
    let csrf = agent.get("/accounts/acct-7").await.csrf();
    let path = format!("/accounts/acct-7/streams/..%2F..%2Facct-8%2Fstreams%2F{eight}/force-stop");
    let page = agent
        .post(&path, &[("csrf", &csrf), ("reason", "trick")])
        .await;
    assert_eq!(page.status, StatusCode::BAD_REQUEST, "{}", page.body);
    assert!(page.body.contains("is not a stream id"), "{}", page.body);
    assert!(page.body.contains("Nothing was stopped"), "{}", page.body);
    acct_8_still_plays(&stack, &eight, "the POST").await;
    let confirm = agent.get(&path).await;
    assert_eq!(confirm.status, StatusCode::BAD_REQUEST, "{}", confirm.body);
    assert!(confirm.body.contains("is not a stream id"));
    assert_eq!(active_devices(&stack.limiter, "acct-7").await, ["tv"]);
}

#[tokio::test]
async fn malformed_stream_ids_get_a_4xx_page_not_a_502() {
    let stack = stack().await;
    let eight = two_accounts(&stack).await;
    let mut agent = Agent::signed_in(&stack.url, SUPPORT).await;
    let csrf = agent.get("/accounts/acct-7").await.csrf();
    // `a/b`, `x?y`, `x#y`, `..`, `.` and an over-long id, each as one path segment; the dot
    // segments also unencoded (sent by hand: HTTP clients would resolve them before sending).
    let long = format!("{}.tv", "A".repeat(300));
    for stream in [
        "a%2Fb", "x%3Fy", "x%23y", "%2E%2E", "..", ".", "%2E", "a%20b.tv", "tv", &long,
    ] {
        let path = format!("/accounts/acct-7/streams/{stream}/force-stop");
        for method in ["POST", "GET"] {
            let page = agent
                .raw(method, &path, &[("csrf", &csrf), ("reason", "x")])
                .await;
            assert_eq!(
                page.status,
                StatusCode::BAD_REQUEST,
                "{method} {path}: {}",
                page.body
            );
            assert!(
                page.body.contains("is not a stream id"),
                "{method} {path}: {}",
                page.body
            );
        }
    }
    acct_8_still_plays(&stack, &eight, "malformed stream ids").await;
    assert_eq!(active_devices(&stack.limiter, "acct-7").await, ["tv"]);
}

#[tokio::test]
async fn a_dot_only_account_id_never_reaches_another_account() {
    let stack = stack().await;
    let eight = two_accounts(&stack).await;
    let mut agent = Agent::signed_in(&stack.url, SUPPORT).await;
    let csrf = agent.get("/accounts/acct-7").await.csrf();
    let form = [
        ("csrf", csrf.as_str()),
        ("reason", "trick"),
        ("max_streams", "5"),
        ("expires_in", "3600"),
    ];
    for account in [
        "..",
        "%2E%2E",
        ".",
        "%2e",
        "acct-7%2F..%2Facct-8",
        "..%2Facct-8",
    ] {
        for (method, path) in [
            ("GET", format!("/accounts/{account}")),
            ("GET", format!("/accounts/{account}/devices")),
            (
                "GET",
                format!("/accounts/{account}/streams/{eight}/force-stop"),
            ),
            (
                "POST",
                format!("/accounts/{account}/streams/{eight}/force-stop"),
            ),
            ("POST", format!("/accounts/{account}/limit-override")),
            ("POST", format!("/accounts/{account}/limit-override/remove")),
            ("GET", format!("/audit?account_id={account}")),
        ] {
            let page = agent.raw(method, &path, &form).await;
            // Today's id rules may let `..` through to the limiter's own (encoded) address, or
            // refuse it here; either way a 4xx, never a 5xx, and nothing of acct-8 changes.
            assert!(
                page.status.is_client_error(),
                "{method} {path}: {} {}",
                page.status,
                page.body
            );
            assert!(!page.body.contains("Eight TV"), "{method} {path}");
        }
    }
    acct_8_still_plays(&stack, &eight, "dot-only account ids").await;
    assert_eq!(
        common::account_streams(&stack.limiter, "acct-8").await["limit_override"],
        serde_json::Value::Null
    );
}

#[tokio::test]
async fn viewer_cannot_force_stop() {
    let stack = stack().await;
    let stream = play(&stack.limiter, "acct-v", "tv", "TV", "tv").await;
    let mut agent = Agent::signed_in(&stack.url, VIEWER).await;
    let page = agent.get("/accounts/acct-v").await;
    assert!(!page.body.contains("Force stop"), "no button for a viewer");
    let path = format!("/accounts/acct-v/streams/{stream}/force-stop");
    assert_eq!(agent.get(&path).await.status, StatusCode::FORBIDDEN);
    let csrf = page.csrf();
    let refused = agent.post(&path, &[("csrf", &csrf), ("reason", "x")]).await;
    assert_eq!(refused.status, StatusCode::FORBIDDEN);
    assert!(
        refused.body.contains("only the support role"),
        "{}",
        refused.body
    );
    assert_eq!(active_devices(&stack.limiter, "acct-v").await, ["tv"]);
}

#[tokio::test]
async fn posts_without_a_valid_csrf_token_are_refused() {
    let stack = stack().await;
    let stream = play(&stack.limiter, "acct-c", "tv", "TV", "tv").await;
    let mut agent = Agent::signed_in(&stack.url, SUPPORT).await;
    let path = format!("/accounts/acct-c/streams/{stream}/force-stop");
    let token = agent.csrf().await;

    let none = agent.post(&path, &[("reason", "x")]).await;
    assert_eq!(none.status, StatusCode::FORBIDDEN);
    assert!(none.body.contains("Nothing was changed"), "{}", none.body);

    let mut other = Agent::new(&stack.url);
    let foreign = other.csrf().await;
    assert_eq!(
        agent.post(&path, &[("csrf", &foreign)]).await.status,
        StatusCode::FORBIDDEN
    );

    let cross_site = agent
        .post_with(
            &path,
            &[("csrf", &token)],
            &[("sec-fetch-site", "cross-site")],
        )
        .await;
    assert_eq!(cross_site.status, StatusCode::FORBIDDEN);

    // Sign-in is protected too (no login CSRF).
    let mut fresh = Agent::new(&stack.url);
    let page = fresh
        .post("/sign-in", &[("user", SUPPORT.0), ("password", SUPPORT.1)])
        .await;
    assert_eq!(page.status, StatusCode::FORBIDDEN);

    assert_eq!(
        active_devices(&stack.limiter, "acct-c").await,
        ["tv"],
        "nothing stopped"
    );
    // And the same request with the token works (the header form is what htmx sends).
    let ok = agent
        .post_with(&path, &[], &[("x-csrf-token", &token)])
        .await;
    assert_eq!(ok.status, StatusCode::SEE_OTHER, "{}", ok.body);
}

#[tokio::test]
async fn support_force_stops_with_confirmation_and_the_audit_log_records_it() {
    let stack = stack().await;
    let tv = play(
        &stack.limiter,
        "acct-s",
        "living-room-tv",
        "Living Room TV",
        "tv",
    )
    .await;
    play(&stack.limiter, "acct-s", "phone", "Mom's phone", "mobile").await;
    let mut agent = Agent::signed_in(&stack.url, SUPPORT).await;

    let page = agent.get("/accounts/acct-s").await;
    let path = format!("/accounts/acct-s/streams/{tv}/force-stop");
    assert!(
        page.body.contains(&format!(r#"href="{path}""#)),
        "{}",
        page.body
    );

    let confirm = agent.get(&path).await;
    assert_eq!(confirm.status, StatusCode::OK);
    assert!(
        confirm
            .body
            .contains("Force-stop “<span id=\"confirm-device\">Living Room TV</span>”?")
    );

    let too_long = "x".repeat(201);
    let refused = agent
        .post(
            &path,
            &[
                ("csrf", &confirm.csrf()),
                ("reason", &too_long),
                ("device", "Living Room TV"),
            ],
        )
        .await;
    assert_eq!(refused.status, StatusCode::UNPROCESSABLE_ENTITY);
    assert!(refused.body.contains("at most 200"), "{}", refused.body);

    let done = agent
        .post(
            &path,
            &[
                ("csrf", &confirm.csrf()),
                ("reason", "caller says the TV is off"),
                ("device", "Living Room TV"),
            ],
        )
        .await;
    assert_eq!(done.status, StatusCode::SEE_OTHER, "{}", done.body);
    assert_eq!(
        done.location(),
        "/accounts/acct-s?stopped=Living%20Room%20TV"
    );
    let after = agent.get(done.location()).await;
    assert!(
        after.body.contains("Force-stopped “Living Room TV”"),
        "{}",
        after.body
    );
    assert!(after.body.contains(r#"<strong id="in-use">1</strong>"#));
    assert!(!after.body.contains("living-room-tv"));

    assert_eq!(
        heartbeat(&stack.limiter, "acct-s", &tv).await,
        (410, "stream_revoked".into())
    );

    // Again (a double submit): idempotent, and the audit log still has one entry.
    let again = agent.post(&path, &[("csrf", &confirm.csrf())]).await;
    assert_eq!(again.status, StatusCode::SEE_OTHER);
    // The confirmation page of a stream that ended says so instead.
    let gone = agent.get(&path).await;
    assert_eq!(gone.location(), "/accounts/acct-s?gone=1");

    let audit = agent.get("/audit").await;
    assert_eq!(audit.status, StatusCode::OK);
    assert!(
        audit.body.contains("caller says the TV is off"),
        "{}",
        audit.body
    );
    assert!(
        audit.body.contains(&format!("<td>{}</td>", SUPPORT.0)),
        "actor is the signed-in user"
    );
    assert!(audit.body.contains("Living Room TV"));
    let filtered = agent.get("/audit?account_id=acct-s").await;
    assert_eq!(filtered.body.matches("class=\"audit-row\"").count(), 1);
    let other = agent.get("/audit?account_id=acct-other").await;
    assert!(
        other.body.contains("Nothing recorded for this account"),
        "{}",
        other.body
    );
}

#[tokio::test]
async fn a_down_limiter_gets_a_clear_message() {
    // A port that was free a moment ago: nothing listens there.
    let closed = {
        let listener = common::free_listener().await;
        format!("http://{}", listener.local_addr().unwrap())
    };
    // Signed in through a replica whose limiter answers; the same cookie on a replica whose
    // limiter is down reads pages (which say what is wrong) but changes nothing.
    let down = Settings::with_users(&closed, common::users());
    let mut agent = common::signed_in_elsewhere(down, SUPPORT).await;
    let page = agent.get("/accounts/acct-1").await;
    assert_eq!(page.status, StatusCode::BAD_GATEWAY);
    assert!(
        page.body.contains("The limiter is unreachable"),
        "{}",
        page.body
    );
    assert!(page.body.contains(&closed));
    let fragment = agent.get("/accounts/acct-1/devices").await;
    assert_eq!(fragment.status, StatusCode::OK, "htmx swaps the message in");
    assert!(fragment.body.contains("Live data paused"));
    let fleet = agent.get("/fleet").await;
    assert!(
        fleet
            .body
            .contains("0</strong> of 1 limiter instances reachable"),
        "{}",
        fleet.body
    );
    assert_eq!(agent.get("/audit").await.status, StatusCode::BAD_GATEWAY);
    // Fail safe: whether the session was signed out elsewhere cannot be read, so no change.
    let csrf = agent.get("/accounts").await.csrf();
    let page = agent
        .post(
            "/accounts/acct-1/limit-override",
            &[("csrf", &csrf), ("max_streams", "3"), ("duration", "1h")],
        )
        .await;
    assert_eq!(page.status, StatusCode::SERVICE_UNAVAILABLE);
    assert!(
        page.body.contains("Your sign-in cannot be confirmed")
            && page.body.contains("Nothing was changed"),
        "{}",
        page.body
    );
}

#[tokio::test]
async fn a_limiter_that_needs_a_token_gets_it() {
    let limiter = common::limiter(Some("service-token-123")).await;
    play_with_token(&limiter).await;
    let mut with = Settings::with_users(&limiter, common::users());
    with.limiter_token = Some("service-token-123".into());
    let mut agent = Agent::signed_in(&common::dashboard(with).await, VIEWER).await;
    let page = agent.get("/accounts/acct-t").await;
    assert_eq!(page.status, StatusCode::OK);
    assert!(page.body.contains("Token TV"));

    // Without the token the limiter cannot record a sign-in, so there is none (a session that
    // no replica could end is never issued).
    let without = Settings::with_users(&limiter, common::users());
    let mut agent = Agent::new(&common::dashboard(without).await);
    let csrf = agent.csrf().await;
    let page = agent
        .post(
            "/sign-in",
            &[("csrf", &csrf), ("user", VIEWER.0), ("password", VIEWER.1)],
        )
        .await;
    assert_eq!(page.status, StatusCode::SERVICE_UNAVAILABLE);
    assert!(page.body.contains("service token"), "{}", page.body);
    assert!(!agent.cookies.contains_key("sl_session"));
}

async fn play_with_token(limiter: &str) {
    let response = common::http()
        .post(format!("{limiter}/v1/streams"))
        .bearer_auth("service-token-123")
        .json(&serde_json::json!({"account_id": "acct-t", "device_id": "tv", "device_meta": "Token TV"}))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::OK);
}

#[tokio::test]
async fn fleet_page_shows_instances_shards_and_decisions() {
    let stack = stack().await;
    play(&stack.limiter, "acct-f", "tv", "TV", "tv").await;
    let mut agent = Agent::signed_in(&stack.url, VIEWER).await;
    let page = agent.get("/fleet").await;
    assert_eq!(page.status, StatusCode::OK);
    for text in [
        "1</strong> of 1 limiter instances reachable",
        "1</strong> of 1 store shards healthy",
        "<strong>memory</strong>",
        "failure policy <strong>open</strong>",
        "<td>allowed</td><td>measuring…</td><td>1</td>",
        r#"hx-get="/fleet/panel?range=10m""#,
    ] {
        assert!(page.body.contains(text), "{text}: {}", page.body);
    }
    // Live streams: the embedded store counts them (one play allowed, one denied above).
    for text in [
        r#"live streams <strong title="leases counted in the embedded store">1</strong>"#,
        r#"<table id="live-shards""#,
        "<tr><td>0</td><td>1</td></tr>",
        "<th>Live streams</th>",
        // The embedded store has no memory to show; a Redis shard's is "used of max".
        "<th>Memory</th>",
    ] {
        assert!(page.body.contains(text), "{text}: {}", page.body);
    }
    // The charts are drawn from the second sample on; the first view has none yet, and says so.
    for text in [
        r#"<figure class="chart" id="chart-decisions" data-empty="true">"#,
        r#"<figure class="chart" id="chart-degraded" data-empty="true">"#,
        r#"role="img" aria-labelledby="chart-decisions-title chart-decisions-desc""#,
        r#"<title id="chart-decisions-title">Decisions per second</title>"#,
        "no data yet",
    ] {
        assert!(page.body.contains(text), "{text}: {}", page.body);
    }
    tokio::time::sleep(std::time::Duration::from_millis(2100)).await;
    play(&stack.limiter, "acct-g", "tv", "TV", "tv").await;
    let panel = agent.get("/fleet/panel").await;
    assert!(
        panel
            .body
            .trim_start()
            .starts_with(r#"<section id="fleet""#)
    );
    for text in [
        r#"<figure class="chart" id="chart-decisions" data-empty="false">"#,
        r#"<figure class="chart" id="chart-degraded" data-empty="false">"#,
        "<summary>The numbers</summary>",
        "degraded <strong>0%</strong>",
        r#"live streams <strong title="leases counted in the embedded store">2</strong>"#,
    ] {
        assert!(panel.body.contains(text), "{text}: {}", panel.body);
    }
    // Two samples 2 s apart fill one or two 10 s buckets: a dot or a short line.
    assert!(
        panel.body.contains(r#"<circle class="dot allowed""#)
            || panel.body.contains(r#"<path class="line allowed" d="M"#),
        "{}",
        panel.body
    );
}

/// An account in shadow is marked next to its plan (page and refresh), its Recent panel reads
/// the play let through as the refusal it would have been, and the fleet page says what is in
/// shadow (without Prometheus, where the shares would come from); a limiter that enforces every
/// account says so in one line.
#[tokio::test]
async fn with_several_regions_the_account_page_names_its_home_and_the_fleet_page_its_peers() {
    let dir = tempfile::tempdir().unwrap();
    let token = dir.path().join("token");
    std::fs::write(&token, "a-region-token-of-twenty-chars").unwrap();
    // The peer's address takes no connection: its accounts' plays are decided here.
    let yaml = format!(
        "stream_id_secret: shared-by-the-regions\nregions:\n  name: eu\n  token_file: {t}\n  timeout: 100ms\n  peers:\n    - {{ name: us, url: \"http://127.0.0.1:9\", token_file: {t} }}\n",
        t = token.display()
    );
    let limiter = common::limiter_with(&yaml).await;
    let dashboard = common::dashboard(Settings::with_users(&limiter, common::users())).await;
    let table = [
        screenlimit_limiter::regions::home::Region {
            name: "eu".into(),
            weight: 1,
            ..Default::default()
        },
        screenlimit_limiter::regions::home::Region {
            name: "us".into(),
            weight: 1,
            ..Default::default()
        },
    ];
    let homed = |home: &str| {
        (0..)
            .map(|i| format!("acct-r{i}"))
            .find(|a| {
                screenlimit_limiter::regions::home::home_of(a, &table)
                    .unwrap()
                    .name
                    == home
            })
            .unwrap()
    };
    let (here, away) = (homed("eu"), homed("us"));
    for account in [&here, &away, &away] {
        let (status, body) =
            common::play_plan(&limiter, account, ("tv", "TV", "tv"), "basic").await;
        assert_eq!(status, 200, "{body}");
    }
    let mut agent = Agent::signed_in(&dashboard, VIEWER).await;
    let page = agent.get(&format!("/accounts/{here}")).await;
    let named = r#"home region <strong id="home-region">eu</strong>"#;
    assert!(page.body.contains(named), "{here}: {}", page.body);
    // An account homed at the peer that does not answer: the page says which region that is.
    let page = agent.get(&format!("/accounts/{away}")).await;
    assert!(
        page.body.contains("home region us did not answer"),
        "{away}: {}",
        page.body
    );
    let fleet = agent.get("/fleet").await;
    for text in [
        "Region <strong>eu</strong> and its peers",
        "(homes by weight: eu 1 · us 1)",
        r#"<tr id="peer-us"><td>us</td>"#,
        r#"<td class="bad""#,
    ] {
        assert!(fleet.body.contains(text), "{text}: {}", fleet.body);
    }
    assert!(!fleet.body.contains("Evacuated"), "{}", fleet.body);
    // The peer evacuated: the fleet page says where its accounts went.
    let evacuated = common::limiter_with(
        &yaml.replace("{ name: us,", "{ name: us, evacuated: true, secondary: eu,"),
    )
    .await;
    let dashboard = common::dashboard(Settings::with_users(&evacuated, common::users())).await;
    let mut agent = Agent::signed_in(&dashboard, VIEWER).await;
    let fleet = agent.get("/fleet").await;
    let said = r#"<span class="bad small" id="evacuated">Evacuated: us → eu</span>"#;
    assert!(fleet.body.contains(said), "{}", fleet.body);
    // Without regions, neither says a word of them.
    let single = stack().await;
    let mut agent = Agent::signed_in(&single.url, VIEWER).await;
    assert!(
        !agent
            .get("/accounts/acct-1")
            .await
            .body
            .contains("home-region")
    );
    assert!(!agent.get("/fleet").await.body.contains("its peers"));
}

#[tokio::test]
async fn an_account_in_shadow_is_marked_and_the_fleet_page_says_what_is_in_shadow() {
    let limiter = common::limiter_with(common::SHADOW_PLANS).await;
    let dashboard = common::dashboard(Settings::with_users(&limiter, common::users())).await;
    for device in [
        ("tv", "Living Room TV", "tv"),
        ("phone", "Mom's iPhone", "mobile"),
        ("tablet", "Kids Tablet", "tablet"),
    ] {
        let (status, body) = common::play_plan(&limiter, "acct-s", device, "standard").await;
        assert_eq!(status, 200, "{body}");
    }
    let (status, _) = common::play_plan(&limiter, "acct-b", ("tv", "TV", "tv"), "basic").await;
    assert_eq!(status, 200);
    let mut agent = Agent::signed_in(&dashboard, VIEWER).await;
    let mark = r#"<p class="shadow-mark" id="shadow-mark"><strong>In shadow:</strong> plays over the limit are let through and counted, not refused.</p>"#;
    let page = agent.get("/accounts/acct-s").await;
    assert_eq!(page.status, StatusCode::OK);
    for text in [
        mark,
        r#"<strong id="in-use">3</strong> of <strong id="limit">2</strong> screens in use"#,
        r#"<li data-kind="shadow_refused">"#,
        "Kids Tablet would have been refused: Standard allows 2, ",
        " were playing. It was let through (shadow).",
    ] {
        assert!(page.body.contains(text), "{text}: {}", page.body);
    }
    let refresh = agent.get("/accounts/acct-s/devices").await;
    assert!(refresh.body.contains(mark), "{}", refresh.body);
    let enforced = agent.get("/accounts/acct-b").await;
    assert!(!enforced.body.contains("shadow-mark"), "{}", enforced.body);

    let fleet = agent.get("/fleet").await;
    for text in [
        r#"<h2 id="shadow-heading">Shadow refusals</h2>"#,
        r#"<p id="enforcement">Enforcement: every account; Standard: shadow</p>"#,
        "come from Prometheus: start the dashboard with --prometheus-url",
    ] {
        assert!(fleet.body.contains(text), "{text}: {}", fleet.body);
    }
    let enforcing = stack().await;
    let mut agent = Agent::signed_in(&enforcing.url, VIEWER).await;
    let fleet = agent.get("/fleet/panel").await;
    for text in [
        r#"<p id="enforcement">Enforcement: every account</p>"#,
        r#"<p class="muted" id="shadow-quiet">No account is in shadow: every play over a limit is refused.</p>"#,
    ] {
        assert!(fleet.body.contains(text), "{text}: {}", fleet.body);
    }
}

/// The dashboard samples every limiter in the background: a fleet page opened for the first
/// time already draws the minutes before it, and its table has rates.
#[tokio::test]
async fn the_fleet_charts_are_drawn_when_the_page_first_opens() {
    let limiter = common::limiter(None).await;
    let mut settings = Settings::with_users(&limiter, common::users());
    settings.fleet_sample_interval = std::time::Duration::from_millis(500);
    let dashboard = common::dashboard(settings).await;
    // Plays while nobody watches the fleet page.
    for i in 0..9 {
        play(&limiter, &format!("acct-bg-{i}"), "tv", "TV", "tv").await;
        tokio::time::sleep(std::time::Duration::from_millis(500)).await;
    }
    let mut agent = Agent::signed_in(&dashboard, VIEWER).await;
    let page = agent.get("/fleet").await;
    assert_eq!(page.status, StatusCode::OK);
    for text in [
        r#"<figure class="chart" id="chart-decisions" data-empty="false">"#,
        r#"<figure class="chart" id="chart-degraded" data-empty="false">"#,
        "The last 10 minutes, all instances, sampled by this dashboard",
    ] {
        assert!(page.body.contains(text), "{text}: {}", page.body);
    }
    assert!(
        page.body.contains(r#"<circle class="dot allowed""#)
            || page.body.contains(r#"<path class="line allowed" d="M"#),
        "{}",
        page.body
    );
    assert!(
        !page.body.contains("<td>allowed</td><td>measuring…</td>"),
        "the table has a rate at once: {}",
        page.body
    );
    // Without a Prometheus there is no range selector, and a longer range is not offered.
    assert!(!page.body.contains(r#"aria-label="Chart range""#));
    let asked = agent.get("/fleet?range=6h").await;
    assert!(
        asked.body.contains("sampled by this dashboard"),
        "{}",
        asked.body
    );
}

#[tokio::test]
async fn proxy_header_mode_trusts_the_header_and_only_then() {
    let limiter = common::limiter(None).await;
    let stream = play(&limiter, "acct-p", "tv", "TV", "tv").await;
    let mut settings = Settings::with_users(&limiter, common::users());
    settings.auth = AuthMode::ProxyHeader {
        user_header: "x-forwarded-user".parse().unwrap(),
        role_header: Some("x-forwarded-groups".parse().unwrap()),
        support_group: "support".into(),
        default_role: screenlimit_admin_ui::auth::Role::Viewer,
    };
    let url = common::dashboard(settings).await;
    let mut agent = Agent::new(&url);
    assert_eq!(
        agent.get("/accounts").await.status,
        StatusCode::UNAUTHORIZED
    );
    let viewer = [
        ("x-forwarded-user", "carol@example.com"),
        ("x-forwarded-groups", "staff"),
    ];
    let page = agent.get_with("/accounts/acct-p", &viewer).await;
    assert_eq!(page.status, StatusCode::OK);
    assert!(page.body.contains("carol@example.com") && !page.body.contains("Force stop"));
    let support = [
        ("x-forwarded-user", "dan@example.com"),
        ("x-forwarded-groups", "staff, support"),
    ];
    let path = format!("/accounts/acct-p/streams/{stream}/force-stop");
    let confirm = agent.get_with(&path, &support).await;
    assert_eq!(confirm.status, StatusCode::OK);
    let done = agent
        .post_with(&path, &[("csrf", &confirm.csrf())], &support)
        .await;
    assert_eq!(done.status, StatusCode::SEE_OTHER);
    let audit = agent.get_with("/audit", &viewer).await;
    assert!(
        audit.body.contains("<td>dan@example.com</td>"),
        "{}",
        audit.body
    );

    // In password mode the same header means nothing.
    let stack = stack().await;
    let mut agent = Agent::new(&stack.url);
    let page = agent.get_with("/accounts", &support).await;
    assert_eq!(page.status, StatusCode::SEE_OTHER);
}

#[tokio::test]
async fn a_limiter_that_hangs_is_cut_off_by_the_deadline() {
    // Accepts connections and never answers.
    let listener = common::free_listener().await;
    let silent = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move {
        let mut held = Vec::new();
        while let Ok((socket, _)) = listener.accept().await {
            held.push(socket);
        }
    });
    let mut settings = Settings::with_users(&silent, common::users());
    settings.limiter_timeout = std::time::Duration::from_millis(300);
    let mut agent = common::signed_in_elsewhere(settings, VIEWER).await;
    let started = std::time::Instant::now();
    let page = agent.get("/accounts/acct-1").await;
    assert!(started.elapsed() < std::time::Duration::from_secs(3));
    assert_eq!(page.status, StatusCode::GATEWAY_TIMEOUT);
    assert!(
        page.body.contains("The limiter is not answering"),
        "{}",
        page.body
    );
    assert!(
        page.body.contains("did not answer within 300ms"),
        "{}",
        page.body
    );
}

// ---- temporary limits ------------------------------------------------------------------------

/// The account's `limit` and `limit_override` as the limiter reports them.
async fn limits(limiter: &str, account: &str) -> (u64, serde_json::Value) {
    let body = common::account_streams(limiter, account).await;
    (
        body["limit"].as_u64().unwrap(),
        body["limit_override"].clone(),
    )
}

#[tokio::test]
async fn a_temporary_limit_shows_next_to_the_plan() {
    let stack = stack().await;
    play(&stack.limiter, "acct-o", "tv", "TV", "tv").await;
    let granted = common::http()
        .put(format!(
            "{}/v1/accounts/acct-o/limit-override",
            stack.limiter
        ))
        .json(&serde_json::json!({"max_streams": 3, "expires_in_sec": 7200}))
        .send()
        .await
        .unwrap();
    assert_eq!(granted.status(), StatusCode::OK);
    let mut agent = Agent::signed_in(&stack.url, VIEWER).await;
    let page = agent.get("/accounts/acct-o").await;
    assert_eq!(page.status, StatusCode::OK);
    for body in [
        &page.body,
        &agent.get("/accounts/acct-o/devices").await.body,
    ] {
        assert!(
            body.contains(r#"<strong id="plan">standard</strong> · <span class="override""#),
            "{body}"
        );
        assert!(
            body.contains(r#"temporary limit <strong id="override-limit">3</strong> until "#),
            "{body}"
        );
        assert!(body.contains(" UTC (in 1 h 59 min)") || body.contains(" UTC (in 2 h 0 min)"));
        assert!(
            body.contains(r#"<strong id="in-use">1</strong> of <strong id="limit">3</strong>"#)
        );
    }
    // A viewer reads it but gets no form.
    assert!(!page.body.contains("limit-override"), "{}", page.body);
    // Without an override there is nothing to show.
    let plain = agent.get("/accounts/acct-none").await;
    assert!(!plain.body.contains("temporary limit"), "{}", plain.body);
}

#[tokio::test]
async fn support_grants_and_removes_a_temporary_limit() {
    let stack = stack().await;
    play(&stack.limiter, "acct-g", "tv", "TV", "tv").await;
    play(&stack.limiter, "acct-g", "phone", "Phone", "mobile").await;
    let mut agent = Agent::signed_in(&stack.url, SUPPORT).await;

    let page = agent.get("/accounts/acct-g").await;
    assert!(
        page.body
            .contains(r#"action="/accounts/acct-g/limit-override""#),
        "{}",
        page.body
    );
    assert!(
        page.body.contains(r#"value="3" required"#),
        "suggests one more"
    );
    for preset in ["1 hour", "24 hours", "7 days"] {
        assert!(page.body.contains(preset), "{preset}");
    }
    assert!(
        !page.body.contains("remove-override"),
        "nothing to remove yet"
    );

    let done = agent
        .post(
            "/accounts/acct-g/limit-override",
            &[
                ("csrf", &page.csrf()),
                ("max_streams", "3"),
                ("expires_in", "86400"),
            ],
        )
        .await;
    assert_eq!(done.status, StatusCode::SEE_OTHER, "{}", done.body);
    assert_eq!(done.location(), "/accounts/acct-g?limit=granted");
    let (limit, granted) = limits(&stack.limiter, "acct-g").await;
    assert_eq!((limit, granted["max_streams"].as_u64()), (3, Some(3)));

    let after = agent.get(done.location()).await;
    assert!(
        after
            .body
            .contains("Temporary limit granted: this account may use 3 screens until ")
            && (after.body.contains("(in 23 h 59 min)") || after.body.contains("(in 1 d 0 h)")),
        "{}",
        after.body
    );
    assert!(after.body.contains(r#"id="override-limit">3</strong>"#));
    assert!(after.body.contains(r#"id="remove-override""#));
    // The extra screen is real: a third play fits now.
    play(&stack.limiter, "acct-g", "laptop", "Laptop", "web").await;

    let removed = agent
        .post(
            "/accounts/acct-g/limit-override/remove",
            &[("csrf", &after.csrf())],
        )
        .await;
    assert_eq!(removed.status, StatusCode::SEE_OTHER, "{}", removed.body);
    assert_eq!(removed.location(), "/accounts/acct-g?limit=removed");
    assert_eq!(
        limits(&stack.limiter, "acct-g").await,
        (2, serde_json::Value::Null)
    );
    let after = agent.get(removed.location()).await;
    assert!(
        after
            .body
            .contains("Temporary limit removed: the plan&#39;s limit of 2 applies again."),
        "{}",
        after.body
    );
    assert!(!after.body.contains(r#"id="override""#));
    // Devices playing are not cut off.
    assert_eq!(active_devices(&stack.limiter, "acct-g").await.len(), 3);
    // A typed-in notice says nothing that is not so.
    let fake = agent.get("/accounts/acct-g?limit=granted").await;
    assert!(!fake.body.contains("Temporary limit granted"));
}

/// The audit rows of `page`: (data-kind, the row's text without tags).
fn audit_rows(page: &common::Page) -> Vec<(String, String)> {
    page.body
        .split(r#"<tr class="audit-row" data-kind=""#)
        .skip(1)
        .map(|row| {
            let (kind, rest) = row.split_once('"').unwrap();
            let row = &rest[..rest.find("</tr>").unwrap()];
            let mut text = String::new();
            let mut in_tag = false;
            for c in row.chars() {
                match c {
                    '<' => in_tag = true,
                    '>' => {
                        in_tag = false;
                        text.push(' ');
                    }
                    c if !in_tag => text.push(c),
                    _ => {}
                }
            }
            let words: Vec<&str> = text.split_whitespace().collect();
            (kind.to_owned(), words.join(" "))
        })
        .collect()
}

#[tokio::test]
async fn temporary_limits_granted_and_removed_are_in_the_audit_log() {
    let stack = stack().await;
    let tv = play(&stack.limiter, "acct-al", "tv", "TV", "tv").await;
    play(&stack.limiter, "acct-other", "tv", "TV", "tv").await;
    let mut agent = Agent::signed_in(&stack.url, SUPPORT).await;
    let csrf = agent.get("/accounts/acct-al").await.csrf();

    let force_stop = format!("/accounts/acct-al/streams/{tv}/force-stop");
    let page = agent
        .post(&force_stop, &[("csrf", &csrf), ("reason", "old TV")])
        .await;
    assert_eq!(page.status, StatusCode::SEE_OTHER, "{}", page.body);
    for (account, streams, reason) in [
        ("acct-al", "3", "family visit"),
        ("acct-other", "2", "ticket 9"),
    ] {
        let form = [
            ("csrf", csrf.as_str()),
            ("max_streams", streams),
            ("expires_in", "86400"),
            ("reason", reason),
        ];
        let page = agent
            .post(&format!("/accounts/{account}/limit-override"), &form)
            .await;
        assert_eq!(page.status, StatusCode::SEE_OTHER, "{}", page.body);
    }
    let page = agent
        .post(
            "/accounts/acct-al/limit-override/remove",
            &[("csrf", &csrf), ("reason", "visit over")],
        )
        .await;
    assert_eq!(page.status, StatusCode::SEE_OTHER, "{}", page.body);

    // The limiter's own log has them, with the signed-in user as the actor.
    let api: serde_json::Value = common::http()
        .get(format!("{}/v1/audit?account_id=acct-al", stack.limiter))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let kinds: Vec<_> = api["entries"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| (e["kind"].as_str().unwrap(), e["actor"].as_str().unwrap()))
        .collect();
    assert_eq!(
        kinds,
        [
            ("limit_removed", SUPPORT.0),
            ("limit_granted", SUPPORT.0),
            ("force_stop", SUPPORT.0)
        ]
    );

    let all = agent.get("/audit?account_id=acct-al").await;
    assert_eq!(all.status, StatusCode::OK);
    let rows = audit_rows(&all);
    let kinds: Vec<&str> = rows.iter().map(|(k, _)| k.as_str()).collect();
    assert_eq!(
        kinds,
        ["limit_removed", "limit_granted", "force_stop"],
        "{}",
        all.body
    );
    let (removed, granted) = (&rows[0].1, &rows[1].1);
    assert!(
        removed.contains("Temporary limit removed acct-al 3 → 2 screens (the plan&#39;s limit)")
            && removed.contains(&format!("{} visit over", SUPPORT.0)),
        "{removed}"
    );
    assert!(
        granted.contains("Temporary limit granted acct-al 2 → 3 screens until 20")
            && granted.contains(&format!("UTC {} family visit", SUPPORT.0)),
        "{granted}"
    );
    assert!(rows[2].1.contains("Force-stop acct-al TV"), "{}", rows[2].1);

    // Filtered by kind, fleet-wide and per account.
    let granted = agent.get("/audit?kind=limit_granted").await;
    let rows = audit_rows(&granted);
    assert_eq!(rows.len(), 2, "{}", granted.body);
    assert!(rows.iter().all(|(k, _)| k == "limit_granted"));
    assert!(granted.body.contains("<h1>Temporary limits granted</h1>"));
    assert!(
        granted
            .body
            .contains(r#"<option value="limit_granted" selected>"#)
    );
    let one = agent
        .get("/audit?kind=limit_removed&account_id=acct-al")
        .await;
    assert_eq!(audit_rows(&one).len(), 1);
    let none = agent
        .get("/audit?kind=force_stop&account_id=acct-other")
        .await;
    assert!(
        none.body
            .contains("Nothing recorded of this kind for this account"),
        "{}",
        none.body
    );
    for bad in ["grant", "%3Cb%3Ex%3C%2Fb%3E"] {
        let page = agent.get(&format!("/audit?kind={bad}")).await;
        assert_eq!(page.status, StatusCode::BAD_REQUEST, "{bad}");
        assert!(
            page.body
                .contains("is not a kind of audit entry. Choose one in the list: force_stop, limit_granted, limit_removed, sign_in, sign_in_failed, sign_in_throttled, sign_out."),
            "{}",
            page.body
        );
        assert!(!page.body.contains("<b>x"));
    }
}

#[tokio::test]
async fn an_over_long_limit_reason_changes_nothing() {
    let stack = stack().await;
    let mut agent = Agent::signed_in(&stack.url, SUPPORT).await;
    let csrf = agent.csrf().await;
    let long = "x".repeat(201);
    let page = agent
        .post(
            "/accounts/acct-lr/limit-override",
            &[
                ("csrf", &csrf),
                ("max_streams", "3"),
                ("expires_in", "3600"),
                ("reason", &long),
            ],
        )
        .await;
    assert_eq!(page.status, StatusCode::UNPROCESSABLE_ENTITY);
    assert!(page.body.contains("keeps at most 200"), "{}", page.body);
    assert_eq!(
        limits(&stack.limiter, "acct-lr").await,
        (1, serde_json::Value::Null)
    );
    let ok = agent
        .post(
            "/accounts/acct-lr/limit-override",
            &[
                ("csrf", &csrf),
                ("max_streams", "3"),
                ("expires_in", "3600"),
            ],
        )
        .await;
    assert_eq!(ok.status, StatusCode::SEE_OTHER);
    let page = agent
        .post(
            "/accounts/acct-lr/limit-override/remove",
            &[("csrf", &csrf), ("reason", &long)],
        )
        .await;
    assert_eq!(page.status, StatusCode::UNPROCESSABLE_ENTITY);
    assert!(
        page.body.contains(r#"id="override-error""#),
        "{}",
        page.body
    );
    assert_eq!(
        limits(&stack.limiter, "acct-lr").await.0,
        3,
        "still in place"
    );
    let audit = agent.get("/audit?account_id=acct-lr").await;
    assert_eq!(
        audit_rows(&audit).len(),
        1,
        "only the grant: {}",
        audit.body
    );
}

#[tokio::test]
async fn viewer_cannot_change_limits() {
    let stack = stack().await;
    let mut agent = Agent::signed_in(&stack.url, VIEWER).await;
    let page = agent.get("/accounts/acct-vl").await;
    assert!(
        !page.body.contains("grant-override"),
        "no form for a viewer"
    );
    let csrf = page.csrf();
    let refused = agent
        .post(
            "/accounts/acct-vl/limit-override",
            &[
                ("csrf", &csrf),
                ("max_streams", "3"),
                ("expires_in", "3600"),
            ],
        )
        .await;
    assert_eq!(refused.status, StatusCode::FORBIDDEN);
    assert!(
        refused
            .body
            .contains("only the support role may change an account&#39;s limit"),
        "{}",
        refused.body
    );
    let refused = agent
        .post(
            "/accounts/acct-vl/limit-override/remove",
            &[("csrf", &csrf)],
        )
        .await;
    assert_eq!(refused.status, StatusCode::FORBIDDEN);
    assert_eq!(
        limits(&stack.limiter, "acct-vl").await,
        (1, serde_json::Value::Null)
    );
}

#[tokio::test]
async fn limit_posts_without_a_csrf_token_are_refused() {
    let stack = stack().await;
    let mut agent = Agent::signed_in(&stack.url, SUPPORT).await;
    let page = agent
        .post(
            "/accounts/acct-cl/limit-override",
            &[("max_streams", "3"), ("expires_in", "3600")],
        )
        .await;
    assert_eq!(page.status, StatusCode::FORBIDDEN);
    assert!(page.body.contains("Nothing was changed"), "{}", page.body);
    let token = agent.csrf().await;
    let cross_site = agent
        .post_with(
            "/accounts/acct-cl/limit-override",
            &[
                ("csrf", &token),
                ("max_streams", "3"),
                ("expires_in", "3600"),
            ],
            &[("sec-fetch-site", "cross-site")],
        )
        .await;
    assert_eq!(cross_site.status, StatusCode::FORBIDDEN);
    assert_eq!(
        limits(&stack.limiter, "acct-cl").await,
        (1, serde_json::Value::Null)
    );
    // With an override in place, a token-less remove leaves it there.
    let ok = agent
        .post(
            "/accounts/acct-cl/limit-override",
            &[
                ("csrf", &token),
                ("max_streams", "2"),
                ("expires_in", "3600"),
            ],
        )
        .await;
    assert_eq!(ok.status, StatusCode::SEE_OTHER);
    let page = agent
        .post("/accounts/acct-cl/limit-override/remove", &[])
        .await;
    assert_eq!(page.status, StatusCode::FORBIDDEN);
    assert_eq!(limits(&stack.limiter, "acct-cl").await.0, 2);
}

#[tokio::test]
async fn invalid_limit_input_gets_a_message() {
    let stack = stack().await;
    let mut agent = Agent::signed_in(&stack.url, SUPPORT).await;
    let csrf = agent.csrf().await;
    for (streams, expires, expected) in [
        ("0", "3600", "“0” is not a number of screens"),
        ("101", "3600", "from 1 to 100"),
        (
            "<b>lots</b>",
            "3600",
            "“&#60;b&#62;lots&#60;/b&#62;” is not a number",
        ),
        ("", "3600", "Enter how many screens"),
        ("3", "9999999", "from 1 hour to 30 days"),
        ("3", "", "from 1 hour to 30 days"),
    ] {
        let page = agent
            .post(
                "/accounts/acct-il/limit-override",
                &[
                    ("csrf", &csrf),
                    ("max_streams", streams),
                    ("expires_in", expires),
                ],
            )
            .await;
        assert_eq!(page.status, StatusCode::UNPROCESSABLE_ENTITY, "{streams}");
        assert!(
            page.body.contains(r#"id="override-error""#),
            "{}",
            page.body
        );
        assert!(page.body.contains(expected), "{streams}: {}", page.body);
        // The account page around it, with the form to correct.
        assert!(page.body.contains(r#"<strong id="plan">"#));
        assert!(!page.body.contains("<b>lots"));
    }
    assert_eq!(
        limits(&stack.limiter, "acct-il").await,
        (1, serde_json::Value::Null)
    );
    // A stray GET of the form address goes back to the account.
    let page = agent.get("/accounts/acct-il/limit-override").await;
    assert_eq!(page.location(), "/accounts/acct-il");
}
