//! Plans and limits without a restart, on the real binary: the config file is replaced (a new
//! file renamed over it, as a ConfigMap update swaps its symlink) while accounts play and
//! heartbeat. New plays see the lowered limit within the file-change delay, with the same
//! process and no failed request; a broken file is refused once and the config in force keeps
//! serving; a change that needs a restart is reported, not applied.

mod support;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use reqwest::StatusCode;
use serde_json::{Value, json};
use support::{Api, LimiterProcess};

const PLANS: &str = "plans: { basic: 1, family: 3 }\ndefault_plan: basic\nrevision: r1\n";

/// Replaces the config file the way a ConfigMap update does: a new file renamed over it.
fn rewrite(limiter: &LimiterProcess, body: &str) {
    limiter.rewrite_config(body);
}

async fn fleet_config(api: &Api) -> Value {
    let fleet: Value = api.get("/v1/fleet").await.json().await.unwrap();
    fleet["config"].clone()
}

/// Waits (bounded) until `check` holds, polling every 100 ms; returns how long it took.
async fn within<F, Fut>(limit: Duration, what: &str, mut check: F) -> Duration
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let started = Instant::now();
    while !check().await {
        assert!(started.elapsed() < limit, "{what} not within {limit:?}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    started.elapsed()
}

/// Plays `devices` on a fresh account of the family plan; returns the statuses.
async fn family_plays(api: &Api, account: &str, devices: usize) -> Vec<StatusCode> {
    let mut statuses = Vec::new();
    for d in 0..devices {
        let reply = api
            .play(json!({ "account_id": account, "device_id": format!("d{d}"), "plan": "family" }))
            .await;
        statuses.push(reply.status);
    }
    statuses
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lowered_limit_reaches_new_plays_live_and_a_broken_file_is_refused() {
    let limiter = LimiterProcess::try_start(
        PLANS,
        &[("RUST_LOG", "info"), ("SCREENLIMIT_LOG_FORMAT", "json")],
    )
    .unwrap();
    let api = limiter.client();
    assert_eq!(
        family_plays(&api, "before", 3).await,
        [StatusCode::OK; 3],
        "family allows 3 at start"
    );
    let config = fleet_config(&api).await;
    assert_eq!(
        (config["generation"].as_u64(), config["revision"].as_str()),
        (Some(1), Some("r1"))
    );

    // Accounts keep playing through every change: each heartbeat must be renewed.
    let stop = Arc::new(AtomicBool::new(false));
    let failures = Arc::new(AtomicUsize::new(0));
    let renewed = Arc::new(AtomicUsize::new(0));
    let mut players = Vec::new();
    for p in 0..4 {
        let account = format!("playing-{p}");
        let (api, stop, failures, renewed) =
            (api.clone(), stop.clone(), failures.clone(), renewed.clone());
        let ids: Vec<String> = {
            let mut ids = Vec::new();
            for d in 0..3 {
                let reply = api
                    .play(json!({ "account_id": account, "device_id": format!("d{d}"), "plan": "family" }))
                    .await;
                assert_eq!(reply.status, StatusCode::OK);
                ids.push(reply.stream_id());
            }
            ids
        };
        players.push(tokio::spawn(async move {
            while !stop.load(Ordering::Relaxed) {
                for id in &ids {
                    let reply = api.heartbeat(&account, id).await;
                    if reply.status == StatusCode::OK {
                        renewed.fetch_add(1, Ordering::Relaxed);
                    } else {
                        failures.fetch_add(1, Ordering::Relaxed);
                    }
                }
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }));
    }

    // The family plan lowered to 2: a fresh account's third play is refused, soon.
    rewrite(
        &limiter,
        "plans: { basic: 1, family: 2 }\ndefault_plan: basic\nrevision: r2\n",
    );
    let mut n = 0;
    let took = within(Duration::from_secs(5), "the lowered limit", || {
        n += 1;
        let (api, account) = (api.clone(), format!("after-{n}"));
        async move {
            family_plays(&api, &account, 3).await
                == [StatusCode::OK, StatusCode::OK, StatusCode::CONFLICT]
        }
    })
    .await;
    println!("a lowered family limit reached new plays {took:?} after the file changed");
    let config = fleet_config(&api).await;
    assert_eq!(
        (config["generation"].as_u64(), config["revision"].as_str()),
        (Some(2), Some("r2"))
    );
    assert_eq!(
        api.metric("screenlimit_config_generation ").await,
        Some(2.0)
    );
    assert_eq!(
        api.metric("screenlimit_config_info{revision=\"r2\"}").await,
        Some(1.0)
    );
    assert_eq!(
        api.metric("screenlimit_config_reloads_total{outcome=\"applied\"}")
            .await,
        Some(1.0)
    );

    // A broken file: refused, counted, said once; generation 2 keeps serving.
    rewrite(
        &limiter,
        "plans: { basic: 1, family: 0 }\ndefault_plan: basic\nrevision: r3\n",
    );
    within(Duration::from_secs(5), "the refusal", || {
        let api = api.clone();
        async move {
            api.metric("screenlimit_config_reloads_total{outcome=\"refused\"}")
                .await
                == Some(1.0)
        }
    })
    .await;
    let config = fleet_config(&api).await;
    assert_eq!(config["generation"].as_u64(), Some(2));
    assert!(
        config["refused"].as_str().unwrap().contains("`plans`"),
        "{config}"
    );
    assert_eq!(
        family_plays(&api, "while-refused", 3).await,
        [StatusCode::OK, StatusCode::OK, StatusCode::CONFLICT],
        "the config in force still serves"
    );

    // A change only a restart can make: reported, not applied, and the live part still is.
    rewrite(
        &limiter,
        "plans: { basic: 1, family: 3 }\ndefault_plan: basic\nrevision: r4\nthreads: 3\n",
    );
    within(Duration::from_secs(5), "the pending restart", || {
        let api = api.clone();
        async move { api.metric("screenlimit_config_restart_pending ").await == Some(1.0) }
    })
    .await;
    let config = fleet_config(&api).await;
    assert_eq!(config["restart_needed"], json!(["threads"]), "{config}");
    assert_eq!(config["generation"].as_u64(), Some(3));
    assert!(config["refused"].is_null(), "{config}");

    stop.store(true, Ordering::Relaxed);
    for player in players {
        player.await.unwrap();
    }
    assert_eq!(
        failures.load(Ordering::Relaxed),
        0,
        "heartbeats failed across the changes"
    );
    assert!(renewed.load(Ordering::Relaxed) > 24);
    let log = limiter.log();
    assert_eq!(log.matches("is refused").count(), 1, "{log}");
}

/// On Redis the store itself holds the default plan (for plays that name none) and the lease
/// timing: a reload reaches them too.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_redis_a_raised_default_plan_reaches_plays_that_name_no_plan() {
    let redis = support::RedisServer::start();
    let store = support::redis_config(&[redis.url()], "");
    let limiter = LimiterProcess::start(&format!(
        "{store}plans: {{ basic: 1, family: 3 }}\ndefault_plan: basic\nlease: {{ heartbeat_interval: 1s, ttl: 10s }}\n"
    ));
    let api = limiter.client();
    let plays = |account: String| {
        let api = api.clone();
        async move {
            let mut statuses = Vec::new();
            for device in ["tv", "phone"] {
                statuses.push(api.play_on(&account, device).await.status);
            }
            statuses
        }
    };
    assert_eq!(
        plays("first".into()).await,
        [StatusCode::OK, StatusCode::CONFLICT]
    );
    rewrite(
        &limiter,
        &format!(
            "{store}plans: {{ basic: 2, family: 3 }}\ndefault_plan: basic\nlease: {{ heartbeat_interval: 1s, ttl: 20s }}\n"
        ),
    );
    let mut n = 0;
    within(Duration::from_secs(5), "the raised default plan", || {
        n += 1;
        let plays = plays(format!("fresh-{n}"));
        async move { plays.await == [StatusCode::OK, StatusCode::OK] }
    })
    .await;
    // New leases get the new TTL.
    let reply = api.play_on("ttl", "tv").await;
    assert_eq!(reply.body["lease_ttl_sec"], 20.0, "{:?}", reply.body);
    assert_eq!(fleet_config(&api).await["generation"], 2);
}

/// A mounted ConfigMap as the kubelet lays it out: `limiter.yaml -> ..data/limiter.yaml`,
/// `..data -> ..<timestamp>/`; an update writes a new timestamped directory and renames a new
/// `..data` link over the old one. The file's inode and mtime seen through the path need not
/// tell; its content does.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_configmap_style_symlink_swap_is_seen() {
    use std::os::unix::fs::symlink;
    let limiter = LimiterProcess::start(PLANS);
    let api = limiter.client();
    let path = limiter.config_path.clone();
    let dir = path.parent().unwrap().to_owned();
    let text = std::fs::read_to_string(&path).unwrap();
    let version = |name: &str, body: &str| {
        let versioned = dir.join(name);
        std::fs::create_dir(&versioned).unwrap();
        std::fs::write(versioned.join("limiter.yaml"), body).unwrap();
        let link = dir.join("..data_tmp");
        symlink(name, &link).unwrap();
        std::fs::rename(&link, dir.join("..data")).unwrap();
    };
    // The same content behind the links: nothing to apply.
    version("..v1", &text);
    let link = dir.join("limiter.yaml.link");
    symlink("..data/limiter.yaml", &link).unwrap();
    std::fs::rename(&link, &path).unwrap();
    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert_eq!(fleet_config(&api).await["generation"], 1);

    version("..v2", &text.replace("family: 3", "family: 2"));
    let mut n = 0;
    within(Duration::from_secs(5), "the swapped file", || {
        n += 1;
        let (api, account) = (api.clone(), format!("swap-{n}"));
        async move {
            family_plays(&api, &account, 3).await
                == [StatusCode::OK, StatusCode::OK, StatusCode::CONFLICT]
        }
    })
    .await;
    assert_eq!(fleet_config(&api).await["generation"], 2);
}
