//! Sign-in through a real OpenID provider: the npm registry's `oidc-provider` (the certified
//! Node.js implementation), started by the test on a loopback port with the small configuration
//! in `tests/oidc/provider.mjs` (installed by `scripts/install-test-deps.sh`). Two dashboard
//! replicas share a secret and a limiter, with password users too.
//!
//! Over HTTP (a cookie-keeping client that follows the provider's pages by hand): roles from
//! groups, a user in no group refused, the audit entry (subject and name), and every refusal:
//! another issuer, another audience, an expired token, a tampered token, a key the provider
//! never published, a replayed `state`, a provider that is down (the password sign-in still
//! works); key rotation is followed. In headless Chromium (`tests/browser.rs`'s driver
//! helpers, in `common::browser`): sign in through the provider's page, support force-stops,
//! a viewer sees no button and is refused a forged POST, sign-out on one replica ends the
//! session on the other and offers the provider's end-session URL.

mod common;

use std::collections::BTreeMap;
use std::path::Path;
use std::process::Stdio;
use std::time::{Duration, Instant};

use common::browser::{self, Locator};
use reqwest::StatusCode;
use screenlimit_admin_ui::auth::oidc::OidcSettings;
use screenlimit_admin_ui::config::Settings;
use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, BufReader};

const CLIENT_ID: &str = "screenlimit-dashboard";
const CLIENT_SECRET: &str = "dashboard-test-secret-1";

/// The provider process, killed when dropped.
struct Provider {
    child: tokio::process::Child,
    issuer: String,
}

impl Provider {
    async fn start(redirects: &[String], post_logout: &[String]) -> Provider {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/oidc");
        assert!(
            dir.join("node_modules/oidc-provider").exists(),
            "the npm package oidc-provider is missing in {}: run scripts/install-test-deps.sh \
             (it runs `npm ci` there; Node.js 20 or later)",
            dir.display()
        );
        let accounts = json!({
            "sam": ["staff", "sl-support"],
            "val": ["staff", "sl-viewer"],
            "nora": ["staff"],
        });
        let mut child = tokio::process::Command::new("node")
            .arg(dir.join("provider.mjs"))
            .current_dir(&dir)
            .env("PORT", "0")
            .env("CLIENT_ID", CLIENT_ID)
            .env("CLIENT_SECRET", CLIENT_SECRET)
            .env("REDIRECT_URIS", redirects.join(","))
            .env("POST_LOGOUT_REDIRECT_URIS", post_logout.join(","))
            .env("ACCOUNTS", accounts.to_string())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .kill_on_drop(true)
            .spawn()
            .expect("node starts (Node.js 20 or later)");
        let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
        let line = tokio::time::timeout(Duration::from_secs(30), lines.next_line())
            .await
            .expect("the provider says where it listens within 30 s")
            .unwrap()
            .expect("a line from the provider");
        let issuer = line
            .strip_prefix("listening ")
            .unwrap_or_else(|| panic!("unexpected provider output: {line}"))
            .to_owned();
        Provider { child, issuer }
    }

    async fn control(&self, what: &str) {
        let response = common::http()
            .get(format!("{}/test/{what}", self.issuer))
            .send()
            .await
            .unwrap();
        assert!(response.status().is_success());
    }

    async fn stop(mut self) {
        self.child.kill().await.ok();
    }
}

/// A limiter, a provider and two dashboard replicas (A and B) with provider and password
/// sign-in.
struct Stack {
    limiter: String,
    provider: Provider,
    a: String,
    b: String,
}

async fn stack() -> Stack {
    let limiter = common::limiter(None).await;
    let listeners = [common::free_listener().await, common::free_listener().await];
    let urls: Vec<String> = listeners
        .iter()
        .map(|l| format!("http://{}", l.local_addr().unwrap()))
        .collect();
    let provider = Provider::start(
        &urls
            .iter()
            .map(|u| format!("{u}/oidc/callback"))
            .collect::<Vec<_>>(),
        &urls
            .iter()
            .map(|u| format!("{u}/sign-in?signed_out=1"))
            .collect::<Vec<_>>(),
    )
    .await;
    let secret = screenlimit_admin_ui::auth::keys::random_bytes::<32>().to_vec();
    let mut started = Vec::new();
    for (listener, url) in listeners.into_iter().zip(&urls) {
        let mut settings = Settings::with_users(&limiter, common::users());
        settings.secret = secret.clone();
        settings.session_check_interval = Duration::from_millis(300);
        let mut oidc = OidcSettings::new(&provider.issuer, CLIENT_ID, Some(CLIENT_SECRET), url);
        oidc.support_groups = vec!["sl-support".into()];
        oidc.viewer_groups = vec!["sl-viewer".into()];
        oidc.display_name = "Test IdP".into();
        oidc.timeout = Duration::from_secs(3);
        settings.oidc = Some(oidc);
        started.push(common::dashboard_on(listener, settings));
    }
    let b = started.pop().unwrap();
    let a = started.pop().unwrap();
    Stack {
        limiter,
        provider,
        a,
        b,
    }
}

// ---- a cookie-keeping client that walks the provider's pages --------------------------------

/// Cookies by name (every server here is 127.0.0.1, and the names do not collide).
#[derive(Default, Clone)]
struct Jar(BTreeMap<String, String>);

struct Answer {
    status: StatusCode,
    location: Option<String>,
    body: String,
    url: String,
}

impl Jar {
    async fn send(&mut self, method: &str, url: &str, form: &[(&str, &str)]) -> Answer {
        let client = common::http();
        let mut request = if method == "POST" {
            client.post(url).form(form)
        } else {
            client.get(url)
        };
        let cookies: Vec<String> = self.0.iter().map(|(k, v)| format!("{k}={v}")).collect();
        request = request.header("cookie", cookies.join("; "));
        let response = request.send().await.unwrap();
        let status = response.status();
        for value in response.headers().get_all("set-cookie") {
            let text = value.to_str().unwrap();
            let (name, value) = text.split(';').next().unwrap().split_once('=').unwrap();
            if value.is_empty() || text.to_ascii_lowercase().contains("max-age=0") {
                self.0.remove(name);
            } else {
                self.0.insert(name.to_owned(), value.to_owned());
            }
        }
        let location = response.headers().get("location").map(|v| {
            reqwest::Url::parse(url)
                .unwrap()
                .join(v.to_str().unwrap())
                .unwrap()
                .to_string()
        });
        Answer {
            status,
            location,
            body: response.text().await.unwrap(),
            url: url.to_owned(),
        }
    }

    /// GETs `url` and follows redirects; returns the last answer.
    async fn follow(&mut self, url: &str) -> Answer {
        let mut answer = self.send("GET", url, &[]).await;
        for _ in 0..10 {
            match answer.location.clone() {
                Some(next) if answer.status.is_redirection() => {
                    answer = self.send("GET", &next, &[]).await;
                }
                _ => break,
            }
        }
        answer
    }
}

/// The provider's sign-in as `login`, from the dashboard's start to (but not into) its callback:
/// returns the callback URL the provider sends the browser to.
async fn to_callback(jar: &mut Jar, dashboard: &str, login: &str) -> String {
    let start = jar
        .send("GET", &format!("{dashboard}/oidc/start?next=/audit"), &[])
        .await;
    assert_eq!(start.status, StatusCode::SEE_OTHER, "{}", start.body);
    let mut answer = jar
        .send("GET", start.location.as_deref().unwrap(), &[])
        .await;
    for _ in 0..10 {
        if let Some(next) = answer.location.clone() {
            if next.starts_with(dashboard) {
                return next;
            }
            answer = jar.send("GET", &next, &[]).await;
            continue;
        }
        // The provider's login page: any password does.
        assert!(
            answer.body.contains("name=\"login\""),
            "a login page: {} {}",
            answer.status,
            answer.body
        );
        answer = jar
            .send(
                "POST",
                &answer.url.clone(),
                &[("prompt", "login"), ("login", login), ("password", "any")],
            )
            .await;
    }
    panic!("the provider never sent the browser back");
}

/// The whole sign-in as `login`: the callback's answer.
async fn sign_in(jar: &mut Jar, dashboard: &str, login: &str) -> Answer {
    let callback = to_callback(jar, dashboard, login).await;
    jar.send("GET", &callback, &[]).await
}

async fn audit(limiter: &str, kind: &str) -> Vec<Value> {
    let body: Value = common::http()
        .get(format!("{limiter}/v1/audit?kind={kind}&limit=1000"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    body["entries"].as_array().unwrap().clone()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn provider_sign_in_checks_every_answer() {
    let stack = stack().await;
    let stream = common::play(&stack.limiter, "acct-42", "tv", "Living Room TV", "tv").await;

    // Support: signed in, a page that moves on, then the account page works with its session.
    let mut jar = Jar::default();
    let done = sign_in(&mut jar, &stack.a, "sam").await;
    assert_eq!(done.status, StatusCode::OK, "{}", done.body);
    assert!(done.body.contains("http-equiv=\"refresh\"") && done.body.contains("/audit"));
    assert!(jar.0.contains_key("sl_session"));
    assert!(!jar.0.contains_key("sl_oidc"), "the flow cookie is spent");
    let page = jar.follow(&format!("{}/accounts/acct-42", stack.b)).await;
    assert_eq!(page.status, StatusCode::OK);
    assert!(
        page.body.contains("sam") && page.body.contains("force-stop"),
        "{}",
        page.body
    );
    let entries = audit(&stack.limiter, "sign_in").await;
    let entry = entries
        .iter()
        .find(|e| e["actor"] == "oidc:sam")
        .expect("audited");
    let reason = entry["reason"].as_str().unwrap();
    assert!(
        reason.contains("sam") && reason.contains("subject sam"),
        "{reason}"
    );

    // A replayed state: the flow cookie copied back is refused here (taken), and on the other
    // replica the provider refuses the spent code.
    let mut replay = Jar::default();
    let callback = to_callback(&mut replay, &stack.a, "sam").await;
    let flow = replay.0["sl_oidc"].clone();
    let first = replay.send("GET", &callback, &[]).await;
    assert_eq!(first.status, StatusCode::OK);
    for replica in [&stack.a, &stack.b] {
        let mut thief = Jar::default();
        thief.0.insert("sl_oidc".into(), flow.clone());
        let url = callback.replacen(&stack.a, replica, 1);
        let again = thief.send("GET", &url, &[]).await;
        println!("replayed state on {replica}: {}", again.status);
        assert!(again.status.is_client_error(), "{}", again.body);
        assert!(!thief.0.contains_key("sl_session"));
    }
    // A callback without its flow cookie (another browser) is refused too.
    let mut other = Jar::default();
    let callback = to_callback(&mut other, &stack.a, "sam").await;
    let answer = Jar::default().send("GET", &callback, &[]).await;
    assert_eq!(answer.status, StatusCode::BAD_REQUEST);
    assert!(answer.body.contains("start again"), "{}", answer.body);

    // Viewer: reads, cannot force-stop.
    let mut viewer = Jar::default();
    assert_eq!(
        sign_in(&mut viewer, &stack.a, "val").await.status,
        StatusCode::OK
    );
    let page = viewer
        .follow(&format!("{}/accounts/acct-42", stack.a))
        .await;
    assert_eq!(page.status, StatusCode::OK);
    assert!(
        page.body.contains("viewer") && !page.body.contains("class=\"button danger force-stop")
    );
    let csrf = {
        let marker = "name=\"csrf\" value=\"";
        let start = page.body.find(marker).unwrap() + marker.len();
        page.body[start..start + page.body[start..].find('"').unwrap()].to_owned()
    };
    let refused = viewer
        .send(
            "POST",
            &format!("{}/accounts/acct-42/streams/{stream}/force-stop", stack.a),
            &[("csrf", &csrf)],
        )
        .await;
    assert_eq!(refused.status, StatusCode::FORBIDDEN);
    assert_eq!(
        common::heartbeat(&stack.limiter, "acct-42", &stream)
            .await
            .0,
        200
    );

    // In no group: a page that says so, no session.
    let mut nobody = Jar::default();
    let answer = sign_in(&mut nobody, &stack.a, "nora").await;
    assert_eq!(answer.status, StatusCode::FORBIDDEN);
    assert!(answer.body.contains("No access") && answer.body.contains("sl-support"));
    assert!(!nobody.0.contains_key("sl_session"));

    // Answers that fail the checks, each refused with a page that says so.
    for (mode, words) in [
        ("wrong-iss", "issuer"),
        ("wrong-aud", "audience"),
        ("expired", "Expired"),
        ("tampered", "Signature verification failed"),
        ("unknown-key", "Signature verification failed"),
    ] {
        stack.provider.control(&format!("mode?m={mode}")).await;
        let mut jar = Jar::default();
        let answer = sign_in(&mut jar, &stack.a, "sam").await;
        println!("{mode}: {} {}", answer.status, first_alert(&answer.body));
        assert_eq!(answer.status, StatusCode::BAD_REQUEST, "{mode}");
        assert!(
            answer.body.contains(words),
            "{mode}: {}",
            first_alert(&answer.body)
        );
        assert!(!jar.0.contains_key("sl_session"), "{mode}");
    }
    stack.provider.control("mode?m=none").await;

    // The provider rotates its signing key: the dashboard fetches the JWKS again.
    stack.provider.control("rotate").await;
    let mut jar = Jar::default();
    let answer = sign_in(&mut jar, &stack.b, "sam").await;
    assert_eq!(
        answer.status,
        StatusCode::OK,
        "after rotation: {}",
        first_alert(&answer.body)
    );

    // The provider down: a clear page; the password sign-in still works.
    let Stack { provider, a, .. } = stack;
    provider.stop().await;
    let mut jar = Jar::default();
    let started = Instant::now();
    let answer = jar.send("GET", &format!("{a}/oidc/start"), &[]).await;
    println!(
        "provider down: {} in {} ms",
        answer.status,
        started.elapsed().as_millis()
    );
    assert_eq!(answer.status, StatusCode::BAD_GATEWAY);
    assert!(
        answer.body.contains("does not answer"),
        "{}",
        first_alert(&answer.body)
    );
    assert!(
        answer.body.contains("id=\"password\""),
        "the password form is still there"
    );
    let mut agent = common::Agent::new(&a);
    agent.sign_in(common::SUPPORT).await;
}

fn first_alert(body: &str) -> &str {
    body.split("class=\"alert\"")
        .nth(1)
        .and_then(|rest| rest.split("</p>").next())
        .unwrap_or(body)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn provider_sign_in_in_a_real_browser() {
    let stack = stack().await;
    let tablet = common::play(
        &stack.limiter,
        "acct-42",
        "kids-tablet",
        "Kids Tablet",
        "tablet",
    )
    .await;
    let driver = browser::start_driver().await;
    let profile = tempfile::tempdir().unwrap();
    let client = browser::browser(&driver, profile.path()).await;
    let outcome = browser_run(&client, &stack, &tablet).await;
    client.close().await.ok();
    outcome.unwrap();
}

async fn provider_page_sign_in(
    client: &browser::Client,
    login: &str,
) -> Result<(), browser::CmdError> {
    browser::click(client, Locator::Id("sign-in-provider")).await?;
    browser::wait_for(client, Locator::Css("input[name=login]")).await?;
    browser::type_into(client, Locator::Css("input[name=login]"), login).await?;
    browser::type_into(client, Locator::Css("input[name=password]"), "any").await?;
    browser::click(client, Locator::Css("button.login-submit")).await
}

async fn browser_run(
    client: &browser::Client,
    stack: &Stack,
    tablet: &str,
) -> Result<(), browser::CmdError> {
    let (a, b) = (&stack.a, &stack.b);
    // Support signs in through the provider's page and force-stops the tablet.
    client.goto(&format!("{a}/accounts/acct-42")).await?;
    browser::wait_for(client, Locator::Id("sign-in-provider")).await?;
    browser::screenshot(client, "oidc-1-sign-in").await;
    provider_page_sign_in(client, "sam").await?;
    browser::wait_for(
        client,
        Locator::Css(r#"tr[data-device-id="kids-tablet"] a.force-stop"#),
    )
    .await?;
    assert_eq!(client.current_url().await?.path(), "/accounts/acct-42");
    let who = browser::text_of(client, Locator::Css(".who .user")).await?;
    assert_eq!(who, "sam");
    browser::screenshot(client, "oidc-2-signed-in").await;
    browser::click(
        client,
        Locator::Css(r#"tr[data-device-id="kids-tablet"] a.force-stop"#),
    )
    .await?;
    browser::wait_for(client, Locator::Id("confirm-force-stop")).await?;
    browser::click(client, Locator::Id("confirm-force-stop")).await?;
    browser::wait_for(client, Locator::Css(".notice")).await?;
    assert_eq!(
        common::heartbeat(&stack.limiter, "acct-42", tablet).await.1,
        "stream_revoked"
    );
    let old_cookie = client.get_named_cookie("sl_session").await?;

    // Sign out on replica B: the provider's end-session URL is offered.
    client.goto(&format!("{b}/accounts")).await?;
    browser::wait_for(client, Locator::Id("account_id")).await?;
    browser::click(client, Locator::Css(r#"form[action="/sign-out"] button"#)).await?;
    browser::wait_for(client, Locator::Id("provider-sign-out")).await?;
    let href = browser::attr_of(client, Locator::Id("provider-sign-out"), "href")
        .await?
        .unwrap_or_default();
    assert!(
        href.starts_with(&format!("{}/session/end", stack.provider.issuer)),
        "{href}"
    );
    browser::screenshot(client, "oidc-3-signed-out").await;
    // The old cookie opens nothing on replica A.
    client.add_cookie(old_cookie).await?;
    tokio::time::sleep(Duration::from_millis(400)).await;
    client.goto(&format!("{a}/accounts")).await?;
    browser::wait_for(client, Locator::Id("sign-in-provider")).await?;
    assert_eq!(client.current_url().await?.path(), "/sign-in");

    // A viewer (a fresh browser: no provider session either) sees no force-stop button.
    client.delete_all_cookies().await?;
    common::play(&stack.limiter, "acct-42", "tv", "Living Room TV", "tv").await;
    client.goto(&format!("{a}/accounts/acct-42")).await?;
    provider_page_sign_in(client, "val").await?;
    browser::wait_for(client, Locator::Css(r#"tr[data-device-id="tv"]"#)).await?;
    assert!(client.find(Locator::Css("a.force-stop")).await.is_err());
    let role = browser::text_of(client, Locator::Css(".who .role")).await?;
    assert_eq!(role, "viewer");

    // In no group: the page says so.
    client.delete_all_cookies().await?;
    client.goto(&format!("{a}/sign-in")).await?;
    provider_page_sign_in(client, "nora").await?;
    // The provider's page may still be there, or re-render, when the first h1 is found: read
    // the heading again until the dashboard's page is in (10 s at most).
    let expected = "No access to the support dashboard";
    let mut title = String::new();
    for _ in 0..50 {
        browser::wait_for(client, Locator::Css("h1")).await?;
        title = browser::text_of(client, Locator::Css("h1")).await?;
        if title == expected {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    }
    assert_eq!(title, expected);
    browser::screenshot(client, "oidc-4-no-access").await;
    Ok(())
}
