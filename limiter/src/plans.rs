//! Which plan holds an account: the one the request names (`request`), or the one the
//! subscription database says (`postgres`), cached in memory and invalidated by
//! `LISTEN/NOTIFY`, so the database is never on the hot path of a warm account.

use std::str::FromStr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use deadpool_postgres::{Manager, ManagerConfig, Pool, RecyclingMethod};
use futures::StreamExt;
use tokio_postgres::{AsyncMessage, NoTls};

use crate::config::{Config, PlanSourceConfig, PlanSourceKind, UnknownAccountPolicy};
use crate::model::Plan;
pub use crate::plan_book::PlanBook;
use crate::rules::LiveRules;

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum PlanError {
    #[error("plan {0:?} is not configured")]
    UnknownPlan(String),
    #[error("the subscription database does not know this account")]
    UnknownAccount,
}

/// The plan a play-start is held to. `plan: None` keeps the account's remembered plan.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Resolved {
    pub plan: Option<Plan>,
    /// The source could not answer and a fallback decided.
    pub degraded: bool,
}

/// Both read the plans in force from the shared rules (`rules.rs`), which a reload may swap.
pub enum PlanSource {
    Request(LiveRules),
    Postgres(Arc<PostgresPlans>),
}

impl PlanSource {
    /// Builds the configured source; `postgres` starts its pool and notification listener.
    /// Must run inside a Tokio runtime.
    pub fn from_config(config: &Config, rules: LiveRules) -> anyhow::Result<PlanSource> {
        match config.plan_source.kind {
            PlanSourceKind::Request => Ok(PlanSource::Request(rules)),
            PlanSourceKind::Postgres => {
                let url = config.resolve_plan_db_url()?.unwrap_or_default();
                Ok(PlanSource::Postgres(PostgresPlans::start(
                    &url,
                    &config.plan_source,
                    rules,
                )?))
            }
        }
    }

    pub async fn resolve(
        &self,
        account_id: &str,
        requested: Option<&str>,
    ) -> Result<Resolved, PlanError> {
        match self {
            PlanSource::Request(rules) => match requested {
                Some(name) => match rules.load().book.get(name) {
                    Some(plan) => Ok(Resolved {
                        plan: Some(plan.clone()),
                        degraded: false,
                    }),
                    None => Err(PlanError::UnknownPlan(name.to_owned())),
                },
                None => Ok(Resolved {
                    plan: None,
                    degraded: false,
                }),
            },
            // The database is the authority; a plan named in the request is ignored.
            PlanSource::Postgres(pg) => pg.resolve(account_id).await,
        }
    }

    /// The home region the plan source names for the account: only the database does
    /// (`regions.home_sources: [plan_source]`).
    pub async fn home(&self, account_id: &str, cached_only: bool) -> Option<String> {
        match self {
            PlanSource::Request(_) => None,
            PlanSource::Postgres(pg) => pg.home(account_id, cached_only).await,
        }
    }

    /// Like `resolve`, without asking the database: a cached plan of any age, else the
    /// fallback plan (degraded). For calls shed under overload.
    pub async fn resolve_cached(
        &self,
        account_id: &str,
        requested: Option<&str>,
    ) -> Result<Resolved, PlanError> {
        match self {
            PlanSource::Request(_) => self.resolve(account_id, requested).await,
            PlanSource::Postgres(pg) => match pg.cache.get(account_id).await {
                Some(entry) => pg.decide(account_id, entry.name.as_deref(), false),
                None => Ok(Resolved {
                    plan: Some(pg.rules.load().fallback.clone()),
                    degraded: true,
                }),
            },
        }
    }
}

#[derive(Debug, Clone)]
struct CachedPlan {
    /// `None`: the database has no row for the account.
    name: Option<String>,
    /// The home region the row names (the query's second column, when it has one).
    home: Option<String>,
    fetched: Instant,
    /// The cache epoch it was fetched in; an older epoch means "look again".
    epoch: u64,
}

pub struct PostgresPlans {
    pool: Pool,
    query: String,
    cache: moka::future::Cache<String, CachedPlan>,
    /// Bumped when notifications may have been missed: every cached plan is then looked up
    /// again on next use, yet still serves if the database cannot answer.
    epoch: AtomicU64,
    /// Whether the last query failed: an outage is logged when it starts and ends, not per play.
    unavailable: AtomicBool,
    ttl: Duration,
    timeout: Duration,
    unknown_account: UnknownAccountPolicy,
    /// The plans, default and fallback in force.
    rules: LiveRules,
}

impl PostgresPlans {
    pub fn start(
        url: &str,
        config: &PlanSourceConfig,
        rules: LiveRules,
    ) -> anyhow::Result<Arc<Self>> {
        let pg_config = tokio_postgres::Config::from_str(url).map_err(|e| {
            anyhow::anyhow!("plan_source.postgres_url is not a valid connection string: {e}")
        })?;
        let manager = Manager::from_config(
            pg_config,
            NoTls,
            ManagerConfig {
                recycling_method: RecyclingMethod::Fast,
            },
        );
        let pool = Pool::builder(manager)
            .max_size(config.pool_size)
            .build()
            .map_err(|e| anyhow::anyhow!("plan database pool: {e}"))?;
        let plans = Arc::new(PostgresPlans {
            pool,
            query: config.query.clone(),
            cache: moka::future::Cache::builder()
                .max_capacity(config.cache_capacity)
                .time_to_live(config.cache_max_stale)
                .build(),
            epoch: AtomicU64::new(0),
            unavailable: AtomicBool::new(false),
            ttl: config.cache_ttl,
            timeout: config.timeout,
            unknown_account: config.unknown_account,
            rules,
        });
        spawn_listener(
            url.to_owned(),
            config.notify_channel.clone(),
            Arc::downgrade(&plans),
        );
        Ok(plans)
    }

    /// Forgets the cached plan of one account; with `None`, marks every cached plan stale.
    pub async fn invalidate(&self, account_id: Option<&str>) {
        match account_id {
            Some(account_id) => self.cache.invalidate(account_id).await,
            None => _ = self.epoch.fetch_add(1, Ordering::Relaxed),
        }
    }

    async fn fetch(&self, account_id: &str) -> Result<CachedPlan, String> {
        let query = async {
            let client = self.pool.get().await.map_err(|e| e.to_string())?;
            let statement = client
                .prepare_cached(&self.query)
                .await
                .map_err(|e| e.to_string())?;
            let row = client
                .query_opt(&statement, &[&account_id])
                .await
                .map_err(|e| e.to_string())?;
            let name = (row.as_ref())
                .map(|r| r.try_get::<_, String>(0))
                .transpose()
                .map_err(|e| e.to_string())?;
            // A second column names the home region; NULL (or no second column) names none.
            let home = match row.as_ref().filter(|r| r.len() > 1) {
                Some(r) => r
                    .try_get::<_, Option<String>>(1)
                    .map_err(|e| e.to_string())?,
                None => None,
            };
            Ok(CachedPlan {
                name,
                home,
                fetched: Instant::now(),
                epoch: self.epoch.load(Ordering::Relaxed),
            })
        };
        tokio::time::timeout(self.timeout, query)
            .await
            .map_err(|_| "timed out".to_owned())?
    }

    async fn resolve(&self, account_id: &str) -> Result<Resolved, PlanError> {
        let cached = self.cache.get(account_id).await;
        if let Some(entry) = &cached {
            if entry.fetched.elapsed() < self.ttl
                && entry.epoch == self.epoch.load(Ordering::Relaxed)
            {
                return self.decide(account_id, entry.name.as_deref(), false);
            }
            self.cache.invalidate(account_id).await;
        }
        // Concurrent misses for one account share one query.
        let fetched = self
            .cache
            .try_get_with(account_id.to_owned(), self.fetch(account_id))
            .await;
        if let Err(error) = &fetched
            && !self.unavailable.swap(true, Ordering::Relaxed)
        {
            tracing::warn!(%error, "plan database unavailable; serving cached plans, else the fallback plan");
        }
        match (fetched, cached) {
            (Ok(entry), _) => {
                if self.unavailable.swap(false, Ordering::Relaxed) {
                    tracing::info!("plan database answers again");
                }
                self.decide(account_id, entry.name.as_deref(), false)
            }
            (Err(_), Some(stale)) => {
                self.cache
                    .insert(account_id.to_owned(), stale.clone())
                    .await;
                self.decide(account_id, stale.name.as_deref(), false)
            }
            (Err(_), None) => Ok(Resolved {
                plan: Some(self.rules.load().fallback.clone()),
                degraded: true,
            }),
        }
    }

    /// The home region the database names for the account: the cached row while it is fresh,
    /// else a new lookup (its cached row of any age if the database does not answer); with
    /// `cached_only`, never the database (a call shed under overload).
    pub async fn home(&self, account_id: &str, cached_only: bool) -> Option<String> {
        let cached = self.cache.get(account_id).await;
        let fresh = cached.as_ref().is_some_and(|entry| {
            entry.fetched.elapsed() < self.ttl && entry.epoch == self.epoch.load(Ordering::Relaxed)
        });
        if fresh || cached_only {
            return cached.and_then(|entry| entry.home);
        }
        // The same lookup a play-start makes, which refreshes the cache.
        _ = self.resolve(account_id).await;
        self.cache
            .get(account_id)
            .await
            .and_then(|entry| entry.home)
    }

    fn decide(
        &self,
        account_id: &str,
        name: Option<&str>,
        degraded: bool,
    ) -> Result<Resolved, PlanError> {
        let rules = self.rules.load();
        let plan = match name {
            None if self.unknown_account == UnknownAccountPolicy::Deny => {
                return Err(PlanError::UnknownAccount);
            }
            None => rules.book.default.clone(),
            Some(name) => match rules.book.get(name) {
                Some(plan) => plan.clone(),
                None => {
                    tracing::error!(
                        account_id,
                        plan = name,
                        "the database names a plan the config lacks; using the fallback"
                    );
                    return Ok(Resolved {
                        plan: Some(rules.fallback.clone()),
                        degraded: true,
                    });
                }
            },
        };
        Ok(Resolved {
            plan: Some(plan),
            degraded,
        })
    }
}

/// Keeps a connection LISTENing on `channel`; each notification's payload is an account id whose
/// cached plan is dropped (`*` or an empty payload marks all stale). Each (re)connect marks all
/// stale too, since notifications may have been missed while disconnected.
fn spawn_listener(url: String, channel: String, plans: std::sync::Weak<PostgresPlans>) {
    tokio::spawn(async move {
        let mut backoff = Duration::from_millis(100);
        loop {
            if plans.strong_count() == 0 {
                return;
            }
            match listen(&url, &channel, &plans).await {
                Ok(()) => backoff = Duration::from_millis(100),
                Err(error) => {
                    tracing::warn!(%error, channel, "plan change listener disconnected; reconnecting")
                }
            }
            tokio::time::sleep(backoff).await;
            backoff = (backoff * 2).min(Duration::from_secs(5));
        }
    });
}

async fn listen(
    url: &str,
    channel: &str,
    plans: &std::sync::Weak<PostgresPlans>,
) -> Result<(), String> {
    let (client, mut connection) = tokio_postgres::connect(url, NoTls)
        .await
        .map_err(|e| e.to_string())?;
    let (tx, mut notifications) = tokio::sync::mpsc::unbounded_channel();
    let pump = tokio::spawn(async move {
        let mut messages = futures::stream::poll_fn(move |cx| connection.poll_message(cx));
        while let Some(message) = messages.next().await {
            match message {
                Ok(AsyncMessage::Notification(n)) => {
                    if tx.send(n.payload().to_owned()).is_err() {
                        break;
                    }
                }
                Ok(_) => {}
                Err(error) => return Err(error.to_string()),
            }
        }
        Err("connection closed".to_owned())
    });
    // The channel was validated as a plain lowercase identifier.
    client
        .batch_execute(&format!("LISTEN {channel}"))
        .await
        .map_err(|e| e.to_string())?;
    tracing::info!(channel, "listening for plan changes");
    if let Some(plans) = plans.upgrade() {
        plans.invalidate(None).await;
    }
    while let Some(payload) = notifications.recv().await {
        let Some(plans) = plans.upgrade() else {
            return Ok(());
        };
        let account = payload.trim();
        plans
            .invalidate((!account.is_empty() && account != "*").then_some(account))
            .await;
    }
    pump.await.map_err(|e| e.to_string())?
}
