//! Shadow enforcement on the real binary, on each store (embedded, Redis through the scripts,
//! Redis through the module): a play the limits would refuse is granted and answered with the
//! refusal it would have been, counted by plan and rule, and kept in the account's history; a
//! share of accounts is enforced by a stable hash; switching enforcement on (a live reload) cuts
//! no stream that plays, and no request fails while it changes under load.

mod support;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use reqwest::StatusCode;
use screenlimit_limiter::enforcement::bucket;
use serde_json::{Value, json};
use support::{Api, LimiterProcess, RedisServer, redis_config};

const PLANS: &str = "plans:\n  basic: 1\n  standard: { max_streams: 2, device_caps: { mobile: 1 } }\ndefault_plan: basic\n";

fn config(enforcement: &str, revision: &str) -> String {
    format!("{PLANS}enforcement: {enforcement}\nrevision: {revision}\n")
}

#[tokio::test]
async fn the_embedded_store_lets_refusals_through_in_shadow_and_enforces_after_the_switch() {
    shadow_then_enforce("").await;
}

#[tokio::test]
async fn redis_through_the_scripts_lets_refusals_through_in_shadow_and_enforces_after_the_switch() {
    let redis = RedisServer::start();
    shadow_then_enforce(&redis_config(&[redis.url()], "")).await;
    assert_eq!(redis.calls("sl.acquire"), 0, "the scripts decided");
}

#[tokio::test]
async fn redis_through_the_module_lets_refusals_through_in_shadow_and_enforces_after_the_switch() {
    let redis = RedisServer::start_with_module(&[]);
    shadow_then_enforce(&redis_config(&[redis.url()], "")).await;
    assert!(redis.calls("sl.acquire") > 0, "the module decided");
}

async fn play(api: &Api, account: &str, device: &str, kind: &str) -> (StatusCode, Value) {
    let reply = api
        .play(
            json!({ "account_id": account, "device_id": device, "plan": "standard",
                      "device_type": kind, "device_meta": format!("{device}'s screen") }),
        )
        .await;
    (reply.status, reply.body)
}

async fn plays_counted(api: &Api, decision: &str, rule: &str, device_type: &str) -> f64 {
    let line = format!(
        "screenlimit_plays_total{{decision=\"{decision}\",device_type=\"{device_type}\",plan=\"standard\",rule=\"{rule}\"}}"
    );
    api.metric(&line).await.unwrap_or(0.0)
}

/// A limiter on the store `store_part` configures (empty: the embedded one), in shadow, then
/// switched to enforcing by a live reload.
async fn shadow_then_enforce(store_part: &str) {
    let limiter = LimiterProcess::start(&format!(
        "{store_part}{}",
        config("{ mode: shadow }", "shadow")
    ));
    let (limiter, api) = (&limiter, &limiter.client());
    let acct = "family-shadow";
    let (status, tv) = play(api, acct, "tv", "tv").await;
    assert_eq!(status, StatusCode::OK, "{tv}");
    assert_eq!(tv["shadow"], json!({ "would_refuse": false }), "{tv}");
    let (_, web) = play(api, acct, "web", "web").await;
    // Over the plan's two: let through, with the refusal it would have been.
    let (status, tablet) = play(api, acct, "tablet", "tablet").await;
    assert_eq!(status, StatusCode::OK, "{tablet}");
    assert_eq!(
        tablet["shadow"],
        json!({ "would_refuse": true, "rule": "max_streams", "limit": 2 })
    );
    assert_eq!(tablet["active_count"], 3, "the store holds the truth");
    // A device-type cap, on another account.
    play(api, "phones-shadow", "phone-1", "mobile").await;
    let (status, phone) = play(api, "phones-shadow", "phone-2", "mobile").await;
    assert_eq!(status, StatusCode::OK, "{phone}");
    assert_eq!(
        phone["shadow"],
        json!({ "would_refuse": true, "rule": "device_type_cap", "limit": 2,
                "device_type": "mobile", "cap": 1 })
    );
    assert_eq!(
        plays_counted(api, "shadow_refused", "max_streams", "").await,
        1.0
    );
    assert_eq!(
        plays_counted(api, "shadow_refused", "device_type_cap", "mobile").await,
        1.0
    );
    assert_eq!(plays_counted(api, "allowed", "", "").await, 3.0);
    let list = api.list(acct).await.body;
    assert_eq!(list["enforcement"], "shadow", "{list}");
    assert_eq!(list["active"].as_array().unwrap().len(), 3, "{list}");
    let history: Value = api
        .get(&format!("/v1/accounts/{acct}/history"))
        .await
        .json()
        .await
        .unwrap();
    let newest = &history["entries"][0];
    assert_eq!(newest["kind"], "shadow_refused", "{history}");
    assert_eq!(newest["rule"], "plan_limit");
    assert_eq!(newest["device"]["device_id"], "tablet");
    assert_eq!(newest["holders"].as_array().unwrap().len(), 2, "{history}");

    // Switched on: the three that play keep playing, new plays see the limit.
    limiter.rewrite_config(&format!(
        "{store_part}{}",
        config("{ mode: enforce }", "enforced")
    ));
    let started = Instant::now();
    loop {
        let account = format!("after-{}", started.elapsed().as_millis());
        play(api, &account, "a", "tv").await;
        play(api, &account, "b", "tv").await;
        if play(api, &account, "c", "tv").await.0 == StatusCode::CONFLICT {
            break;
        }
        assert!(
            started.elapsed() < Duration::from_secs(5),
            "enforcement never came into force"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    for stream in [&tv, &web, &tablet] {
        let id = stream["stream_id"].as_str().unwrap();
        let beat = api.heartbeat(acct, id).await;
        assert_eq!(
            beat.status,
            StatusCode::OK,
            "a playing stream was cut: {beat:?}"
        );
    }
    let (status, refused) = play(api, acct, "console", "console").await;
    assert_eq!(status, StatusCode::CONFLICT, "{refused}");
    assert_eq!(refused["active"].as_array().unwrap().len(), 3);
    let list = api.list(acct).await.body;
    assert_eq!(list["enforcement"], "enforce", "{list}");
    assert_eq!(list["active"].as_array().unwrap().len(), 3, "{list}");
    assert!(plays_counted(api, "denied", "max_streams", "").await >= 2.0);
}

#[tokio::test]
async fn a_share_of_accounts_is_enforced_and_each_stays_on_its_side() {
    let limiter = LimiterProcess::start(&config("{ mode: enforce, enforce_percent: 50 }", "half"));
    let api = limiter.client();
    let accounts: Vec<String> = (0..40).map(|i| format!("share-{i}")).collect();
    let (mut enforced, mut shadowed) = (0, 0);
    for round in 0..2 {
        for account in &accounts {
            let device = |d: &str| format!("{d}-{round}");
            play(&api, account, &device("a"), "tv").await;
            play(&api, account, &device("b"), "tv").await;
            let (status, body) = play(&api, account, &device("c"), "tv").await;
            let expected = match bucket(account) < 50 {
                true => StatusCode::CONFLICT,
                false => StatusCode::OK,
            };
            assert_eq!(
                status,
                expected,
                "{account} (bucket {}): {body}",
                bucket(account)
            );
            if round == 0 {
                match status == StatusCode::CONFLICT {
                    true => enforced += 1,
                    false => shadowed += 1,
                }
            }
        }
    }
    assert!(
        enforced > 5 && shadowed > 5,
        "{enforced} enforced, {shadowed} in shadow"
    );
    let fleet: Value = api.get("/v1/fleet").await.json().await.unwrap();
    assert_eq!(
        fleet["enforcement"],
        json!({ "enforce_percent": 50, "plans": {} })
    );
}

/// Enforcement changes several times while players play, heartbeat and stop on Redis: every play
/// is answered 200 or 409, every heartbeat and stop 200, and nothing fails.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn enforcement_changes_live_under_load_and_no_request_fails() {
    let redis = RedisServer::start();
    let store_part = redis_config(&[redis.url()], "");
    let limiter =
        LimiterProcess::start(&format!("{store_part}{}", config("{ mode: shadow }", "r0")));
    let api = limiter.client();
    let stop = Arc::new(AtomicBool::new(false));
    let failures = Arc::new(std::sync::Mutex::new(Vec::<String>::new()));
    let (shadow_answers, refusals, requests) = (
        Arc::new(AtomicUsize::new(0)),
        Arc::new(AtomicUsize::new(0)),
        Arc::new(AtomicUsize::new(0)),
    );
    let mut players = Vec::new();
    for p in 0..8 {
        let (api, stop, failures) = (api.clone(), stop.clone(), failures.clone());
        let (shadow_answers, refusals, requests) =
            (shadow_answers.clone(), refusals.clone(), requests.clone());
        players.push(tokio::spawn(async move {
            let account = format!("load-{p}");
            let mut round = 0;
            while !stop.load(Ordering::Relaxed) {
                round += 1;
                let mut playing = Vec::new();
                for d in 0..3 {
                    let (status, body) = play(&api, &account, &format!("d{d}-{round}"), "tv").await;
                    requests.fetch_add(1, Ordering::Relaxed);
                    match status {
                        StatusCode::OK => {
                            if body["shadow"]["would_refuse"] == true {
                                shadow_answers.fetch_add(1, Ordering::Relaxed);
                            }
                            playing.push(body["stream_id"].as_str().unwrap().to_owned());
                        }
                        StatusCode::CONFLICT => {
                            refusals.fetch_add(1, Ordering::Relaxed);
                        }
                        other => failures
                            .lock()
                            .unwrap()
                            .push(format!("play {other}: {body}")),
                    }
                }
                for id in &playing {
                    for reply in [
                        api.heartbeat(&account, id).await,
                        api.stop(&account, id).await,
                    ] {
                        requests.fetch_add(1, Ordering::Relaxed);
                        if reply.status != StatusCode::OK {
                            failures.lock().unwrap().push(format!("{reply:?}"));
                        }
                    }
                }
            }
        }));
    }
    let modes = [
        "{ mode: enforce, enforce_percent: 50 }",
        "{ mode: enforce }",
        "{ mode: shadow }",
        "{ mode: enforce, enforce_percent: 10 }",
        "{ mode: enforce }",
    ];
    for (i, mode) in modes.iter().enumerate() {
        tokio::time::sleep(Duration::from_millis(700)).await;
        limiter.rewrite_config(&format!(
            "{store_part}{}",
            config(mode, &format!("r{}", i + 1))
        ));
    }
    tokio::time::sleep(Duration::from_millis(1500)).await;
    stop.store(true, Ordering::Relaxed);
    for player in players {
        player.await.unwrap();
    }
    let failures = std::mem::take(&mut *failures.lock().unwrap());
    assert!(
        failures.is_empty(),
        "{} failed: {:?}",
        failures.len(),
        &failures[..failures.len().min(5)]
    );
    let fleet: Value = api.get("/v1/fleet").await.json().await.unwrap();
    assert_eq!(fleet["config"]["revision"], "r5", "{}", fleet["config"]);
    let (shadowed, refused) = (
        shadow_answers.load(Ordering::Relaxed),
        refusals.load(Ordering::Relaxed),
    );
    println!(
        "{} requests across {} changes: {shadowed} let through in shadow, {refused} refused",
        requests.load(Ordering::Relaxed),
        modes.len()
    );
    assert!(shadowed > 0 && refused > 0, "both sides were exercised");
}
