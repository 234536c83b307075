//! The v1 HTTP contract, against the real binary on the embedded store: status codes, error
//! codes, field names, input limits, isolation, authentication and the operational endpoints.

mod support;

use std::time::Duration;

use reqwest::StatusCode;
use serde_json::json;
use support::{Api, LimiterProcess};

const SHORT_LEASES: &str = "lease: { heartbeat_interval: 200ms, ttl: 600ms }\n";

#[tokio::test]
async fn play_deny_take_over_and_stop_follow_the_documented_contract() {
    let limiter = LimiterProcess::start("");
    let api = limiter.client();

    let tv = api
        .play(
            json!({"account_id": "acct-1", "device_id": "tv-1", "plan": "basic",
                     "device_type": "tv", "device_meta": "Living Room TV",
                     "profile_id": "kids", "title_id": "title:42"}),
        )
        .await;
    assert_eq!(tv.status, StatusCode::OK, "{tv:?}");
    assert_eq!(tv.body["lease_ttl_sec"], 90.0);
    assert_eq!(tv.body["heartbeat_interval_sec"], 30.0);
    assert_eq!(tv.body["limit"], 1);
    assert_eq!(tv.body["active_count"], 1);
    assert_eq!(tv.body["degraded"], false);
    let tv_id = tv.stream_id();
    assert!(tv_id.len() >= 38, "128 random bits plus a tag: {tv_id}");

    let denied = api
        .play(json!({"account_id": "acct-1", "device_id": "phone-1"}))
        .await;
    assert_eq!(denied.status, StatusCode::CONFLICT);
    assert_eq!(denied.error(), "concurrent_stream_limit");
    assert_eq!(denied.body["limit"], 1);
    let active = &denied.body["active"][0];
    assert_eq!(active["stream_id"], tv_id.as_str());
    assert_eq!(active["device_id"], "tv-1");
    assert_eq!(active["device_meta"], "Living Room TV");
    assert_eq!(active["device_type"], "tv");
    for field in ["started_at", "last_seen", "expires_at"] {
        let at = active[field].as_str().unwrap();
        assert!(
            at.ends_with('Z') && at.contains('T'),
            "{field} is RFC 3339 UTC: {at}"
        );
    }

    let beat = api.heartbeat("acct-1", &tv_id).await;
    assert_eq!(beat.status, StatusCode::OK);
    assert_eq!(beat.body["ok"], true);
    assert_eq!(beat.body["lease_ttl_sec"], 90.0);

    let listed = api.list("acct-1").await;
    assert_eq!(listed.status, StatusCode::OK);
    assert_eq!(listed.body["limit"], 1);
    assert_eq!(listed.body["active"].as_array().unwrap().len(), 1);
    assert_eq!(listed.body["active"][0]["profile_id"], "kids");
    assert_eq!(listed.body["active"][0]["title_id"], "title:42");

    let phone = api
        .play(json!({"account_id": "acct-1", "device_id": "phone-1", "replace_stream_id": tv_id}))
        .await;
    assert_eq!(
        phone.status,
        StatusCode::OK,
        "take-over in one call: {phone:?}"
    );
    let revoked = api.heartbeat("acct-1", &tv_id).await;
    assert_eq!(revoked.status, StatusCode::GONE);
    assert_eq!(revoked.error(), "stream_revoked");
    assert_eq!(revoked.body["action"], "stop");

    let phone_id = phone.stream_id();
    for _ in 0..2 {
        let stopped = api.stop("acct-1", &phone_id).await;
        assert_eq!(
            (stopped.status, stopped.body["ok"].clone()),
            (StatusCode::OK, json!(true))
        );
    }
    assert_eq!(api.list("acct-1").await.body["active"], json!([]));
}

#[tokio::test]
async fn force_stop_frees_the_slot_and_the_device_is_told_to_stop() {
    let limiter = LimiterProcess::start("");
    let api = limiter.client();
    let tv = api.play_on("acct-2", "tv").await.stream_id();
    let stopped = api.force_stop("acct-2", &tv).await;
    assert_eq!(stopped.status, StatusCode::OK);
    assert_eq!(stopped.body["ok"], true);
    assert_eq!(
        api.play_on("acct-2", "phone").await.status,
        StatusCode::OK,
        "slot freed at once"
    );
    let beat = api.heartbeat("acct-2", &tv).await;
    assert_eq!(
        (beat.status, beat.error()),
        (StatusCode::GONE, "stream_revoked")
    );
    assert_eq!(
        api.force_stop("acct-2", &tv).await.status,
        StatusCode::OK,
        "idempotent"
    );
}

#[tokio::test]
async fn an_expired_lease_on_a_full_account_is_answered_lease_expired() {
    let limiter = LimiterProcess::start(SHORT_LEASES);
    let api = limiter.client();
    let tv = api.play_on("acct-3", "tv").await.stream_id();
    tokio::time::sleep(Duration::from_millis(800)).await;
    assert_eq!(api.play_on("acct-3", "phone").await.status, StatusCode::OK);
    let beat = api.heartbeat("acct-3", &tv).await;
    assert_eq!(beat.status, StatusCode::GONE);
    assert_eq!(beat.error(), "lease_expired");
    assert_eq!(beat.body["action"], "re_acquire");
}

#[tokio::test]
async fn a_stream_id_used_with_another_account_renews_stops_and_reveals_nothing() {
    let limiter = LimiterProcess::start("");
    let api = limiter.client();
    let victim = api.play_on("victim", "tv").await.stream_id();
    api.play_on("attacker", "tv").await;

    for reply in [
        api.heartbeat("attacker", &victim).await,
        api.stop("attacker", &victim).await,
        api.force_stop("attacker", &victim).await,
    ] {
        assert_eq!(reply.status, StatusCode::NOT_FOUND, "{reply:?}");
        assert_eq!(reply.error(), "unknown_stream");
    }
    let replace = api
        .play(json!({"account_id": "attacker", "device_id": "phone", "replace_stream_id": victim}))
        .await;
    assert_eq!(
        (replace.status, replace.error()),
        (StatusCode::NOT_FOUND, "unknown_stream")
    );
    assert_eq!(
        api.list("victim").await.body["active"][0]["stream_id"],
        victim.as_str()
    );
    assert_eq!(
        api.heartbeat("victim", &victim).await.status,
        StatusCode::OK
    );
    let attackers_view = api.list("attacker").await.body.to_string();
    assert!(
        !attackers_view.contains(&victim),
        "no trace of the victim's stream"
    );
}

#[tokio::test]
async fn bad_input_gets_a_json_4xx_never_a_500() {
    let limiter = LimiterProcess::start("max_body_bytes: 1024\n");
    let api = limiter.client();
    let post = |body: String| {
        api.http
            .post(format!("{}/v1/streams", api.base))
            .header("content-type", "application/json")
            .body(body)
    };
    let long = "x".repeat(65);
    let cases: Vec<(reqwest::RequestBuilder, StatusCode, &str)> = vec![
        (
            post("{\"account_id\": ".into()),
            StatusCode::BAD_REQUEST,
            "bad_json",
        ),
        (
            post("[]".into()),
            StatusCode::UNPROCESSABLE_ENTITY,
            "invalid_request",
        ),
        (
            post(json!({"account_id": "a"}).to_string()),
            StatusCode::UNPROCESSABLE_ENTITY,
            "invalid_request",
        ),
        (
            post(json!({"account_id": "a b", "device_id": "d"}).to_string()),
            StatusCode::UNPROCESSABLE_ENTITY,
            "invalid_request",
        ),
        (
            post(json!({"account_id": long, "device_id": "d"}).to_string()),
            StatusCode::UNPROCESSABLE_ENTITY,
            "invalid_request",
        ),
        (
            post(
                json!({"account_id": "a", "device_id": "d", "device_meta": "x".repeat(65)})
                    .to_string(),
            ),
            StatusCode::UNPROCESSABLE_ENTITY,
            "invalid_request",
        ),
        (
            post(
                json!({"account_id": "a", "device_id": "d", "device_meta": "bell\u{7}"})
                    .to_string(),
            ),
            StatusCode::UNPROCESSABLE_ENTITY,
            "invalid_request",
        ),
        (
            post(
                json!({"account_id": "a", "device_id": "d", "device_type": "toaster"}).to_string(),
            ),
            StatusCode::UNPROCESSABLE_ENTITY,
            "invalid_request",
        ),
        (
            post(json!({"account_id": "a", "device_id": "d", "plan": "gold"}).to_string()),
            StatusCode::UNPROCESSABLE_ENTITY,
            "unknown_plan",
        ),
        (
            post(
                json!({"account_id": "a", "device_id": "d", "replace_stream_id": "nope"})
                    .to_string(),
            ),
            StatusCode::NOT_FOUND,
            "unknown_stream",
        ),
        (
            post(
                json!({"account_id": "a", "device_id": "d", "device_meta": "x".repeat(4096)})
                    .to_string(),
            ),
            StatusCode::PAYLOAD_TOO_LARGE,
            "payload_too_large",
        ),
        (
            api.http.post(format!("{}/v1/streams", api.base)).body("{}"),
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            "unsupported_media_type",
        ),
        (
            api.http
                .put(format!("{}/v1/streams/nope/heartbeat", api.base))
                .json(&json!({"account_id": "a"})),
            StatusCode::NOT_FOUND,
            "unknown_stream",
        ),
        (
            api.http
                .put(format!("{}/v1/streams/nope/heartbeat", api.base))
                .json(&json!({"account_id": "ä"})),
            StatusCode::UNPROCESSABLE_ENTITY,
            "invalid_request",
        ),
        (
            api.http.get(format!(
                "{}/v1/accounts/{}/streams",
                api.base,
                "y".repeat(65)
            )),
            StatusCode::UNPROCESSABLE_ENTITY,
            "invalid_request",
        ),
        (
            api.http.post(format!(
                "{}/v1/accounts/a/streams/nope/force-stop",
                api.base
            )),
            StatusCode::NOT_FOUND,
            "unknown_stream",
        ),
        (
            api.http.get(format!("{}/v1/streams", api.base)),
            StatusCode::METHOD_NOT_ALLOWED,
            "method_not_allowed",
        ),
        (
            api.http.get(format!("{}/v2/streams", api.base)),
            StatusCode::NOT_FOUND,
            "not_found",
        ),
    ];
    for (i, (request, status, code)) in cases.into_iter().enumerate() {
        let reply = api.send(request).await;
        assert_eq!(
            (reply.status, reply.error()),
            (status, code),
            "case {i}: {reply:?}"
        );
        assert!(
            !reply.body["message"].as_str().unwrap_or("").is_empty(),
            "case {i} explains itself"
        );
    }
    let field = api
        .play(json!({"account_id": "a", "device_id": "d", "profile_id": "p q"}))
        .await;
    assert_eq!(
        field.body["field"], "profile_id",
        "the field at fault is named"
    );
}

#[tokio::test]
async fn with_a_token_file_every_call_but_health_needs_the_bearer_token() {
    let dir = tempfile::tempdir().unwrap();
    let token_path = dir.path().join("token");
    std::fs::write(&token_path, "s3cret-token-for-the-gateway\n").unwrap();
    let limiter = LimiterProcess::start(&format!("auth_token_file: {}\n", token_path.display()));
    let api = limiter.client();

    let anonymous = api.play_on("acct", "tv").await;
    assert_eq!(
        (anonymous.status, anonymous.error()),
        (StatusCode::UNAUTHORIZED, "unauthorized")
    );
    let wrong = api
        .send(
            api.http
                .get(format!("{}/v1/accounts/acct/streams", api.base))
                .bearer_auth("nope"),
        )
        .await;
    assert_eq!(wrong.status, StatusCode::UNAUTHORIZED);
    let right = api
        .send(
            api.http
                .post(format!("{}/v1/streams", api.base))
                .bearer_auth("s3cret-token-for-the-gateway")
                .json(&json!({"account_id": "acct", "device_id": "tv"})),
        )
        .await;
    assert_eq!(right.status, StatusCode::OK);
    for open in ["/healthz", "/readyz", "/metrics"] {
        assert_eq!(
            api.get(open).await.status(),
            StatusCode::OK,
            "{open} stays open for probes"
        );
    }
    let doc = api
        .send(
            api.http
                .get(format!("{}/openapi.json", api.base))
                .bearer_auth("s3cret-token-for-the-gateway"),
        )
        .await
        .body;
    assert_eq!(
        doc["components"]["securitySchemes"]["bearer"]["scheme"],
        "bearer"
    );
    assert_eq!(
        doc["paths"]["/v1/streams"]["post"]["responses"]["401"]["$ref"],
        "#/components/responses/Unauthorized"
    );
    assert!(doc["paths"]["/healthz"]["get"]["responses"]["401"].is_null());
}

#[tokio::test]
async fn openapi_metrics_and_health_are_served() {
    let limiter = LimiterProcess::start("");
    let api = limiter.client();
    api.play_on("acct", "tv").await;
    api.play_on("acct", "phone").await;

    let doc: serde_json::Value = api.get("/openapi.json").await.json().await.unwrap();
    for path in [
        "/v1/streams",
        "/v1/streams/{stream_id}/heartbeat",
        "/v1/streams/{stream_id}",
        "/v1/accounts/{account_id}/streams",
        "/v1/accounts/{account_id}/streams/{stream_id}/force-stop",
    ] {
        assert!(doc["paths"][path].is_object(), "{path} documented");
    }
    assert!(doc["components"]["schemas"]["PlayStartRequest"].is_object());
    let play = &doc["paths"]["/v1/streams"]["post"];
    for status in [
        "200", "400", "403", "404", "409", "413", "415", "422", "503",
    ] {
        assert!(
            play["responses"][status].is_object(),
            "play-start documents {status}"
        );
    }
    assert_eq!(
        doc["components"]["schemas"]["PlayStartRequest"]["properties"]["plan"]["enum"],
        json!(["basic", "premium", "standard", null]),
        "the plans this instance knows"
    );
    assert!(play["responses"]["200"]["links"]["Heartbeat"].is_object());
    assert!(
        doc["components"].get("securitySchemes").is_none(),
        "no token configured, none asked for"
    );

    let metrics = api.get("/metrics").await.text().await.unwrap();
    assert!(
        metrics.contains("screenlimit_decisions_total{decision=\"allowed\"} 1"),
        "{metrics}"
    );
    assert!(metrics.contains("screenlimit_decisions_total{decision=\"denied\"} 1"));
    assert!(
        metrics.contains("screenlimit_operation_duration_seconds_count{operation=\"acquire\"} 2")
    );
    assert!(metrics.contains("screenlimit_store_circuit_open{shard=\"0\"} 0"));

    let ready: serde_json::Value = api.get("/readyz").await.json().await.unwrap();
    assert_eq!(ready["ready"], true);
    assert_eq!(ready["shards"][0]["reachable"], true);
    assert_eq!(api.get("/healthz").await.status(), StatusCode::OK);
}

#[tokio::test]
async fn a_bad_config_stops_the_start_and_names_the_field() {
    for (yaml, field) in [
        (
            "lease: { heartbeat_interval: 30s, ttl: 40s }\n",
            "lease.ttl",
        ),
        ("default_plan: gold\n", "default_plan"),
        (
            "store: { backend: redis, redis_shards: [\"redis://127.0.0.1:1\"] }\n",
            "stream_id_secret_file",
        ),
        ("plans: { basic: many }\n", "plans.basic"),
    ] {
        let stderr = LimiterProcess::try_start(yaml, &[])
            .err()
            .expect("must refuse to start");
        assert!(stderr.contains(field), "{yaml:?} -> {stderr}");
    }
    let env_err = LimiterProcess::try_start("", &[("SCREENLIMIT_FAILURE_POLICY", "sometimes")])
        .err()
        .unwrap();
    assert!(env_err.contains("failure_policy"), "{env_err}");
}

#[tokio::test]
async fn sigterm_shuts_down_gracefully() {
    let limiter = LimiterProcess::start("");
    assert_eq!(
        limiter.client().play_on("acct", "tv").await.status,
        StatusCode::OK
    );
    assert!(limiter.terminate().success());
}

#[tokio::test]
async fn the_default_run_needs_no_config_at_all() {
    // The README's first command: no file, embedded store. Point it at a free port by env.
    let port = support::free_port();
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_screenlimit-limiter"))
        .env("SCREENLIMIT_LISTEN", format!("127.0.0.1:{port}"))
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let api = Api::new(&format!("http://127.0.0.1:{port}"));
    let mut reply = None;
    for _ in 0..100 {
        if std::net::TcpStream::connect(("127.0.0.1", port)).is_ok() {
            reply = Some(api.play_on("acct", "tv").await);
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let _ = child.kill();
    let _ = child.wait();
    let reply = reply.expect("the limiter listened");
    assert_eq!(
        (reply.status, reply.body["limit"].clone()),
        (StatusCode::OK, json!(1))
    );
}

#[tokio::test]
async fn force_stops_are_audited_with_actor_and_reason() {
    let limiter = LimiterProcess::start("");
    let api = limiter.client();
    let tv = api
        .play(json!({"account_id": "acct-9", "device_id": "tv", "device_meta": "Den TV"}))
        .await
        .stream_id();
    let url = format!("{}/v1/accounts/acct-9/streams/{tv}/force-stop", api.base);
    let too_long = api
        .send(
            api.http
                .post(&url)
                .json(&json!({"reason": "x".repeat(201)})),
        )
        .await;
    assert_eq!(
        (too_long.status, too_long.body["field"].clone()),
        (StatusCode::UNPROCESSABLE_ENTITY, json!("reason"))
    );
    let stopped = api
        .send(
            api.http
                .post(&url)
                .json(&json!({"actor": "alice@support", "reason": "nobody is watching"})),
        )
        .await;
    assert_eq!(stopped.status, StatusCode::OK);

    let audit = api
        .send(
            api.http
                .get(format!("{}/v1/audit?account_id=acct-9", api.base)),
        )
        .await;
    assert_eq!(audit.status, StatusCode::OK);
    let entry = &audit.body["entries"][0];
    assert_eq!(entry["stream_id"], tv.as_str());
    assert_eq!(entry["device_meta"], "Den TV");
    assert_eq!(entry["actor"], "alice@support");
    assert_eq!(entry["reason"], "nobody is watching");
    assert!(entry["at"].as_str().unwrap().ends_with('Z'));
    let other = api
        .send(
            api.http
                .get(format!("{}/v1/audit?account_id=acct-10", api.base)),
        )
        .await;
    assert_eq!(other.body["entries"], json!([]));
    let bad = api
        .send(api.http.get(format!("{}/v1/audit?limit=lots", api.base)))
        .await;
    assert_eq!(bad.status, StatusCode::UNPROCESSABLE_ENTITY);
}

#[tokio::test]
async fn the_fleet_view_reports_shards_and_decision_counters() {
    let limiter = LimiterProcess::start("");
    let api = limiter.client();
    api.play_on("acct", "tv").await;
    api.play_on("acct", "phone").await;
    let fleet: serde_json::Value = api.get("/v1/fleet").await.json().await.unwrap();
    assert_eq!(fleet["instance"]["backend"], "memory");
    assert_eq!(fleet["failure_policy"], "open");
    assert_eq!(fleet["plans"]["premium"], 4);
    assert_eq!(fleet["shards"][0]["reachable"], true);
    assert_eq!(fleet["shards"][0]["keys"], 1);
    assert_eq!(fleet["decisions"]["allowed"], 1);
    assert_eq!(fleet["decisions"]["denied"], 1);
    // The embedded store counts its live leases exactly.
    assert_eq!(
        fleet["live_streams"],
        json!({"method": "exact", "window_sec": 0.0, "shards": [1]})
    );
    let metrics = api.get("/metrics").await.text().await.unwrap();
    assert!(
        metrics.contains("screenlimit_live_streams{method=\"exact\",shard=\"0\"} 1"),
        "{metrics}"
    );
}

#[tokio::test]
async fn a_device_type_cap_is_named_in_the_409() {
    let limiter = LimiterProcess::start(
        "plans:\n  basic: 1\n  standard: { max_streams: 2, device_caps: { mobile: 1 } }\n",
    );
    let api = limiter.client();
    let phone = |device: &str| json!({"account_id": "fam", "device_id": device, "plan": "standard", "device_type": "mobile"});
    assert_eq!(api.play(phone("phone-1")).await.status, StatusCode::OK);
    let second = api.play(phone("phone-2")).await;
    assert_eq!(second.status, StatusCode::CONFLICT);
    assert_eq!(second.body["rule"], "device_type_cap");
    assert_eq!(second.body["device_type"], "mobile");
    assert_eq!(second.body["cap"], 1);
    assert_eq!(second.body["limit"], 2);
    assert!(second.body["message"].as_str().unwrap().contains("mobile"));
    let tv = api
        .play(json!({"account_id": "fam", "device_id": "tv", "device_type": "tv"}))
        .await;
    assert_eq!(tv.status, StatusCode::OK, "the other slot is open to a tv");
    let full = api
        .play(json!({"account_id": "fam", "device_id": "web", "device_type": "web"}))
        .await;
    assert_eq!(full.body["rule"], "max_streams");
}

#[tokio::test]
async fn support_can_grant_a_temporary_extra_stream() {
    let limiter = LimiterProcess::start("");
    let api = limiter.client();
    let url = format!("{}/v1/accounts/fam/limit-override", api.base);
    let bad = api
        .send(
            api.http
                .put(&url)
                .json(&json!({"max_streams": 0, "expires_in_sec": 60})),
        )
        .await;
    assert_eq!(
        (bad.status, bad.body["field"].clone()),
        (StatusCode::UNPROCESSABLE_ENTITY, json!("max_streams"))
    );
    let granted = api
        .send(
            api.http
                .put(&url)
                .json(&json!({"max_streams": 2, "expires_in_sec": 3600})),
        )
        .await;
    assert_eq!(granted.status, StatusCode::OK);
    assert_eq!(granted.body["max_streams"], 2);
    assert!(granted.body["expires_at"].as_str().unwrap().ends_with('Z'));

    assert_eq!(api.play_on("fam", "tv").await.status, StatusCode::OK);
    assert_eq!(
        api.play_on("fam", "phone").await.status,
        StatusCode::OK,
        "the extra stream"
    );
    let listed = api.list("fam").await;
    assert_eq!(listed.body["limit"], 2);
    assert_eq!(listed.body["limit_override"]["max_streams"], 2);

    assert_eq!(api.send(api.http.delete(&url)).await.status, StatusCode::OK);
    let listed = api.list("fam").await;
    assert_eq!(
        (
            listed.body["limit"].clone(),
            listed.body["limit_override"].clone()
        ),
        (json!(1), json!(null))
    );
    assert_eq!(
        api.play_on("fam", "tablet").await.status,
        StatusCode::CONFLICT
    );
}

#[tokio::test]
async fn limit_changes_reach_the_audit_log_filterable_by_kind() {
    let limiter = LimiterProcess::start("");
    let api = limiter.client();
    let url = format!("{}/v1/accounts/fam/limit-override", api.base);
    let audit = |query: &'static str| {
        let url = format!("{}/v1/audit?{query}", api.base);
        api.send(api.http.get(url))
    };
    // A bad actor or reason changes nothing and logs nothing.
    let bad = api
        .send(
            api.http.put(&url).json(
                &json!({"max_streams": 2, "expires_in_sec": 3600, "reason": "x".repeat(201)}),
            ),
        )
        .await;
    assert_eq!(
        (bad.status, bad.body["field"].clone()),
        (StatusCode::UNPROCESSABLE_ENTITY, json!("reason"))
    );
    let bad = api
        .send(api.http.delete(&url).json(&json!({"actor": "a\u{7}b"})))
        .await;
    assert_eq!(
        (bad.status, bad.body["field"].clone()),
        (StatusCode::UNPROCESSABLE_ENTITY, json!("actor"))
    );
    assert_eq!(audit("").await.body["entries"], json!([]));

    let granted = api
        .send(
            api.http
                .put(&url)
                .json(&json!({"max_streams": 3, "expires_in_sec": 3600,
            "actor": "bo@support", "reason": "family visit"})),
        )
        .await;
    assert_eq!(granted.status, StatusCode::OK);
    // No body at all is fine for a removal: the actor is then `api`.
    assert_eq!(api.send(api.http.delete(&url)).await.status, StatusCode::OK);

    let log = audit("account_id=fam").await;
    let entries = log.body["entries"].as_array().unwrap();
    assert_eq!(entries.len(), 2, "{}", log.body);
    let (removed, grant) = (&entries[0], &entries[1]);
    assert_eq!(grant["kind"], "limit_granted");
    assert_eq!(
        (&grant["actor"], &grant["reason"]),
        (&json!("bo@support"), &json!("family visit"))
    );
    assert_eq!(
        (&grant["limit_from"], &grant["limit_to"]),
        (&json!(1), &json!(3))
    );
    assert_eq!(grant["limit_until"], granted.body["expires_at"]);
    assert_eq!(grant["stream_id"], "");
    assert_eq!(removed["kind"], "limit_removed");
    assert_eq!(
        (&removed["actor"], &removed["reason"]),
        (&json!("api"), &json!(""))
    );
    assert_eq!(
        (&removed["limit_from"], &removed["limit_to"]),
        (&json!(3), &json!(1))
    );

    let only = audit("kind=limit_removed").await;
    assert_eq!(only.body["entries"].as_array().unwrap().len(), 1);
    assert_eq!(only.body["entries"][0]["kind"], "limit_removed");
    assert_eq!(
        audit("kind=force_stop&account_id=fam").await.body["entries"],
        json!([])
    );
    let unknown = audit("kind=grant").await;
    assert_eq!(
        (unknown.status, unknown.body["field"].clone()),
        (StatusCode::UNPROCESSABLE_ENTITY, json!("kind"))
    );
    let message = unknown.body["message"].as_str().unwrap();
    assert!(
        message.contains("force_stop, limit_granted, limit_removed"),
        "{message}"
    );
}

#[tokio::test]
async fn dashboard_sign_outs_raise_the_generation_and_sign_ins_are_audited() {
    let limiter = LimiterProcess::start("");
    let api = limiter.client();
    let session = |user: &str| {
        let url = format!("{}/v1/dashboard-sessions/{user}", api.base);
        api.send(api.http.get(url))
    };
    let event = |user: &str, body: serde_json::Value| {
        let url = format!("{}/v1/dashboard-sessions/{user}/events", api.base);
        api.send(api.http.post(url).json(&body))
    };
    let fresh = session("ana").await;
    assert_eq!(fresh.status, StatusCode::OK);
    assert_eq!(
        fresh.body,
        json!({"user": "ana", "generation": 0, "failures": 0})
    );

    // Bad input changes nothing and logs nothing.
    for (user, body, field) in [
        (
            "ana",
            json!({"event": "sign_in", "address": "10.0.0.1; rm"}),
            "address",
        ),
        (
            "ana",
            json!({"event": "sign_in", "reason": "x".repeat(201)}),
            "reason",
        ),
        ("a%20b", json!({"event": "sign_out"}), "user"),
        (
            "ana",
            json!({"event": "sign_in_failed", "failure_window_sec": 0}),
            "failure_window_sec",
        ),
        (
            "ana",
            json!({"event": "sign_in_failed", "failure_window_sec": 86401}),
            "failure_window_sec",
        ),
    ] {
        let bad = event(user, body).await;
        assert_eq!(
            (bad.status, bad.body["field"].clone()),
            (StatusCode::UNPROCESSABLE_ENTITY, json!(field)),
            "{}",
            bad.body
        );
    }
    let bad = event("ana", json!({"event": "sign_in_everywhere"})).await;
    assert_eq!(bad.status, StatusCode::UNPROCESSABLE_ENTITY, "{}", bad.body);
    assert_eq!(session("ana").await.body["generation"], 0);

    let signed_in = event("ana", json!({"event": "sign_in", "address": "10.0.0.1"})).await;
    assert_eq!(
        signed_in.body,
        json!({"user": "ana", "generation": 0, "failures": 0})
    );
    let failed = event("ana", json!({"event": "sign_in_failed", "address": "::1"})).await;
    assert_eq!(failed.body["generation"], 0);
    assert_eq!(failed.body["failures"], 0, "no window: not counted");
    let counted = json!({"event": "sign_in_failed", "address": "::1", "failure_window_sec": 60});
    assert_eq!(event("ana", counted.clone()).await.body["failures"], 1);
    assert_eq!(event("ana", counted).await.body["failures"], 2);
    assert_eq!(session("ana").await.body["failures"], 2);
    let out = event("ana", json!({"event": "sign_out", "address": "10.0.0.1"})).await;
    assert_eq!(
        out.body,
        json!({"user": "ana", "generation": 1, "failures": 2})
    );
    assert_eq!(session("ana").await.body["generation"], 1);
    assert_eq!(session("bo").await.body["generation"], 0, "per user");

    let url = format!("{}/v1/audit?kind=sign_out", api.base);
    let log = api.send(api.http.get(url)).await;
    let entries = log.body["entries"].as_array().unwrap();
    assert_eq!(entries.len(), 1, "{}", log.body);
    assert_eq!(
        (
            &entries[0]["actor"],
            &entries[0]["address"],
            &entries[0]["account_id"]
        ),
        (&json!("ana"), &json!("10.0.0.1"), &json!(""))
    );
    let url = format!("{}/v1/audit", api.base);
    let all = api.send(api.http.get(url)).await;
    let kinds: Vec<&str> = all.body["entries"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["kind"].as_str().unwrap())
        .collect();
    assert_eq!(
        kinds,
        [
            "sign_out",
            "sign_in_failed",
            "sign_in_failed",
            "sign_in_failed",
            "sign_in"
        ]
    );
}

/// Sends `request_line` as is over a fresh connection (a URL library would resolve `..` in a
/// path before sending it) and returns the status code.
fn raw_status(base: &str, request_line: &str) -> u16 {
    use std::io::{Read, Write};
    let host = base.trim_start_matches("http://");
    let mut stream = std::net::TcpStream::connect(host).unwrap();
    write!(
        stream,
        "{request_line} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n"
    )
    .unwrap();
    let mut reply = String::new();
    stream.read_to_string(&mut reply).unwrap();
    reply
        .split(' ')
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("no status line in {reply:?}"))
}

#[tokio::test]
async fn ids_made_only_of_dots_are_refused_with_the_field_named() {
    let limiter = LimiterProcess::start("");
    let api = limiter.client();
    for dots in [".", "..", "..."] {
        for field in ["account_id", "device_id", "profile_id", "title_id", "plan"] {
            let mut body = json!({"account_id": "acct", "device_id": "tv"});
            body[field] = json!(dots);
            let reply = api.play(body).await;
            assert_eq!(
                (reply.status, reply.error(), reply.body["field"].clone()),
                (
                    StatusCode::UNPROCESSABLE_ENTITY,
                    "invalid_request",
                    json!(field)
                ),
                "{field} = {dots:?}: {reply:?}"
            );
            assert!(
                reply.body["message"].as_str().unwrap().contains("dots"),
                "{reply:?}"
            );
        }
    }
    let beat = api.heartbeat("..", "nope").await;
    assert_eq!(
        (beat.status, beat.body["field"].clone()),
        (StatusCode::UNPROCESSABLE_ENTITY, json!("account_id"))
    );
    let audit = api
        .send(api.http.get(format!("{}/v1/audit?account_id=..", api.base)))
        .await;
    assert_eq!(audit.status, StatusCode::UNPROCESSABLE_ENTITY);
    assert_eq!(raw_status(&api.base, "GET /v1/accounts/../streams"), 422);
    assert_eq!(
        raw_status(&api.base, "GET /v1/accounts/%2E%2E/streams"),
        422
    );
    assert_eq!(
        api.play_on(".a.", "tv").await.status,
        StatusCode::OK,
        "dots beside other characters are fine"
    );
}

#[tokio::test]
async fn the_api_refuses_exactly_what_its_document_refuses() {
    let limiter = LimiterProcess::start("");
    let api = limiter.client();
    let tv = api.play_on("acct-d", "tv").await.stream_id();
    let force_stop = format!("{}/v1/accounts/acct-d/streams/{tv}/force-stop", api.base);
    let cases: Vec<(reqwest::RequestBuilder, StatusCode, &str)> =
        vec![
        // device_meta: 30 characters, whatever their UTF-8 size
        (
            api.http.post(format!("{}/v1/streams", api.base)).json(
                &json!({"account_id": "acct-m", "device_id": "tv", "device_meta": "📺".repeat(30)}),
            ),
            StatusCode::OK,
            "",
        ),
        (
            api.http.post(format!("{}/v1/streams", api.base)).json(
                &json!({"account_id": "acct-m", "device_id": "tv", "device_meta": "x".repeat(31)}),
            ),
            StatusCode::UNPROCESSABLE_ENTITY,
            "invalid_request",
        ),
        // a body is an object, never an array serde could read as the fields in order
        (
            api.http
                .put(format!("{}/v1/streams/{tv}/heartbeat", api.base))
                .header("content-type", "application/json")
                .body(r#"["acct-d"]"#),
            StatusCode::UNPROCESSABLE_ENTITY,
            "invalid_request",
        ),
        // JSON Schema integers include 60.0
        (
            api.http
                .put(format!("{}/v1/accounts/acct-o/limit-override", api.base))
                .header("content-type", "application/json")
                .body(r#"{"max_streams": 2.0, "expires_in_sec": 6e1}"#),
            StatusCode::OK,
            "",
        ),
        (
            api.http
                .put(format!("{}/v1/accounts/acct-o/limit-override", api.base))
                .json(&json!({"max_streams": 2, "expires_in_sec": 1.5})),
            StatusCode::UNPROCESSABLE_ENTITY,
            "invalid_request",
        ),
        (
            api.http.get(format!("{}/v1/audit?limit=0", api.base)),
            StatusCode::UNPROCESSABLE_ENTITY,
            "invalid_request",
        ),
        (
            api.http.get(format!("{}/v1/audit?limit=1001", api.base)),
            StatusCode::UNPROCESSABLE_ENTITY,
            "invalid_request",
        ),
        (
            api.http.get(format!("{}/v1/audit?limit=1000", api.base)),
            StatusCode::OK,
            "",
        ),
        (
            api.http.get(format!("{}/v1/accounts/%FF/streams", api.base)),
            StatusCode::UNPROCESSABLE_ENTITY,
            "invalid_request",
        ),
        // force-stop: no body, `null` or an object, sent as JSON
        (
            api.http.post(&force_stop).body("{}"),
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            "unsupported_media_type",
        ),
        (
            api.http
                .post(&force_stop)
                .header("content-type", "application/json")
                .body("[null, null]"),
            StatusCode::UNPROCESSABLE_ENTITY,
            "invalid_request",
        ),
        (
            api.http
                .post(&force_stop)
                .header("content-type", "application/json")
                .body("{\"actor\": "),
            StatusCode::BAD_REQUEST,
            "bad_json",
        ),
        (
            api.http.post(&force_stop).json(&json!({"actor": " \u{3000}"})),
            StatusCode::UNPROCESSABLE_ENTITY,
            "invalid_request",
        ),
        (
            api.http
                .post(&force_stop)
                .json(&json!({"reason": "é".repeat(200)})),
            StatusCode::OK,
            "",
        ),
        (
            api.http
                .post(&force_stop)
                .header("content-type", "application/json")
                .body("null"),
            StatusCode::OK,
            "",
        ),
    ];
    for (i, (request, status, code)) in cases.into_iter().enumerate() {
        let reply = api.send(request).await;
        assert_eq!(
            (reply.status, reply.error()),
            (status, code),
            "case {i}: {reply:?}"
        );
    }
}
