//! Plans and limits without a restart: the config file is read again when its content changes
//! (a mounted ConfigMap is updated by swapping a symlink, so the content is compared, not the
//! inode or the mtime), validated whole like at start, and its live part (`rules.rs`) put in
//! force at once, or the old config keeps serving and the refusal is counted and logged once.
//! Fields that only a restart can change (listen address, store (the failure policy's thresholds
//! too: the store deadline and the circuit's, built into each shard), threads, http, secrets, the
//! plan source's connection) are reported as pending, in the metric and `/v1/fleet`, until a
//! restart (or their old values) clears them.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use prometheus::{Encoder, IntCounterVec, IntGauge, IntGaugeVec, Opts, Registry, TextEncoder};

use crate::config::{Config, ConfigError};
use crate::rules::Rules;
use crate::service::StreamService;

/// How often the file's content is compared with the last one read. A mounted ConfigMap takes
/// the kubelet's sync period (about a minute) to change; a second more is not noticed.
pub const POLL_INTERVAL: Duration = Duration::from_secs(1);

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

    fn in_force(&self, rules: &Rules) {
        self.generation.set(rules.generation as i64);
        self.info.reset();
        self.info
            .with_label_values(&[rules.revision.as_deref().unwrap_or("")])
            .set(1);
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

/// Watches the file `config` was read from, if any; spawn on the runtime of the background
/// tasks. `config` is what the instance started with.
pub fn spawn(service: Arc<StreamService>, config: Config) {
    let Some(path) = config.file.clone() else {
        return;
    };
    tokio::spawn(watch(service, config, path));
}

async fn watch(service: Arc<StreamService>, started: Config, path: PathBuf) {
    let mut seen = read(&path).await.ok();
    let mut in_force = started.clone();
    let mut unreadable = false;
    let mut ticks = tokio::time::interval(POLL_INTERVAL);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        ticks.tick().await;
        let content = match read(&path).await {
            Ok(content) => content,
            Err(error) => {
                // A ConfigMap update swaps a symlink: a read may fall between; log a lasting one once.
                if !std::mem::replace(&mut unreadable, true) {
                    tracing::warn!(path = %path.display(), %error, "cannot read the config file; the config in force keeps serving");
                }
                continue;
            }
        };
        unreadable = false;
        if seen.as_ref() == Some(&content) {
            continue;
        }
        seen = Some(content);
        let (checked_path, flag) = (path.clone(), started.listen_flag);
        let checked = tokio::task::spawn_blocking(move || load_checked(&checked_path, flag))
            .await
            .unwrap_or_else(|e| {
                Err(ConfigError::Invalid {
                    field: "(file)",
                    message: format!("the check panicked: {e}"),
                })
            });
        match checked {
            Ok(new) => {
                apply(&service, &started, &in_force, &new);
                in_force = new;
            }
            Err(error) => refuse(&service, &error),
        }
    }
}

/// The file's bytes, read off the event loop (a volume may be slow).
async fn read(path: &Path) -> std::io::Result<Vec<u8>> {
    let path = path.to_owned();
    tokio::task::spawn_blocking(move || std::fs::read(path))
        .await
        .unwrap_or_else(|e| Err(std::io::Error::other(e)))
}

/// The file read and checked like at start: parsed, environment applied, validated, the files
/// it names read.
fn load_checked(
    path: &Path,
    listen_flag: Option<std::net::SocketAddr>,
) -> Result<Config, ConfigError> {
    let mut config = Config::load(Some(path), |name| std::env::var(name).ok())?;
    config.check_named_files()?;
    if let Some(listen) = listen_flag {
        config.listen = listen;
        config.listen_flag = Some(listen);
    }
    Ok(config)
}

fn refuse(service: &StreamService, error: &ConfigError) {
    let generation = service.rules.load().generation;
    service.reload.reloads.with_label_values(&["refused"]).inc();
    service.reload.outcome().refused = Some(error.to_string());
    tracing::warn!(
        %error,
        generation,
        "the changed config file is refused; generation {generation} keeps serving"
    );
}

fn apply(service: &StreamService, started: &Config, in_force: &Config, new: &Config) {
    let status = &service.reload;
    status.reloads.with_label_values(&["applied"]).inc();
    let restart_needed = restart_fields(started, new);
    let live = live_fields(in_force, new);
    let generation = if live.is_empty() {
        service.rules.load().generation
    } else {
        let rules = Rules::from_config(new, service.rules.load().generation + 1);
        let generation = rules.generation;
        status.in_force(&rules);
        service.rules.replace(rules);
        generation
    };
    {
        let mut outcome = status.outcome();
        outcome.refused = None;
        outcome.restart_needed = restart_needed.iter().map(|f| f.to_string()).collect();
    }
    status.restart_pending.set(restart_needed.len() as i64);
    if restart_needed.is_empty() {
        tracing::info!(generation, revision = new.revision.as_deref(), changed = ?live, "config file changed; in force");
    } else {
        tracing::warn!(generation, revision = new.revision.as_deref(), changed = ?live, restart_needed = ?restart_needed,
            "config file changed; its live part is in force, the rest takes effect at the next restart");
    }
}

/// The live fields (`rules.rs`) whose values differ.
fn live_fields(old: &Config, new: &Config) -> Vec<&'static str> {
    let mut changed = Vec::new();
    let mut differs = |field, a: &dyn std::fmt::Debug, b: &dyn std::fmt::Debug| {
        if format!("{a:?}") != format!("{b:?}") {
            changed.push(field);
        }
    };
    differs("plans", &old.plans, &new.plans);
    differs("default_plan", &old.default_plan, &new.default_plan);
    differs("lease", &old.lease, &new.lease);
    differs("failure_policy", &old.failure_policy, &new.failure_policy);
    differs(
        "plan_source.fallback_plan",
        &old.plan_source.fallback_plan,
        &new.plan_source.fallback_plan,
    );
    differs("revision", &old.revision, &new.revision);
    changed
}

/// The fields whose values differ from what the instance started with and that only a restart
/// puts in force.
fn restart_fields(started: &Config, new: &Config) -> Vec<&'static str> {
    let mut changed = Vec::new();
    let mut differs = |field, a: &dyn std::fmt::Debug, b: &dyn std::fmt::Debug| {
        if format!("{a:?}") != format!("{b:?}") {
            changed.push(field);
        }
    };
    differs("listen", &started.listen, &new.listen);
    differs("store", &started.store, &new.store);
    differs("threads", &started.threads, &new.threads);
    differs("http", &started.http, &new.http);
    differs(
        "max_body_bytes",
        &started.max_body_bytes,
        &new.max_body_bytes,
    );
    differs(
        "stream_id_secret",
        &(&started.stream_id_secret, &started.stream_id_secret_file),
        &(&new.stream_id_secret, &new.stream_id_secret_file),
    );
    differs(
        "auth_token_file",
        &started.auth_token_file,
        &new.auth_token_file,
    );
    differs("auth", &started.auth, &new.auth);
    let source = |c: &Config| {
        let mut source = c.plan_source.clone();
        source.fallback_plan = None; // live
        format!("{source:?}")
    };
    differs("plan_source", &source(started), &source(new));
    changed
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(yaml: &str) -> Config {
        let config = Config::from_yaml(yaml).unwrap();
        config.validate().unwrap();
        config
    }

    #[test]
    fn plans_lease_and_policy_are_live_and_the_store_and_listen_address_are_not() {
        let old = config("plans: { basic: 1, premium: 4 }\ndefault_plan: basic\n");
        let new = config(
            "plans: { basic: 1, premium: 2 }\ndefault_plan: basic\nfailure_policy: closed\n\
             lease: { heartbeat_interval: 10s, ttl: 30s }\nlisten: 0.0.0.0:9000\nthreads: 3\n",
        );
        assert_eq!(
            live_fields(&old, &new),
            ["plans", "lease", "failure_policy"]
        );
        assert_eq!(restart_fields(&old, &new), ["listen", "threads"]);
        assert!(live_fields(&old, &old).is_empty() && restart_fields(&old, &old).is_empty());
    }

    #[test]
    fn the_failure_policys_thresholds_are_store_fields_and_need_a_restart() {
        let old = config("plans: { basic: 1 }\ndefault_plan: basic\n");
        for store in [
            "timeout: 40ms",
            "circuit_failure_threshold: 5",
            "circuit_probe_interval: 2s",
        ] {
            let new = config(&format!(
                "plans: {{ basic: 1 }}\ndefault_plan: basic\nfailure_policy: closed\nstore: {{ {store} }}\n"
            ));
            assert_eq!(live_fields(&old, &new), ["failure_policy"], "{store}");
            assert_eq!(restart_fields(&old, &new), ["store"], "{store}");
        }
    }
}
