//! A wrong password takes as long to answer for a user name that exists as for one that does
//! not, on every failure path, so that nobody learns the user names from the clock.
//!
//! Medians of 20 answers each, known and unknown names interleaved (so that whatever else the
//! shared test machine does falls on both alike), in up to three rounds (a real difference shows
//! in every round, the load of other builds on the same two cores in some); the figures are
//! printed (`--nocapture`).
//!
//! The users file mixes hash parameters, as one does that was written over the years (two of
//! OWASP's argon2id settings, and one with four lanes): each name must still cost the same.

mod common;

use std::time::{Duration, Instant};

use argon2::password_hash::PasswordHasher;
use common::Agent;
use reqwest::StatusCode;
use screenlimit_admin_ui::auth::throttle::ThrottleRules;
use screenlimit_admin_ui::auth::users::Users;
use screenlimit_admin_ui::config::Settings;

/// An argon2id hash of `password` with memory `m` KiB, `t` passes and `p` lanes.
fn hash(password: &str, m: u32, t: u32, p: u32) -> String {
    let params = argon2::Params::new(m, t, p, None).unwrap();
    let argon = argon2::Argon2::new(argon2::Algorithm::Argon2id, argon2::Version::V0x13, params);
    argon
        .hash_password(password.as_bytes())
        .unwrap()
        .to_string()
}

/// ana: 46 MiB, one pass (OWASP's first choice); bo: 19 MiB, two passes, four lanes (its
/// second choice, with lanes). Before this test, an unknown name was checked against the hash
/// with the most memory × passes × lanes, bo's, which costs less than ana's: ana's wrong
/// passwords took 1.6 times as long as an unknown name's.
fn users() -> Users {
    let text = format!(
        "ana:support:{}\nbo:viewer:{}\n",
        hash("ana-password", 47104, 1, 1),
        hash("bo-password", 19456, 2, 4),
    );
    Users::parse(&text).unwrap()
}

const SAMPLES: usize = 20;

fn median(times: &mut [Duration]) -> Duration {
    times.sort();
    times[times.len() / 2]
}

/// One wrong-password sign-in for `user`: (status, time to answer).
async fn wrong(agent: &mut Agent, csrf: &str, user: &str) -> (StatusCode, Duration) {
    let started = Instant::now();
    let page = agent
        .post(
            "/sign-in",
            &[("csrf", csrf), ("user", user), ("password", "wrong-guess")],
        )
        .await;
    (page.status, started.elapsed())
}

/// A known name and unknown names, `SAMPLES` wrong passwords each, interleaved; returns the
/// medians.
async fn medians(
    agent: &mut Agent,
    known: &str,
    unknown: &impl Fn(usize) -> String,
) -> (Duration, Duration) {
    let csrf = agent.csrf().await;
    // Warm up both paths (first connections, first argon2 allocation).
    wrong(agent, &csrf, known).await;
    wrong(agent, &csrf, &unknown(usize::MAX)).await;
    let (mut known_times, mut unknown_times) = (Vec::new(), Vec::new());
    for i in 0..SAMPLES {
        // Known first, then unknown first, and so on: a drift in the machine's load falls on
        // both alike.
        let names = [known.to_owned(), unknown(i)];
        let order = if i % 2 == 0 { [0, 1] } else { [1, 0] };
        for which in order {
            let (status, took) = wrong(agent, &csrf, &names[which]).await;
            assert_eq!(status, StatusCode::UNAUTHORIZED);
            if which == 0 {
                known_times.push(took);
            } else {
                unknown_times.push(took);
            }
        }
    }
    (median(&mut known_times), median(&mut unknown_times))
}

/// Rounds of `SAMPLES` each, at most this many: a real difference shows in every round, the
/// shared machine's load (other builds on the same two cores) in some.
const ROUNDS: usize = 3;

fn ratio((known, unknown): (Duration, Duration)) -> f64 {
    known.as_secs_f64() / unknown.as_secs_f64()
}

/// Medians within 10 % of each other in one of `ROUNDS` rounds.
async fn within_ten_percent(
    what: &str,
    agent: &mut Agent,
    known: &str,
    unknown: impl Fn(usize) -> String,
) {
    let mut seen = Vec::new();
    for _ in 0..ROUNDS {
        let (k, u) = medians(agent, known, &unknown).await;
        let r = ratio((k, u));
        println!(
            "{what}: median known {:.1} ms, unknown {:.1} ms (x {r:.3})",
            k.as_secs_f64() * 1e3,
            u.as_secs_f64() * 1e3
        );
        seen.push(r);
        if (0.9..=1.1).contains(&r) {
            return;
        }
    }
    panic!("{what}: known vs unknown medians apart by more than 10 % in every round: {seen:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wrong_passwords_take_as_long_for_known_and_unknown_names() {
    let limiter = common::limiter(None).await;
    let mut settings = Settings::with_users(&limiter, users());
    // No delays here: this test is about the answer itself, not the throttle (which is the
    // same for both, and tested in tests/signin.rs).
    settings.throttle = ThrottleRules {
        free_failures: 1000,
        device_failures: 1000,
        address_lockout_after: 1000,
        ..ThrottleRules::default()
    };
    let url = common::dashboard(settings).await;
    let mut agent = Agent::new(&url);
    // Each known name against a new unknown name each time, and one unknown name over and over.
    within_ten_percent("ana vs fresh unknown names", &mut agent, "ana", |i| {
        format!("nobody-{i}")
    })
    .await;
    within_ten_percent("bo vs one unknown name", &mut agent, "bo", |_| {
        "nobody".to_owned()
    })
    .await;
}
