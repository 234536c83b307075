//! `spec.regions`: the limiter's own rules for its `regions` block, by field, then the limiter's
//! own check of the rendered block.

use std::collections::BTreeSet;

use super::field::{FieldError, err, valid_token};
use crate::crd::{HomeSource, MAX_REGION_PEERS, PlanSourceKind, RegionsSpec, StreamLimiterSpec};

/// The limiter's own rules for `regions` (its `config/regions.rs`), by field; then, when those
/// pass, the limiter's own check of the same block, for what only its URL parser can tell.
pub(super) fn validate_regions(r: &RegionsSpec, errors: &mut Vec<FieldError>) {
    let before = errors.len();
    let token_rule = "must be 1-64 characters of A-Z a-z 0-9 . _ : -";
    if !valid_token(&r.name) {
        errors.push(err(
            "spec.regions.name",
            format!("{:?} {token_rule}", r.name),
        ));
    }
    if r.peers.is_empty() || r.peers.len() > MAX_REGION_PEERS {
        errors.push(err(
            "spec.regions.peers",
            format!(
                "{} peers; name 1 to {MAX_REGION_PEERS} (without peers, leave regions out)",
                r.peers.len()
            ),
        ));
    }
    let weight_rule = |field: String, weight: i32, errors: &mut Vec<FieldError>| {
        if !(0..=1000).contains(&weight) {
            errors.push(err(
                field,
                format!("{weight} is out of range; use 0 to 1000"),
            ));
        }
    };
    weight_rule("spec.regions.weight".into(), r.weight, errors);
    let mut seen = BTreeSet::from([r.name.as_str()]);
    for (i, peer) in r.peers.iter().enumerate() {
        if !valid_token(&peer.name) {
            errors.push(err(
                format!("spec.regions.peers[{i}].name"),
                format!("{:?} {token_rule}", peer.name),
            ));
        } else if peer.name == r.name {
            errors.push(err(
                format!("spec.regions.peers[{i}].name"),
                format!("{:?} is this region's own name (regions.name)", peer.name),
            ));
        } else if !seen.insert(peer.name.as_str()) {
            errors.push(err(
                format!("spec.regions.peers[{i}].name"),
                format!(
                    "peer {:?} is named twice; peer names must be unique",
                    peer.name
                ),
            ));
        }
        if let Some(why) = peer_url_problem(&peer.url) {
            errors.push(err(
                format!("spec.regions.peers[{i}].url"),
                format!("{:?} {why}", peer.url),
            ));
        }
        weight_rule(
            format!("spec.regions.peers[{i}].weight"),
            peer.weight,
            errors,
        );
    }
    if r.weight == 0 && r.peers.iter().all(|p| p.weight == 0) {
        errors.push(err(
            "spec.regions.weight",
            "every region weighs 0, so no account would have a home; give one region a weight above 0",
        ));
    } else if (r.weight == 0 || r.evacuated) && r.peers.iter().all(|p| p.weight == 0 || p.evacuated)
    {
        errors.push(err(
            "spec.regions.evacuated",
            "every region of weight above 0 is evacuated, so no account would have a home; keep one region of weight above 0 not evacuated",
        ));
    }
    validate_secondaries(r, errors);
    for (i, source) in r.home_sources.iter().enumerate() {
        if r.home_sources[..i].contains(source) {
            errors.push(err(
                "spec.regions.homeSources",
                format!(
                    "{} is named twice; name each source at most once",
                    home_source(*source)
                ),
            ));
        }
    }
    if !(10..=10_000).contains(&r.timeout_millis) {
        errors.push(err(
            "spec.regions.timeoutMillis",
            "must be 10 to 10000 (a round trip between regions, and some)",
        ));
    }
    if !(0..=1_000).contains(&r.heartbeat_window_millis) {
        errors.push(err(
            "spec.regions.heartbeatWindowMillis",
            "must be 0 to 1000",
        ));
    }
    if errors.len() == before
        && let Err(e) = limiter_regions(r).validate()
    {
        errors.push(err("spec.regions", e.to_string()));
    }
}

/// Each `secondary` names another region of the spec: this region's names a peer, a peer's
/// names this region or another peer.
fn validate_secondaries(r: &RegionsSpec, errors: &mut Vec<FieldError>) {
    let is_peer = |name: &str| r.peers.iter().any(|p| p.name == name);
    if let Some(secondary) = &r.secondary
        && !is_peer(secondary)
    {
        errors.push(err(
            "spec.regions.secondary",
            format!("{secondary:?} must name one of the peers (another region than this one)"),
        ));
    }
    for (i, peer) in r.peers.iter().enumerate() {
        let Some(secondary) = &peer.secondary else {
            continue;
        };
        let field = format!("spec.regions.peers[{i}].secondary");
        if *secondary == peer.name {
            errors.push(err(
                field,
                format!("{secondary:?} is the peer itself; name another region"),
            ));
        } else if *secondary != r.name && !is_peer(secondary) {
            errors.push(err(
                field,
                format!(
                    "{secondary:?} must name a region of this spec: regions.name or a peer's name"
                ),
            ));
        }
    }
}

/// The home sources by the CRD's rules on the spec (the limiter's own `check_home_sources`):
/// `planSource` needs the postgres plan source, `playerToken` the player token's `homeClaim`.
pub(super) fn validate_home_sources(spec: &StreamLimiterSpec, errors: &mut Vec<FieldError>) {
    let Some(regions) = &spec.regions else {
        return;
    };
    let names = |source| regions.home_sources.contains(&source);
    if names(HomeSource::PlanSource) && spec.plan_source.kind != PlanSourceKind::Postgres {
        errors.push(err(
            "spec.regions.homeSources",
            "names planSource, which needs planSource.kind: postgres (the subscription query's \
             second column names the home)",
        ));
    }
    let claim = (spec.limiter.player_auth.as_ref()).and_then(|p| p.home_claim.as_ref());
    if names(HomeSource::PlayerToken) && claim.is_none() {
        errors.push(err(
            "spec.regions.homeSources",
            "names playerToken, which needs limiter.playerAuth.homeClaim (the claim of the player \
             token that names the home)",
        ));
    }
}

/// A home source as the CRD spells it.
fn home_source(source: HomeSource) -> &'static str {
    match source {
        HomeSource::PlanSource => "planSource",
        HomeSource::PlayerToken => "playerToken",
        HomeSource::GatewayHeader => "gatewayHeader",
    }
}

/// Why a peer's URL is refused, by the schema's pattern: `http://` or `https://`, a host, no
/// credentials, query or fragment.
fn peer_url_problem(url: &str) -> Option<&'static str> {
    let Some(rest) = url
        .strip_prefix("https://")
        .or_else(|| url.strip_prefix("http://"))
    else {
        return Some("must start with http:// or https://");
    };
    let authority = &rest[..rest.find('/').unwrap_or(rest.len())];
    if authority.is_empty() || authority.starts_with(':') {
        return Some("names no host");
    }
    if authority.contains('@') {
        return Some("must not carry credentials (use tokenSecret)");
    }
    if url.contains(['?', '#']) {
        return Some("must not have a query or fragment");
    }
    if url.contains(char::is_whitespace) || url.len() > 2048 {
        return Some("must be one URL of at most 2048 characters, without spaces");
    }
    None
}

/// The block as the limiter takes it (the files are the build's; only their names matter here).
fn limiter_regions(r: &RegionsSpec) -> screenlimit_limiter::config::RegionsConfig {
    use screenlimit_limiter::config::{PeerConfig, RegionsConfig};
    use std::time::Duration;
    let weight = |w: i32| u32::try_from(w).unwrap_or(u32::MAX);
    RegionsConfig {
        name: r.name.clone(),
        weight: weight(r.weight),
        evacuated: r.evacuated,
        secondary: r.secondary.clone(),
        token_file: "token".into(),
        timeout: Duration::from_millis(u64::try_from(r.timeout_millis).unwrap_or(0)),
        heartbeat_window: Duration::from_millis(
            u64::try_from(r.heartbeat_window_millis).unwrap_or(u64::MAX),
        ),
        peers: r
            .peers
            .iter()
            .map(|p| PeerConfig {
                name: p.name.clone(),
                url: p.url.clone(),
                weight: weight(p.weight),
                evacuated: p.evacuated,
                secondary: p.secondary.clone(),
                token_file: "token".into(),
                ca_file: p.ca_secret.as_ref().map(|_| "ca.crt".into()),
            })
            .collect(),
        home_sources: r.home_sources.iter().map(|s| s.in_limiter()).collect(),
    }
}
