//! The binary's start: a bad configuration stops it with exit code 2 and a message that names
//! the field, whatever the field (files it names included), before anything listens.

use std::io::Write;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// Runs the limiter on `config`; returns its exit code and standard error. A limiter that is
/// still running after 20 s accepted the config: that fails the test.
fn start_with(config: &str) -> (Option<i32>, String) {
    let mut file = tempfile::NamedTempFile::new().unwrap();
    file.write_all(config.as_bytes()).unwrap();
    let mut child = Command::new(env!("CARGO_BIN_EXE_screenlimit-limiter"))
        .arg("--config")
        .arg(file.path())
        .env("SCREENLIMIT_LISTEN", "127.0.0.1:0")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(20);
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!("the limiter started on a bad config:\n{config}");
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let mut stderr = String::new();
    std::io::Read::read_to_string(&mut child.stderr.take().unwrap(), &mut stderr).unwrap();
    (status.code(), stderr)
}

fn assert_refused(config: &str, field: &str, says: &str) -> String {
    let (code, stderr) = start_with(config);
    assert_eq!(code, Some(2), "exit code for:\n{config}\nstderr: {stderr}");
    assert!(
        stderr.contains(&format!("`{field}`")) && stderr.contains(says),
        "the message must name `{field}` and say {says:?}: {stderr}"
    );
    stderr
}

const POSTGRES: &str = "plan_source: { kind: postgres, ";

#[test]
fn a_missing_plan_database_url_file_is_a_config_error() {
    let stderr = assert_refused(
        &format!("{POSTGRES}postgres_url_file: /nonexistent/screenlimit/plan-db-url }}\n"),
        "plan_source.postgres_url_file",
        "/nonexistent/screenlimit/plan-db-url",
    );
    assert!(!stderr.contains("config file"), "{stderr}");
}

#[test]
fn a_malformed_plan_database_url_is_a_config_error_that_keeps_the_password_out() {
    let stderr = assert_refused(
        &format!("{POSTGRES}postgres_url: 'postgres://app:hunter2-secret@db:notaport/plans' }}\n"),
        "plan_source.postgres_url",
        "not a PostgreSQL connection string",
    );
    assert!(!stderr.contains("hunter2-secret"), "{stderr}");

    let mut url_file = tempfile::NamedTempFile::new().unwrap();
    url_file
        .write_all(b"postgres://app:pw@db:99999999/plans\n")
        .unwrap();
    assert_refused(
        &format!(
            "{POSTGRES}postgres_url_file: {} }}\n",
            url_file.path().display()
        ),
        "plan_source.postgres_url_file",
        "not a PostgreSQL connection string",
    );
}

#[test]
fn an_unknown_device_type_in_device_caps_is_named() {
    let (code, stderr) = start_with(
        "plans:\n  basic: 1\n  standard: { max_streams: 2, device_caps: { phone: 1 } }\n",
    );
    assert_eq!(code, Some(2), "{stderr}");
    assert!(
        stderr.contains("plans.standard.device_caps")
            && stderr.contains("phone")
            && stderr.contains("mobile"),
        "the message must name the field, the bad type and the known ones: {stderr}"
    );
}

#[test]
fn a_missing_secret_or_token_file_is_a_config_error() {
    assert_refused(
        "stream_id_secret_file: /nonexistent/screenlimit/secret\n",
        "stream_id_secret_file",
        "/nonexistent/screenlimit/secret",
    );
    assert_refused(
        "auth_token_file: /nonexistent/screenlimit/token\n",
        "auth_token_file",
        "/nonexistent/screenlimit/token",
    );
}

#[test]
fn a_regions_file_that_cannot_be_read_is_a_config_error() {
    let dir = tempfile::tempdir().unwrap();
    let token = dir.path().join("token");
    std::fs::write(&token, "a-region-token-of-twenty-chars").unwrap();
    let regions = |inbound: &str, ca: &str| {
        format!(
            "stream_id_secret: shared-by-every-region\nregions:\n  name: eu\n  token_file: {inbound}\n  peers:\n    - {{ name: us, url: \"https://us.example\", token_file: {}{ca} }}\n",
            token.display()
        )
    };
    assert_refused(
        &regions("/nonexistent/screenlimit/region-token", ""),
        "regions.token_file",
        "/nonexistent/screenlimit/region-token",
    );
    let inbound = token.display().to_string();
    assert_refused(
        &regions(&inbound, ", ca_file: /nonexistent/screenlimit/ca.crt"),
        "regions.peers",
        "/nonexistent/screenlimit/ca.crt",
    );
    let not_pem = dir.path().join("ca.crt");
    std::fs::write(&not_pem, "not a certificate\n").unwrap();
    assert_refused(
        &regions(&inbound, &format!(", ca_file: {}", not_pem.display())),
        "regions.peers",
        "holds no PEM certificate",
    );
}
