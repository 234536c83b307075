//! CI smoke: every scenario for a second or two at a low rate against a throwaway
//! redis-server and the workspace's limiter binary, asserting zero failures (no transport
//! errors, 5xx, degraded answers or unexpected answers) and zero invariant violations.
//! The full-size runs and their figures are in BENCHMARKS.md.

use clap::Parser;
use screenlimit_bench::{Cli, run};

async fn scenario(args: &[&str]) -> screenlimit_bench::stats::Report {
    let mut argv = vec!["screenlimit-loadgen"];
    argv.extend_from_slice(args);
    // A generous store deadline: CI machines are shared and the limiter is a debug build.
    argv.extend_from_slice(&[
        "--spawn",
        "--quiet",
        "--store-timeout",
        "2s",
        "--progress",
        "1h",
    ]);
    let cli = Cli::try_parse_from(&argv).expect("valid arguments");
    let report = run(cli).await.expect("scenario runs");
    println!("{}", report.table());
    assert!(report.ok(), "failures or violations:\n{}", report.table());
    report
}

fn op_count(report: &screenlimit_bench::stats::Report, op: &str) -> u64 {
    report
        .ops
        .iter()
        .find(|o| o.op == op)
        .map_or(0, |o| o.count)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn max_smoke() {
    let r = scenario(&[
        "max",
        "--levels",
        "2",
        "--step",
        "1s",
        "--accounts",
        "100",
        "--leases",
        "100",
    ])
    .await;
    assert_eq!(r.rows.len(), 2, "one row per op and level");
    assert!(
        r.rows
            .iter()
            .all(|row| row["rate_per_sec"].as_f64().unwrap() > 0.0)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn steady_smoke() {
    let r = scenario(&[
        "steady",
        "--leases",
        "300",
        "--duration",
        "2s",
        "--play-rate",
        "50",
        "--heartbeat-interval",
        "1s",
        "--ttl",
        "3s",
        "--checks-per-sec",
        "20",
        "--connections",
        "16",
    ])
    .await;
    assert!(
        op_count(&r, "heartbeat") > 300,
        "heartbeats on their interval"
    );
    assert!(op_count(&r, "play_start") > 50);
    assert!(r.invariants["no_account_above_cap"].checks > 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn race_smoke() {
    let r = scenario(&[
        "race",
        "--accounts",
        "100",
        "--wave",
        "25",
        "--connections",
        "32",
    ])
    .await;
    assert_eq!(r.figures["accounts_over_admitted"], 0);
    assert_eq!(r.figures["accounts_with_exactly_limit_winners"], 100);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn churn_smoke() {
    let r = scenario(&[
        "churn",
        "--clients",
        "20",
        "--duration",
        "2s",
        "--ttl",
        "600ms",
        "--heartbeat-interval",
        "300ms",
        "--connections",
        "16",
    ])
    .await;
    assert!(
        r.invariants["crashed_slot_reusable_within_ttl"].checks > 0,
        "some crashes measured"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fleet_smoke() {
    let r = scenario(&[
        "fleet",
        "--players",
        "200",
        "--play-rate",
        "20",
        "--heartbeat-every",
        "1s",
        "--heartbeat-interval",
        "1s",
        "--ttl",
        "3s",
        "--closed-step",
        "1s",
        "--closed-leases",
        "100",
        "--closed-accounts",
        "100",
        "--baseline-requests",
        "5000",
        "--idle",
        "300ms",
        "--heartbeat-only",
        "1s",
        "--duration",
        "1s",
        "--rounds",
        "1",
        "--probe",
        "200ms",
        "--verify-accounts",
        "50",
        "--connections",
        "16",
    ])
    .await;
    // The figures are there (their values are timings: not asserted).
    let f = &r.figures;
    assert_eq!(f["baseline"]["sets"], 5000);
    for phase in ["heartbeat", "play_start"] {
        let p = &f["closed"][phase];
        assert!(p["ops"].as_u64().unwrap() > 0, "{phase}: {p}");
        for key in [
            "redis_main_us_per_op",
            "redis_main_us_per_op_idle_subtracted",
            "ratio_to_set",
            "commands_per_batch",
            "ops_per_batch",
        ] {
            assert!(p[key].is_number(), "closed {phase} {key}: {p}");
        }
    }
    let open = &f["open"];
    assert!(open["heartbeat_only"]["ops"].as_u64().unwrap() > 0);
    assert!(open["mixed"]["play_starts"].as_u64().unwrap() > 0);
    for key in [
        "redis_main_us_per_play_start_cycle_idle_subtracted",
        "commands_per_batch",
        "heartbeats_per_batch",
        "play_starts_per_batch",
    ] {
        assert!(open["mixed"][key].is_number(), "mixed {key}");
    }
    assert!(open["idle"]["redis_main_thread_ms_per_sec"].is_number());
    let model = &f["projection"];
    for key in [
        "shards_needed",
        "redis_main_cores",
        "limiter_cores",
        "redis_bytes_per_stream",
        "limiter_rss_bytes_per_process",
    ] {
        assert!(model[key].is_number(), "projection {key}: {model}");
    }
    assert!(model["per_pair"]["expected_commands_per_batch"].is_number());
    // The seed's own model (stops at the churn) beside the conservative one.
    let seed = &model["seed_model"];
    assert_eq!(seed["stops_per_sec"], 28_000.0, "seed model {seed}");
    for key in ["redis_main_cores", "shards_needed", "limiter_cores"] {
        assert!(seed[key].is_number(), "seed model {key}: {seed}");
    }
    assert!(r.text.contains("Fleet projection"), "{}", r.text);
    assert!(r.invariants["no_account_above_cap"].checks > 0);
    assert!(r.invariants["live_leases_match_players"].checks > 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fleet_background_smoke() {
    let r = scenario(&[
        "fleet",
        "--players",
        "200",
        "--play-rate",
        "20",
        "--heartbeat-every",
        "1s",
        "--heartbeat-interval",
        "1s",
        "--ttl",
        "3s",
        "--closed-step",
        "500ms",
        "--closed-leases",
        "100",
        "--closed-accounts",
        "100",
        "--baseline-requests",
        "2000",
        "--idle",
        "300ms",
        "--heartbeat-only",
        "1s",
        "--duration",
        "1s",
        "--rounds",
        "2",
        "--probe",
        "200ms",
        "--verify-accounts",
        "50",
        "--connections",
        "16",
        "--background-busy",
        "0.05",
        "--background-connections",
        "8",
        "--background-calibrate",
        "200ms",
        "--background-alone",
        "500ms",
    ])
    .await;
    // The marginal figures are there (their values are timings: not asserted).
    let f = &r.figures;
    let open = &f["open"];
    assert!(
        open["heartbeat_only"]["redis_main_us_per_heartbeat_marginal"].is_number(),
        "{open}"
    );
    assert!(
        open["mixed"]["redis_main_us_per_play_start_cycle_marginal"].is_number(),
        "{open}"
    );
    let bg = &open["background"];
    assert!(bg["rate_per_sec"].as_f64().unwrap() > 0.0, "{bg}");
    assert!(bg["alone_spread_ms_per_sec"].is_number(), "{bg}");
    let windows = bg["windows"].as_array().expect("background windows");
    // Alone, 2 × (heartbeats, mixed) with the background alone between them (players paused),
    // alone.
    assert_eq!(windows.len(), 7, "{bg}");
    assert_eq!(
        bg["alone_redis_main_ms_per_sec_windows"]
            .as_array()
            .map(Vec::len),
        Some(3),
        "{bg}"
    );
    assert!(
        windows
            .iter()
            .all(|w| w["redis_main_thread_busy"].is_number())
    );
    assert!(
        f["projection"]["cost_basis"]
            .as_str()
            .unwrap()
            .starts_with("marginal")
    );
    assert!(r.text.contains("MARGINAL"), "{}", r.text);
    assert!(r.invariants["live_leases_match_players"].checks > 0);
}

/// `store-cycle` (the peer comparison's other half, scripts/bench-peer.sh) on the scripts and,
/// where the test run names the module (`SCREENLIMIT_MODULE_SO`, as scripts/test.sh does), on
/// its `SL.ACQUIRE` + `SL.RELEASE`: every cycle granted and then released.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn store_cycle_smoke() {
    let module = std::env::var_os("SCREENLIMIT_MODULE_SO").map(std::path::PathBuf::from);
    let redis = screenlimit_bench::procs::RedisProc::start_with(module.as_deref(), &[])
        .expect("a throwaway redis-server");
    let url = redis.url();
    let mut paths = vec![false];
    match module {
        Some(_) => paths.push(true),
        None => eprintln!("SCREENLIMIT_MODULE_SO unset: the scripts' cycle only"),
    }
    for native in paths {
        let mut argv = vec![
            "screenlimit-loadgen",
            "store-cycle",
            "--redis",
            &url,
            "--duration",
            "1s",
            "--concurrency",
            "4",
            "--accounts",
            "50",
        ];
        if native {
            argv.push("--native");
        }
        let report = run(Cli::try_parse_from(&argv).expect("valid arguments"))
            .await
            .expect("store-cycle runs");
        assert!(report.ok(), "native {native}:\n{}", report.table());
        let cycles = report.figures["cycles"].as_u64().unwrap_or(0);
        assert!(cycles > 0, "native {native}: no cycle completed");
        let expected = if native { "native" } else { "lua" };
        assert_eq!(report.figures["path"], expected);
    }
}

/// `regions`: two regions through a short delayed link; every play decided at its home (none
/// degraded), one call per roaming play, heartbeats carried by fewer calls than heartbeats.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn regions_smoke() {
    let argv = [
        "screenlimit-loadgen",
        "regions",
        "--delay",
        "5ms",
        "--jitter",
        "1ms",
        "--plays",
        "30",
        "--concurrency",
        "4",
        "--heartbeat-spread",
        "500ms",
    ];
    let report = run(Cli::try_parse_from(argv).expect("valid arguments"))
        .await
        .expect("regions runs");
    assert!(report.ok(), "{}", report.table());
    let figure = |name: &str| report.figures[name].as_f64().unwrap_or(f64::NAN);
    assert_eq!(figure("calls_per_roaming_play"), 1.0, "{}", report.table());
    assert!(figure("heartbeat_calls") < 30.0, "{}", report.table());
    assert!(figure("roaming_play_p50_ms") >= 10.0, "crosses the link");
}
