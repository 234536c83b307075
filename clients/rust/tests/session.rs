//! The client against the limiter's own service and router (embedded store, short leases, a
//! bearer token) over real HTTP: heartbeats, a force-stop seen as `Revoked`, a 409 with the
//! devices and a take-over, a stop that frees the slot at once.

use std::sync::Arc;
use std::time::{Duration, Instant};

use screenlimit_client::{Client, Event, PlayOutcome, PlayStart, Session, SessionOptions, Start};
use screenlimit_limiter::api::auth::ApiAuth;
use screenlimit_limiter::api::{ApiOptions, router};
use screenlimit_limiter::config::Config;
use screenlimit_limiter::service::StreamService;

const TOKEN: &str = "the-client-test-token-0123456789";

async fn limiter() -> String {
    let config = Config::from_yaml("lease: { heartbeat_interval: 200ms, ttl: 2s }\n").unwrap();
    config.validate().unwrap();
    let service = Arc::new(StreamService::from_config(&config).unwrap());
    let app = router(
        service,
        ApiOptions {
            auth: ApiAuth::single_token(Some(TOKEN.into())),
            ..ApiOptions::open(config.max_body_bytes)
        },
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    format!("http://{addr}")
}

fn client(base: &str) -> Client {
    Client::new(base, Some(TOKEN.into()), Duration::from_secs(5)).unwrap()
}

async fn playing(base: &str, device: &str, replace: Option<String>) -> Start {
    let request = PlayStart {
        device_meta: Some(format!("{device} display")),
        replace_stream_id: replace,
        ..PlayStart::new("acct-1", device)
    };
    Session::start(client(base), request, SessionOptions::default())
        .await
        .unwrap()
}

async fn next(session: &mut Session) -> Option<Event> {
    tokio::time::timeout(Duration::from_secs(5), session.next_event())
        .await
        .expect("an event within 5 s")
}

#[tokio::test]
async fn a_session_heartbeats_is_revoked_denied_taken_over_and_stopped() {
    let base = limiter().await;
    let Start::Playing(mut tv) = playing(&base, "tv", None).await else {
        panic!("the first device plays");
    };
    let started = Instant::now();
    for _ in 0..3 {
        assert!(matches!(
            next(&mut tv).await,
            Some(Event::Heartbeat { degraded: false })
        ));
    }
    // Three heartbeats at 200 ms ± 10%.
    let elapsed = started.elapsed();
    assert!(
        elapsed >= Duration::from_millis(540) && elapsed < Duration::from_millis(1500),
        "{elapsed:?}"
    );
    let list = client(&base).list("acct-1").await.unwrap();
    assert_eq!(list.active[0].stream_id, tv.stream_id());

    // The basic plan holds one stream: the phone is denied and told who plays.
    let Start::Denied(denial) = playing(&base, "phone", None).await else {
        panic!("the account is full");
    };
    assert_eq!(denial.active.len(), 1);
    assert_eq!(denial.active[0].device_meta, "tv display");
    // Take-over: the phone plays, the TV is told to stop at its next heartbeat.
    let Start::Playing(phone) =
        playing(&base, "phone", Some(denial.active[0].stream_id.clone())).await
    else {
        panic!("the take-over plays");
    };
    loop {
        match next(&mut tv).await {
            Some(Event::Revoked) => break,
            Some(Event::Heartbeat { .. }) => continue,
            other => panic!("{other:?}"),
        }
    }
    assert!(next(&mut tv).await.is_none(), "a revoked session is over");

    // A stop frees the slot at once (the TTL is 2 s).
    phone.stop().await.unwrap();
    let Start::Playing(mut laptop) = playing(&base, "laptop", None).await else {
        panic!("the slot is free");
    };
    // A force-stop by support: revoked.
    client(&base)
        .force_stop("acct-1", &laptop.stream_id(), "agent", "test")
        .await
        .unwrap();
    loop {
        match next(&mut laptop).await {
            Some(Event::Revoked) => break,
            Some(Event::Heartbeat { .. }) => continue,
            other => panic!("{other:?}"),
        }
    }
}

#[tokio::test]
async fn a_refused_credential_is_named_and_no_answer_is_transient() {
    let base = limiter().await;
    let stranger = Client::new(&base, Some("wrong-token".into()), Duration::from_secs(5)).unwrap();
    let error = stranger
        .play_start(&PlayStart::new("acct-1", "tv"))
        .await
        .unwrap_err();
    assert_eq!(error.code(), Some("unauthorized"));
    assert!(!error.is_transient());
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let nobody = Client::new(
        &format!("http://127.0.0.1:{port}"),
        None,
        Duration::from_secs(1),
    )
    .unwrap();
    let error = nobody.list("acct-1").await.unwrap_err();
    assert!(error.is_transient(), "{error}");
    // Ids are sent as encoded path segments.
    let odd = client(&base).list("a/b").await.unwrap_err();
    assert_eq!(odd.code(), Some("invalid_request"), "{odd}");
}

#[tokio::test]
async fn a_play_let_through_in_shadow_says_what_enforcing_would_have_done() {
    let config = Config::from_yaml(
        "plans: { basic: 1 }\ndefault_plan: basic\nenforcement: { mode: shadow }\n",
    )
    .unwrap();
    config.validate().unwrap();
    let service = Arc::new(StreamService::from_config(&config).unwrap());
    let app = router(service, ApiOptions::open(config.max_body_bytes));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    let client = Client::new(&base, None, Duration::from_secs(5)).unwrap();
    let play = |device: &str| PlayStart::new("acct-shadow", device);
    let PlayOutcome::Granted(first) = client.play_start(&play("tv")).await.unwrap() else {
        panic!("the first device plays");
    };
    assert_eq!(first.shadow.map(|s| s.would_refuse), Some(false));
    let PlayOutcome::Granted(second) = client.play_start(&play("phone")).await.unwrap() else {
        panic!("in shadow the second device plays too");
    };
    let shadow = second
        .shadow
        .expect("the answer says what enforcing would have done");
    assert!(shadow.would_refuse);
    assert_eq!(
        (shadow.rule.as_deref(), shadow.limit),
        (Some("max_streams"), Some(1))
    );
    assert_eq!(second.active_count, 2);
}
