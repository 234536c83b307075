//! What the reloads did, for the metrics and `/v1/fleet`: the generation and revision in force,
//! the reloads by outcome, the fields waiting for a restart and the last refusal.

use std::sync::Mutex;

use prometheus::{Encoder, IntCounterVec, IntGauge, IntGaugeVec, Opts, Registry, TextEncoder};

use crate::rules::Rules;

/// The config an instance runs, as `/v1/fleet` shows it.
#[derive(Debug, Clone, serde::Serialize, utoipa::ToSchema)]
pub struct ConfigView {
    /// 1 at start, one more for each changed config put in force since.
    pub generation: u64,
    /// The file's `revision` label (the operator writes one), if it has one.
    pub revision: Option<String>,
    /// Fields the file changed that take effect only at a restart (empty: none pending).
    pub restart_needed: Vec<String>,
    /// Why the newest version of the file was refused (the previous config keeps serving);
    /// none once a valid one is read.
    pub refused: Option<String>,
}

#[derive(Default)]
struct Outcome {
    restart_needed: Vec<String>,
    refused: Option<String>,
}

/// What the reloads did: metrics and the fleet view's part.
pub struct ReloadStatus {
    registry: Registry,
    generation: IntGauge,
    info: IntGaugeVec,
    reloads: IntCounterVec,
    restart_pending: IntGauge,
    outcome: Mutex<Outcome>,
}

impl ReloadStatus {
    pub fn new(rules: &Rules) -> ReloadStatus {
        let registry =
            Registry::new_custom(Some("screenlimit".into()), None).expect("valid prefix");
        let generation = IntGauge::new(
            "config_generation",
            "The config generation this instance runs: 1 at start, one more per change put in force",
        )
        .expect("valid metric");
        let info = IntGaugeVec::new(
            Opts::new(
                "config_info",
                "1 for the revision label of the config this instance runs",
            ),
            &["revision"],
        )
        .expect("valid metric");
        let reloads = IntCounterVec::new(
            Opts::new(
                "config_reloads_total",
                "Changed config files read, by outcome: applied (valid, live part in force) or refused (invalid, the previous config serves)",
            ),
            &["outcome"],
        )
        .expect("valid metric");
        let restart_pending = IntGauge::new(
            "config_restart_pending",
            "Fields of the config file changed that take effect only at a restart",
        )
        .expect("valid metric");
        for metric in [
            Box::new(generation.clone()) as Box<dyn prometheus::core::Collector>,
            Box::new(info.clone()),
            Box::new(reloads.clone()),
            Box::new(restart_pending.clone()),
        ] {
            registry.register(metric).expect("unique metric");
        }
        for outcome in ["applied", "refused"] {
            reloads.with_label_values(&[outcome]);
        }
        let status = ReloadStatus {
            registry,
            generation,
            info,
            reloads,
            restart_pending,
            outcome: Mutex::default(),
        };
        status.in_force(rules);
        status
    }

    /// `rules` put in force.
    pub(super) fn in_force(&self, rules: &Rules) {
        self.generation.set(rules.generation as i64);
        self.info.reset();
        self.info
            .with_label_values(&[rules.revision.as_deref().unwrap_or("")])
            .set(1);
    }

    /// A changed file applied; `restart_needed` its fields that wait for a restart.
    pub(super) fn applied(&self, restart_needed: &[&str]) {
        self.reloads.with_label_values(&["applied"]).inc();
        {
            let mut outcome = self.outcome();
            outcome.refused = None;
            outcome.restart_needed = restart_needed.iter().map(|f| f.to_string()).collect();
        }
        self.restart_pending.set(restart_needed.len() as i64);
    }

    /// A changed file refused, for `error`; the config in force keeps serving.
    pub(super) fn refused(&self, error: String) {
        self.reloads.with_label_values(&["refused"]).inc();
        self.outcome().refused = Some(error);
    }

    fn outcome(&self) -> std::sync::MutexGuard<'_, Outcome> {
        self.outcome.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub fn view(&self, rules: &Rules) -> ConfigView {
        let outcome = self.outcome();
        ConfigView {
            generation: rules.generation,
            revision: rules.revision.clone(),
            restart_needed: outcome.restart_needed.clone(),
            refused: outcome.refused.clone(),
        }
    }

    pub fn render(&self) -> String {
        let mut out = Vec::new();
        TextEncoder::new()
            .encode(&self.registry.gather(), &mut out)
            .expect("text encoding does not fail");
        String::from_utf8(out).expect("Prometheus text is UTF-8")
    }
}
