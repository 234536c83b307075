//! What the web layer needs to run, built by `main.rs` from flags and environment (or by
//! tests and `--dev` directly).

use std::time::Duration;

use axum::http::HeaderName;
use ipnet::IpNet;

use crate::auth::Role;
use crate::auth::oidc::OidcSettings;
use crate::auth::throttle::ThrottleRules;
use crate::auth::users::Users;

/// How people sign in.
pub enum AuthMode {
    /// The dashboard's own sessions: users and argon2 hashes from a credentials file (or a
    /// mounted Kubernetes Secret; empty with sign-in through the identity provider only), and
    /// the identity provider when `Settings::oidc` is set.
    Credentials(Users),
    /// An authenticating proxy in front sets the user name (and optionally a role list) in
    /// headers. Only in this mode are those headers believed.
    ProxyHeader {
        user_header: HeaderName,
        /// Comma-separated group or role names; holding `support_group` grants `support`.
        role_header: Option<HeaderName>,
        support_group: String,
        default_role: Role,
    },
}

pub struct Settings {
    /// Base URL of the limiter (or the Service in front of its replicas).
    pub limiter_url: String,
    /// Bearer token the limiter expects (its `auth_token_file`), if any.
    pub limiter_token: Option<String>,
    /// Deadline of every limiter call.
    pub limiter_timeout: Duration,
    /// Limiter instances the fleet page polls one by one; empty means just `limiter_url`.
    pub fleet_urls: Vec<String>,
    /// How often the dashboard samples every fleet instance's counters in the background (the
    /// fleet charts' last 10 minutes).
    pub fleet_sample_interval: Duration,
    /// A Prometheus that scrapes the limiters: the fleet charts' 1 h, 6 h and 24 h ranges, and the
    /// shares of plays that would be refused in shadow.
    pub prometheus_url: Option<String>,
    /// Deadline of every Prometheus query.
    pub prometheus_timeout: Duration,
    pub auth: AuthMode,
    /// Signs sessions and CSRF tokens; replicas must share it.
    pub secret: Vec<u8>,
    pub session_ttl: Duration,
    /// How long a user's session generation read from the limiter is trusted for reading pages
    /// (state-changing actions always read it afresh).
    pub session_check_interval: Duration,
    /// Mark cookies `Secure` (the dashboard is reached over TLS). Also set per request when
    /// a proxy reports `X-Forwarded-Proto: https`.
    pub secure_cookies: bool,
    /// How often the account page's device table refreshes itself.
    pub refresh: Duration,
    /// Peers whose client-address header is believed (reverse proxies, load balancers).
    pub trusted_proxies: Vec<IpNet>,
    /// The header a trusted proxy names the client's address in (`X-Forwarded-For` style: a
    /// list, the nearest hop last).
    pub client_address_header: HeaderName,
    /// Sign-in throttling per user name and per client address.
    pub throttle: ThrottleRules,
    /// Sign-in through an OpenID Connect provider (besides or instead of passwords).
    pub oidc: Option<OidcSettings>,
    /// Password verifications (argon2) running at once, at most.
    pub signin_concurrency: usize,
    /// How long a sign-in waits for a verification slot before it is answered 503.
    pub signin_queue_timeout: Duration,
}

/// A few argon2 verifications at once: half the cores, 1 to 4.
pub fn default_signin_concurrency() -> usize {
    std::thread::available_parallelism()
        .map_or(1, |n| n.get() / 2)
        .clamp(1, 4)
}

/// How often the dashboard samples each limiter of the fleet unless told otherwise
/// (`--fleet-sample-interval`). Here, below the sampler and the app state that both read the
/// settings, so that the dashboard's imports run one way.
pub const SAMPLE_EVERY: Duration = Duration::from_secs(5);

impl Settings {
    /// Settings for a dashboard in front of `limiter_url` with password users.
    pub fn with_users(limiter_url: &str, users: Users) -> Settings {
        Settings {
            limiter_url: limiter_url.to_owned(),
            limiter_token: None,
            limiter_timeout: Duration::from_secs(3),
            fleet_urls: Vec::new(),
            fleet_sample_interval: SAMPLE_EVERY,
            prometheus_url: None,
            prometheus_timeout: Duration::from_secs(5),
            auth: AuthMode::Credentials(users),
            secret: crate::auth::keys::random_bytes::<32>().to_vec(),
            session_ttl: Duration::from_secs(8 * 3600),
            session_check_interval: Duration::from_secs(2),
            secure_cookies: false,
            refresh: Duration::from_secs(3),
            trusted_proxies: Vec::new(),
            client_address_header: HeaderName::from_static("x-forwarded-for"),
            throttle: ThrottleRules::default(),
            oidc: None,
            signin_concurrency: default_signin_concurrency(),
            signin_queue_timeout: Duration::from_secs(2),
        }
    }
}
