//! Pure validation of a `StreamLimiter` before anything is built. The API server enforces the
//! same rules through the CRD's schema and CEL rules; checking again here keeps a resource
//! created under an older CRD (or with validation off) from rendering a config the limiter
//! would refuse.

use std::collections::BTreeSet;

use kube::{Resource, ResourceExt};

mod field;
mod regions;

use crate::crd::{
    EnforcementMode, EnforcementSpec, ExternalRedisSpec, MAX_NAME_LEN, MAX_PLANS, MAX_SHARDS,
    MAX_STREAMS_CEILING, MonitoringSpec, PlanSourceKind, RedisMode, StreamLimiter,
};
pub use field::FieldError;
use field::{err, valid_token};
use regions::{validate_home_sources, validate_regions};

/// Every problem with the resource, or nothing.
pub fn validate(sl: &StreamLimiter) -> Result<(), Vec<FieldError>> {
    let mut errors = Vec::new();
    let spec = &sl.spec;

    let name = sl.name_any();
    if name.len() > MAX_NAME_LEN {
        errors.push(err(
            "metadata.name",
            format!("{name:?} is longer than {MAX_NAME_LEN} characters; owned object names would not be valid"),
        ));
    }
    if sl.meta().uid.is_none() || sl.meta().namespace.is_none() {
        errors.push(err(
            "metadata",
            "the resource has no uid or namespace (it was not read from the API server)",
        ));
    }

    if spec.plans.is_empty() || spec.plans.len() > MAX_PLANS {
        errors.push(err("spec.plans", format!("declare 1 to {MAX_PLANS} plans")));
    }
    let mut seen = BTreeSet::new();
    for (i, plan) in spec.plans.iter().enumerate() {
        if !valid_token(&plan.name) {
            errors.push(err(
                format!("spec.plans[{i}].name"),
                format!(
                    "{:?} must be 1-64 characters of A-Z a-z 0-9 . _ : -",
                    plan.name
                ),
            ));
        }
        if !seen.insert(plan.name.as_str()) {
            errors.push(err(
                format!("spec.plans[{i}].name"),
                format!(
                    "plan {:?} is declared twice; plan names must be unique",
                    plan.name
                ),
            ));
        }
        if !(1..=MAX_STREAMS_CEILING).contains(&plan.max_streams) {
            errors.push(err(
                format!("spec.plans[{i}].maxStreams"),
                format!(
                    "{} is out of range; use 1 to {MAX_STREAMS_CEILING}",
                    plan.max_streams
                ),
            ));
        }
        for (kind, cap) in plan
            .device_caps
            .as_ref()
            .map(|c| c.entries())
            .unwrap_or_default()
        {
            if !(1..=plan.max_streams).contains(&cap) {
                errors.push(err(
                    format!("spec.plans[{i}].deviceCaps.{kind}"),
                    format!(
                        "{cap} is out of range; use 1 to the plan's maxStreams ({})",
                        plan.max_streams
                    ),
                ));
            }
        }
        if let Some(enforcement) = &plan.enforcement {
            validate_enforcement(
                enforcement,
                &format!("spec.plans[{i}].enforcement"),
                &mut errors,
            );
        }
    }
    validate_enforcement(&spec.enforcement, "spec.enforcement", &mut errors);
    if !seen.contains(spec.default_plan.as_str()) {
        errors.push(err(
            "spec.defaultPlan",
            format!(
                "{:?} is not one of the plans ({})",
                spec.default_plan,
                seen.iter().copied().collect::<Vec<_>>().join(", ")
            ),
        ));
    }

    let source = &spec.plan_source;
    if let Some(fallback) = &source.fallback_plan
        && !seen.contains(fallback.as_str())
    {
        errors.push(err(
            "spec.planSource.fallbackPlan",
            format!("{fallback:?} is not one of the plans"),
        ));
    }
    if source.kind == PlanSourceKind::Postgres {
        match &source.postgres {
            None => errors.push(err(
                "spec.planSource.postgres.secretRef",
                "required when planSource.kind is postgres: the Secret key holding the connection string",
            )),
            Some(pg) => {
                if !pg.query.contains("$1") {
                    errors.push(err(
                        "spec.planSource.postgres.query",
                        "must take the account id as $1",
                    ));
                }
                let channel = &pg.notify_channel;
                let valid = (1..=63).contains(&channel.len())
                    && channel
                        .bytes()
                        .next()
                        .is_some_and(|b| b.is_ascii_lowercase() || b == b'_')
                    && channel
                        .bytes()
                        .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_');
                if !valid {
                    errors.push(err(
                        "spec.planSource.postgres.notifyChannel",
                        "must be a lowercase SQL identifier (a-z, 0-9, _), at most 63 characters",
                    ));
                }
                if pg.timeout_millis < 1 || pg.pool_size < 1 {
                    errors.push(err(
                        "spec.planSource.postgres",
                        "timeoutMillis and poolSize must be at least 1",
                    ));
                }
            }
        }
    }
    if source.cache.capacity < 1 || source.cache.ttl_seconds < 1 {
        errors.push(err(
            "spec.planSource.cache",
            "capacity and ttlSeconds must be at least 1",
        ));
    }
    if source.cache.max_stale_seconds < source.cache.ttl_seconds {
        errors.push(err(
            "spec.planSource.cache.maxStaleSeconds",
            "must be at least ttlSeconds",
        ));
    }

    let lease = &spec.lease;
    if lease.heartbeat_interval_seconds < 1 {
        errors.push(err(
            "spec.lease.heartbeatIntervalSeconds",
            "must be at least 1",
        ));
    }
    if i64::from(lease.ttl_seconds) < 2 * i64::from(lease.heartbeat_interval_seconds) {
        errors.push(err(
            "spec.lease.ttlSeconds",
            format!(
                "{} must be at least twice heartbeatIntervalSeconds ({}), so one lost heartbeat does not end a stream",
                lease.ttl_seconds, lease.heartbeat_interval_seconds
            ),
        ));
    }

    let redis = &spec.redis;
    if !(1..=MAX_SHARDS).contains(&redis.shards) {
        errors.push(err(
            "spec.redis.shards",
            format!("{} is out of range; use 1 to {MAX_SHARDS}", redis.shards),
        ));
    }
    if !(0..=4).contains(&redis.replicas_per_shard) {
        errors.push(err(
            "spec.redis.replicasPerShard",
            format!("{} is out of range; use 0 to 4", redis.replicas_per_shard),
        ));
    }
    let sentinel = &redis.sentinel;
    if !(1..=9).contains(&sentinel.replicas) {
        errors.push(err(
            "spec.redis.sentinel.replicas",
            format!("{} is out of range; use 1 to 9", sentinel.replicas),
        ));
    }
    if sentinel.quorum < 1 || sentinel.quorum > sentinel.replicas {
        errors.push(err(
            "spec.redis.sentinel.quorum",
            format!(
                "{} must be between 1 and redis.sentinel.replicas ({})",
                sentinel.quorum, sentinel.replicas
            ),
        ));
    }
    if redis.mode == RedisMode::External {
        match &redis.external {
            None => errors.push(err(
                "spec.redis.external",
                "required when redis.mode is external: give urls or urlsSecret (shards), or \
                 clusterNodes or clusterNodesSecret (a Redis Cluster)",
            )),
            Some(ext) => validate_external(ext, redis.shards, &mut errors),
        }
    }

    if let Some(tls) = &redis.tls
        && !(1..=253).contains(&tls.secret_name.len())
    {
        errors.push(err(
            "spec.redis.tls.secretName",
            "name the Secret with tls.crt, tls.key and ca.crt (1 to 253 characters)",
        ));
    }
    let np = &spec.network_policies;
    for (field, peers) in [
        ("limiterClients", &np.limiter_clients),
        ("adminUIClients", &np.admin_ui_clients),
    ] {
        for (i, p) in peers.iter().enumerate() {
            if p.namespace_labels.is_none() && p.pod_labels.is_none() {
                errors.push(err(
                    format!("spec.networkPolicies.{field}[{i}]"),
                    "give namespaceLabels, podLabels or both",
                ));
            }
        }
    }

    if spec.limiter.replicas < 1 {
        errors.push(err("spec.limiter.replicas", "must be at least 1"));
    }
    if spec.admin_ui.enabled && spec.admin_ui.auth_secret_name.is_none() {
        errors.push(err(
            "spec.adminUI.authSecretName",
            "required when the admin UI is enabled",
        ));
    }
    for (i, proxy) in spec.admin_ui.trusted_proxies.iter().enumerate() {
        if !is_address_or_network(proxy) {
            errors.push(err(
                format!("spec.adminUI.trustedProxies[{i}]"),
                format!("`{proxy}` is neither an address nor a network such as 10.0.0.0/8"),
            ));
        }
    }
    let ui = &spec.admin_ui;
    let https_url = |text: &str| {
        text.strip_prefix("https://")
            .is_some_and(|rest| !rest.is_empty() && !rest.contains(char::is_whitespace))
    };
    if let Some(url) = &ui.external_url
        && !(https_url(url) || url.starts_with("http://"))
    {
        errors.push(err(
            "spec.adminUI.externalUrl",
            format!("`{url}` is not an http(s) URL such as https://support.example.com"),
        ));
    }
    if let Some(oidc) = &ui.oidc {
        if ui.external_url.is_none() {
            errors.push(err(
                "spec.adminUI.externalUrl",
                "required with adminUI.oidc: the provider sends people back to {externalUrl}/oidc/callback",
            ));
        }
        if !https_url(&oidc.issuer_url) {
            errors.push(err(
                "spec.adminUI.oidc.issuerUrl",
                format!("`{}` is not an https URL", oidc.issuer_url),
            ));
        }
        if oidc.client_id.trim().is_empty() {
            errors.push(err("spec.adminUI.oidc.clientId", "must not be empty"));
        }
        if oidc.support_groups.is_empty() && oidc.viewer_groups.is_empty() {
            errors.push(err(
                "spec.adminUI.oidc.supportGroups",
                "name at least one support or viewer group (nobody could sign in)",
            ));
        }
        for (field, items) in [
            ("supportGroups", &oidc.support_groups),
            ("viewerGroups", &oidc.viewer_groups),
            ("extraScopes", &oidc.extra_scopes),
        ] {
            for (i, item) in items.iter().enumerate() {
                if item.contains([',', ' ']) || item.trim().is_empty() {
                    errors.push(err(
                        format!("spec.adminUI.oidc.{field}[{i}]"),
                        format!("`{item}` may not be empty or hold commas or spaces"),
                    ));
                }
            }
        }
    }
    if spec.failure_policy.store_timeout_millis < 1 {
        errors.push(err(
            "spec.failurePolicy.storeTimeoutMillis",
            "must be at least 1",
        ));
    }
    let window = i64::from(spec.limiter.batch_window_micros);
    if !(0..=10_000).contains(&window) {
        errors.push(err("spec.limiter.batchWindowMicros", "must be 0 to 10000"));
    } else if window * 2 > i64::from(spec.failure_policy.store_timeout_millis) * 1000 {
        errors.push(err(
            "spec.limiter.batchWindowMicros",
            "must be at most half of failurePolicy.storeTimeoutMillis (a batch that waits longer leaves its calls no time)",
        ));
    }
    // The limiter's own rule (`store.renewal_window`): a renewal held for its window takes at
    // most a quarter of what a lease has to spare after the heartbeat. A lease timing refused
    // above is not judged again here.
    let renewal = i64::from(spec.limiter.renewal_window_millis);
    let (heartbeat, ttl) = (
        i64::from(lease.heartbeat_interval_seconds),
        i64::from(lease.ttl_seconds),
    );
    let lease_valid = heartbeat >= 1 && ttl >= 2 * heartbeat;
    let spare_millis = (ttl - heartbeat) * 1000;
    if !(0..=1_000).contains(&renewal) {
        errors.push(err("spec.limiter.renewalWindowMillis", "must be 0 to 1000"));
    } else if lease_valid && renewal * 4 > spare_millis {
        errors.push(err(
            "spec.limiter.renewalWindowMillis",
            format!(
                "{renewal} ms must be at most a quarter of lease.ttlSeconds - \
                 lease.heartbeatIntervalSeconds ({spare_millis} ms): a renewal that waits longer risks \
                 its lease"
            ),
        ));
    }
    // The limiter's own bounds (`history`): 1 to 1000 events, a retention of 1 minute to 90 days
    // (whole hours here).
    let history = &spec.limiter.history;
    let http = &spec.limiter.http;
    for (field, value, range) in [
        (
            "spec.limiter.history.maxEvents",
            history.max_events,
            1..=1_000,
        ),
        (
            "spec.limiter.history.retentionHours",
            history.retention_hours,
            1..=2_160,
        ),
        (
            "spec.limiter.http.headerReadTimeoutMillis",
            http.header_read_timeout_millis,
            10..=3_600_000,
        ),
        (
            "spec.limiter.http.bodyReadTimeoutMillis",
            http.body_read_timeout_millis,
            10..=3_600_000,
        ),
        (
            "spec.limiter.http.idleTimeoutSeconds",
            http.idle_timeout_seconds,
            1..=3_600,
        ),
        (
            "spec.limiter.http.maxHeaderBytes",
            http.max_header_bytes,
            1_024..=1_048_576,
        ),
        (
            "spec.limiter.http.maxConnections",
            http.max_connections,
            1..=1_000_000,
        ),
        (
            "spec.limiter.http.maxInFlight",
            http.max_in_flight,
            1..=1_000_000,
        ),
        (
            "spec.limiter.http.writeTimeoutMillis",
            http.write_timeout_millis,
            10..=3_600_000,
        ),
        (
            "spec.limiter.http.listenBacklog",
            http.listen_backlog,
            16..=65_535,
        ),
        (
            "spec.limiter.http.maxQueueDelayMillis",
            http.max_queue_delay_millis,
            0..=10_000,
        ),
        (
            "spec.limiter.http.drainPeriodSeconds",
            http.drain_period_seconds,
            0..=300,
        ),
        (
            "spec.limiter.http.shutdownTimeoutSeconds",
            http.shutdown_timeout_seconds,
            1..=600,
        ),
    ] {
        if !range.contains(&value) {
            errors.push(err(
                field,
                format!("must be {} to {}", range.start(), range.end()),
            ));
        }
    }
    if let Some(auto) = &spec.limiter.autoscaling {
        if !(1..=1000).contains(&auto.min_replicas) || auto.min_replicas > auto.max_replicas {
            errors.push(err(
                "spec.limiter.autoscaling.minReplicas",
                "must be 1 to 1000 and at most maxReplicas",
            ));
        }
        if !(1..=1000).contains(&auto.max_replicas) {
            errors.push(err(
                "spec.limiter.autoscaling.maxReplicas",
                "must be 1 to 1000",
            ));
        }
        if !(10..=100).contains(&auto.target_cpu_utilization_percent) {
            errors.push(err(
                "spec.limiter.autoscaling.targetCpuUtilizationPercent",
                "must be 10 to 100",
            ));
        }
        let cpu_request = spec
            .limiter
            .resources
            .as_ref()
            .and_then(|r| r.requests.as_ref())
            .is_some_and(|r| r.contains_key("cpu"));
        if auto.enabled && !cpu_request {
            errors.push(err(
                "spec.limiter.resources.requests.cpu",
                "required when limiter.autoscaling is enabled: CPU utilization is measured against the request",
            ));
        }
    }

    validate_monitoring(&spec.monitoring, &mut errors);
    if let Some(regions) = &spec.regions {
        if spec.stream_id_secret_name.is_none() {
            errors.push(err(
                "spec.streamIdSecretName",
                "required with regions: every region must sign stream ids with the same key, \
                 from a Secret you create in each cluster (key stream-id-secret)",
            ));
        }
        validate_regions(regions, &mut errors);
        validate_home_sources(spec, &mut errors);
    }

    if errors.is_empty() {
        Ok(())
    } else {
        Err(errors)
    }
}

/// The limiter's own rules for an `enforcement` block (its `config/enforcement.rs`): a share of
/// 0 to 100, and only with `mode: enforce`.
fn validate_enforcement(e: &EnforcementSpec, field: &str, errors: &mut Vec<FieldError>) {
    let Some(percent) = e.enforce_percent else {
        return;
    };
    if !(0..=100).contains(&percent) {
        errors.push(err(
            format!("{field}.enforcePercent"),
            format!("{percent} is out of range; use 0 to 100 (the share of accounts enforced)"),
        ));
    } else if e.mode == EnforcementMode::Shadow {
        errors.push(err(
            format!("{field}.enforcePercent"),
            "applies to mode: enforce (mode: shadow enforces no account); remove it, or set mode: enforce",
        ));
    }
}

fn validate_monitoring(m: &MonitoringSpec, errors: &mut Vec<FieldError>) {
    let interval = &m.service_monitor.interval;
    let (digits, unit) = interval.split_at(
        interval
            .find(|c: char| !c.is_ascii_digit())
            .unwrap_or(interval.len()),
    );
    let valid_interval = (1..=5).contains(&digits.len())
        && !digits.starts_with('0')
        && ["ms", "s", "m", "h"].contains(&unit);
    if !valid_interval {
        errors.push(err(
            "spec.monitoring.serviceMonitor.interval",
            format!("{interval:?} is not a Prometheus duration such as 30s or 1m"),
        ));
    }
    let t = &m.prometheus_rule.thresholds;
    for (field, value, range) in [
        ("degradedPercent", t.degraded_percent, 1..=100),
        ("playStartP99Millis", t.play_start_p99_millis, 1..=10_000),
        (
            "storeErrorsPerSecond",
            t.store_errors_per_second,
            1..=1_000_000,
        ),
        ("denialFactor", t.denial_factor, 2..=100),
    ] {
        if !range.contains(&value) {
            errors.push(err(
                format!("spec.monitoring.prometheusRule.thresholds.{field}"),
                format!("must be {} to {}", range.start(), range.end()),
            ));
        }
    }
    for (field, labels) in [
        ("serviceMonitor", &m.service_monitor.labels),
        ("prometheusRule", &m.prometheus_rule.labels),
    ] {
        if labels.len() > 16 {
            errors.push(err(
                format!("spec.monitoring.{field}.labels"),
                "at most 16 labels",
            ));
        }
        for (key, value) in labels {
            let path = format!("spec.monitoring.{field}.labels[{key:?}]");
            if key.starts_with("app.kubernetes.io/") {
                errors.push(err(
                    path,
                    "app.kubernetes.io/ keys are the operator's own: it finds its objects by them",
                ));
            } else if !is_label_key(key) {
                errors.push(err(
                    path,
                    "not a label key: an optional DNS prefix and `/`, then 1-63 characters of A-Z a-z 0-9 - _ . starting and ending alphanumeric",
                ));
            } else if !(value.is_empty() || is_label_name(value)) {
                errors.push(err(
                    path,
                    format!("{value:?} is not a label value: at most 63 characters of A-Z a-z 0-9 - _ . starting and ending alphanumeric"),
                ));
            }
        }
    }
}

/// A label name (or value): 1-63 characters, alphanumeric at both ends, `-_.` inside.
fn is_label_name(s: &str) -> bool {
    let bytes = s.as_bytes();
    (1..=63).contains(&bytes.len())
        && bytes[0].is_ascii_alphanumeric()
        && bytes[bytes.len() - 1].is_ascii_alphanumeric()
        && bytes
            .iter()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'))
}

/// A label key: `name` or `prefix/name` with a DNS subdomain prefix.
fn is_label_key(key: &str) -> bool {
    match key.split_once('/') {
        None => is_label_name(key),
        Some((prefix, name)) => {
            (1..=253).contains(&prefix.len())
                && prefix.split('.').all(|part| {
                    let b = part.as_bytes();
                    (1..=63).contains(&b.len())
                        && b[0].is_ascii_alphanumeric()
                        && b[b.len() - 1].is_ascii_alphanumeric()
                        && b.iter()
                            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || *c == b'-')
                })
                && is_label_name(name)
        }
    }
}

/// An IP address, or a network in CIDR form with a prefix the address family allows.
fn is_address_or_network(text: &str) -> bool {
    let (address, prefix) = match text.split_once('/') {
        Some((address, prefix)) => (address, Some(prefix)),
        None => (text, None),
    };
    let Ok(address) = address.parse::<std::net::IpAddr>() else {
        return false;
    };
    let longest = if address.is_ipv4() { 32 } else { 128 };
    prefix.is_none_or(|p| p.parse::<u8>().is_ok_and(|p| p <= longest))
}

/// `redis.external`: shard URLs (as many as `redis.shards`) or a cluster's seed nodes, one way,
/// never both.
fn validate_external(ext: &ExternalRedisSpec, shards: i32, errors: &mut Vec<FieldError>) {
    let shard_urls = ext.urls.is_some() || ext.urls_secret.is_some();
    let cluster = ext.cluster_nodes.is_some() || ext.cluster_nodes_secret.is_some();
    if shard_urls && cluster {
        errors.push(err(
            "spec.redis.external",
            "mixes shard URLs (urls, urlsSecret) and a Redis Cluster (clusterNodes, \
             clusterNodesSecret): give one",
        ));
        return;
    }
    let given = [
        ext.urls.is_some(),
        ext.urls_secret.is_some(),
        ext.cluster_nodes.is_some(),
        ext.cluster_nodes_secret.is_some(),
    ];
    if given.iter().filter(|g| **g).count() != 1 {
        errors.push(err(
            "spec.redis.external",
            "set exactly one of urls, urlsSecret, clusterNodes and clusterNodesSecret",
        ));
        return;
    }
    if let Some(urls) = &ext.urls
        && urls.len() != usize::try_from(shards).unwrap_or(0)
    {
        errors.push(err(
            "spec.redis.external.urls",
            format!("lists {} URLs but redis.shards is {shards}", urls.len()),
        ));
    }
    let lists = [("urls", &ext.urls), ("clusterNodes", &ext.cluster_nodes)];
    for (field, list) in lists {
        for (i, url) in list.iter().flatten().enumerate() {
            if !(url.starts_with("redis://") || url.starts_with("rediss://")) {
                errors.push(err(
                    format!("spec.redis.external.{field}[{i}]"),
                    "must start with redis:// or rediss://",
                ));
            }
        }
    }
}
