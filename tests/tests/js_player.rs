//! The JS client library (`clients/js`, built by `npm run build`) in headless Chromium, on its
//! example page served from another origin than the limiter, against a real limiter process on a
//! real Redis with player tokens and CORS: it plays and heartbeats every interval ± jitter; a
//! force-stop from the support API reaches it as `revoked` within one heartbeat; a 409 lists the
//! devices and the take-over works; closing the tab frees the slot at once; a store outage under
//! `open` shows `degraded` and the player keeps playing.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use fantoccini::Locator;
use jsonwebtoken::{EncodingKey, Header};
use reqwest::StatusCode;
use screenlimit_system_tests::browser::Browser;
use screenlimit_system_tests::{binary, workspace_root};
use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

const SUPPORT: &str = "support-token-of-the-js-test";
const SECRET: &str = "the-js-test-hs256-secret-32-bytes-long";
const ISSUER: &str = "https://auth.video.example";
const AUDIENCE: &str = "screenlimit";
/// The heartbeat interval the limiter gives, and the page's jitter.
const INTERVAL: Duration = Duration::from_secs(1);
const JITTER: f64 = 0.2;

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .unwrap()
        .port()
}

struct Killed(Child);

impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn redis(dir: &Path) -> (Killed, u16) {
    let port = free_port();
    let child = Command::new("redis-server")
        .args([
            "--port",
            &port.to_string(),
            "--bind",
            "127.0.0.1",
            "--save",
            "",
            "--appendonly",
            "no",
        ])
        .arg("--dir")
        .arg(dir)
        .stdout(Stdio::null())
        .spawn()
        .expect("redis-server (scripts/install-test-deps.sh)");
    wait_for_port(port);
    (Killed(child), port)
}

fn wait_for_port(port: u16) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(Instant::now() < deadline, "nothing listens on {port}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn player_token(account: &str) -> String {
    let exp = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs()
        + 600;
    jsonwebtoken::encode(
        &Header::default(),
        &json!({"sub": account, "iss": ISSUER, "aud": AUDIENCE, "exp": exp}),
        &EncodingKey::from_secret(SECRET.as_bytes()),
    )
    .unwrap()
}

/// Serves `clients/js` (the example page and the built library) on its own port: another origin
/// than the limiter's.
async fn serve_page(root: PathBuf) -> u16 {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    tokio::spawn(async move {
        loop {
            let Ok((mut socket, _)) = listener.accept().await else {
                return;
            };
            let root = root.clone();
            tokio::spawn(async move {
                let mut request = Vec::new();
                let mut buffer = [0u8; 2048];
                while !request.windows(4).any(|w| w == b"\r\n\r\n") && request.len() < 16_384 {
                    match socket.read(&mut buffer).await {
                        Ok(0) | Err(_) => return,
                        Ok(n) => request.extend_from_slice(&buffer[..n]),
                    }
                }
                let line = String::from_utf8_lossy(&request);
                let path = line.split_whitespace().nth(1).unwrap_or("/");
                let path = path.split('?').next().unwrap_or("/");
                let allowed = (path.starts_with("/example/") || path.starts_with("/dist/"))
                    && !path.contains("..");
                let file = allowed
                    .then(|| std::fs::read(root.join(&path[1..])).ok())
                    .flatten();
                let (status, kind, body) = match file {
                    Some(body) if path.ends_with(".js") => ("200 OK", "text/javascript", body),
                    Some(body) => ("200 OK", "text/html; charset=utf-8", body),
                    None => ("404 Not Found", "text/plain", b"not found".to_vec()),
                };
                let head = format!(
                    "HTTP/1.1 {status}\r\ncontent-type: {kind}\r\ncontent-length: {}\r\ncache-control: no-store\r\nconnection: close\r\n\r\n",
                    body.len()
                );
                let _ = socket.write_all(head.as_bytes()).await;
                let _ = socket.write_all(&body).await;
            });
        }
    });
    port
}

struct Page<'a> {
    browser: &'a Browser,
    handle: fantoccini::wd::WindowHandle,
}

impl Page<'_> {
    async fn focus(&self) {
        self.browser
            .client
            .switch_to_window(self.handle.clone())
            .await
            .unwrap();
    }

    /// Every event the page logged (`window.screenlimitEvents`).
    async fn events(&self) -> Vec<Value> {
        self.focus().await;
        let events = self
            .browser
            .client
            .execute("return window.screenlimitEvents || []", vec![])
            .await
            .unwrap();
        events.as_array().cloned().unwrap_or_default()
    }

    /// Waits until an event named `name` is logged (the `n`th one), and returns it.
    async fn wait_event(&self, name: &str, n: usize, within: Duration) -> Value {
        let deadline = Instant::now() + within;
        loop {
            let events = self.events().await;
            let named: Vec<&Value> = events.iter().filter(|e| e["name"] == name).collect();
            if named.len() >= n {
                return named[n - 1].clone();
            }
            assert!(
                Instant::now() < deadline,
                "no {name} #{n} within {within:?}; the page logged {events:#?}"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    async fn state(&self) -> String {
        self.focus().await;
        self.browser.text_of(Locator::Id("state")).await.unwrap()
    }
}

struct Stack {
    limiter: String,
    page: String,
    http: reqwest::Client,
}

impl Stack {
    fn url(&self, account: &str, device: &str, name: &str) -> String {
        format!(
            "{}/example/index.html?baseUrl={}&account={account}&device={device}&name={}&jitter={JITTER}&token={}",
            self.page,
            self.limiter,
            name.replace(' ', "%20"),
            player_token(account)
        )
    }

    async fn open<'a>(
        &self,
        browser: &'a Browser,
        account: &str,
        device: &str,
        name: &str,
    ) -> Page<'a> {
        let window = browser.client.new_window(true).await.unwrap();
        browser
            .client
            .switch_to_window(window.handle.clone())
            .await
            .unwrap();
        browser
            .client
            .goto(&self.url(account, device, name))
            .await
            .unwrap();
        Page {
            browser,
            handle: window.handle,
        }
    }

    async fn support(&self, request: reqwest::RequestBuilder) -> Value {
        let response = request.bearer_auth(SUPPORT).send().await.unwrap();
        assert_eq!(response.status(), StatusCode::OK);
        response.json().await.unwrap()
    }

    async fn active(&self, account: &str) -> Vec<Value> {
        let list = self
            .support(
                self.http
                    .get(format!("{}/v1/accounts/{account}/streams", self.limiter)),
            )
            .await;
        list["active"].as_array().cloned().unwrap()
    }
}

/// The waits the page's library chose between heartbeats, in seconds: from each answer (the
/// `playing` event, then each heartbeat's `at`) to the next heartbeat's sending (`sentAt`), so
/// the requests' own latency does not blur them.
fn heartbeat_gaps(events: &[Value]) -> Vec<f64> {
    let beats: Vec<&Value> = events
        .iter()
        .filter(|e| e["name"] == "playing" || e["name"] == "heartbeat")
        .collect();
    beats
        .windows(2)
        .map(|w| {
            let answered = w[0]["event"]["at"]
                .as_f64()
                .unwrap_or_else(|| w[0]["at"].as_f64().unwrap());
            (w[1]["event"]["sentAt"].as_f64().unwrap() - answered) / 1000.0
        })
        .collect()
}

#[tokio::test]
async fn the_js_library_plays_heartbeats_and_follows_the_limiter_in_a_real_browser() {
    let root = workspace_root().join("clients/js");
    assert!(
        root.join("dist/index.js").is_file(),
        "build the library first: npm ci && npm run build in clients/js (scripts/test.sh does)"
    );
    let dir = tempfile::tempdir().unwrap();
    let (mut redis, redis_port) = redis(dir.path());
    let page_port = serve_page(root).await;
    let page_origin = format!("http://127.0.0.1:{page_port}");
    std::fs::write(dir.path().join("support"), SUPPORT).unwrap();
    std::fs::write(dir.path().join("secret"), SECRET).unwrap();
    let limiter_port = free_port();
    let config = dir.path().join("limiter.yaml");
    std::fs::write(
        &config,
        format!(
            "listen: 127.0.0.1:{limiter_port}\n\
             store: {{ backend: redis, redis_shards: [\"redis://127.0.0.1:{redis_port}\"], timeout: 100ms, circuit_probe_interval: 200ms }}\n\
             stream_id_secret: js-test-stream-id-secret-0123456789\n\
             failure_policy: open\n\
             lease: {{ heartbeat_interval: 1s, ttl: 20s }}\n\
             plans: {{ basic: 1, family: 4 }}\n\
             default_plan: basic\n\
             auth:\n  support_token_file: {d}/support\n  players: {{ hs256_secret_file: {d}/secret, issuer: \"{ISSUER}\", audience: {AUDIENCE} }}\n\
             http: {{ cors: {{ allowed_origins: [\"{page_origin}\"] }} }}\n",
            d = dir.path().display()
        ),
    )
    .unwrap();
    let _limiter = Killed(
        Command::new(binary("screenlimit-limiter"))
            .arg("--config")
            .arg(&config)
            .env("RUST_LOG", "warn")
            .env("SCREENLIMIT_DRAIN_PERIOD", "0s")
            .spawn()
            .expect("the limiter starts"),
    );
    wait_for_port(limiter_port);
    let stack = Stack {
        limiter: format!("http://127.0.0.1:{limiter_port}"),
        page: page_origin,
        http: reqwest::Client::builder()
            .timeout(Duration::from_secs(5))
            .build()
            .unwrap(),
    };
    let browser = Browser::start().await;

    // Plays, from another origin, and heartbeats every interval ± jitter.
    let watching = stack.open(&browser, "acct-a", "web-1", "Laptop").await;
    watching
        .wait_event("playing", 1, Duration::from_secs(10))
        .await;
    watching
        .wait_event("heartbeat", 4, Duration::from_secs(10))
        .await;
    let gaps = heartbeat_gaps(&watching.events().await);
    let (low, high) = (1.0 - JITTER, 1.0 + JITTER);
    for gap in &gaps {
        // Timers fire late on a busy machine, never early.
        assert!(
            *gap >= low - 0.02 && *gap <= high + 0.4,
            "gap {gap:.3} s outside {low}..{high} s: {gaps:?}"
        );
    }
    let spread = gaps.iter().cloned().fold(f64::MIN, f64::max)
        - gaps.iter().cloned().fold(f64::MAX, f64::min);
    assert!(spread > 0.005, "the heartbeats are jittered: {gaps:?}");
    let active = stack.active("acct-a").await;
    assert_eq!(active.len(), 1);
    assert_eq!(active[0]["device_id"], "web-1");

    // A force-stop from the support API: `revoked` within one heartbeat.
    let stream = active[0]["stream_id"].as_str().unwrap().to_owned();
    let stopped_at = Instant::now();
    stack
        .support(stack.http.post(format!(
            "{}/v1/accounts/acct-a/streams/{stream}/force-stop",
            stack.limiter
        )))
        .await;
    watching
        .wait_event(
            "revoked",
            1,
            INTERVAL.mul_f64(high) + Duration::from_millis(700),
        )
        .await;
    assert!(stopped_at.elapsed() < INTERVAL.mul_f64(high) + Duration::from_millis(700));
    assert_eq!(watching.state().await, "revoked");

    // A 409 lists the devices; the take-over plays here and revokes the other.
    let tv = stack
        .open(&browser, "acct-b", "tv-1", "Living Room TV")
        .await;
    tv.wait_event("playing", 1, Duration::from_secs(10)).await;
    let laptop = stack.open(&browser, "acct-b", "web-2", "Laptop").await;
    let denied = laptop
        .wait_event("denied", 1, Duration::from_secs(10))
        .await;
    assert_eq!(denied["event"]["active"][0]["device_id"], "tv-1");
    assert_eq!(
        denied["event"]["active"][0]["device_meta"],
        "Living Room TV"
    );
    assert_eq!(laptop.state().await, "denied");
    let listed = browser.text_of(Locator::Css("#devices li")).await.unwrap();
    assert!(listed.contains("Living Room TV"), "{listed}");
    browser
        .click(Locator::Css("#devices li button"))
        .await
        .unwrap();
    laptop
        .wait_event("playing", 1, Duration::from_secs(10))
        .await;
    tv.wait_event(
        "revoked",
        1,
        INTERVAL.mul_f64(high) + Duration::from_secs(1),
    )
    .await;
    let active = stack.active("acct-b").await;
    assert_eq!(active.len(), 1);
    assert_eq!(active[0]["device_id"], "web-2");

    // Closing the tab frees the slot at once (the lease TTL is 20 s).
    laptop.focus().await;
    browser.client.close_window().await.unwrap();
    let closed_at = Instant::now();
    let phone = loop {
        let reply = stack
            .http
            .post(format!("{}/v1/streams", stack.limiter))
            .bearer_auth(player_token("acct-b"))
            .json(&json!({"account_id": "acct-b", "device_id": "phone"}))
            .send()
            .await
            .unwrap();
        if reply.status() == StatusCode::OK || closed_at.elapsed() > Duration::from_secs(3) {
            break reply.status();
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert_eq!(
        phone,
        StatusCode::OK,
        "the closed tab's slot is free at once, not after the TTL"
    );
    watching.focus().await;

    // A store outage under `open`: degraded, and the player keeps playing.
    let family = stack.open(&browser, "acct-c", "web-3", "Kitchen").await;
    family
        .wait_event("heartbeat", 1, Duration::from_secs(10))
        .await;
    redis.0.kill().unwrap();
    redis.0.wait().unwrap();
    let degraded = family
        .wait_event("degraded", 1, Duration::from_secs(10))
        .await;
    assert_eq!(degraded["event"]["reason"], "store_degraded", "{degraded}");
    let before = family
        .events()
        .await
        .iter()
        .filter(|e| e["name"] == "heartbeat")
        .count();
    family
        .wait_event("heartbeat", before + 2, Duration::from_secs(10))
        .await;
    assert_eq!(family.state().await, "playing");
    let events = family.events().await;
    assert!(
        !events
            .iter()
            .any(|e| ["revoked", "stopped", "released", "failed"]
                .contains(&e["name"].as_str().unwrap_or(""))),
        "{events:#?}"
    );
    browser.close().await;
}
