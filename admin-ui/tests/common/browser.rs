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
    start_driver_with(&[]).await
}

/// chromedriver, and the Chromium it starts, with `env` set (e.g. `TZ`, the browser's time zone).
pub async fn start_driver_with(env: &[(&str, &str)]) -> Driver {
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
        .envs(env.iter().copied())
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

/// The element found is gone: the page replaced it between the find and the use. Chromium says
/// so as a stale element, or, when the node went mid-command, as an inspector error.
fn stale(error: &CmdError) -> bool {
    let text = error.to_string();
    text.contains("stale element") || text.contains("does not belong to the document")
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

/// Types into an element, found again when the page replaced it meanwhile (a stale element:
/// the provider's page re-rendered between the find and the keys).
pub async fn type_into(client: &Client, locator: Locator<'_>, text: &str) -> Result<(), CmdError> {
    for _ in 0..3 {
        match client.find(locator).await?.send_keys(text).await {
            Err(error) if stale(&error) => continue,
            done => return done,
        }
    }
    client.find(locator).await?.send_keys(text).await
}

/// An attribute of an element, found again when the page replaced it meanwhile.
pub async fn attr_of(
    client: &Client,
    locator: Locator<'_>,
    name: &str,
) -> Result<Option<String>, CmdError> {
    for _ in 0..3 {
        match client.find(locator).await?.attr(name).await {
            Err(error) if stale(&error) => continue,
            done => return done,
        }
    }
    client.find(locator).await?.attr(name).await
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

/// axe-core from the npm registry (`admin-ui/tests/axe`, pinned by its package-lock.json;
/// `scripts/install-test-deps.sh` runs `npm ci` there).
fn axe_source() -> String {
    let path = workspace_root().join("admin-ui/tests/axe/node_modules/axe-core/axe.min.js");
    std::fs::read_to_string(&path).unwrap_or_else(|e| {
        panic!(
            "{} cannot be read ({e}): the browser tests check every page with axe-core; \
             run scripts/install-test-deps.sh",
            path.display()
        )
    })
}

/// The rules every page must pass: WCAG 2.1 levels A and AA, and axe's best practices.
const AXE_TAGS: [&str; 5] = ["wcag2a", "wcag2aa", "wcag21a", "wcag21aa", "best-practice"];

/// Runs axe-core on the page shown now and panics, naming `page`, each rule broken and the
/// elements that break it, unless there is no violation. The script goes in through WebDriver,
/// which the page's Content-Security-Policy does not govern.
pub async fn assert_accessible(client: &Client, page: &str) {
    let loaded = client
        .execute("return typeof window.axe === 'object'", vec![])
        .await
        .expect("the page answers a script");
    if loaded != json!(true) {
        client
            .execute(&axe_source(), vec![])
            .await
            .expect("axe-core loads");
    }
    let violations = client
        .execute(
            "return axe.run(document, {runOnly: {type: 'tag', values: arguments[0]}, \
               resultTypes: ['violations']}) \
             .then(r => r.violations.map(v => ({id: v.id, impact: v.impact, help: v.help, \
               nodes: v.nodes.map(n => n.target.join(' ') + ': ' + n.failureSummary)})));",
            vec![json!(AXE_TAGS)],
        )
        .await
        .expect("axe-core runs");
    let violations = violations.as_array().cloned().unwrap_or_default();
    assert!(
        violations.is_empty(),
        "axe-core finds {} violation(s) on {page} ({}):\n{}",
        violations.len(),
        client
            .current_url()
            .await
            .map(|u| u.to_string())
            .unwrap_or_default(),
        serde_json::to_string_pretty(&violations).unwrap()
    );
}
