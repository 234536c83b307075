//! What every handler shares: the settings, the limiter and Prometheus clients, sessions, CSRF,
//! the sign-in throttle and the known devices.

use std::sync::Arc;

use super::fleet::history::Samples;
use crate::auth::csrf::Csrf;
use crate::auth::device::Devices;
use crate::auth::oidc::Oidc;
use crate::auth::session::{Generations, Session, Sessions};
use crate::auth::throttle::Throttle;
use crate::config::Settings;
use crate::limiter::{LimiterClient, LimiterError};
use crate::prometheus::{self, PrometheusClient};

/// Everything a handler may need; cheap to clone.
#[derive(Clone)]
pub struct AppState {
    pub inner: Arc<Shared>,
}

pub struct Shared {
    pub settings: Settings,
    pub limiter: LimiterClient,
    pub sessions: Sessions,
    /// Users' session generations, read from the limiter, cached for
    /// `settings.session_check_interval`.
    pub generations: Generations,
    pub csrf: Csrf,
    pub fleet_samples: Samples,
    /// Where the fleet charts' longer ranges come from, if a Prometheus is configured.
    pub prometheus: Option<PrometheusClient>,
    pub prometheus_health: prometheus::Health,
    /// Sign-in throttling per user name and per client address.
    pub throttle: Throttle,
    /// Bounds the argon2 verifications running at once.
    pub verify_slots: Arc<tokio::sync::Semaphore>,
    /// One more verification at a time, for known browsers only (strangers cannot fill it).
    pub known_browser_slots: Arc<tokio::sync::Semaphore>,
    /// Device cookies: which browsers signed in as a user before.
    pub devices: Devices,
    /// The identity provider, when OpenID Connect sign-in is on.
    pub oidc: Option<Oidc>,
}

impl std::ops::Deref for AppState {
    type Target = Shared;
    fn deref(&self) -> &Shared {
        &self.inner
    }
}

impl AppState {
    pub fn new(settings: Settings) -> anyhow::Result<AppState> {
        let limiter = LimiterClient::new(
            &settings.limiter_url,
            settings.limiter_token.clone(),
            settings.limiter_timeout,
        )?;
        let prometheus = match &settings.prometheus_url {
            Some(url) => Some(PrometheusClient::new(url, settings.prometheus_timeout)?),
            None => None,
        };
        Ok(AppState {
            inner: Arc::new(Shared {
                sessions: Sessions::new(&settings.secret, settings.session_ttl),
                generations: Generations::new(settings.session_check_interval),
                csrf: Csrf::new(&settings.secret),
                limiter,
                fleet_samples: Samples::default(),
                prometheus,
                prometheus_health: prometheus::Health::default(),
                throttle: Throttle::new(settings.throttle.clone()),
                verify_slots: Arc::new(tokio::sync::Semaphore::new(
                    settings.signin_concurrency.max(1),
                )),
                known_browser_slots: Arc::new(tokio::sync::Semaphore::new(1)),
                devices: Devices::new(&settings.secret, settings.throttle.device_ttl),
                oidc: match &settings.oidc {
                    Some(oidc) => Some(Oidc::new(oidc.clone(), &settings.secret)?),
                    None => None,
                },
                settings,
            }),
        })
    }
}

impl Shared {
    /// Whether `session` has not been signed out on any replica: its generation is still its
    /// user's. `fresh` asks the limiter even when the cache holds the answer (before a
    /// state-changing action); an error means nobody could say.
    pub async fn session_live(&self, session: &Session, fresh: bool) -> Result<bool, LimiterError> {
        let cached = self.generations.cached(&session.user).filter(|_| !fresh);
        let current = match cached {
            Some(generation) => generation,
            None => {
                let generation = self.limiter.session_generation(&session.user).await?;
                self.generations.remember(&session.user, generation);
                generation
            }
        };
        Ok(session.generation >= current)
    }
}
