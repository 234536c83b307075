//! Headless Chromium through chromedriver (Debian's `chromium` and `chromium-driver`, installed
//! by `scripts/install-test-deps.sh`), for the tests that drive the dashboard in a browser.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

pub use fantoccini::elements::Element;
pub use fantoccini::error::CmdError;
pub use fantoccini::{Client, Locator};
use serde_json::json;

pub const CHROMIUM: &str = "/usr/bin/chromium";
pub const CHROMEDRIVER: &str = "/usr/bin/chromedriver";
pub const WAIT: Duration = Duration::from_secs(15);

pub fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .unwrap()
        .to_owned()
}

/// chromedriver on a free port, killed when dropped.
pub struct Driver {
    _child: tokio::process::Child,
    url: String,
}

pub async fn start_driver() -> Driver {
    for tool in [CHROMIUM, CHROMEDRIVER] {
        assert!(
            Path::new(tool).exists(),
            "{tool} is missing: the browser tests need Debian's chromium and chromium-driver; \
             run scripts/install-test-deps.sh"
        );
    }
    let port = super::free_listener().await.local_addr().unwrap().port();
    let log = std::env::temp_dir().join(format!("chromedriver-{port}.log"));
    let child = tokio::process::Command::new(CHROMEDRIVER)
        .arg(format!("--port={port}"))
        .arg(format!("--log-path={}", log.display()))
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .expect("chromedriver starts");
    let url = format!("http://127.0.0.1:{port}");
    let deadline = Instant::now() + WAIT;
    loop {
        let ready = super::http().get(format!("{url}/status")).send().await;
        if let Ok(response) = ready {
            let body: serde_json::Value = response.json().await.unwrap_or_default();
            if body["value"]["ready"] == true {
                break;
            }
        }
        assert!(
            Instant::now() < deadline,
            "chromedriver did not become ready; see {}",
            log.display()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    Driver { _child: child, url }
}

pub async fn browser(driver: &Driver, profile: &Path) -> Client {
    let args = [
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-quic",
        "--no-first-run",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--disable-dev-shm-usage",
        "--window-size=1280,760",
        &format!("--user-data-dir={}", profile.display()),
    ];
    let mut caps = serde_json::Map::new();
    caps.insert("browserName".into(), json!("chrome"));
    caps.insert(
        "goog:chromeOptions".into(),
        json!({ "binary": CHROMIUM, "args": args }),
    );
    fantoccini::ClientBuilder::new(hyper_util::client::legacy::connect::HttpConnector::new())
        .capabilities(caps)
        .connect(&driver.url)
        .await
        .expect("a Chromium session")
}

/// Waits (up to `WAIT`) for an element to appear.
pub async fn wait_for(client: &Client, locator: Locator<'_>) -> Result<Element, CmdError> {
    client.wait().at_most(WAIT).for_element(locator).await
}

fn stale(error: &CmdError) -> bool {
    error.to_string().contains("stale element")
}

pub async fn click(client: &Client, locator: Locator<'_>) -> Result<(), CmdError> {
    for _ in 0..3 {
        match client.find(locator).await?.click().await {
            Err(error) if stale(&error) => continue,
            done => return done,
        }
    }
    client.find(locator).await?.click().await
}

pub async fn type_into(client: &Client, locator: Locator<'_>, text: &str) -> Result<(), CmdError> {
    client.find(locator).await?.send_keys(text).await
}

pub async fn text_of(client: &Client, locator: Locator<'_>) -> Result<String, CmdError> {
    for _ in 0..3 {
        match client.find(locator).await?.text().await {
            Err(error) if stale(&error) => continue,
            done => return done,
        }
    }
    client.find(locator).await?.text().await
}

/// A screenshot into `target/admin-ui-browser/{name}.png`.
pub async fn screenshot(client: &Client, name: &str) -> Vec<u8> {
    let png = client.screenshot().await.expect("a screenshot");
    let dir = workspace_root().join("target/admin-ui-browser");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join(format!("{name}.png")), &png).unwrap();
    png
}
