//! The binary itself: `hash-password`, `--dev` (the README's first command), a users file from
//! a mounted Secret directory, and start-up errors that name the flag.

mod common;

use std::io::Write;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::{Agent, play};
use reqwest::StatusCode;
use screenlimit_admin_ui::auth::Role;
use screenlimit_admin_ui::auth::users::Users;

const BIN: &str = env!("CARGO_BIN_EXE_screenlimit-admin-ui");

/// Kills the child when the test ends, however it ends.
struct Running(std::process::Child);

impl Drop for Running {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

async fn free_port() -> u16 {
    common::free_listener().await.local_addr().unwrap().port()
}

async fn wait_healthy(url: &str) {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        if let Ok(r) = common::http().get(format!("{url}/healthz")).send().await
            && r.status() == StatusCode::OK
        {
            return;
        }
        assert!(Instant::now() < deadline, "{url} did not come up");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[test]
fn hash_password_prints_a_users_file_line() {
    let mut child = Command::new(BIN)
        .args(["hash-password", "--user", "alice", "--role", "viewer"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(b"correct horse battery\n")
        .unwrap();
    let output = child.wait_with_output().unwrap();
    assert!(output.status.success());
    let line = String::from_utf8(output.stdout).unwrap();
    assert!(line.starts_with("alice:viewer:$argon2id$"), "{line}");
    let users = Users::parse(&line).unwrap();
    assert_eq!(
        users
            .verify("alice", "correct horse battery")
            .map(|u| u.role),
        Some(Role::Viewer)
    );
}

#[test]
fn a_missing_users_file_stops_the_start_with_a_message() {
    let output = Command::new(BIN)
        .args(["--listen", "127.0.0.1:0"])
        .env_remove("SCREENLIMIT_ADMIN_CREDENTIALS_FILE")
        .env_remove("SCREENLIMIT_ADMIN_AUTH_DIR")
        .output()
        .unwrap();
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains("--credentials-file") && stderr.contains("hash-password"),
        "{stderr}"
    );
}

#[test]
fn oidc_flags_are_checked_before_the_start() {
    let run = |args: &[&str]| {
        let output = Command::new(BIN)
            .args(["--listen", "127.0.0.1:0"])
            .args(args)
            .env_remove("SCREENLIMIT_ADMIN_CREDENTIALS_FILE")
            .env_remove("SCREENLIMIT_ADMIN_AUTH_DIR")
            .output()
            .unwrap();
        assert!(!output.status.success(), "{args:?}");
        String::from_utf8_lossy(&output.stderr).into_owned()
    };
    let issuer = ["--oidc-issuer", "https://idp.example.com"];
    let stderr = run(&issuer);
    assert!(stderr.contains("--oidc-client-id"), "{stderr}");
    let stderr = run(&[&issuer[..], &["--oidc-client-id", "dash"]].concat());
    assert!(stderr.contains("--external-url"), "{stderr}");
    let stderr = run(&[
        &issuer[..],
        &[
            "--oidc-client-id",
            "dash",
            "--external-url",
            "https://s.example.com",
        ],
    ]
    .concat());
    assert!(stderr.contains("group"), "no group: {stderr}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dev_mode_serves_a_limiter_and_the_dashboard_together() {
    let (limiter_port, ui_port) = (free_port().await, free_port().await);
    let child = Command::new(BIN)
        .args([
            "--dev",
            "--dev-limiter-listen",
            &format!("127.0.0.1:{limiter_port}"),
        ])
        .args(["--listen", &format!("127.0.0.1:{ui_port}")])
        .env("SCREENLIMIT_ADMIN_DEV_PASSWORD", "dev-password-1")
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let _running = Running(child);
    let (limiter, ui) = (
        format!("http://127.0.0.1:{limiter_port}"),
        format!("http://127.0.0.1:{ui_port}"),
    );
    wait_healthy(&ui).await;
    wait_healthy(&limiter).await;
    play(
        &limiter,
        "acct-42",
        "living-room-tv",
        "Living Room TV",
        "tv",
    )
    .await;
    let mut agent = Agent::signed_in(&ui, ("support", "dev-password-1")).await;
    let page = agent.get("/accounts/acct-42").await;
    assert_eq!(page.status, StatusCode::OK);
    assert!(page.body.contains("Living Room TV") && page.body.contains("Force stop"));
    let mut viewer = Agent::signed_in(&ui, ("viewer", "dev-password-1")).await;
    assert!(
        !viewer
            .get("/accounts/acct-42")
            .await
            .body
            .contains("Force stop")
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn users_and_session_secret_from_a_mounted_secret_directory() {
    let limiter = common::limiter(None).await;
    let dir = tempfile::tempdir().unwrap();
    let line = format!(
        "# support staff\nana:support:{}\n",
        screenlimit_admin_ui::auth::users::hash_password("ana-password-1")
    );
    std::fs::write(dir.path().join("users"), line).unwrap();
    std::fs::write(dir.path().join("session-secret"), "s".repeat(40)).unwrap();
    let port = free_port().await;
    let child = Command::new(BIN)
        .args(["--listen", &format!("127.0.0.1:{port}")])
        .env("SCREENLIMIT_ADMIN_AUTH_DIR", dir.path())
        .env("SCREENLIMIT_LIMITER_URL", &limiter)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let _running = Running(child);
    let ui = format!("http://127.0.0.1:{port}");
    wait_healthy(&ui).await;
    play(&limiter, "acct-9", "tv", "Den TV", "tv").await;
    let mut agent = Agent::signed_in(&ui, ("ana", "ana-password-1")).await;
    let page = agent.get("/accounts/acct-9").await;
    assert!(page.body.contains("Den TV"), "{}", page.body);
}
