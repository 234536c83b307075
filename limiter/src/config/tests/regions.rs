//! `regions` checked through the whole file: each refusal names its field.

use super::refused_with;
use crate::config::{Config, ConfigError};

const SECRET: &str = "stream_id_secret: shared-by-every-region\n";

fn regions(body: &str) -> String {
    format!("{SECRET}regions:\n  name: eu\n  token_file: /run/eu.token\n{body}")
}

const PEERS: &str = "  peers:\n    - { name: us, url: \"https://limiter.us.example:8443/sl\", token_file: /run/us.token }\n";

#[test]
fn a_region_with_its_peers_is_taken_with_defaults() {
    let config = Config::from_yaml(&regions(PEERS)).unwrap();
    config.validate().unwrap();
    let regions = config.regions.unwrap();
    assert_eq!((regions.weight, regions.peers[0].weight), (1, 1));
    assert_eq!(regions.timeout, std::time::Duration::from_secs(1));
    assert_eq!(
        regions.heartbeat_window,
        std::time::Duration::from_millis(200)
    );
    assert!(Config::from_yaml("{}").unwrap().regions.is_none());
}

#[test]
fn an_evacuation_names_the_region_that_takes_its_accounts() {
    let body = format!(
        "  evacuated: true\n  secondary: us\n{}",
        PEERS.replace("name: us,", "name: us, weight: 2,")
    );
    let config = Config::from_yaml(&regions(&body)).unwrap();
    config.validate().unwrap();
    let evacuated = config.regions.unwrap();
    let homes = evacuated.homes();
    assert_eq!(homes.len(), 2);
    assert!(homes[0].evacuated && homes[0].secondary.as_deref() == Some("us"));
    assert_eq!((homes[1].name.as_str(), homes[1].weight), ("us", 2));
    assert!(!homes[1].evacuated && homes[1].secondary.is_none());
    // What only a restart changes leaves the homes out: the same as with none of them.
    let plain = Config::from_yaml(&regions(PEERS)).unwrap().regions.unwrap();
    assert_ne!(plain.homes(), homes);
    assert_eq!(plain.without_homes(), evacuated.without_homes());
}

#[test]
fn each_wrong_field_is_named() {
    let peer = |fields: &str| format!("  peers:\n    - {{ name: us, token_file: /t, {fields} }}\n");
    for (body, field, words) in [
        ("  peers: []\n".to_owned(), "regions.peers", "0 peers"),
        (
            peer("url: \"ftp://us.example\""),
            "regions.peers",
            "http:// or https://",
        ),
        (
            peer("url: \"http://a:b@us.example\""),
            "regions.peers",
            "credentials",
        ),
        (
            peer("url: \"http://us.example/?x=1\""),
            "regions.peers",
            "query",
        ),
        (peer("url: \"not a url\""), "regions.peers", "not a URL"),
        (
            "  peers:\n    - { name: eu, url: \"http://eu.example\", token_file: /t }\n".to_owned(),
            "regions.peers",
            "named twice",
        ),
        (
            "  peers:\n    - { name: \"u s\", url: \"http://us.example\", token_file: /t }\n"
                .to_owned(),
            "regions.peers",
            "peer name",
        ),
        (
            format!(
                "  weight: 0\n{}",
                peer("url: \"http://us.example\", weight: 0")
            ),
            "regions",
            "no account has a home",
        ),
        (
            peer("url: \"http://us.example\", weight: 1001"),
            "regions",
            "use 0 to 1000",
        ),
        (
            format!("  secondary: eu\n{PEERS}"),
            "regions",
            "its own secondary",
        ),
        (
            peer("url: \"http://us.example\", secondary: ap"),
            "regions",
            "not a region of this list",
        ),
        (
            format!(
                "  evacuated: true\n{}",
                peer("url: \"http://us.example\", evacuated: true, secondary: eu")
            ),
            "regions",
            "end one evacuation",
        ),
        (
            format!("  home_sources: [gateway_header, gateway_header]\n{PEERS}"),
            "regions.home_sources",
            "named twice",
        ),
        (
            format!("  home_sources: [plan_source]\n{PEERS}"),
            "regions.home_sources",
            "plan_source.kind: postgres",
        ),
        (
            format!("  home_sources: [player_token]\n{PEERS}"),
            "regions.home_sources",
            "auth.players with home_claim",
        ),
        (
            format!("  timeout: 5ms\n{PEERS}"),
            "regions.timeout",
            "10ms to 10s",
        ),
        (
            format!("  heartbeat_window: 2s\n{PEERS}"),
            "regions.heartbeat_window",
            "0s to 1s",
        ),
    ] {
        refused_with(&regions(&body), field, words);
    }
    let unnamed = format!("regions:\n  name: \"../eu\"\n  token_file: /t\n{PEERS}");
    refused_with(
        &format!("{SECRET}{unnamed}"),
        "regions.name",
        "1-64 characters",
    );
    refused_with(
        &regions(PEERS).replace(SECRET, ""),
        "regions",
        "stream_id_secret",
    );
}

#[test]
fn a_token_file_that_cannot_be_read_or_is_short_is_named() {
    let dir = tempfile::tempdir().unwrap();
    let short = dir.path().join("short.token");
    std::fs::write(&short, "short").unwrap();
    let config = Config::from_yaml(&regions(PEERS)).unwrap();
    let regions = config.regions.unwrap();
    assert!(matches!(
        regions.read_tokens(),
        Err(ConfigError::ReadFile {
            field: "regions.token_file",
            ..
        })
    ));
    let mut with_short = regions.clone();
    with_short.token_file = short;
    assert!(matches!(
        with_short.read_tokens(),
        Err(ConfigError::Invalid {
            field: "regions.token_file",
            ..
        })
    ));
}
