//! Headless Chromium driven through chromedriver (Debian's `chromium` and `chromium-driver`,
//! installed by `scripts/install-test-deps.sh`), as `admin-ui/tests/browser.rs` drives it.

use std::path::Path;
use std::time::{Duration, Instant};

use fantoccini::elements::Element;
use fantoccini::error::CmdError;
use fantoccini::{Client, ClientBuilder, Locator};
use serde_json::json;

const CHROMIUM: &str = "/usr/bin/chromium";
const CHROMEDRIVER: &str = "/usr/bin/chromedriver";
/// How long a page may take to show what is waited for.
pub const WAIT: Duration = Duration::from_secs(20);

/// chromedriver and one Chromium session; both end when dropped (after [`Browser::close`]).
pub struct Browser {
    pub client: Client,
    _driver: tokio::process::Child,
    _profile: tempfile::TempDir,
}

impl Browser {
    /// Starts chromedriver on a free loopback port and opens a headless session.
    pub async fn start() -> Browser {
        for tool in [CHROMIUM, CHROMEDRIVER] {
            assert!(
                Path::new(tool).exists(),
                "{tool} is missing: run scripts/install-test-deps.sh (chromium, chromium-driver)"
            );
        }
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .expect("a free loopback port")
            .port();
        let log = std::env::temp_dir().join(format!("chromedriver-{port}.log"));
        let driver = tokio::process::Command::new(CHROMEDRIVER)
            .arg(format!("--port={port}"))
            .arg(format!("--log-path={}", log.display()))
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .kill_on_drop(true)
            .spawn()
            .expect("chromedriver starts");
        let url = format!("http://127.0.0.1:{port}");
        let http = reqwest::Client::builder()
            .timeout(Duration::from_secs(2))
            .build()
            .unwrap();
        let deadline = Instant::now() + WAIT;
        loop {
            if let Ok(response) = http.get(format!("{url}/status")).send().await {
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
        let profile = tempfile::tempdir().unwrap();
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
            &format!("--user-data-dir={}", profile.path().display()),
        ];
        let mut caps = serde_json::Map::new();
        caps.insert("browserName".into(), json!("chrome"));
        caps.insert(
            "goog:chromeOptions".into(),
            json!({ "binary": CHROMIUM, "args": args }),
        );
        let client = ClientBuilder::new(hyper_util::client::legacy::connect::HttpConnector::new())
            .capabilities(caps)
            .connect(&url)
            .await
            .expect("a Chromium session");
        Browser {
            client,
            _driver: driver,
            _profile: profile,
        }
    }

    /// Ends the session (Chromium exits); chromedriver goes with the value.
    pub async fn close(self) {
        let _ = self.client.close().await;
    }

    /// Waits (up to [`WAIT`]) for an element to appear.
    pub async fn wait_for(&self, locator: Locator<'_>) -> Result<Element, CmdError> {
        self.client.wait().at_most(WAIT).for_element(locator).await
    }

    /// Clicks an element, finding it again when htmx replaced it meanwhile.
    pub async fn click(&self, locator: Locator<'_>) -> Result<(), CmdError> {
        for _ in 0..3 {
            match self.client.find(locator).await?.click().await {
                Err(error) if stale(&error) => continue,
                done => return done,
            }
        }
        self.client.find(locator).await?.click().await
    }

    pub async fn type_into(&self, locator: Locator<'_>, text: &str) -> Result<(), CmdError> {
        self.client.find(locator).await?.send_keys(text).await
    }

    /// An element's text, found again when htmx replaced it meanwhile.
    pub async fn text_of(&self, locator: Locator<'_>) -> Result<String, CmdError> {
        for _ in 0..3 {
            match self.client.find(locator).await?.text().await {
                Err(error) if stale(&error) => continue,
                done => return done,
            }
        }
        self.client.find(locator).await?.text().await
    }
}

/// Whether `error` says the element was replaced meanwhile (htmx swaps parts of the page).
fn stale(error: &CmdError) -> bool {
    error.to_string().contains("stale element")
}
