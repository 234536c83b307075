//! `threads`: the limiter serves on several single-threaded event loops, each with its own
//! connections. Requests spread over many client connections (and so over every thread) must
//! still see one store: caps hold, a stream started on one thread renews and stops on another,
//! and SIGTERM still drains every thread.

mod support;

use futures::future::join_all;
use reqwest::StatusCode;
use serde_json::json;
use support::{Api, LimiterProcess, RedisServer, SECRET};

const ACCOUNTS: usize = 12;
const DEVICES: usize = 10;
/// Separate clients, so separate connections, dealt out to the threads in turn.
const CLIENTS: usize = 16;

async fn every_thread_sees_one_store(limiter: &LimiterProcess, tag: &str) {
    let clients: Vec<Api> = (0..CLIENTS).map(|_| limiter.client()).collect();
    // One call per connection first, so that the burst below does not race the store's cold
    // start (connections, script loading) against its 25 ms deadline.
    for (i, api) in clients.iter().enumerate() {
        let warm = api.play_on(&format!("{tag}-warm-{i}"), "tv").await;
        assert_eq!(warm.status, StatusCode::OK, "{warm:?}");
    }
    // Every device of every account at once, each through a different connection.
    let plays = (0..ACCOUNTS).flat_map(|a| (0..DEVICES).map(move |d| (a, d)));
    let replies = join_all(plays.map(|(a, d)| {
        let api = clients[(a * DEVICES + d) % CLIENTS].clone();
        async move {
            let body = json!({"account_id": format!("{tag}-{a}"), "device_id": format!("d{d}"), "plan": "standard"});
            (a, api.play(body).await)
        }
    }))
    .await;
    let mut granted = vec![Vec::new(); ACCOUNTS];
    for (account, reply) in replies {
        match reply.status {
            StatusCode::OK => {
                assert_eq!(reply.body["degraded"], json!(false), "{reply:?}");
                granted[account].push(reply.stream_id());
            }
            StatusCode::CONFLICT => assert_eq!(reply.error(), "concurrent_stream_limit"),
            other => panic!("a play-start got {other}: {reply:?}"),
        }
    }
    assert!(
        granted.iter().all(|g| g.len() == 2),
        "each standard account holds exactly 2 streams: {:?}",
        granted.iter().map(Vec::len).collect::<Vec<_>>()
    );
    // Renew and stop each stream through other connections than the one that started it.
    for (a, streams) in granted.iter().enumerate() {
        let account = format!("{tag}-{a}");
        for (i, stream_id) in streams.iter().enumerate() {
            let beat = clients[(a + i + 1) % CLIENTS]
                .heartbeat(&account, stream_id)
                .await;
            assert_eq!(beat.status, StatusCode::OK, "{beat:?}");
        }
        let stopped = clients[(a + 7) % CLIENTS].stop(&account, &streams[0]).await;
        assert_eq!(stopped.status, StatusCode::OK, "{stopped:?}");
        let listed = clients[(a + 3) % CLIENTS].list(&account).await;
        assert_eq!(
            listed.body["active"].as_array().map(Vec::len),
            Some(1),
            "{listed:?}"
        );
    }
}

/// Redis config with a roomy store deadline: these tests are about sharing, not deadlines (a
/// debug build with more threads than CPUs can miss 25 ms, and then `open` lets plays through).
fn redis_with_threads(redis: &RedisServer, threads: usize) -> String {
    format!(
        "store: {{ backend: redis, redis_shards: [\"{}\"], timeout: 2s }}\n\
         stream_id_secret: \"{SECRET}\"\nthreads: {threads}\n",
        redis.url()
    )
}

#[tokio::test]
async fn many_threads_share_one_redis_store() {
    let redis = RedisServer::start();
    let limiter = LimiterProcess::start(&redis_with_threads(&redis, 4));
    every_thread_sees_one_store(&limiter, "redis").await;
    assert!(limiter.terminate().success());
}

#[tokio::test]
async fn many_threads_share_one_embedded_store() {
    let limiter = LimiterProcess::start("threads: 3\n");
    every_thread_sees_one_store(&limiter, "memory").await;
    assert!(limiter.terminate().success());
}

#[tokio::test]
async fn one_thread_serves_everything() {
    let redis = RedisServer::start();
    let limiter = LimiterProcess::start(&redis_with_threads(&redis, 1));
    every_thread_sees_one_store(&limiter, "single").await;
    assert!(limiter.terminate().success());
}
