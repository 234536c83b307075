//! An account's home as a source names it (`regions.home_sources`, in their order): the
//! subscription database (a column beside the plan, cached with the plan and invalidated with
//! it), a claim of the player token, or a header the gateway sets. The two a call carries are
//! remembered for the calls that carry neither (a support call, a heartbeat through another
//! path), cached like plans. An account no source names is homed by the hash (`home.rs`).

use std::sync::Arc;
use std::time::Duration;

use crate::config::HomeSource;
use crate::plans::PlanSource;

/// What one call says of its account's home: its player token's claim, the gateway's header.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct HomeHint {
    pub token: Option<String>,
    pub header: Option<String>,
}

impl HomeHint {
    /// A call that names no home (a support call).
    pub const NONE: HomeHint = HomeHint {
        token: None,
        header: None,
    };
}

pub struct NamedHomes {
    sources: Vec<HomeSource>,
    /// Homes named by a call's token or header: account → (region, source).
    seen: moka::future::Cache<String, (Arc<str>, HomeSource)>,
}

impl NamedHomes {
    pub fn new(sources: Vec<HomeSource>, capacity: u64, ttl: Duration) -> NamedHomes {
        NamedHomes {
            sources,
            seen: moka::future::Cache::builder()
                .max_capacity(capacity)
                .time_to_live(ttl)
                .build(),
        }
    }

    pub fn sources(&self) -> &[HomeSource] {
        &self.sources
    }

    /// The home the first source that names one names, with that source; else the home a token
    /// or header named on an earlier call. `cached_only`: the database is not asked (a call shed
    /// under overload), its cached row answers.
    pub async fn named(
        &self,
        account_id: &str,
        hint: &HomeHint,
        plans: &PlanSource,
        cached_only: bool,
    ) -> Option<(Arc<str>, HomeSource)> {
        for &source in &self.sources {
            let named = match source {
                HomeSource::PlanSource => plans.home(account_id, cached_only).await,
                HomeSource::PlayerToken => hint.token.clone(),
                HomeSource::GatewayHeader => hint.header.clone(),
            };
            let Some(named) = named else { continue };
            let named: Arc<str> = named.into();
            // Remembered from the calls that carry it (written only when it changes: most calls
            // of an account repeat it); the database is its own cache.
            if source != HomeSource::PlanSource
                && self.seen.get(account_id).await != Some((named.clone(), source))
            {
                self.seen
                    .insert(account_id.to_owned(), (named.clone(), source))
                    .await;
            }
            return Some((named, source));
        }
        self.seen.get(account_id).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Config;
    use crate::rules::{LiveRules, Rules};

    fn request_plans() -> PlanSource {
        let config = Config::default();
        PlanSource::Request(LiveRules::new(Rules::from_config(&config, 1)))
    }

    fn hint(token: Option<&str>, header: Option<&str>) -> HomeHint {
        HomeHint {
            token: token.map(Into::into),
            header: header.map(Into::into),
        }
    }

    #[tokio::test]
    async fn the_first_source_that_names_a_home_decides_and_is_remembered() {
        let plans = request_plans();
        let homes = NamedHomes::new(
            vec![HomeSource::PlayerToken, HomeSource::GatewayHeader],
            100,
            Duration::from_secs(60),
        );
        let (homes, plans) = (&homes, &plans);
        let named = |h| async move { homes.named("acct", &h, plans, false).await };
        assert_eq!(named(HomeHint::NONE).await, None, "none named yet");
        let both = named(hint(Some("ap"), Some("us"))).await;
        assert_eq!(both, Some(("ap".into(), HomeSource::PlayerToken)));
        let header = named(hint(None, Some("us"))).await;
        assert_eq!(header, Some(("us".into(), HomeSource::GatewayHeader)));
        // A call that names none finds the last one named.
        let remembered = named(HomeHint::NONE).await;
        assert_eq!(remembered, Some(("us".into(), HomeSource::GatewayHeader)));
        let other = homes.named("other", &HomeHint::NONE, plans, false).await;
        assert_eq!(other, None);
    }

    #[tokio::test]
    async fn a_source_not_listed_is_not_read() {
        let plans = request_plans();
        let homes = NamedHomes::new(vec![HomeSource::PlayerToken], 100, Duration::from_secs(60));
        let named = homes
            .named("acct", &hint(None, Some("us")), &plans, false)
            .await;
        assert_eq!(named, None, "the header is not a source here");
    }
}
