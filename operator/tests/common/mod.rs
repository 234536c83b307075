//! Shared test helpers: fixtures.
#![allow(dead_code)]

use screenlimit_operator::crd::StreamLimiter;

/// A fixture from `tests/fixtures`, parsed as the API server would hand it over (defaults
/// applied by serde, like the schema defaults).
pub fn fixture(name: &str) -> StreamLimiter {
    let path = format!("{}/tests/fixtures/{name}", env!("CARGO_MANIFEST_DIR"));
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"));
    serde_yaml_ng::from_str(&text).unwrap_or_else(|e| panic!("{path}: {e}"))
}

/// Every fixture in `tests/fixtures`: each one a valid resource.
pub const FIXTURES: [&str; 6] = [
    "managed.yaml",
    "external.yaml",
    "external-secret.yaml",
    "admin-ui.yaml",
    "ha.yaml",
    "secure.yaml",
];
