//! Test rig: a real limiter (embedded store) and a real dashboard, both in this process on
//! free loopback ports, and a small cookie-keeping HTTP agent.
#![allow(dead_code)]

pub mod browser;

use std::collections::BTreeMap;
use std::time::Duration;

use reqwest::StatusCode;
use reqwest::header::HeaderMap;
use screenlimit_admin_ui::auth::Role;
use screenlimit_admin_ui::auth::users::Users;
use screenlimit_admin_ui::config::Settings;
use screenlimit_admin_ui::view::query_encode;
use serde_json::{Value, json};
use tokio::net::TcpListener;

pub const SUPPORT: (&str, &str) = ("ana", "support-password-1");
pub const VIEWER: (&str, &str) = ("bo", "viewer-password-1");

pub fn users() -> Users {
    Users::with_passwords(&[
        (SUPPORT.0, Role::Support, SUPPORT.1),
        (VIEWER.0, Role::Viewer, VIEWER.1),
    ])
}

pub struct Stack {
    pub limiter: String,
    pub url: String,
}

pub async fn free_listener() -> TcpListener {
    TcpListener::bind("127.0.0.1:0")
        .await
        .expect("a free loopback port")
}

/// Starts a limiter, optionally requiring `token`.
pub async fn limiter(token: Option<&str>) -> String {
    let limiter =
        screenlimit_admin_ui::dev::start_limiter(free_listener().await, token.map(str::to_owned))
            .expect("limiter starts");
    limiter.url()
}

/// Starts a dashboard with `settings`.
pub async fn dashboard(settings: Settings) -> String {
    dashboard_on(free_listener().await, settings)
}

/// Starts a dashboard with `settings` on `listener` (whose address the settings may name).
pub fn dashboard_on(listener: TcpListener, settings: Settings) -> String {
    let url = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(screenlimit_admin_ui::serve(
        listener,
        settings,
        std::future::pending(),
    ));
    url
}

/// An agent signed in as `who` through a replica whose limiter answers, then aimed at a
/// dashboard with `settings` (the same secret): for dashboards whose limiter is down or hangs,
/// where nobody can sign in.
pub async fn signed_in_elsewhere(mut settings: Settings, who: (&str, &str)) -> Agent {
    let up = Settings::with_users(&limiter(None).await, users());
    settings.secret = up.secret.clone();
    let signed_in = Agent::signed_in(&dashboard(up).await, who).await;
    let mut agent = Agent::new(&dashboard(settings).await);
    agent.cookies = signed_in.cookies;
    agent
}

/// Plans of which `standard` is in shadow (plays over its limit of 2, or over its cap of 1
/// mobile, let through and counted); `basic` and `premium` are enforced.
pub const SHADOW_PLANS: &str = "plans:\n  basic: 1\n  \
    standard: { max_streams: 2, device_caps: { mobile: 1 }, enforcement: { mode: shadow } }\n  \
    premium: 4\ndefault_plan: basic\n";

/// Starts a limiter with the config `yaml` (embedded store).
pub async fn limiter_with(yaml: &str) -> String {
    let config = screenlimit_limiter::config::Config::from_yaml(yaml).expect("a config");
    config.validate().expect("a valid config");
    screenlimit_admin_ui::dev::start_limiter_with(free_listener().await, config, None)
        .expect("limiter starts")
        .url()
}

/// A limiter and a dashboard in front of it with the two test users.
pub async fn stack() -> Stack {
    let limiter = limiter(None).await;
    let url = dashboard(Settings::with_users(&limiter, users())).await;
    Stack { limiter, url }
}

// ---- the limiter API, as a player uses it -------------------------------------------------

pub fn http() -> reqwest::Client {
    reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .timeout(Duration::from_secs(10))
        .build()
        .unwrap()
}

/// Starts a play; returns its stream id.
pub async fn play(limiter: &str, account: &str, device: &str, meta: &str, kind: &str) -> String {
    play_title(limiter, account, device, meta, kind, ("main", "title-7")).await
}

/// Starts a play of `title` on `profile`; returns its stream id.
pub async fn play_title(
    limiter: &str,
    account: &str,
    device: &str,
    meta: &str,
    kind: &str,
    (profile, title): (&str, &str),
) -> String {
    let response = http()
        .post(format!("{limiter}/v1/streams"))
        .json(
            &json!({"account_id": account, "device_id": device, "plan": "standard",
            "device_type": kind, "device_meta": meta, "profile_id": profile, "title_id": title}),
        )
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::OK, "play-start");
    let body: Value = response.json().await.unwrap();
    body["stream_id"].as_str().unwrap().to_owned()
}

/// A play-start of `plan`: its status and answer.
pub async fn play_plan(
    limiter: &str,
    account: &str,
    (device, meta, kind): (&str, &str, &str),
    plan: &str,
) -> (u16, Value) {
    let response = http()
        .post(format!("{limiter}/v1/streams"))
        .json(
            &json!({"account_id": account, "device_id": device, "plan": plan,
            "device_type": kind, "device_meta": meta}),
        )
        .send()
        .await
        .unwrap();
    let status = response.status().as_u16();
    (status, response.json().await.unwrap())
}

/// The status and error code of a heartbeat.
pub async fn heartbeat(limiter: &str, account: &str, stream_id: &str) -> (u16, String) {
    let response = http()
        .put(format!("{limiter}/v1/streams/{stream_id}/heartbeat"))
        .json(&json!({"account_id": account}))
        .send()
        .await
        .unwrap();
    let status = response.status().as_u16();
    let body: Value = response.json().await.unwrap();
    (status, body["error"].as_str().unwrap_or("").to_owned())
}

/// The limiter's `GET /v1/accounts/{account}/streams` body.
pub async fn account_streams(limiter: &str, account: &str) -> Value {
    http()
        .get(format!("{limiter}/v1/accounts/{account}/streams"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap()
}

pub async fn active_devices(limiter: &str, account: &str) -> Vec<String> {
    account_streams(limiter, account).await["active"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["device_id"].as_str().unwrap().to_owned())
        .collect()
}

// ---- a browser-like agent: keeps cookies, does not follow redirects --------------------------

pub struct Page {
    pub status: StatusCode,
    pub headers: HeaderMap,
    pub body: String,
}

impl Page {
    pub fn location(&self) -> &str {
        self.headers
            .get("location")
            .and_then(|v| v.to_str().ok())
            .unwrap_or("")
    }

    /// The value of the first hidden `csrf` field.
    pub fn csrf(&self) -> String {
        let marker = "name=\"csrf\" value=\"";
        let start = self.body.find(marker).expect("a form with a csrf field") + marker.len();
        let end = start + self.body[start..].find('"').unwrap();
        self.body[start..end].to_owned()
    }

    /// The `Set-Cookie` header that sets cookie `name`; panics when there is none.
    pub fn set_cookie(&self, name: &str) -> String {
        let prefix = format!("{name}=");
        self.headers
            .get_all("set-cookie")
            .iter()
            .map(|v| v.to_str().unwrap().to_owned())
            .find(|c| c.starts_with(&prefix))
            .unwrap()
    }
}

pub struct Agent {
    pub base: String,
    pub cookies: BTreeMap<String, String>,
    client: reqwest::Client,
}

impl Agent {
    pub fn new(base: &str) -> Agent {
        Agent {
            base: base.to_owned(),
            cookies: BTreeMap::new(),
            client: http(),
        }
    }

    fn cookie_header(&self) -> String {
        self.cookies
            .iter()
            .map(|(k, v)| format!("{k}={v}"))
            .collect::<Vec<_>>()
            .join("; ")
    }

    async fn finish(&mut self, request: reqwest::RequestBuilder) -> Page {
        let response = request
            .header("cookie", self.cookie_header())
            .send()
            .await
            .unwrap();
        let status = response.status();
        let headers = response.headers().clone();
        for value in headers.get_all("set-cookie") {
            let text = value.to_str().unwrap();
            let pair = text.split(';').next().unwrap();
            let (name, value) = pair.split_once('=').unwrap();
            if value.is_empty() || text.contains("Max-Age=0") {
                self.cookies.remove(name);
            } else {
                self.cookies.insert(name.to_owned(), value.to_owned());
            }
        }
        let body = response.text().await.unwrap();
        Page {
            status,
            headers,
            body,
        }
    }

    pub async fn get(&mut self, path: &str) -> Page {
        let request = self.client.get(format!("{}{path}", self.base));
        self.finish(request).await
    }

    pub async fn get_with(&mut self, path: &str, headers: &[(&str, &str)]) -> Page {
        let mut request = self.client.get(format!("{}{path}", self.base));
        for (k, v) in headers {
            request = request.header(*k, *v);
        }
        self.finish(request).await
    }

    pub async fn post(&mut self, path: &str, form: &[(&str, &str)]) -> Page {
        let request = self.client.post(format!("{}{path}", self.base)).form(form);
        self.finish(request).await
    }

    pub async fn post_with(
        &mut self,
        path: &str,
        form: &[(&str, &str)],
        headers: &[(&str, &str)],
    ) -> Page {
        let mut request = self.client.post(format!("{}{path}", self.base)).form(form);
        for (k, v) in headers {
            request = request.header(*k, *v);
        }
        self.finish(request).await
    }

    /// Sends `path` exactly as written. HTTP clients (reqwest, browsers) resolve `.` and `..`
    /// segments, even as `%2E%2E`, before sending; a hostile client does not, so tests of such
    /// addresses write the request by hand. `form` (if any) goes as a url-encoded POST body.
    pub async fn raw(&mut self, method: &str, path: &str, form: &[(&str, &str)]) -> Page {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let host = self.base.trim_start_matches("http://").to_owned();
        let body = form
            .iter()
            .map(|(k, v)| format!("{k}={}", query_encode(v)))
            .collect::<Vec<_>>()
            .join("&");
        let request = format!(
            "{method} {path} HTTP/1.1\r\nhost: {host}\r\ncookie: {}\r\n\
             content-type: application/x-www-form-urlencoded\r\ncontent-length: {}\r\n\
             connection: close\r\n\r\n{body}",
            self.cookie_header(),
            body.len()
        );
        let mut stream = tokio::net::TcpStream::connect(&host).await.unwrap();
        stream.write_all(request.as_bytes()).await.unwrap();
        let mut answer = Vec::new();
        stream.read_to_end(&mut answer).await.unwrap();
        let answer = String::from_utf8_lossy(&answer).into_owned();
        let (head, body) = answer.split_once("\r\n\r\n").expect("an HTTP answer");
        let mut lines = head.lines();
        let status = lines.next().unwrap().split(' ').nth(1).unwrap();
        let mut headers = HeaderMap::new();
        for line in lines {
            let (name, value) = line.split_once(':').unwrap();
            headers.append(
                reqwest::header::HeaderName::from_bytes(name.trim().as_bytes()).unwrap(),
                value.trim().parse().unwrap(),
            );
        }
        Page {
            status: StatusCode::from_bytes(status.as_bytes()).unwrap(),
            headers,
            body: body.to_owned(),
        }
    }

    /// A CSRF token for this agent's cookie (fetching a page first if it has none).
    pub async fn csrf(&mut self) -> String {
        let page = self.get("/sign-in").await;
        if page.status.is_redirection() {
            return self.get("/accounts").await.csrf();
        }
        page.csrf()
    }

    /// Signs in; panics unless it worked.
    pub async fn sign_in(&mut self, (user, password): (&str, &str)) {
        let csrf = self.csrf().await;
        let page = self
            .post(
                "/sign-in",
                &[("csrf", &csrf), ("user", user), ("password", password)],
            )
            .await;
        assert_eq!(page.status, StatusCode::SEE_OTHER, "sign-in: {}", page.body);
        assert!(self.cookies.contains_key("sl_session"));
    }

    pub async fn signed_in(base: &str, who: (&str, &str)) -> Agent {
        let mut agent = Agent::new(base);
        agent.sign_in(who).await;
        agent
    }
}
