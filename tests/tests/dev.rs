//! Suite **dev**: `examples/dev.yaml` (one shard, no replica, policy `open`) with the dashboard
//! on, as the operator's pure build renders it, started as local pods: the shard's Redis from its
//! inline start script, the limiter and the dashboard from their Deployments (command = the
//! workspace's binaries, the rendered args, env, ConfigMap and Secrets). Driven from outside
//! through port-forwards: a play, a heartbeat, a denial at the cap; the Redis pod crashes and
//! comes back (no 5xx meanwhile, the cap holds again after); a force-stop in headless Chromium
//! through the dashboard; the stopped device's heartbeat says revoked, and still does after the
//! limiter pod restarts. The windows are printed (`--no-capture` shows them).

use std::process::Stdio;
use std::time::{Duration, Instant};

use fantoccini::Locator;
use k8s_openapi::api::apps::v1::{Deployment, StatefulSet};
use reqwest::StatusCode;
use screenlimit_operator::build::build;
use screenlimit_operator::names::Names;
use screenlimit_system_tests::api::{heartbeat, play};
use screenlimit_system_tests::browser::Browser;
use screenlimit_system_tests::pods::{Cluster, Pod};
use screenlimit_system_tests::{
    add_limiter_image, binary, example, named, operator_secrets, require_root,
};

const START: Duration = Duration::from_secs(30);
const SUPPORT: (&str, &str) = ("ana", "support-password-1");
const USERS_SECRET: &str = "screenlimit-admin-users";
const ACCOUNT: &str = "acct-dev";

/// A users file line for the dashboard's Secret, made by its own `hash-password`.
fn users_line(admin_ui: &str, (user, password): (&str, &str)) -> String {
    use std::io::Write;
    let mut child = std::process::Command::new(admin_ui)
        .args(["hash-password", "--user", user, "--role", "support"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("screenlimit-admin-ui hash-password");
    writeln!(child.stdin.take().unwrap(), "{password}").unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success(), "hash-password: {out:?}");
    String::from_utf8(out.stdout).unwrap()
}

/// Polls `check` every 100 ms until it holds; the time it took. Panics naming `what` after
/// `timeout`.
async fn eventually<F, Fut>(timeout: Duration, what: &str, mut check: F) -> Duration
where
    F: FnMut() -> Fut,
    Fut: Future<Output = bool>,
{
    let start = Instant::now();
    while !check().await {
        assert!(start.elapsed() < timeout, "no {what} after {timeout:?}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    start.elapsed()
}

/// Starts `pod` and waits for its readiness probe; the time that took.
/// The limiter's one shard is on the native path (`screenlimit_store_path`), within the 5 s a
/// shard takes to be asked again after a restart.
async fn assert_native(api: &str, redis: &Pod) {
    let wanted = "screenlimit_store_path{path=\"native\",shard=\"0\"} 1";
    let deadline = Instant::now() + Duration::from_secs(15);
    loop {
        let metrics = reqwest::get(format!("{api}/metrics"))
            .await
            .expect("the limiter's /metrics")
            .text()
            .await
            .unwrap();
        if metrics.contains(wanted) {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "the shard is not on the native path:\n{}\nRedis log:\n{}",
            metrics
                .lines()
                .filter(|l| l.contains("store_path"))
                .collect::<Vec<_>>()
                .join("\n"),
            redis.log()
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

fn start_ready(pod: &mut Pod) -> Duration {
    let started = Instant::now();
    pod.start();
    pod.wait_ready(START);
    started.elapsed()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dev_example_plays_denies_survives_a_redis_crash_and_force_stops_in_the_browser() {
    require_root();
    let mut sl = example("dev.yaml");
    // The example leaves the dashboard off; on, with the users Secret a person would create.
    sl.spec.admin_ui.enabled = true;
    sl.spec.admin_ui.auth_secret_name = Some(USERS_SECRET.to_owned());
    let desired = build(&sl).expect("the operator's build");
    let names = Names::new("screenlimit-demo");
    let admin_ui_binary = binary("screenlimit-admin-ui");

    let mut cluster = Cluster::new("video", &desired.config_maps);
    add_limiter_image(&mut cluster, &sl);
    for secret in operator_secrets(&sl) {
        cluster.add_secret_object(&secret);
    }
    cluster.add_secret(
        USERS_SECRET,
        [("users".to_owned(), users_line(&admin_ui_binary, SUPPORT))].into(),
    );

    let shard: &StatefulSet = named(&desired.stateful_sets, &names.redis_shard(0));
    let mut redis = cluster.stateful_pod(shard, 0);
    let redis_up = start_ready(&mut redis);
    cluster.add_service(&names.redis_shard(0), &redis);

    let deployment: &Deployment = named(&desired.deployments, &names.limiter());
    let mut limiter = cluster.deployment_pod(
        deployment,
        &format!("{}-0", names.limiter()),
        vec![binary("screenlimit-limiter")],
    );
    let limiter_up = start_ready(&mut limiter);
    cluster.add_service(&names.limiter(), &limiter);

    let deployment: &Deployment = named(&desired.deployments, &names.admin_ui());
    let mut dashboard = cluster.deployment_pod(
        deployment,
        &format!("{}-0", names.admin_ui()),
        vec![admin_ui_binary],
    );
    let dashboard_up = start_ready(&mut dashboard);
    println!(
        "ready after start: redis {redis_up:?}, limiter {limiter_up:?}, dashboard {dashboard_up:?}"
    );

    let api_forward = cluster.port_forward(&limiter, 8080);
    let api = api_forward.url();
    let ui_forward = cluster.port_forward(&dashboard, 8081);

    // A play decided by Redis, a heartbeat, a denial at the plan's cap of 1.
    let (status, body) = play(&api, ACCOUNT, "living-room-tv").await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body["active_count"], 1, "{body}");
    assert_ne!(body["degraded"], true, "{body}\n{}", limiter.log());
    let tv = body["stream_id"].as_str().unwrap().to_owned();
    assert_eq!(
        heartbeat(&api, ACCOUNT, &tv).await,
        (StatusCode::OK, String::new())
    );
    let (status, body) = play(&api, ACCOUNT, "bedroom-tv").await;
    assert_eq!(status, StatusCode::CONFLICT, "{body}");
    assert_eq!(body["error"], "concurrent_stream_limit", "{body}");
    assert_eq!(body["active"][0]["device_id"], "living-room-tv", "{body}");
    // The shard runs the module its init container copied (`copy-redis-module`, the limiter
    // image's `copy-module`), and the limiter decided those plays with its native commands.
    assert_native(&api, &redis).await;

    // The Redis pod crashes (no persistence: it comes back empty). Under policy `open` every
    // play is answered 200 meanwhile, degraded, never a 5xx.
    redis.kill();
    let mut probes = 0;
    let outage = eventually(START, "a degraded play while Redis is down", || {
        probes += 1;
        let api = api.clone();
        async move {
            let (status, body) = play(&api, &format!("acct-outage-{probes}"), "tv").await;
            assert_eq!(
                status,
                StatusCode::OK,
                "a play under `open` with Redis down: {body}"
            );
            body["degraded"] == true
        }
    })
    .await;
    // An outage is logged as it starts and ends, never a line per request.
    let lines_before = limiter.log().lines().count();
    for i in 0..50 {
        let (status, body) = play(&api, &format!("acct-during-{i}"), "tv").await;
        assert_eq!(
            status,
            StatusCode::OK,
            "a play under `open` with Redis down: {body}"
        );
        assert_eq!(body["degraded"], true, "{body}");
    }
    let logged = limiter.log().lines().count() - lines_before;
    assert!(
        logged < 10,
        "{logged} log lines for 50 degraded plays:\n{}",
        limiter.log()
    );
    let restarted = Instant::now();
    redis.start();
    let mut probes = 0;
    eventually(START, "a play decided by the restarted Redis", || {
        probes += 1;
        let api = api.clone();
        async move {
            let (status, body) = play(&api, &format!("acct-back-{probes}"), "tv").await;
            assert_eq!(
                status,
                StatusCode::OK,
                "a play under `open` while Redis starts: {body}"
            );
            body["degraded"] != true
        }
    })
    .await;
    let back = restarted.elapsed();
    // The lost lease comes back on its next heartbeat, and the cap with it.
    assert_eq!(
        heartbeat(&api, ACCOUNT, &tv).await,
        (StatusCode::OK, String::new())
    );
    let (status, body) = play(&api, ACCOUNT, "bedroom-tv").await;
    assert_eq!(
        status,
        StatusCode::CONFLICT,
        "the cap after the restart: {body}"
    );
    // The restarted container loads the module from the same emptyDir (init containers do
    // not run again at a container restart).
    assert_native(&api, &redis).await;
    println!(
        "Redis pod crash: first degraded play after {outage:?}; decided by Redis again {back:?} \
         after the restart (probe and breaker included)"
    );

    // A support agent force-stops the TV in the dashboard.
    let browser = Browser::start().await;
    let confirmed = force_stop_in_browser(&browser, &ui_forward.url()).await;
    eventually(START, "the stopped TV's heartbeat revoked", || {
        let api = api.clone();
        let tv = tv.clone();
        async move {
            heartbeat(&api, ACCOUNT, &tv).await == (StatusCode::GONE, "stream_revoked".into())
        }
    })
    .await;
    println!(
        "force-stop: confirmed in the browser → heartbeat 410 stream_revoked {:?} later (the \
         dashboard's page back included)",
        confirmed.elapsed()
    );
    browser.close().await;
    // The slot is free for the other device.
    let (status, body) = play(&api, ACCOUNT, "bedroom-tv").await;
    assert_eq!(status, StatusCode::OK, "{body}");

    // The limiter pod restarts (a new container, the same config): the state is in Redis, so
    // the revoked stream stays revoked and the cap still holds.
    let restarted = Instant::now();
    limiter.kill();
    start_ready(&mut limiter);
    println!(
        "limiter pod restart: ready again after {:?}",
        restarted.elapsed()
    );
    assert_eq!(
        heartbeat(&api, ACCOUNT, &tv).await,
        (StatusCode::GONE, "stream_revoked".into())
    );
    let (status, body) = play(&api, ACCOUNT, "living-room-tv").await;
    assert_eq!(status, StatusCode::CONFLICT, "{body}");
    assert!(
        !limiter.log().contains("\"level\":\"ERROR\""),
        "{}",
        limiter.log()
    );
}

/// Signs in as support. A sign-in the limiter cannot confirm in time (on a loaded machine its
/// store may miss a deadline) comes back as the sign-in page saying "Try again in a few seconds":
/// the agent tries again, as a person would, a few times.
async fn sign_in(browser: &Browser) -> Result<(), fantoccini::error::CmdError> {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let user = browser.wait_for(Locator::Id("user")).await?;
        user.clear().await?;
        browser.type_into(Locator::Id("user"), SUPPORT.0).await?;
        browser
            .type_into(Locator::Id("password"), SUPPORT.1)
            .await?;
        browser.click(Locator::Id("sign-in")).await?;
        // The Accounts page, or a new sign-in page with why (its password field is empty; the
        // page the password was typed into is not it).
        loop {
            if browser.client.find(Locator::Id("account_id")).await.is_ok() {
                return Ok(());
            }
            let retry = match browser.client.find(Locator::Css("p.alert")).await {
                Ok(alert) => {
                    let text = alert.text().await.unwrap_or_default();
                    let typed = match browser.client.find(Locator::Id("password")).await {
                        Ok(field) => field.prop("value").await.ok().flatten(),
                        Err(_) => None,
                    };
                    text.contains("Try again") && typed.as_deref() == Some("")
                }
                Err(_) => false,
            };
            if retry {
                break;
            }
            assert!(Instant::now() < deadline, "no sign-in within 30 s");
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        assert!(Instant::now() < deadline, "no sign-in within 30 s");
        println!("sign-in: the limiter could not confirm it in time; trying again");
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

/// Signs in, finds the account, force-stops the living-room TV through its confirmation page;
/// the moment the stop was confirmed.
async fn force_stop_in_browser(browser: &Browser, dashboard: &str) -> Instant {
    let outcome: Result<Instant, fantoccini::error::CmdError> = async {
        browser
            .client
            .goto(&format!("{dashboard}/accounts"))
            .await?;
        sign_in(browser).await?;
        browser
            .type_into(Locator::Id("account_id"), ACCOUNT)
            .await?;
        browser.click(Locator::Id("search")).await?;
        browser.wait_for(Locator::Css("tr.device-row")).await?;
        assert_eq!(browser.text_of(Locator::Id("in-use")).await?, "1");
        browser
            .click(Locator::Css(
                r#"tr[data-device-id="living-room-tv"] a.force-stop"#,
            ))
            .await?;
        browser.wait_for(Locator::Id("confirm-device")).await?;
        // The lease came back from its heartbeat after the Redis restart: its display name was
        // lost with the store (a stream id carries account, device and plan, no details), so the
        // page names the device by its id.
        assert_eq!(
            browser.text_of(Locator::Id("confirm-device")).await?,
            "living-room-tv"
        );
        browser
            .type_into(Locator::Id("reason"), "system suite: customer asked")
            .await?;
        browser.click(Locator::Id("confirm-force-stop")).await?;
        let confirmed = Instant::now();
        browser.wait_for(Locator::Id("notice")).await?;
        let notice = browser.text_of(Locator::Id("notice")).await?;
        assert!(notice.contains("Force-stopped"), "{notice}");
        assert_eq!(browser.text_of(Locator::Id("in-use")).await?, "0");
        Ok(confirmed)
    }
    .await;
    outcome.expect("the force-stop in the browser")
}

#[test]
fn the_dev_example_renders_what_this_suite_runs() {
    // The suite relies on these: one shard without Sentinel, fail open, a cap of 1 on `basic`.
    let sl = example("dev.yaml");
    assert_eq!(sl.spec.redis.shards, 1);
    assert_eq!(sl.spec.redis.replicas_per_shard, 0);
    let desired = build(&sl).unwrap();
    assert!(
        desired.limiter_config.contains("policy: open"),
        "{}",
        desired.limiter_config
    );
    assert_eq!(desired.stateful_sets.len(), 1);
}
