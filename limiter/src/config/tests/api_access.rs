//! The `auth` part of the config, checked through the whole config as a file states it.

use crate::config::api_access::*;
use crate::config::error::ConfigError;
use crate::config::file::Config;

fn error_field(yaml: &str) -> &'static str {
    let config = Config::from_yaml(yaml).unwrap();
    match config.validate().unwrap_err() {
        ConfigError::Invalid { field, .. } => field,
        other => panic!("{other}"),
    }
}

const PLAYERS: &str =
    "players: { hs256_secret_file: /s, issuer: https://auth.example, audience: screenlimit }";

#[test]
fn the_credentials_must_cover_both_audiences() {
    assert_eq!(
        error_field("auth: { gateway_token_file: /g }\n"),
        "auth.support_token_file"
    );
    assert_eq!(
        error_field(&format!("auth: {{ {PLAYERS} }}\n")),
        "auth.support_token_file"
    );
    assert_eq!(
        error_field("auth: { support_token_file: /s }\n"),
        "auth.support_token_file"
    );
    assert_eq!(
        error_field(
            "auth_token_file: /t\nauth: { support_token_file: /s, gateway_token_file: /g }\n"
        ),
        "auth_token_file"
    );
    // The single token beside player tokens alone: which token opens the support routes?
    assert_eq!(
        error_field(&format!("auth_token_file: /t\nauth: {{ {PLAYERS} }}\n")),
        "auth_token_file"
    );
    for fine in [
        "auth: { support_token_file: /s, gateway_token_file: /g }\n".to_owned(),
        format!("auth: {{ support_token_file: /s, {PLAYERS} }}\n"),
        "auth_token_file: /t\n".to_owned(),
    ] {
        Config::from_yaml(&fine).unwrap().validate().unwrap();
    }
}

#[test]
fn player_tokens_need_one_key_source_and_their_claims() {
    let with =
        |players: &str| format!("auth: {{ support_token_file: /s, players: {{ {players} }} }}\n");
    assert_eq!(error_field(&with("issuer: i, audience: a")), "auth.players");
    assert_eq!(
        error_field(&with(
            "hs256_secret_file: /s, jwks_file: /j, issuer: i, audience: a"
        )),
        "auth.players"
    );
    assert_eq!(
        error_field(&with("jwks_file: /j, issuer: ' ', audience: a")),
        "auth.players.issuer"
    );
    assert_eq!(
        error_field(&with("jwks_file: /j, issuer: i, audience: a, leeway: 10m")),
        "auth.players.leeway"
    );
    let (field, _) = Config::from_yaml(&with("jwks_file: /j, audience: a")).unwrap_err();
    assert_eq!(field, "auth.players");
}

#[test]
fn cors_origins_are_exact() {
    for bad in [
        "'*'",
        "'https://*.example.com'",
        "https://watch.example.com/",
        "https://watch.example.com/player",
        "watch.example.com",
        "https://Watch.example.com",
        "'https://watch.example.com:http'",
    ] {
        assert_eq!(
            error_field(&format!(
                "http: {{ cors: {{ allowed_origins: [{bad}] }} }}\n"
            )),
            "http.cors.allowed_origins",
            "{bad}"
        );
    }
    let config = Config::from_yaml(
        "http: { cors: { allowed_origins: ['https://watch.example.com', 'http://127.0.0.1:8000', 'http://[::1]:3000'] } }\n",
    )
    .unwrap();
    config.validate().unwrap();
    assert_eq!(config.http.cors.allowed_origins.len(), 3);
}

#[test]
fn token_files_are_read_and_checked() {
    let dir = tempfile::tempdir().unwrap();
    let write = |name: &str, text: &str| {
        let path = dir.path().join(name);
        std::fs::write(&path, text).unwrap();
        path
    };
    let support = write("support", "support-token-0123456789\n");
    let gateway = write("gateway", "gateway-token-0123456789\n");
    let short = write("short", "short\n");
    let auth = ApiAuthConfig {
        support_token_file: Some(support.clone()),
        gateway_token_file: Some(gateway),
        players: None,
    };
    let credentials = resolve(&auth, None).unwrap();
    assert_eq!(
        credentials.support.as_deref(),
        Some("support-token-0123456789")
    );
    assert_eq!(
        credentials.gateway.as_deref(),
        Some("gateway-token-0123456789")
    );
    let same = ApiAuthConfig {
        gateway_token_file: Some(support.clone()),
        ..auth.clone()
    };
    assert!(matches!(
        resolve(&same, None),
        Err(ConfigError::Invalid {
            field: "auth.gateway_token_file",
            ..
        })
    ));
    let single = resolve(&ApiAuthConfig::default(), Some(&support)).unwrap();
    assert!(single.single);
    assert_eq!(single.support, single.gateway);
    assert!(matches!(
        resolve(&ApiAuthConfig::default(), Some(&short)),
        Err(ConfigError::Invalid {
            field: "auth_token_file",
            ..
        })
    ));
}
