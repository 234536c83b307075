//! `GET /v1/accounts/{account_id}/history` against the real binary on each store: the embedded
//! one, Redis through the scripts and Redis through the module. What a customer calls support
//! about shows there, newest first; what support does not need (a grant, a renewal) does not.

mod support;

use std::time::Duration;

use reqwest::StatusCode;
use serde_json::{Value, json};
use support::{Api, LimiterProcess, RedisServer, redis_config};

/// Short leases, so that a crashed player's lease ends (and is forgotten) within the test.
const LEASES: &str = "lease: { heartbeat_interval: 200ms, ttl: 600ms }\n";

#[tokio::test]
async fn the_embedded_store_answers_what_a_customer_saw() {
    let limiter = LimiterProcess::start(LEASES);
    what_a_customer_saw(&limiter.client(), None).await;
}

#[tokio::test]
async fn redis_through_the_scripts_answers_what_a_customer_saw() {
    let redis = RedisServer::start();
    let limiter = LimiterProcess::start(&redis_config(&[redis.url()], LEASES));
    what_a_customer_saw(&limiter.client(), Some(&redis)).await;
}

#[tokio::test]
async fn redis_through_the_module_answers_what_a_customer_saw() {
    let redis = RedisServer::start_with_module(&[]);
    let limiter = LimiterProcess::start(&redis_config(&[redis.url()], LEASES));
    what_a_customer_saw(&limiter.client(), Some(&redis)).await;
    assert!(
        redis.calls("sl.acquire") > 0,
        "the plays went through the module"
    );
}

async fn history(api: &Api, account: &str, query: &str) -> (StatusCode, Value) {
    let response = api
        .get(&format!("/v1/accounts/{account}/history{query}"))
        .await;
    let status = response.status();
    (status, response.json().await.unwrap_or(Value::Null))
}

async fn play(
    api: &Api,
    account: &str,
    device: &str,
    name: &str,
    kind: &str,
) -> (StatusCode, Value) {
    let reply = api
        .play(
            json!({"account_id": account, "device_id": device, "plan": "standard",
                     "device_type": kind, "device_meta": name}),
        )
        .await;
    (reply.status, reply.body)
}

fn device_ids(devices: &Value) -> Vec<&str> {
    let mut ids: Vec<&str> = devices
        .as_array()
        .unwrap()
        .iter()
        .map(|d| d["device_id"].as_str().unwrap())
        .collect();
    ids.sort_unstable();
    ids
}

async fn what_a_customer_saw(api: &Api, redis: Option<&RedisServer>) {
    let acct = "acct-history";
    // Grants and renewals write nothing.
    let (status, tv) = play(api, acct, "tv", "Living Room TV", "tv").await;
    assert_eq!(status, StatusCode::OK, "{tv}");
    let tv = tv["stream_id"].as_str().unwrap().to_owned();
    let (status, phone) = play(api, acct, "phone", "Mom's iPhone", "mobile").await;
    assert_eq!(status, StatusCode::OK, "{phone}");
    let phone = phone["stream_id"].as_str().unwrap().to_owned();
    assert_eq!(api.heartbeat(acct, &tv).await.status, StatusCode::OK);
    let (status, body) = history(api, acct, "").await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(body, json!({"account_id": acct, "entries": []}));
    if let Some(redis) = redis {
        assert_eq!(
            redis.command("EXISTS sl:history:{acct-history}").as_deref(),
            Some(":0\r\n"),
            "no history key after grants and renewals"
        );
    }

    // "It says I'm on too many screens": the refusal, its rule and who held the slots.
    let (status, refused) = play(api, acct, "tablet", "Kids Tablet", "tablet").await;
    assert_eq!(status, StatusCode::CONFLICT, "{refused}");
    let (_, body) = history(api, acct, "").await;
    let entry = &body["entries"][0];
    assert_eq!(entry["kind"], "refused", "{body}");
    assert_eq!(entry["device"]["device_id"], "tablet");
    assert_eq!(entry["device"]["device_meta"], "Kids Tablet");
    assert_eq!(entry["device"]["device_type"], "tablet");
    assert_eq!(entry["rule"], "plan_limit");
    assert_eq!(entry["limit"], 2);
    assert_eq!(device_ids(&entry["holders"]), ["phone", "tv"]);
    let at = entry["at"].as_str().unwrap();
    assert!(at.ends_with('Z') && at.contains('T'), "RFC 3339 UTC: {at}");

    // Support force-stops the phone; its next heartbeats are told, once in the history.
    let stopped = api
        .send(
            api.http
                .post(format!(
                    "{}/v1/accounts/{acct}/streams/{phone}/force-stop",
                    api.base
                ))
                .json(&json!({"actor": "sam", "reason": "customer asked"})),
        )
        .await;
    assert_eq!(stopped.status, StatusCode::OK, "{stopped:?}");
    for _ in 0..2 {
        assert_eq!(api.heartbeat(acct, &phone).await.error(), "stream_revoked");
    }
    // "My TV stopped and said another device took over."
    let took = api
        .play(
            json!({"account_id": acct, "device_id": "tablet", "plan": "standard",
                     "device_type": "tablet", "device_meta": "Kids Tablet",
                     "replace_stream_id": tv}),
        )
        .await;
    assert_eq!(took.status, StatusCode::OK, "{took:?}");

    let (_, body) = history(api, acct, "").await;
    let kinds: Vec<&str> = body["entries"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["kind"].as_str().unwrap())
        .collect();
    assert_eq!(
        kinds,
        ["take_over", "revoked", "force_stop", "refused"],
        "newest first, a revocation once: {body}"
    );
    let entries = &body["entries"];
    assert_eq!(entries[0]["device"]["device_id"], "tablet");
    assert_eq!(entries[0]["replaced"]["device_id"], "tv");
    assert_eq!(entries[0]["replaced"]["device_meta"], "Living Room TV");
    assert_eq!(entries[1]["device"]["device_id"], "phone");
    assert_eq!(entries[2]["device"]["device_meta"], "Mom's iPhone");
    assert_eq!(entries[2]["actor"], "sam");

    // The limit bounds the answer; a bad one is refused with the field named.
    let (status, body) = history(api, acct, "?limit=2").await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(body["entries"].as_array().unwrap().len(), 2);
    for bad in ["?limit=0", "?limit=1001", "?limit=many"] {
        let (status, body) = history(api, acct, bad).await;
        assert!(
            status == StatusCode::UNPROCESSABLE_ENTITY || status == StatusCode::BAD_REQUEST,
            "{bad}: {status} {body}"
        );
        assert!(body["error"].is_string(), "{bad}: {body}");
    }
    let (status, body) = history(api, "bad%20id%00", "").await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{body}");

    // A player that went silent: its lease ends, and the next write that forgets it says so.
    let crashed = "acct-crashed";
    let (status, _) = play(api, crashed, "stick", "Bedroom Stick", "tv").await;
    assert_eq!(status, StatusCode::OK);
    tokio::time::sleep(Duration::from_millis(1_500)).await;
    let (status, _) = play(api, crashed, "laptop", "Work Laptop", "web").await;
    assert_eq!(status, StatusCode::OK);
    let (_, body) = history(api, crashed, "").await;
    let entry = &body["entries"][0];
    assert_eq!(entry["kind"], "expired", "{body}");
    assert_eq!(entry["device"]["device_meta"], "Bedroom Stick");
    assert!(entry["ended_at"].as_str().unwrap() < entry["at"].as_str().unwrap());
}
