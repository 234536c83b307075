//! The config file's top level: every part in one `Config`, its defaults, the checks that span
//! parts, and the secrets it names read on demand.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use serde::Deserialize;

use super::api_access::{self, ApiAuthConfig, Credentials};
use super::enforcement::EnforcementConfig;
use super::error::{ConfigError, invalid, read_named_file};
use super::history::HistoryConfig;
use super::http::HttpConfig;
use super::plans::{
    FailurePolicy, LeaseConfig, MAX_STREAMS_CEILING, PlanRule, PlanSourceConfig, PlanSourceKind,
};
use super::regions::HomeSource;
use super::store::{MAX_RENEWAL_WINDOW, StoreConfig};

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Config {
    /// Address the HTTP API listens on.
    pub listen: SocketAddr,
    /// Plan name -> maximum simultaneous streams.
    pub plans: BTreeMap<String, PlanRule>,
    /// Plan used when a play-start names none and the account holds no lease.
    pub default_plan: String,
    pub lease: LeaseConfig,
    pub store: StoreConfig,
    /// How much of each account's recent history the store keeps.
    pub history: HistoryConfig,
    /// Whether plays over a limit are refused, for every account or a share, or only counted
    /// (shadow); a plan's own block (`plans.<name>.enforcement`) wins for its accounts.
    pub enforcement: EnforcementConfig,
    pub failure_policy: FailurePolicy,
    /// Secret that signs stream ids, inline. Every limiter instance on one store must share it.
    pub stream_id_secret: Option<String>,
    /// File holding the stream id secret (a mounted Kubernetes Secret).
    pub stream_id_secret_file: Option<PathBuf>,
    /// File holding the one bearer token that opens every API call (the older form of `auth`,
    /// kept as it was); none, and no `auth`, means no authentication.
    pub auth_token_file: Option<PathBuf>,
    /// The credentials of each audience: the support token, the gateway token, player tokens.
    pub auth: ApiAuthConfig,
    /// Largest request body accepted, in bytes.
    pub max_body_bytes: usize,
    /// Where each account's plan comes from.
    pub plan_source: PlanSourceConfig,
    /// This region and its peers, when the install is one of several regions.
    pub regions: Option<super::regions::RegionsConfig>,
    /// Threads serving the API, each a single-threaded event loop with its own connections;
    /// 0 = one per CPU the process may use.
    pub threads: usize,
    /// Connection deadlines and the bounds of one instance.
    pub http: HttpConfig,
    /// A label for this version of the file, reported in `/v1/fleet` and
    /// `screenlimit_config_info` (the operator writes one per rendered config, and reads it back
    /// to tell when every instance runs it). 1-64 characters of A-Z a-z 0-9 . _ : -.
    pub revision: Option<String>,
    /// The file this config was read from: `reload/` watches it.
    #[serde(skip)]
    pub file: Option<PathBuf>,
    /// `listen` given by the `--listen` flag, which wins over the file on a reload too.
    #[serde(skip)]
    pub listen_flag: Option<SocketAddr>,
}

/// Most `threads` a config may ask for.
pub const MAX_THREADS: usize = 256;

impl Default for Config {
    fn default() -> Self {
        Config {
            listen: "127.0.0.1:8080".parse().expect("literal address"),
            plans: [("basic", 1), ("standard", 2), ("premium", 4)]
                .into_iter()
                .map(|(name, n)| (name.to_owned(), PlanRule::Streams(n)))
                .collect(),
            default_plan: "basic".into(),
            lease: LeaseConfig::default(),
            store: StoreConfig::default(),
            history: HistoryConfig::default(),
            enforcement: EnforcementConfig::default(),
            failure_policy: FailurePolicy::Open,
            stream_id_secret: None,
            stream_id_secret_file: None,
            auth_token_file: None,
            auth: ApiAuthConfig::default(),
            max_body_bytes: 8 * 1024,
            plan_source: PlanSourceConfig::default(),
            regions: None,
            threads: 0,
            http: HttpConfig::default(),
            revision: None,
            file: None,
            listen_flag: None,
        }
    }
}

impl Config {
    /// A renewal held for its window must still renew its lease well before the lease ends: the
    /// window takes at most a quarter of what a lease has to spare after the player's heartbeat
    /// is due (`lease.ttl - lease.heartbeat_interval`, at least 100 ms, so the default window
    /// always fits), the rest is for the store deadline, the player's jitter and the network.
    /// Each home source named has what it reads from: a plan database, a claim to read.
    fn check_home_sources(&self, sources: &[HomeSource]) -> Result<(), ConfigError> {
        if sources.contains(&HomeSource::PlanSource)
            && self.plan_source.kind != PlanSourceKind::Postgres
        {
            return Err(invalid(
                "regions.home_sources",
                "plan_source names the home from the subscription database: it needs \
                 plan_source.kind: postgres, whose query returns the home as its second column",
            ));
        }
        let claim = self
            .auth
            .players
            .as_ref()
            .and_then(|p| p.home_claim.as_ref());
        if sources.contains(&HomeSource::PlayerToken) && claim.is_none() {
            return Err(invalid(
                "regions.home_sources",
                "player_token names the home from a claim of the player token: it needs \
                 auth.players with home_claim",
            ));
        }
        Ok(())
    }

    fn validate_renewal_window(&self) -> Result<(), ConfigError> {
        let window = self.store.renewal_window;
        let spare = self.lease.ttl.saturating_sub(self.lease.heartbeat_interval);
        if window > MAX_RENEWAL_WINDOW || window * 4 > spare {
            return Err(invalid(
                "store.renewal_window",
                format!(
                    "{} must be at most a quarter of lease.ttl - lease.heartbeat_interval ({}), and at most 1s: a renewal that waits longer risks its lease",
                    humantime::format_duration(window),
                    humantime::format_duration(spare)
                ),
            ));
        }
        Ok(())
    }

    pub fn validate(&self) -> Result<(), ConfigError> {
        api_access::validate(&self.auth, self.auth_token_file.as_ref(), &self.http.cors)?;
        if self.plans.is_empty() {
            return Err(invalid(
                "plans",
                "declare at least one plan, e.g. `plans: { basic: 1 }`",
            ));
        }
        for (name, rule) in &self.plans {
            if crate::ids::validate_token(name).is_err() {
                return Err(invalid(
                    "plans",
                    format!("plan name {name:?} must be 1-64 characters of A-Z a-z 0-9 . _ : -"),
                ));
            }
            let max = rule.max_streams();
            if !(1..=MAX_STREAMS_CEILING).contains(&max) {
                return Err(invalid(
                    "plans",
                    format!("plan {name:?} allows {max} streams; use 1 to {MAX_STREAMS_CEILING}"),
                ));
            }
            if let Some(enforcement) = rule.enforcement() {
                enforcement.validate("plans", &format!("plan {name:?}: "))?;
            }
            for (kind, &cap) in rule.device_caps() {
                if !(1..=max).contains(&cap) {
                    return Err(invalid(
                        "plans",
                        format!(
                            "plan {name:?} caps {kind:?} devices at {cap}; use 1 to its max_streams ({max})"
                        ),
                    ));
                }
            }
        }
        if !self.plans.contains_key(&self.default_plan) {
            let known: Vec<_> = self.plans.keys().map(String::as_str).collect();
            return Err(invalid(
                "default_plan",
                format!(
                    "{:?} is not among the plans ({})",
                    self.default_plan,
                    known.join(", ")
                ),
            ));
        }
        let lease = &self.lease;
        if lease.heartbeat_interval < Duration::from_millis(100) {
            return Err(invalid(
                "lease.heartbeat_interval",
                "must be at least 100ms",
            ));
        }
        if lease.ttl < lease.heartbeat_interval * 2 {
            return Err(invalid(
                "lease.ttl",
                format!(
                    "{} must be at least 2 x lease.heartbeat_interval ({}), so one lost heartbeat does not end a stream",
                    humantime::format_duration(lease.ttl),
                    humantime::format_duration(lease.heartbeat_interval)
                ),
            ));
        }
        self.store
            .validate(self.stream_id_secret.is_some() || self.stream_id_secret_file.is_some())?;
        self.validate_renewal_window()?;
        self.history.validate()?;
        self.enforcement.validate("enforcement", "")?;
        self.plan_source.validate(&self.plans)?;
        self.http.validate()?;
        if let Some(regions) = &self.regions {
            regions.validate()?;
            if self.stream_id_secret.is_none() && self.stream_id_secret_file.is_none() {
                return Err(invalid(
                    "regions",
                    "several regions need stream_id_secret (or stream_id_secret_file), the same in \
                     every region: a stream id minted in one region is checked in the others",
                ));
            }
            self.check_home_sources(&regions.home_sources)?;
        }
        if let Some(revision) = &self.revision
            && crate::ids::validate_token(revision).is_err()
        {
            return Err(invalid(
                "revision",
                format!("{revision:?} must be 1-64 characters of A-Z a-z 0-9 . _ : -"),
            ));
        }
        if self.max_body_bytes < 512 {
            return Err(invalid("max_body_bytes", "must be at least 512"));
        }
        if self.threads > MAX_THREADS {
            return Err(invalid(
                "threads",
                format!(
                    "{} is too many; use 0 (one per CPU) to {MAX_THREADS}",
                    self.threads
                ),
            ));
        }
        Ok(())
    }

    /// How many threads serve the API: `threads`, or one per CPU the process may use.
    pub fn threads(&self) -> usize {
        match self.threads {
            0 => std::thread::available_parallelism().map_or(1, |n| n.get()),
            n => n,
        }
    }

    /// The plan database's connection string: file, then inline.
    pub fn resolve_plan_db_url(&self) -> Result<Option<String>, ConfigError> {
        let source = &self.plan_source;
        if let Some(path) = &source.postgres_url_file {
            let text = read_named_file("plan_source.postgres_url_file", path)?;
            return Ok(Some(text.trim().to_owned()));
        }
        Ok(source.postgres_url.clone())
    }

    /// The stream id secret, read from the file when one is named.
    pub fn resolve_stream_id_secret(&self) -> Result<Option<Vec<u8>>, ConfigError> {
        if let Some(path) = &self.stream_id_secret_file {
            let bytes = std::fs::read(path).map_err(|source| ConfigError::ReadFile {
                field: "stream_id_secret_file",
                path: path.clone(),
                source,
            })?;
            let trimmed = bytes.trim_ascii().to_vec();
            if trimmed.len() < 16 {
                return Err(invalid(
                    "stream_id_secret_file",
                    "the secret must be at least 16 bytes",
                ));
            }
            return Ok(Some(trimmed));
        }
        match &self.stream_id_secret {
            Some(secret) if secret.len() < 16 => Err(invalid(
                "stream_id_secret",
                "the secret must be at least 16 bytes",
            )),
            Some(secret) => Ok(Some(secret.as_bytes().to_vec())),
            None => Ok(None),
        }
    }

    /// The support and gateway tokens, read from their files (`auth_token_file`: one token
    /// for both).
    pub fn resolve_credentials(&self) -> Result<Credentials, ConfigError> {
        api_access::resolve(&self.auth, self.auth_token_file.as_ref())
    }
}
