//! Shared test helpers: fixtures, the limiter binary.
#![allow(dead_code)]

pub mod cel_rules;

use screenlimit_operator::crd::StreamLimiter;

/// A fixture from `tests/fixtures`, parsed as the API server would hand it over (defaults
/// applied by serde, like the schema defaults).
pub fn fixture(name: &str) -> StreamLimiter {
    let path = format!("{}/tests/fixtures/{name}", env!("CARGO_MANIFEST_DIR"));
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"));
    serde_yaml_ng::from_str(&text).unwrap_or_else(|e| panic!("{path}: {e}"))
}

/// Every fixture in `tests/fixtures`: each one a valid resource.
pub const FIXTURES: [&str; 8] = [
    "managed.yaml",
    "external.yaml",
    "external-secret.yaml",
    "admin-ui.yaml",
    "admin-ui-oidc.yaml",
    "ha.yaml",
    "secure.yaml",
    "regions.yaml",
];

/// The limiter binary built beside this test: `cargo nextest run --workspace` (scripts/test.sh)
/// builds it for the limiter's own tests.
pub fn limiter_binary() -> String {
    let exe = std::env::current_exe().expect("the test binary's path");
    let dir = exe
        .parent()
        .and_then(|deps| deps.parent())
        .expect("target dir");
    let binary = dir.join("screenlimit-limiter");
    assert!(
        binary.is_file(),
        "no {}: build it first (cargo build -p screenlimit-limiter), as --workspace does",
        binary.display()
    );
    binary.display().to_string()
}

/// Calls `f(path, node)` for every node of a JSON schema; `[]` marks a list's items, `{}` a
/// map's values.
pub fn walk(path: &str, node: &serde_json::Value, f: &mut dyn FnMut(&str, &serde_json::Value)) {
    f(path, node);
    if let Some(props) = node
        .get("properties")
        .and_then(serde_json::Value::as_object)
    {
        for (k, v) in props {
            walk(&format!("{path}.{k}"), v, f);
        }
    }
    if let Some(items) = node.get("items") {
        walk(&format!("{path}[]"), items, f);
    }
    if let Some(values) = node.get("additionalProperties").filter(|v| v.is_object()) {
        walk(&format!("{path}{{}}"), values, f);
    }
}
