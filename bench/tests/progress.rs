//! The loadgen binary prints a progress line on stderr every `--progress` on a long run, and
//! none with `--no-progress`. Against a throwaway redis-server and the workspace's limiter
//! (`--spawn`), like the smoke tests.

use std::process::Command;

fn steady(extra: &[&str]) -> (bool, String) {
    let output = Command::new(env!("CARGO_BIN_EXE_screenlimit-loadgen"))
        .args([
            "steady",
            "--spawn",
            "--quiet",
            "--store-timeout",
            "2s",
            "--leases",
            "100",
            "--duration",
            "3s",
            "--play-rate",
            "20",
            "--heartbeat-interval",
            "1s",
            "--ttl",
            "3s",
            "--checks-per-sec",
            "5",
            "--connections",
            "8",
        ])
        .args(extra)
        .output()
        .expect("screenlimit-loadgen runs");
    (
        output.status.success(),
        String::from_utf8_lossy(&output.stderr).into_owned(),
    )
}

#[test]
fn a_long_run_prints_progress_lines_unless_told_not_to() {
    let (ok, stderr) = steady(&["--progress", "1s"]);
    assert!(ok, "{stderr}");
    let lines: Vec<&str> = stderr
        .lines()
        .filter(|l| l.starts_with("steady ["))
        .collect();
    assert!(lines.len() >= 2, "a line a second over 3 s: {stderr}");
    for line in &lines {
        assert!(line.contains("s/3s]"), "elapsed of total: {line}");
        assert!(line.contains("heartbeat "), "operations done: {line}");
        assert!(line.contains("/s, p99 "), "current rate: {line}");
        assert!(line.contains("| errors 0 violations 0"), "{line}");
    }

    let (ok, stderr) = steady(&["--progress", "1s", "--no-progress"]);
    assert!(ok, "{stderr}");
    assert!(
        !stderr
            .lines()
            .any(|l| l.contains("s/3s]") || l.contains(" [")),
        "no progress lines: {stderr}"
    );
}
