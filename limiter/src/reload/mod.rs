//! Plans and limits without a restart: the config file is read again when its content changes
//! (a mounted ConfigMap is updated by swapping a symlink, so the content is compared, not the
//! inode or the mtime), validated whole like at start, and its live part (`rules.rs`) put in
//! force at once, or the old config keeps serving and the refusal is counted and logged once.
//! Fields that only a restart can change (listen address, store (the failure policy's thresholds
//! too: the store deadline and the circuit's, built into each shard), threads, http, secrets, the
//! plan source's connection) are reported as pending, in the metric and `/v1/fleet`, until a
//! restart (or their old values) clears them.

pub mod status;

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use crate::config::{Config, ConfigError, RegionsConfig};
use crate::rules::Rules;
use crate::service::StreamService;

/// How often the file's content is compared with the last one read. A mounted ConfigMap takes
/// the kubelet's sync period (about a minute) to change; a second more is not noticed.
pub const POLL_INTERVAL: Duration = Duration::from_secs(1);

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
    service.reload.refused(error.to_string());
    tracing::warn!(
        %error,
        generation,
        "the changed config file is refused; generation {generation} keeps serving"
    );
}

fn apply(service: &StreamService, started: &Config, in_force: &Config, new: &Config) {
    let restart_needed = restart_fields(started, new);
    let live = live_fields(in_force, new);
    let generation = if live.is_empty() {
        service.rules.load().generation
    } else {
        let rules = Rules::from_config(new, service.rules.load().generation + 1);
        let generation = rules.generation;
        service.reload.in_force(&rules);
        service.rules.replace(rules);
        generation
    };
    if let (Some(regions), Some(homes)) = (service.regions(), &new.regions) {
        let ttl = Duration::from_millis(service.rules.load().timing.ttl_ms);
        if regions.set_homes(homes.homes(), ttl) {
            tracing::info!(
                generation,
                learning = ?ttl,
                "the regions' homes changed; the accounts whose home moved here learn for one lease TTL (their live streams re-register even at the limit)"
            );
        }
    }
    service.reload.applied(&restart_needed);
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
    differs("history", &old.history, &new.history);
    differs("enforcement", &old.enforcement, &new.enforcement);
    differs("failure_policy", &old.failure_policy, &new.failure_policy);
    differs(
        "store.renewal_window",
        &old.store.renewal_window,
        &new.store.renewal_window,
    );
    differs(
        "plan_source.fallback_plan",
        &old.plan_source.fallback_plan,
        &new.plan_source.fallback_plan,
    );
    differs(
        "regions.homes",
        &old.regions.as_ref().map(RegionsConfig::homes),
        &new.regions.as_ref().map(RegionsConfig::homes),
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
    let store = |c: &Config| {
        let mut store = c.store.clone();
        store.renewal_window = Duration::ZERO; // live
        format!("{store:?}")
    };
    differs("store", &store(started), &store(new));
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
    differs(
        "regions",
        &started.regions.as_ref().map(RegionsConfig::without_homes),
        &new.regions.as_ref().map(RegionsConfig::without_homes),
    );
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
    fn the_regions_homes_are_live_and_their_peers_are_not() {
        let regions = |homes: &str, url: &str| {
            config(&format!(
                "stream_id_secret: s\nregions:\n  name: eu\n  token_file: /t\n{homes}  peers:\n    - {{ name: us, url: \"{url}\", token_file: /t }}\n"
            ))
        };
        let old = regions("", "http://us.example");
        for homes in ["  weight: 3\n", "  evacuated: true\n  secondary: us\n"] {
            let new = regions(homes, "http://us.example");
            assert_eq!(live_fields(&old, &new), ["regions.homes"], "{homes}");
            assert!(restart_fields(&old, &new).is_empty(), "{homes}");
        }
        let moved = regions("", "http://us2.example");
        assert!(live_fields(&old, &moved).is_empty());
        assert_eq!(restart_fields(&old, &moved), ["regions"]);
    }

    #[test]
    fn the_renewal_window_is_live_and_the_rest_of_the_store_is_not() {
        let old = config("plans: { basic: 1 }\ndefault_plan: basic\n");
        let new =
            config("plans: { basic: 1 }\ndefault_plan: basic\nstore: { renewal_window: 50ms }\n");
        assert_eq!(live_fields(&old, &new), ["store.renewal_window"]);
        assert!(restart_fields(&old, &new).is_empty());
        let rules = Rules::from_config(&new, 2);
        assert_eq!(rules.renewal_window, Duration::from_millis(50));
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
