//! Two audiences, two credentials, against the real binary: the support token opens the support
//! routes only, the gateway token and player tokens (JWTs) the player routes only, a player token
//! for its own account only; bad tokens (forged, `alg: none`, expired, wrong `aud`/`iss`, a key
//! the JWKS does not hold) are answered 401 with the check named; a rotated JWKS is picked up;
//! CORS answers the listed origins on the player routes only.

mod support;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use jsonwebtoken::{Algorithm, EncodingKey, Header};
use reqwest::{Method, StatusCode};
use serde_json::{Value, json};
use support::{Api, LimiterProcess, Reply};

const SUPPORT: &str = "support-token-for-the-dashboard";
const GATEWAY: &str = "gateway-token-for-the-edge";
const HS_SECRET: &str = "an-hs256-secret-of-at-least-32-bytes!!";
const ISSUER: &str = "https://auth.video.example";
const AUDIENCE: &str = "screenlimit";

fn now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs()
}

fn claims(account: &str) -> Value {
    json!({"sub": account, "iss": ISSUER, "aud": AUDIENCE, "exp": now() + 300})
}

fn hs256(claims: &Value) -> String {
    jsonwebtoken::encode(
        &Header::new(Algorithm::HS256),
        claims,
        &EncodingKey::from_secret(HS_SECRET.as_bytes()),
    )
    .unwrap()
}

/// A limiter with the support and gateway tokens and player tokens from `players` (YAML lines
/// of `auth.players`), plus `extra`.
struct Setup {
    limiter: LimiterProcess,
    dir: tempfile::TempDir,
}

fn start(players: &str, extra: &str) -> Setup {
    let dir = tempfile::tempdir().unwrap();
    let write = |name: &str, text: &str| {
        let path = dir.path().join(name);
        std::fs::write(&path, text).unwrap();
        path.display().to_string()
    };
    let support = write("support", SUPPORT);
    let gateway = write("gateway", GATEWAY);
    let secret = write("hs256", HS_SECRET);
    let region_token = write("region", "a-region-token-of-twenty-chars");
    let players = players
        .replace("$SECRET", &secret)
        .replace("$DIR", &dir.path().display().to_string());
    let extra = extra.replace("$TOKEN", &region_token);
    let limiter = LimiterProcess::start(&format!(
        "auth:\n  support_token_file: {support}\n  gateway_token_file: {gateway}\n  players:\n    issuer: {ISSUER}\n    audience: {AUDIENCE}\n{players}{extra}"
    ));
    Setup { limiter, dir }
}

async fn call(
    api: &Api,
    method: Method,
    path: &str,
    token: Option<&str>,
    body: Option<Value>,
) -> Reply {
    let mut request = api.http.request(method, format!("{}{path}", api.base));
    if let Some(token) = token {
        request = request.bearer_auth(token);
    }
    if let Some(body) = body {
        request = request.json(&body);
    }
    api.send(request).await
}

/// A call (method, path, bearer token, body) and the answer expected (status, error code).
type Case<'a> = (
    Method,
    String,
    &'a str,
    Option<Value>,
    StatusCode,
    &'static str,
);

async fn play(api: &Api, token: &str, account: &str, device: &str) -> Reply {
    call(
        api,
        Method::POST,
        "/v1/streams",
        Some(token),
        Some(json!({"account_id": account, "device_id": device})),
    )
    .await
}

#[tokio::test]
async fn each_credential_opens_its_own_routes_and_a_player_only_its_own_account() {
    let setup = start("    hs256_secret_file: $SECRET\n", "");
    let api = setup.limiter.client();
    let player = hs256(&claims("acct-1"));

    let mine = play(&api, &player, "acct-1", "tv").await;
    assert_eq!(mine.status, StatusCode::OK, "{mine:?}");
    let stream = mine.stream_id();
    let body = |account: &str| Some(json!({"account_id": account}));
    let heartbeat = format!("/v1/streams/{stream}/heartbeat");
    let cases: Vec<Case> = vec![
        // A player token: its own account's player routes.
        (
            Method::PUT,
            heartbeat.clone(),
            &player,
            body("acct-1"),
            StatusCode::OK,
            "",
        ),
        (
            Method::GET,
            "/v1/accounts/acct-1/streams".into(),
            &player,
            None,
            StatusCode::OK,
            "",
        ),
        // ... never another account's.
        (
            Method::POST,
            "/v1/streams".into(),
            &player,
            Some(json!({"account_id": "acct-2", "device_id": "tv"})),
            StatusCode::FORBIDDEN,
            "account_mismatch",
        ),
        (
            Method::PUT,
            heartbeat.clone(),
            &player,
            body("acct-2"),
            StatusCode::FORBIDDEN,
            "account_mismatch",
        ),
        (
            Method::DELETE,
            format!("/v1/streams/{stream}"),
            &player,
            body("acct-2"),
            StatusCode::FORBIDDEN,
            "account_mismatch",
        ),
        (
            Method::GET,
            "/v1/accounts/acct-2/streams".into(),
            &player,
            None,
            StatusCode::FORBIDDEN,
            "account_mismatch",
        ),
        // ... and no support route.
        (
            Method::POST,
            format!("/v1/accounts/acct-1/streams/{stream}/force-stop"),
            &player,
            None,
            StatusCode::FORBIDDEN,
            "support_only",
        ),
        (
            Method::PUT,
            "/v1/accounts/acct-1/limit-override".into(),
            &player,
            Some(json!({"limit": 3, "duration_sec": 60})),
            StatusCode::FORBIDDEN,
            "support_only",
        ),
        (
            Method::GET,
            "/v1/audit".into(),
            &player,
            None,
            StatusCode::FORBIDDEN,
            "support_only",
        ),
        (
            Method::GET,
            "/v1/accounts/acct-1/history".into(),
            &player,
            None,
            StatusCode::FORBIDDEN,
            "support_only",
        ),
        (
            Method::GET,
            "/v1/fleet".into(),
            &player,
            None,
            StatusCode::FORBIDDEN,
            "support_only",
        ),
        (
            Method::GET,
            "/v1/dashboard-sessions/alice".into(),
            &player,
            None,
            StatusCode::FORBIDDEN,
            "support_only",
        ),
        // The gateway token: any account's player routes, no support route.
        (
            Method::POST,
            "/v1/streams".into(),
            GATEWAY,
            Some(json!({"account_id": "acct-2", "device_id": "tv"})),
            StatusCode::OK,
            "",
        ),
        (
            Method::GET,
            "/v1/accounts/acct-2/streams".into(),
            GATEWAY,
            None,
            StatusCode::OK,
            "",
        ),
        (
            Method::GET,
            "/v1/audit".into(),
            GATEWAY,
            None,
            StatusCode::FORBIDDEN,
            "support_only",
        ),
        (
            Method::GET,
            "/v1/accounts/acct-1/history".into(),
            GATEWAY,
            None,
            StatusCode::FORBIDDEN,
            "support_only",
        ),
        (
            Method::POST,
            format!("/v1/accounts/acct-1/streams/{stream}/force-stop"),
            GATEWAY,
            None,
            StatusCode::FORBIDDEN,
            "support_only",
        ),
        // The support token: support routes and any account's list, no play.
        (
            Method::POST,
            "/v1/streams".into(),
            SUPPORT,
            Some(json!({"account_id": "acct-3", "device_id": "tv"})),
            StatusCode::FORBIDDEN,
            "players_only",
        ),
        (
            Method::PUT,
            heartbeat.clone(),
            SUPPORT,
            body("acct-1"),
            StatusCode::FORBIDDEN,
            "players_only",
        ),
        (
            Method::GET,
            "/v1/accounts/acct-2/streams".into(),
            SUPPORT,
            None,
            StatusCode::OK,
            "",
        ),
        (
            Method::GET,
            "/v1/audit".into(),
            SUPPORT,
            None,
            StatusCode::OK,
            "",
        ),
        (
            Method::GET,
            "/v1/fleet".into(),
            SUPPORT,
            None,
            StatusCode::OK,
            "",
        ),
        (
            Method::GET,
            "/v1/dashboard-sessions/alice".into(),
            SUPPORT,
            None,
            StatusCode::OK,
            "",
        ),
        (
            Method::POST,
            format!("/v1/accounts/acct-1/streams/{stream}/force-stop"),
            SUPPORT,
            None,
            StatusCode::OK,
            "",
        ),
        // Revoked by support: the player is told to stop.
        (
            Method::PUT,
            heartbeat.clone(),
            &player,
            body("acct-1"),
            StatusCode::GONE,
            "stream_revoked",
        ),
        (
            Method::GET,
            "/v1/audit".into(),
            "not-a-configured-token",
            None,
            StatusCode::UNAUTHORIZED,
            "unauthorized",
        ),
    ];
    for (i, (method, path, token, body, status, code)) in cases.into_iter().enumerate() {
        let reply = call(&api, method.clone(), &path, Some(token), body).await;
        assert_eq!(
            (reply.status, reply.error()),
            (status, code),
            "case {i}: {method} {path}: {reply:?}"
        );
    }
    let anonymous = call(&api, Method::GET, "/v1/accounts/acct-1/streams", None, None).await;
    assert_eq!(anonymous.error(), "unauthorized");
    assert_eq!(api.get("/healthz").await.status(), StatusCode::OK);

    // The document names both schemes and which routes each opens.
    let doc = call(&api, Method::GET, "/openapi.json", Some(&player), None)
        .await
        .body;
    let schemes = &doc["components"]["securitySchemes"];
    assert_eq!(schemes["support"]["scheme"], "bearer");
    assert_eq!(schemes["player"]["bearerFormat"], "JWT");
    let security = |path: &str, method: &str| doc["paths"][path][method]["security"].clone();
    assert_eq!(security("/v1/streams", "post"), json!([{"player": []}]));
    assert_eq!(security("/v1/audit", "get"), json!([{"support": []}]));
    assert_eq!(
        security("/v1/accounts/{account_id}/streams", "get"),
        json!([{"support": []}, {"player": []}])
    );
    assert_eq!(
        doc["paths"]["/v1/streams"]["post"]["responses"]["401"]["$ref"],
        "#/components/responses/PlayerUnauthorized"
    );
    assert!(doc["paths"]["/healthz"]["get"].get("security").is_none());
}

#[tokio::test]
async fn bad_player_tokens_are_refused_with_the_check_named() {
    let setup = start("    hs256_secret_file: $SECRET\n", "");
    let api = setup.limiter.client();
    let with = |patch: Value| {
        let mut claims = claims("acct-1");
        claims
            .as_object_mut()
            .unwrap()
            .extend(patch.as_object().unwrap().clone());
        claims
    };
    let forged = jsonwebtoken::encode(
        &Header::new(Algorithm::HS256),
        &claims("acct-1"),
        &EncodingKey::from_secret(b"another-secret-another-secret-another"),
    )
    .unwrap();
    let unsigned = format!(
        "{}.{}.",
        URL_SAFE_NO_PAD.encode(br#"{"alg":"none","typ":"JWT"}"#),
        URL_SAFE_NO_PAD.encode(claims("acct-1").to_string())
    );
    let mut no_sub = claims("acct-1");
    no_sub.as_object_mut().unwrap().remove("sub");
    let cases = [
        ("forged", forged, "invalid_token", "bad_signature"),
        (
            "alg none",
            unsigned,
            "invalid_token",
            "algorithm_not_allowed",
        ),
        (
            "expired",
            hs256(&with(json!({"exp": now() - 3600}))),
            "token_expired",
            "expired",
        ),
        (
            "wrong aud",
            hs256(&with(json!({"aud": "another-service"}))),
            "invalid_token",
            "wrong_audience",
        ),
        (
            "wrong iss",
            hs256(&with(json!({"iss": "https://evil.example"}))),
            "invalid_token",
            "wrong_issuer",
        ),
        (
            "no account",
            hs256(&no_sub),
            "invalid_token",
            "missing_claim",
        ),
        (
            "bad account",
            hs256(&with(json!({"sub": "a b/c"}))),
            "invalid_token",
            "bad_claim",
        ),
        (
            "not yet",
            hs256(&with(json!({"nbf": now() + 3600}))),
            "invalid_token",
            "not_yet_valid",
        ),
        ("garbage", "a.b.c".to_owned(), "invalid_token", "malformed"),
        // Meant as JWTs, with the wrong number of parts: malformed, not a missing credential.
        (
            "two parts",
            "eyJhbGciOiJIUzI1NiJ9.e30".to_owned(),
            "invalid_token",
            "malformed",
        ),
        (
            "four parts",
            format!("{}.x", hs256(&claims("acct-1"))),
            "invalid_token",
            "malformed",
        ),
        // Present and wrong is not missing.
        (
            "exp as text",
            hs256(&with(json!({"exp": "tomorrow"}))),
            "invalid_token",
            "bad_claim",
        ),
    ];
    for (what, token, code, reason) in cases {
        let reply = play(&api, &token, "acct-1", "tv").await;
        assert_eq!(
            (reply.status, reply.error(), reply.body["reason"].as_str()),
            (StatusCode::UNAUTHORIZED, code, Some(reason)),
            "{what}: {reply:?}"
        );
    }
    let response = api
        .http
        .get(format!("{}/v1/accounts/acct-1/streams", api.base))
        .bearer_auth(hs256(&with(json!({"exp": now() - 3600}))))
        .send()
        .await
        .unwrap();
    assert_eq!(
        response.headers()["www-authenticate"],
        "Bearer error=\"invalid_token\""
    );
    assert_eq!(
        play(&api, &hs256(&claims("acct-1")), "acct-1", "tv")
            .await
            .status,
        StatusCode::OK
    );
    // Many issuers set a `kid` on HS256 tokens too; the secret names none, so it takes any.
    let mut header = Header::new(Algorithm::HS256);
    header.kid = Some("issuer-key-2026".into());
    let with_kid = jsonwebtoken::encode(
        &header,
        &claims("acct-2"),
        &EncodingKey::from_secret(HS_SECRET.as_bytes()),
    )
    .unwrap();
    let reply = play(&api, &with_kid, "acct-2", "phone").await;
    assert_eq!(reply.status, StatusCode::OK, "{reply:?}");
}

#[tokio::test]
async fn the_bearer_scheme_is_read_in_any_case() {
    let setup = start("    hs256_secret_file: $SECRET\n", "");
    let api = setup.limiter.client();
    for scheme in ["bearer", "BEARER", "Bearer"] {
        let reply = api
            .send(
                api.http
                    .post(format!("{}/v1/streams", api.base))
                    .header("authorization", format!("{scheme} {GATEWAY}"))
                    .json(&json!({"account_id": format!("acct-{scheme}"), "device_id": "tv"})),
            )
            .await;
        assert_eq!(reply.status, StatusCode::OK, "{scheme}: {reply:?}");
    }
}

#[tokio::test]
async fn a_device_claim_binds_the_play_start_to_its_device() {
    let setup = start(
        "    hs256_secret_file: $SECRET\n    account_claim: account\n    device_claim: device\n",
        "",
    );
    let api = setup.limiter.client();
    let token = hs256(
        &json!({"account": "acct-1", "device": "tv-1", "iss": ISSUER, "aud": AUDIENCE, "exp": now() + 60}),
    );
    assert_eq!(
        play(&api, &token, "acct-1", "tv-1").await.status,
        StatusCode::OK
    );
    let other = play(&api, &token, "acct-1", "phone").await;
    assert_eq!(
        (other.status, other.error()),
        (StatusCode::FORBIDDEN, "device_mismatch")
    );
}

#[tokio::test]
async fn a_device_bound_token_renews_and_stops_only_its_own_device_streams_and_may_take_over() {
    let setup = start(
        "    hs256_secret_file: $SECRET\n    account_claim: account\n    device_claim: device\n",
        "",
    );
    let api = setup.limiter.client();
    let token_of = |device: &str| {
        hs256(
            &json!({"account": "acct-1", "device": device, "iss": ISSUER, "aud": AUDIENCE, "exp": now() + 60}),
        )
    };
    let (tv, phone) = (token_of("tv"), token_of("phone"));
    let phone_stream = play(&api, &phone, "acct-1", "phone").await;
    assert_eq!(phone_stream.status, StatusCode::OK, "{phone_stream:?}");
    let phone_stream = phone_stream.body["stream_id"].as_str().unwrap().to_owned();
    let account = || Some(json!({"account_id": "acct-1"}));
    let seen_before = call(
        &api,
        Method::GET,
        "/v1/accounts/acct-1/streams",
        Some(&phone),
        None,
    )
    .await
    .body["active"][0]["last_seen"]
        .clone();
    tokio::time::sleep(Duration::from_millis(1100)).await;
    // The TV's token on the phone's stream: refused, and nothing changes.
    let heartbeat = format!("/v1/streams/{phone_stream}/heartbeat");
    let stop = format!("/v1/streams/{phone_stream}");
    for (method, path) in [(Method::PUT, &heartbeat), (Method::DELETE, &stop)] {
        let reply = call(&api, method.clone(), path, Some(&tv), account()).await;
        assert_eq!(
            (reply.status, reply.error()),
            (StatusCode::FORBIDDEN, "device_mismatch"),
            "{method} {path}: {reply:?}"
        );
    }
    let listed = call(
        &api,
        Method::GET,
        "/v1/accounts/acct-1/streams",
        Some(&phone),
        None,
    )
    .await;
    assert_eq!(
        listed.body["active"].as_array().unwrap().len(),
        1,
        "{listed:?}"
    );
    assert_eq!(
        listed.body["active"][0]["last_seen"], seen_before,
        "the phone was not renewed"
    );
    let own = call(&api, Method::PUT, &heartbeat, Some(&phone), account()).await;
    assert_eq!(
        own.status,
        StatusCode::OK,
        "the phone renews its own stream: {own:?}"
    );
    // Take-over from the deny screen: the TV plays in the phone's slot (the new stream is the
    // TV's own), and the phone is told to stop.
    let take_over = call(
        &api,
        Method::POST,
        "/v1/streams",
        Some(&tv),
        Some(json!({"account_id": "acct-1", "device_id": "tv", "replace_stream_id": phone_stream})),
    )
    .await;
    assert_eq!(take_over.status, StatusCode::OK, "{take_over:?}");
    let told = call(&api, Method::PUT, &heartbeat, Some(&phone), account()).await;
    assert_eq!(
        (told.status, told.error()),
        (StatusCode::GONE, "stream_revoked")
    );
    // ... but never while naming another device as its own.
    let as_phone = call(
        &api,
        Method::POST,
        "/v1/streams",
        Some(&tv),
        Some(json!({"account_id": "acct-1", "device_id": "phone", "replace_stream_id": phone_stream})),
    )
    .await;
    assert_eq!(
        (as_phone.status, as_phone.error()),
        (StatusCode::FORBIDDEN, "device_mismatch")
    );
    // The TV stops its own stream.
    let tv_stream = take_over.body["stream_id"].as_str().unwrap();
    let stopped = call(
        &api,
        Method::DELETE,
        &format!("/v1/streams/{tv_stream}"),
        Some(&tv),
        account(),
    )
    .await;
    assert_eq!(stopped.status, StatusCode::OK, "{stopped:?}");
}

#[tokio::test]
async fn a_rotated_secret_of_the_same_size_and_time_is_read_again() {
    let setup = start("    hs256_secret_file: $SECRET\n", "");
    let api = setup.limiter.client();
    let signed = |secret: &str, account: &str| {
        jsonwebtoken::encode(
            &Header::new(Algorithm::HS256),
            &claims(account),
            &EncodingKey::from_secret(secret.as_bytes()),
        )
        .unwrap()
    };
    assert_eq!(
        play(&api, &signed(HS_SECRET, "acct-1"), "acct-1", "tv")
            .await
            .status,
        StatusCode::OK
    );
    // The rotation keeps the length and, as a write within the same second can, the time.
    let rotated = HS_SECRET.replace("an-", "my-");
    assert_eq!(rotated.len(), HS_SECRET.len());
    let path = setup.dir.path().join("hs256");
    let before = std::fs::metadata(&path).unwrap().modified().unwrap();
    std::fs::write(&path, &rotated).unwrap();
    std::fs::File::options()
        .write(true)
        .open(&path)
        .unwrap()
        .set_modified(before)
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let reply = play(&api, &signed(&rotated, "acct-2"), "acct-2", "tv").await;
        if reply.status == StatusCode::OK {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the rotated secret was never read: {reply:?}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let old = play(&api, &signed(HS_SECRET, "acct-3"), "acct-3", "tv").await;
    assert_eq!(old.body["reason"], "bad_signature", "{old:?}");
}

/// An openssl key of `kind` in `dir`: the private PEM and the public key's DER.
fn openssl_key(dir: &Path, name: &str, args: &[&str]) -> (Vec<u8>, Vec<u8>) {
    let pem = dir.join(format!("{name}.pem"));
    let status = Command::new("openssl")
        .args(["genpkey", "-out"])
        .arg(&pem)
        .args(args)
        .output()
        .expect("openssl (scripts/install-test-deps.sh)");
    assert!(
        status.status.success(),
        "{}",
        String::from_utf8_lossy(&status.stderr)
    );
    let der = Command::new("openssl")
        .args(["pkey", "-pubout", "-outform", "DER", "-in"])
        .arg(&pem)
        .output()
        .unwrap();
    assert!(der.status.success());
    (std::fs::read(&pem).unwrap(), der.stdout)
}

struct SigningKey {
    kid: &'static str,
    algorithm: Algorithm,
    key: EncodingKey,
    jwk: Value,
}

impl SigningKey {
    fn sign(&self, claims: &Value) -> String {
        let mut header = Header::new(self.algorithm);
        header.kid = Some(self.kid.into());
        jsonwebtoken::encode(&header, claims, &self.key).unwrap()
    }
}

fn rsa(dir: &Path, kid: &'static str) -> SigningKey {
    let (pem, _) = openssl_key(
        dir,
        kid,
        &["-algorithm", "RSA", "-pkeyopt", "rsa_keygen_bits:2048"],
    );
    let modulus = Command::new("openssl")
        .args(["rsa", "-noout", "-modulus", "-in"])
        .arg(dir.join(format!("{kid}.pem")))
        .output()
        .unwrap();
    let hex = String::from_utf8(modulus.stdout).unwrap();
    let hex = hex.trim().trim_start_matches("Modulus=");
    let n: Vec<u8> = (0..hex.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&hex[i..i + 2], 16).unwrap())
        .collect();
    SigningKey {
        kid,
        algorithm: Algorithm::RS256,
        key: EncodingKey::from_rsa_pem(&pem).unwrap(),
        jwk: json!({"kty": "RSA", "kid": kid, "alg": "RS256", "use": "sig", "n": URL_SAFE_NO_PAD.encode(n), "e": "AQAB"}),
    }
}

fn ec(dir: &Path, kid: &'static str) -> SigningKey {
    let (pem, der) = openssl_key(
        dir,
        kid,
        &["-algorithm", "EC", "-pkeyopt", "ec_paramgen_curve:P-256"],
    );
    let point = &der[der.len() - 65..];
    assert_eq!(point[0], 4, "an uncompressed point");
    SigningKey {
        kid,
        algorithm: Algorithm::ES256,
        key: EncodingKey::from_ec_pem(&pem).unwrap(),
        jwk: json!({"kty": "EC", "kid": kid, "crv": "P-256", "x": URL_SAFE_NO_PAD.encode(&point[1..33]), "y": URL_SAFE_NO_PAD.encode(&point[33..])}),
    }
}

fn ed(dir: &Path, kid: &'static str) -> SigningKey {
    let (pem, der) = openssl_key(dir, kid, &["-algorithm", "ed25519"]);
    SigningKey {
        kid,
        algorithm: Algorithm::EdDSA,
        key: EncodingKey::from_ed_pem(&pem).unwrap(),
        jwk: json!({"kty": "OKP", "kid": kid, "crv": "Ed25519", "alg": "EdDSA", "x": URL_SAFE_NO_PAD.encode(&der[der.len() - 32..])}),
    }
}

fn write_jwks(path: &PathBuf, keys: &[&SigningKey]) {
    let document = json!({"keys": keys.iter().map(|k| k.jwk.clone()).collect::<Vec<_>>()});
    // Written beside and renamed, as a Secret volume swaps its files.
    let next = path.with_extension("next");
    std::fs::write(&next, document.to_string()).unwrap();
    std::fs::rename(&next, path).unwrap();
}

#[tokio::test]
async fn jwks_keys_verify_by_kid_and_a_rotated_key_set_is_read_again() {
    let keys = tempfile::tempdir().unwrap();
    let (r1, e1, d1, r2) = (
        rsa(keys.path(), "r1"),
        ec(keys.path(), "e1"),
        ed(keys.path(), "d1"),
        rsa(keys.path(), "r2"),
    );
    let jwks = keys.path().join("jwks.json");
    write_jwks(&jwks, &[&r1, &e1, &d1]);
    let setup = start(&format!("    jwks_file: {}\n", jwks.display()), "");
    let api = setup.limiter.client();
    for key in [&r1, &e1, &d1] {
        let reply = play(&api, &key.sign(&claims(key.kid)), key.kid, "tv").await;
        assert_eq!(reply.status, StatusCode::OK, "{}: {reply:?}", key.kid);
    }
    // HS256 with the RSA key's public modulus as the secret: the classic confusion attack.
    let mut confused = Header::new(Algorithm::HS256);
    confused.kid = Some("r1".into());
    let token = claims("acct-1");
    let confusion = jsonwebtoken::encode(
        &confused,
        &token,
        &EncodingKey::from_secret(r1.jwk["n"].as_str().unwrap().as_bytes()),
    )
    .unwrap();
    let reply = play(&api, &confusion, "acct-1", "tv").await;
    assert_eq!(reply.body["reason"], "algorithm_not_allowed", "{reply:?}");
    let unknown = play(&api, &r2.sign(&token), "acct-1", "r2").await;
    assert_eq!(
        (unknown.error(), unknown.body["reason"].as_str()),
        ("invalid_token", Some("unknown_key"))
    );

    // Rotation: r2 in, r1 out.
    write_jwks(&jwks, &[&r2, &e1, &d1]);
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let reply = play(&api, &r2.sign(&token), "acct-1", "r2").await;
        if reply.status == StatusCode::OK {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the rotated key set was not read: {reply:?}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let retired = play(&api, &r1.sign(&token), "acct-1", "r1").await;
    assert_eq!(retired.body["reason"], "unknown_key", "{retired:?}");

    // A broken file keeps the keys in force.
    std::fs::write(&jwks, "{ not json").unwrap();
    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert_eq!(
        play(&api, &r2.sign(&token), "acct-1", "r2").await.status,
        StatusCode::OK
    );
    assert!(
        setup.limiter.log().contains("stay in force"),
        "{}",
        setup.limiter.log()
    );
    drop(setup.dir);
}

#[tokio::test]
async fn cors_answers_the_listed_origins_on_the_player_routes_without_the_store() {
    // A store nobody listens on: the preflight must not need it.
    let dead = support::free_port();
    let setup = start(
        "    hs256_secret_file: $SECRET\n",
        &format!(
            "http:\n  cors:\n    allowed_origins: [\"http://player.example:8000\"]\n    max_age: 5m\nstore: {{ backend: redis, redis_shards: [\"redis://127.0.0.1:{dead}\"], timeout: 25ms }}\nstream_id_secret: {}\n",
            support::SECRET
        ),
    );
    let api = setup.limiter.client();
    let preflight = |path: &str, origin: &str, method: &str| {
        api.http
            .request(Method::OPTIONS, format!("{}{path}", api.base))
            .header("origin", origin)
            .header("access-control-request-method", method)
            .header(
                "access-control-request-headers",
                "authorization, content-type",
            )
            .send()
    };
    let started = Instant::now();
    let ok = preflight(
        "/v1/streams/abc/heartbeat",
        "http://player.example:8000",
        "PUT",
    )
    .await
    .unwrap();
    assert_eq!(ok.status(), StatusCode::NO_CONTENT);
    let headers = ok.headers();
    assert_eq!(
        headers["access-control-allow-origin"],
        "http://player.example:8000"
    );
    assert!(
        headers["access-control-allow-methods"]
            .to_str()
            .unwrap()
            .contains("PUT")
    );
    assert!(
        headers["access-control-allow-headers"]
            .to_str()
            .unwrap()
            .contains("authorization")
    );
    assert_eq!(headers["access-control-max-age"], "300");
    assert!(started.elapsed() < Duration::from_secs(1));

    let stranger = preflight("/v1/streams", "http://evil.example", "POST")
        .await
        .unwrap();
    assert_eq!(stranger.status(), StatusCode::FORBIDDEN);
    assert!(
        stranger
            .headers()
            .get("access-control-allow-origin")
            .is_none()
    );
    let support_route = preflight("/v1/audit", "http://player.example:8000", "GET")
        .await
        .unwrap();
    assert!(
        support_route
            .headers()
            .get("access-control-allow-origin")
            .is_none(),
        "no page may call a support route"
    );

    // The answers themselves (a 401 too, so the page can read why) carry the origin.
    let answer = api
        .http
        .post(format!("{}/v1/streams", api.base))
        .header("origin", "http://player.example:8000")
        .json(&json!({"account_id": "acct-1", "device_id": "tv"}))
        .send()
        .await
        .unwrap();
    assert_eq!(answer.status(), StatusCode::UNAUTHORIZED);
    assert_eq!(
        answer.headers()["access-control-allow-origin"],
        "http://player.example:8000"
    );
    let audit = api
        .http
        .get(format!("{}/v1/audit", api.base))
        .header("origin", "http://player.example:8000")
        .bearer_auth(SUPPORT)
        .send()
        .await
        .unwrap();
    assert!(audit.headers().get("access-control-allow-origin").is_none());
}

#[test]
fn credential_config_errors_name_the_field() {
    let dir = tempfile::tempdir().unwrap();
    let support = dir.path().join("support");
    std::fs::write(&support, SUPPORT).unwrap();
    for (yaml, field) in [
        (
            format!("auth: {{ support_token_file: {} }}\n", support.display()),
            "auth.support_token_file",
        ),
        (
            format!(
                "auth: {{ support_token_file: {}, players: {{ jwks_file: /nonexistent/jwks.json, issuer: i, audience: a }} }}\n",
                support.display()
            ),
            "auth.players.jwks_file",
        ),
        (
            format!(
                "auth: {{ support_token_file: {0}, gateway_token_file: {0} }}\n",
                support.display()
            ),
            "auth.gateway_token_file",
        ),
    ] {
        let Err(stderr) = LimiterProcess::try_start(&yaml, &[]) else {
            panic!("{yaml} started");
        };
        assert!(
            stderr.contains("exit status: 2") && stderr.contains(field),
            "{yaml}: {stderr}"
        );
    }
}

/// With several regions and `home_sources: [player_token, gateway_header]`, a player token's
/// home claim names the account's home; without it the gateway's header does, and only the
/// gateway's: a player cannot steer its home by the header. A malformed claim is refused.
#[tokio::test]
async fn a_home_claim_names_the_accounts_home_and_only_the_gateway_sets_the_header() {
    let setup = start(
        "    hs256_secret_file: $SECRET\n    home_claim: home\n",
        "plans: { family: 4 }\ndefault_plan: family\nstream_id_secret: shared-by-the-regions\nregions:\n  name: eu\n  token_file: $TOKEN\n  timeout: 100ms\n  home_sources: [player_token, gateway_header]\n  peers:\n    - { name: us, url: \"http://127.0.0.1:9\", token_file: $TOKEN }\n    - { name: ap, url: \"http://127.0.0.1:9\", token_file: $TOKEN }\n",
    );
    let api = setup.limiter.client();
    // The peers take no connection: a play homed at one is decided here and counted under it.
    let provisional = |peer: &'static str| {
        let line =
            format!("screenlimit_region_provisional_total{{op=\"acquire\",peer=\"{peer}\"}}");
        let api = api.clone();
        async move { api.metric(&line).await.unwrap_or(0.0) }
    };
    let token = |home: Option<&str>| {
        let mut claims = claims("acct-home");
        if let Some(home) = home {
            claims["home"] = json!(home);
        }
        hs256(&claims)
    };
    assert_eq!(
        play(&api, &token(Some("us")), "acct-home", "tv")
            .await
            .status,
        StatusCode::OK
    );
    assert_eq!(
        (provisional("us").await, provisional("ap").await),
        (1.0, 0.0)
    );
    // A player's header is not the gateway's: the claim (here none: the last one named) holds.
    let steered = api
        .send(
            api.http
                .post(format!("{}/v1/streams", api.base))
                .bearer_auth(token(None))
                .header("x-screenlimit-home-region", "ap")
                .json(&json!({"account_id": "acct-home", "device_id": "phone"})),
        )
        .await;
    assert_eq!(steered.status, StatusCode::OK, "{steered:?}");
    assert_eq!(
        (provisional("us").await, provisional("ap").await),
        (2.0, 0.0)
    );
    // The gateway's header names it.
    let gateway = api
        .send(
            api.http
                .post(format!("{}/v1/streams", api.base))
                .bearer_auth(GATEWAY)
                .header("x-screenlimit-home-region", "ap")
                .json(&json!({"account_id": "acct-home", "device_id": "tablet"})),
        )
        .await;
    assert_eq!(gateway.status, StatusCode::OK, "{gateway:?}");
    assert_eq!(
        (provisional("us").await, provisional("ap").await),
        (2.0, 1.0)
    );
    let bad = play(&api, &token(Some("../us")), "acct-home", "car").await;
    assert_eq!(
        (bad.status, bad.body["reason"].as_str()),
        (StatusCode::UNAUTHORIZED, Some("bad_claim")),
        "{bad:?}"
    );
}
