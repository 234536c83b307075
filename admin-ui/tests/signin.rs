//! Sign-in under attack and sign-out across replicas, with real processes: a throwaway
//! `redis-server`, a limiter on the Redis store, and two dashboard replicas sharing a secret
//! (as `examples/production.yaml` runs them), behind a trusted proxy (this host) that names the
//! client in `X-Forwarded-For`.

mod common;

use std::collections::BTreeMap;
use std::net::TcpStream;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use common::{Agent, SUPPORT, VIEWER};
use reqwest::StatusCode;
use screenlimit_admin_ui::auth::throttle::ThrottleRules;
use screenlimit_admin_ui::config::Settings;
use screenlimit_admin_ui::web::client::parse_trusted_proxy;
use screenlimit_limiter::config::{Backend, Config, StoreConfig};
use serde_json::Value;

/// A `redis-server` of our own on a free port, stopped on drop.
struct Redis {
    child: Child,
    port: u16,
}

impl Redis {
    fn start() -> Redis {
        for _ in 0..5 {
            let port = std::net::TcpListener::bind("127.0.0.1:0")
                .unwrap()
                .local_addr()
                .unwrap()
                .port();
            let mut child = Command::new("redis-server")
                .args(["--port", &port.to_string(), "--bind", "127.0.0.1"])
                .args(["--save", "", "--appendonly", "no"])
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .expect("redis-server (scripts/install-test-deps.sh installs it)");
            let deadline = Instant::now() + Duration::from_secs(5);
            while Instant::now() < deadline {
                if let Ok(Some(_)) = child.try_wait() {
                    break; // the port was taken meanwhile: try another
                }
                if TcpStream::connect(("127.0.0.1", port)).is_ok() {
                    return Redis { child, port };
                }
                std::thread::sleep(Duration::from_millis(20));
            }
            let _ = child.kill();
            let _ = child.wait();
        }
        panic!("redis-server did not start");
    }

    fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }
}

impl Drop for Redis {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The limiter on Redis and two dashboard replicas in front of it.
struct Replicas {
    _redis: Redis,
    limiter: String,
    a: String,
    b: String,
}

fn rules() -> ThrottleRules {
    ThrottleRules {
        free_failures: 3,
        base_delay: Duration::from_millis(100),
        max_delay: Duration::from_millis(800),
        device_failures: 5,
        address_lockout_after: 10,
        lockout: Duration::from_secs(60),
        ..ThrottleRules::default()
    }
}

async fn replicas() -> Replicas {
    let redis = Redis::start();
    let config = Config {
        store: StoreConfig {
            backend: Backend::Redis,
            redis_shards: vec![redis.url()],
            // Everything shares this test's two cores: a roomy deadline, so that what is
            // measured is the dashboard, not the limiter's 25 ms store deadline under starvation.
            timeout: Duration::from_secs(1),
            ..StoreConfig::default()
        },
        ..Config::default()
    };
    let limiter =
        screenlimit_admin_ui::dev::start_limiter_with(common::free_listener().await, config, None)
            .expect("limiter on Redis starts")
            .url();
    let secret = screenlimit_admin_ui::auth::keys::random_bytes::<32>().to_vec();
    let settings = || {
        let mut settings = Settings::with_users(&limiter, common::users());
        settings.secret = secret.clone();
        settings.session_check_interval = Duration::from_millis(300);
        settings.trusted_proxies = vec![parse_trusted_proxy("127.0.0.1").unwrap()];
        settings.throttle = rules();
        settings.signin_queue_timeout = Duration::from_secs(1);
        settings.signin_concurrency = 1;
        settings
    };
    let a = common::dashboard(settings()).await;
    let b = common::dashboard(settings()).await;
    Replicas {
        _redis: redis,
        limiter,
        a,
        b,
    }
}

/// The limiter's audit entries of `kind`.
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

/// The audit entries of `kind` once at least `count` are there (written in the background),
/// waiting at most 5 s.
async fn audited(limiter: &str, kind: &str, count: usize) -> Vec<Value> {
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let entries = audit(limiter, kind).await;
        if entries.len() >= count || Instant::now() > deadline {
            return entries;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// A sign-in through the trusted proxy for client `address`: (status, Retry-After, time).
async fn attempt(
    agent: &mut Agent,
    (user, password): (&str, &str),
    address: &str,
) -> (StatusCode, Option<u64>, Duration, String) {
    let csrf = agent.csrf().await;
    let started = Instant::now();
    let page = agent
        .post_with(
            "/sign-in",
            &[("csrf", &csrf), ("user", user), ("password", password)],
            &[("x-forwarded-for", address)],
        )
        .await;
    let retry_after = page
        .headers
        .get("retry-after")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse().ok());
    (page.status, retry_after, started.elapsed(), page.body)
}

/// Grants acct-x a temporary limit of `max` through `agent`'s dashboard.
async fn grant(agent: &mut Agent, csrf: &str, max: &str) -> common::Page {
    agent
        .post(
            "/accounts/acct-x/limit-override",
            &[("csrf", csrf), ("max_streams", max), ("expires_in", "3600")],
        )
        .await
}

#[tokio::test]
async fn a_cookie_signed_out_on_one_replica_is_refused_by_the_other() {
    let replicas = replicas().await;
    let mut on_a = Agent::signed_in(&replicas.a, SUPPORT).await;
    let mut on_b = Agent::new(&replicas.b);
    on_b.cookies = on_a.cookies.clone();

    // The session works on both replicas, for reading and for changes.
    assert_eq!(on_b.get("/accounts").await.status, StatusCode::OK);
    let csrf = on_b.get("/accounts/acct-x").await.csrf();
    let done = grant(&mut on_b, &csrf, "3").await;
    assert_eq!(done.status, StatusCode::SEE_OTHER, "{}", done.body);
    assert_eq!(done.location(), "/accounts/acct-x?limit=granted");

    // Signed out on A.
    let csrf_a = on_a.get("/accounts").await.csrf();
    let out = on_a.post("/sign-out", &[("csrf", &csrf_a)]).await;
    assert_eq!(out.status, StatusCode::SEE_OTHER);
    assert_eq!(out.location(), "/sign-in?signed_out=1");

    // B refuses a change at once (it asks the limiter afresh before any change)...
    let refused = grant(&mut on_b, &csrf, "4").await;
    assert_eq!(refused.status, StatusCode::SEE_OTHER, "{}", refused.body);
    assert!(
        refused.location().starts_with("/sign-in"),
        "{}",
        refused.location()
    );
    let streams = common::account_streams(&replicas.limiter, "acct-x").await;
    assert_eq!(
        streams["limit_override"]["max_streams"], 3,
        "nothing changed"
    );
    // ...and any page once its short cache has passed.
    tokio::time::sleep(Duration::from_millis(400)).await;
    let page = on_b.get("/accounts").await;
    assert_eq!(page.status, StatusCode::SEE_OTHER);
    assert!(
        page.location().starts_with("/sign-in"),
        "{}",
        page.location()
    );

    // A new sign-in, on B, is good on both.
    let on_b = Agent::signed_in(&replicas.b, SUPPORT).await;
    let mut again_on_a = Agent::new(&replicas.a);
    again_on_a.cookies = on_b.cookies.clone();
    assert_eq!(again_on_a.get("/accounts").await.status, StatusCode::OK);

    let sign_outs = audited(&replicas.limiter, "sign_out", 1).await;
    assert_eq!(sign_outs.len(), 1, "{sign_outs:?}");
    assert_eq!(sign_outs[0]["actor"], SUPPORT.0);
    assert_eq!(sign_outs[0]["address"], "127.0.0.1");
    assert_eq!(audited(&replicas.limiter, "sign_in", 2).await.len(), 2);
}

/// Signs `agent` in again as `who` from `address` after dropping its session (its device
/// cookie, if any, stays): (status, time, body).
async fn sign_in_again(
    agent: &mut Agent,
    who: (&str, &str),
    address: &str,
) -> (StatusCode, Duration, String) {
    agent.cookies.remove("sl_session");
    let (status, _, took, body) = attempt(agent, who, address).await;
    (status, took, body)
}

fn summary(results: &[(StatusCode, Option<u64>, Duration, String)]) -> String {
    let mut counts: BTreeMap<u16, usize> = BTreeMap::new();
    for (status, ..) in results {
        *counts.entry(status.as_u16()).or_default() += 1;
    }
    let mut times: Vec<Duration> = results.iter().map(|r| r.2).collect();
    format!("statuses {counts:?}, answer times {}", figures(&mut times))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hundred_guesses_never_keep_the_rightful_user_out() {
    let replicas = replicas().await;
    let rules = rules();
    // The rightful user signed in from this browser before (it holds a device cookie).
    let mut known = Agent::new(&replicas.a);
    let (status, _, _, body) = attempt(&mut known, SUPPORT, "198.51.100.2").await;
    assert_eq!(status, StatusCode::SEE_OTHER, "{body}");
    assert!(known.cookies.contains_key("sl_device"));
    let mut known_b = Agent::new(&replicas.b);
    known_b.cookies = known.cookies.clone();

    // 100 wrong guesses for the same name from one address, one after the other.
    let attacker = "203.0.113.7";
    let guessing = {
        let a = replicas.a.clone();
        tokio::spawn(async move {
            let mut agent = Agent::new(&a);
            let mut results = Vec::new();
            for _ in 0..100 {
                results.push(attempt(&mut agent, (SUPPORT.0, "guess"), attacker).await);
            }
            results
        })
    };
    // Meanwhile the browser that signed in before signs in at once, on either replica.
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let (status, took, body) = sign_in_again(&mut known_b, SUPPORT, "198.51.100.2").await;
    println!(
        "known browser during guesses from one address: {status} in {} ms",
        took.as_millis()
    );
    assert_eq!(status, StatusCode::SEE_OTHER, "{body}");
    let one_address = guessing.await.unwrap();
    println!("100 guesses from one address: {}", summary(&one_address));
    // The address was slowed, then paused; the pause was logged once.
    let failed = one_address
        .iter()
        .take_while(|r| r.0 == StatusCode::UNAUTHORIZED)
        .count();
    assert_eq!(
        failed as u32,
        rules.address_lockout_after,
        "{}",
        summary(&one_address)
    );
    for (status, retry_after, _, body) in &one_address[failed..] {
        assert_eq!(*status, StatusCode::TOO_MANY_REQUESTS);
        assert!(retry_after.is_some_and(|s| (1..=60).contains(&s)));
        assert!(body.contains("Sign-in is paused for"), "{body}");
    }

    // Then 100 more from 100 addresses, 10 at a time, on both replicas.
    let mut from_many = Vec::new();
    let mut during = Vec::new();
    for batch in 0..10u32 {
        let guesses: Vec<_> = (0..10u32)
            .map(|i| {
                let n = batch * 10 + i;
                let url = if n % 2 == 0 { &replicas.a } else { &replicas.b }.clone();
                tokio::spawn(async move {
                    let mut agent = Agent::new(&url);
                    let address = format!("192.0.2.{}", n + 1);
                    attempt(&mut agent, (SUPPORT.0, "guess"), &address).await
                })
            })
            .collect();
        if batch == 5 {
            // Meanwhile: the known browser at once; a new browser within the longest delay.
            let known = sign_in_again(&mut known, SUPPORT, "198.51.100.2").await;
            let mut new_browser = Agent::new(&replicas.b);
            let new = sign_in_again(&mut new_browser, SUPPORT, "198.51.100.99").await;
            during.push((known, new));
        }
        for guess in guesses {
            from_many.push(guess.await.unwrap());
        }
    }
    println!("100 guesses from 100 addresses: {}", summary(&from_many));
    // None refused: a name is only ever delayed. Past the free failures each guess waited.
    assert!(
        from_many.iter().all(|r| r.0 == StatusCode::UNAUTHORIZED),
        "{}",
        summary(&from_many)
    );
    let slowed = from_many.iter().filter(|r| r.2 >= rules.base_delay).count();
    assert!(slowed >= 80, "guesses delayed: {slowed} of 100");
    let after = (
        sign_in_again(&mut known, SUPPORT, "198.51.100.2").await,
        sign_in_again(&mut Agent::new(&replicas.a), SUPPORT, "198.51.100.98").await,
    );
    // A new browser waits at most the longest delay, then its turn at a verification slot.
    let documented = rules.max_delay + Duration::from_secs(1);
    for (when, ((known_status, known_took, known_body), (new_status, new_took, new_body))) in
        [("during", &during[0]), ("after", &after)]
    {
        println!(
            "{when} guesses from many addresses: known browser {known_status} in {} ms, new \
             browser {new_status} in {} ms",
            known_took.as_millis(),
            new_took.as_millis()
        );
        assert_eq!(*known_status, StatusCode::SEE_OTHER, "{known_body}");
        assert_eq!(*new_status, StatusCode::SEE_OTHER, "{new_body}");
        assert!(
            *new_took < documented + Duration::from_secs(3),
            "a new browser signed in within the longest delay and a verification: {new_took:?}"
        );
    }

    // The audit log has every failure (who, from where) and the one pause of the address.
    let failures = audited(&replicas.limiter, "sign_in_failed", failed + 100).await;
    assert_eq!(failures.len(), failed + 100);
    assert!(failures.iter().all(|e| e["actor"] == SUPPORT.0));
    let throttled = audited(&replicas.limiter, "sign_in_throttled", 1).await;
    assert_eq!(throttled.len(), 1, "once per pause: {throttled:?}");
    assert_eq!(throttled[0]["address"], attacker);

    // The Audit page shows them, filtered by kind.
    let mut lead = Agent::signed_in(&replicas.b, VIEWER).await;
    let page = lead.get("/audit?kind=sign_in_throttled").await;
    assert_eq!(page.status, StatusCode::OK);
    assert_eq!(
        page.body.matches("data-kind=\"sign_in_throttled\"").count(),
        1
    );
    assert!(page.body.contains("From 203.0.113.7"));
}

#[tokio::test]
async fn a_guesser_spreading_over_replicas_gets_the_budget_of_one() {
    let replicas = replicas().await;
    let rules = rules();
    // Each guess from another address (so that only the name's count slows it), alternating
    // between the replicas, from new browsers.
    let mut took = Vec::new();
    for n in 0..6u32 {
        let base = if n % 2 == 0 { &replicas.a } else { &replicas.b };
        let mut guesser = Agent::new(base);
        let address = format!("203.0.113.{}", 10 + n);
        let (status, _, time, _) = attempt(&mut guesser, (SUPPORT.0, "guess"), &address).await;
        assert_eq!(status, StatusCode::UNAUTHORIZED);
        took.push(time);
        // The failure reaches the limiter in the background: let it land.
        audited(&replicas.limiter, "sign_in_failed", n as usize + 1).await;
    }
    // As on one replica: the free failures, then the delay doubling from `base_delay`. Each
    // replica alone would have seen 3 failures and let every guess through at once.
    let slowest_expected = rules.base_delay * 4; // the 6th guess: 5 failures, 2 past the free 3
    println!("guesses over two replicas took {took:?}");
    assert!(
        took[5] >= slowest_expected.mul_f64(0.9),
        "the 6th guess waited {:?}, not the {slowest_expected:?} of the name's 5 failures",
        took[5]
    );
    assert!(took[4] >= rules.base_delay.mul_f64(1.8), "{took:?}");
    // The rightful user still signs in, and that clears the count everywhere.
    let mut user = Agent::new(&replicas.b);
    let (status, ..) = attempt(&mut user, SUPPORT, "198.51.100.7").await;
    assert_eq!(status, StatusCode::SEE_OTHER);
    let shared: Value = common::http()
        .get(format!(
            "{}/v1/dashboard-sessions/{}",
            replicas.limiter, SUPPORT.0
        ))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(shared["failures"], 0, "{shared}");
}

#[tokio::test]
async fn a_known_browser_has_its_own_small_budget() {
    let replicas = replicas().await;
    let rules = rules();
    let mut known = Agent::new(&replicas.a);
    let (status, ..) = attempt(&mut known, SUPPORT, "198.51.100.2").await;
    assert_eq!(status, StatusCode::SEE_OTHER);
    known.cookies.remove("sl_session");
    // Its own failures are answered at once, up to its budget...
    for _ in 0..rules.device_failures {
        let (status, _, took, _) = attempt(&mut known, (SUPPORT.0, "typo"), "198.51.100.2").await;
        assert_eq!(status, StatusCode::UNAUTHORIZED);
        println!("known browser's failure: {} ms", took.as_millis());
    }
    // ...then it is a new browser for a while, and the pause is logged.
    let throttled = audited(&replicas.limiter, "sign_in_throttled", 1).await;
    assert_eq!(throttled.len(), 1, "{throttled:?}");
    assert!(
        throttled[0]["reason"]
            .as_str()
            .unwrap()
            .contains("own budget")
    );
    // Another browser of the same user keeps its own budget; strangers' guesses have left the
    // name's count alone, so a new browser signs in without a delay too.
    let mut other = Agent::new(&replicas.b);
    let (status, ..) = attempt(&mut other, SUPPORT, "198.51.100.3").await;
    assert_eq!(status, StatusCode::SEE_OTHER);
    let (status, ..) = attempt(&mut known, SUPPORT, "198.51.100.2").await;
    assert_eq!(status, StatusCode::SEE_OTHER);
    // A device cookie proves nothing for another name.
    known.cookies.remove("sl_session");
    let (status, ..) = attempt(&mut known, (VIEWER.0, "typo"), "198.51.100.2").await;
    assert_eq!(status, StatusCode::UNAUTHORIZED);
    let failures = audited(&replicas.limiter, "sign_in_failed", 6).await;
    assert_eq!(failures.len() as u32, rules.device_failures + 1);
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    sorted[((sorted.len() - 1) as f64 * p).round() as usize]
}

fn figures(times: &mut [Duration]) -> String {
    times.sort();
    format!(
        "n={} p50={:.1}ms p95={:.1}ms max={:.1}ms",
        times.len(),
        percentile(times, 0.5).as_secs_f64() * 1e3,
        percentile(times, 0.95).as_secs_f64() * 1e3,
        times.last().unwrap().as_secs_f64() * 1e3
    )
}

// A runtime with two workers, as the dashboard's binary has on a two-core node.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_flood_of_sign_ins_leaves_the_account_page_answering() {
    let replicas = replicas().await;
    common::play(&replicas.limiter, "acct-42", "tv", "Living Room TV", "tv").await;
    let mut reader = Agent::signed_in(&replicas.a, VIEWER).await;
    let account_page = async |agent: &mut Agent| {
        let started = Instant::now();
        let page = agent.get("/accounts/acct-42").await;
        assert_eq!(page.status, StatusCode::OK);
        assert!(page.body.contains("Living Room TV"));
        started.elapsed()
    };
    let mut before = Vec::new();
    for _ in 0..20 {
        before.push(account_page(&mut reader).await);
    }

    // 200 sign-ins at once, each a different name from a different address, so that no
    // throttle refuses them: they all want an argon2 verification.
    let mut flooder = Agent::new(&replicas.a);
    let csrf = flooder.csrf().await;
    let cookie = format!("sl_csrf={}", flooder.cookies["sl_csrf"]);
    let client = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .timeout(Duration::from_secs(30))
        .build()
        .unwrap();
    let flood_started = Instant::now();
    let flood: Vec<_> = (0..200u32)
        .map(|i| {
            let request = client
                .post(format!("{}/sign-in", replicas.a))
                .header("cookie", &cookie)
                .header(
                    "x-forwarded-for",
                    format!("10.9.{}.{}", i / 250, i % 250 + 1),
                )
                .form(&[
                    ("csrf", csrf.as_str()),
                    ("user", &format!("guess-{i}")),
                    ("password", "hunter2"),
                ]);
            tokio::spawn(async move {
                let response = request.send().await.unwrap();
                (response.status().as_u16(), flood_started.elapsed())
            })
        })
        .collect();
    let mut during = Vec::new();
    while flood.iter().any(|t| !t.is_finished()) {
        during.push(account_page(&mut reader).await);
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let mut statuses: BTreeMap<u16, usize> = BTreeMap::new();
    let mut flood_end = Duration::ZERO;
    for task in flood {
        let (status, at) = task.await.unwrap();
        *statuses.entry(status).or_default() += 1;
        flood_end = flood_end.max(at);
    }
    let mut after = Vec::new();
    for _ in 0..10 {
        after.push(account_page(&mut reader).await);
    }
    let in_order: Vec<u128> = during.iter().map(|d| d.as_millis()).collect();
    println!("account page during, in order (ms): {in_order:?}");
    let (before_text, during_text, after_text) = (
        figures(&mut before),
        figures(&mut during),
        figures(&mut after),
    );
    println!(
        "flood of 200 concurrent sign-ins: answered in {} ms, statuses {statuses:?}",
        flood_end.as_millis()
    );
    println!("account page before: {before_text}");
    println!("account page during: {during_text}");
    println!("account page after:  {after_text}");

    // Every flood attempt got an answer that says what happened: wrong (401), busy (503).
    assert_eq!(statuses.values().sum::<usize>(), 200);
    assert!(
        statuses.keys().all(|s| [401, 429, 503].contains(s)),
        "{statuses:?}"
    );
    // Generous bounds only: the page answered throughout, and never took seconds.
    assert!(during.len() >= 3, "sampled during the flood: {during_text}");
    assert!(
        percentile(&during, 0.5) < Duration::from_secs(1)
            && *during.last().unwrap() < Duration::from_secs(5),
        "{during_text}"
    );
}
