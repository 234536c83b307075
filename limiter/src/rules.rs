//! The part of the config a running limiter may change without a restart (`reload/` swaps
//! it): plans, the default and fallback plans, device caps, lease timing, the heartbeat interval,
//! the failure policy, the enforcement (who is refused, who is in shadow) and how much account history is kept. One immutable snapshot behind an atomic pointer: the service, the
//! plan source and both stores read the one in force (a load is a few nanoseconds, no lock), and
//! a reload replaces it whole, so no call sees half of one config and half of another.

use std::sync::Arc;
use std::time::Duration;

use arc_swap::{ArcSwap, Guard};

use crate::config::{Config, FailurePolicy};
use crate::enforcement::EnforcementBook;
use crate::model::{HistoryLimits, Plan, Timing};
use crate::plan_book::PlanBook;

/// The rules in force.
#[derive(Debug, Clone)]
pub struct Rules {
    /// 1 at start, one more for each config applied since.
    pub generation: u64,
    /// The config's `revision` (the operator writes one per rendered config), if it has one.
    pub revision: Option<String>,
    pub book: PlanBook,
    /// The plan used when the plan database cannot answer (`plan_source.fallback_plan`, else the
    /// default plan).
    pub fallback: Plan,
    /// Lease TTL and revocation memory, for leases written from now on.
    pub timing: Timing,
    pub heartbeat_interval: Duration,
    /// How long a lease's renewal waits on its shard for company (`store.renewal_window`).
    pub renewal_window: Duration,
    pub policy: FailurePolicy,
    /// Which accounts' plays over a limit are refused, and which only counted (shadow).
    pub enforcement: EnforcementBook,
    /// The device caps of every plan that has some, as the acquire scripts read them.
    pub caps_book: Vec<u8>,
    /// How much of each account's recent history the stores keep (`set_history`).
    history: HistoryLimits,
    /// The same, as the scripts and the module read them, formatted once per snapshot rather
    /// than on every play, stop and heartbeat script (`HistoryLimits::bounds_arg`).
    history_bounds: Vec<u8>,
}

impl Rules {
    /// How much of each account's recent history the stores keep.
    pub fn history(&self) -> HistoryLimits {
        self.history
    }

    /// The history's bounds as one argument of the scripts and the module.
    pub fn history_bounds(&self) -> &[u8] {
        &self.history_bounds
    }

    /// Keeps `limits` of history from now on (the bounds' argument with them).
    pub fn set_history(&mut self, limits: HistoryLimits) {
        self.history = limits;
        self.history_bounds = limits.bounds_arg();
    }

    /// The rules of a validated config.
    pub fn from_config(config: &Config, generation: u64) -> Rules {
        let book = PlanBook::from_config(config);
        let fallback = config
            .plan_source
            .fallback_plan
            .as_deref()
            .and_then(|name| book.get(name))
            .unwrap_or(&book.default)
            .clone();
        Rules {
            generation,
            revision: config.revision.clone(),
            caps_book: book.caps_book(),
            fallback,
            book,
            timing: Timing::from_ttl(config.lease.ttl),
            heartbeat_interval: config.lease.heartbeat_interval,
            renewal_window: config.store.renewal_window,
            policy: config.failure_policy,
            enforcement: EnforcementBook {
                default: config.enforcement.enforcement(),
                plans: config
                    .plans
                    .iter()
                    .filter_map(|(name, rule)| {
                        Some((name.clone(), rule.enforcement()?.enforcement()))
                    })
                    .collect(),
            },
            history: config.history.limits(),
            history_bounds: config.history.limits().bounds_arg(),
        }
    }

    /// Rules that never change, for a store built on its own (tests, benchmarks).
    pub fn fixed(book: &PlanBook, timing: Timing) -> Rules {
        Rules {
            generation: 1,
            revision: None,
            caps_book: book.caps_book(),
            fallback: book.default.clone(),
            book: book.clone(),
            timing,
            heartbeat_interval: Duration::from_millis(timing.ttl_ms / 2),
            renewal_window: crate::config::DEFAULT_RENEWAL_WINDOW,
            policy: FailurePolicy::Open,
            enforcement: EnforcementBook::default(),
            history: HistoryLimits::default(),
            history_bounds: HistoryLimits::default().bounds_arg(),
        }
    }
}

/// The shared, swappable snapshot.
#[derive(Clone)]
pub struct LiveRules(Arc<ArcSwap<Rules>>);

impl LiveRules {
    pub fn new(rules: Rules) -> LiveRules {
        LiveRules(Arc::new(ArcSwap::from_pointee(rules)))
    }

    /// The rules in force; hold the guard only for the call at hand.
    pub fn load(&self) -> Guard<Arc<Rules>> {
        self.0.load()
    }

    /// The rules in force, to keep beyond one call.
    pub fn load_full(&self) -> Arc<Rules> {
        self.0.load_full()
    }

    /// Puts `rules` in force for every call that starts from now on.
    pub fn replace(&self, rules: Rules) {
        self.0.store(Arc::new(rules));
    }
}

impl std::fmt::Debug for LiveRules {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_tuple("LiveRules").field(&self.load()).finish()
    }
}
