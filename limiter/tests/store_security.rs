//! The limiter against a Redis that requires TLS with client certificates and signs clients in
//! with ACL users: it serves as the limiter's ACL user, the ACL refuses what the limiter must not
//! do, and a wrong password, a missing permission or an unknown CA stops the start with the field
//! named (exit 2), while a password changed at run time trips the failure policy instead of
//! answering 500.

mod support;

use std::path::PathBuf;
use std::time::{Duration, Instant};

use reqwest::StatusCode;
use screenlimit_limiter::store::redis::access::LIMITER_ACL_RULES;
use support::tls::{Certificates, LIMITER_USER, SENTINEL_PASSWORD, SecureRedis, SecureSentinel};
use support::{LimiterProcess, redis_config};

struct Setup {
    certs: Certificates,
    redis: SecureRedis,
    password_file: PathBuf,
    _dir: tempfile::TempDir,
}

fn setup() -> Setup {
    let certs = Certificates::make();
    let redis = SecureRedis::start(&certs);
    let dir = tempfile::tempdir().unwrap();
    let password_file = dir.path().join("redis-password");
    // A mounted Secret usually ends with a newline; it is not part of the password.
    std::fs::write(&password_file, format!("{}\n", LIMITER_USER.1)).unwrap();
    Setup {
        certs,
        redis,
        password_file,
        _dir: dir,
    }
}

impl Setup {
    /// The limiter's config: the TLS address, `store.tls` trusting `ca`, and `auth`.
    fn config(&self, ca: &str, auth: &str) -> String {
        let store = redis_config(&[self.redis.url()], "");
        // `timeout` is roomy: a debug build and TLS on a shared machine.
        let store = store.replace("timeout: 25ms", "timeout: 500ms");
        let (head, rest) = store.split_once("stream_id_secret").unwrap();
        format!(
            "{head}{}{auth}stream_id_secret{rest}",
            self.certs.store_tls_yaml(ca)
        )
    }

    fn auth_yaml(&self, user: &str) -> String {
        format!(
            "  auth: {{ username: {user}, password_file: {:?} }}\n",
            self.password_file
        )
    }

    /// Starts a limiter that must refuse to start; returns what it said.
    fn refused(&self, config: &str, env: &[(&str, &str)]) -> String {
        match LimiterProcess::try_start(config, env) {
            Ok(_) => panic!("the limiter started on:\n{config}"),
            Err(said) => said,
        }
    }
}

fn assert_names(said: &str, field: &str, what: &str) {
    assert!(
        said.starts_with("exit status: 2")
            && said.contains(&format!("`{field}`"))
            && said.contains(what),
        "exit 2, naming `{field}` and saying {what:?}; got: {said}"
    );
}

#[tokio::test]
async fn the_limiter_serves_over_tls_as_its_acl_user_and_the_acl_refuses_the_rest() {
    let s = setup();
    let limiter = LimiterProcess::start(&s.config("ca.crt", &s.auth_yaml(LIMITER_USER.0)));
    let api = limiter.client();

    let first = api.play_on("acct-tls", "tv").await;
    assert_eq!(first.status, StatusCode::OK, "{first:?}");
    assert_eq!(
        first.body["degraded"], false,
        "the store decided: {first:?}"
    );
    let id = first.stream_id();
    let beat = api.heartbeat("acct-tls", &id).await;
    assert_eq!(beat.status, StatusCode::OK, "{beat:?}");
    assert_eq!(beat.body["degraded"], false, "{beat:?}");
    let second = api.play_on("acct-tls", "phone").await;
    assert_eq!(
        second.status,
        StatusCode::CONFLICT,
        "basic allows one: {second:?}"
    );
    let stopped = api.force_stop("acct-tls", &id).await;
    assert_eq!(stopped.status, StatusCode::OK, "{stopped:?}");
    let audit = api.get("/v1/audit?account_id=acct-tls").await;
    assert_eq!(
        audit.status(),
        StatusCode::OK,
        "the audit list is readable too"
    );

    // What the limiter wrote is there, under its own prefix.
    let keys = s
        .redis
        .admin("EVAL \"return #redis.call('KEYS', 'sl:*')\" 0")
        .unwrap();
    assert_ne!(
        keys.trim(),
        ":0",
        "the limiter wrote through the TLS port: {keys}"
    );

    // The ACL lets the limiter's user do nothing else.
    for forbidden in [
        "FLUSHALL",
        "KEYS *",
        "SET other:key 1",
        "GET other:key",
        "CONFIG GET requirepass",
        "EVAL \"return 1\" 0",
        "SCRIPT FLUSH",
    ] {
        let reply = s.redis.as_limiter(forbidden).unwrap_or_default();
        assert!(
            reply.starts_with("-NOPERM"),
            "{forbidden} as the limiter's user: {reply}"
        );
    }
    let allowed = s.redis.as_limiter("GET sl:{acct-tls}").unwrap_or_default();
    assert!(!allowed.starts_with('-'), "its own keys: {allowed}");

    let readme =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../README.md")).unwrap();
    assert!(
        readme.contains(LIMITER_ACL_RULES),
        "README documents the ACL the limiter is tested with"
    );
}

#[tokio::test]
async fn bad_credentials_permissions_or_tls_stop_the_start_with_the_field_named() {
    let s = setup();
    let auth = s.auth_yaml(LIMITER_USER.0);

    // The environment wins over the file: a wrong password there is refused.
    let said = s.refused(
        &s.config("ca.crt", &auth),
        &[("SCREENLIMIT_REDIS_PASSWORD", "not-the-password")],
    );
    assert_names(&said, "store.auth", "WRONGPASS");

    let said = s.refused(&s.config("ca.crt", ""), &[]);
    assert_names(&said, "store.auth", "NOAUTH");

    let weak = format!(
        "ACL SETUSER weak on >{} ~sl:* +ping +evalsha",
        LIMITER_USER.1
    );
    assert!(s.redis.admin(&weak).unwrap().starts_with("+OK"));
    let said = s.refused(&s.config("ca.crt", &s.auth_yaml("weak")), &[]);
    assert_names(&said, "store.auth", "NOPERM");

    let said = s.refused(&s.config("other-ca.crt", &auth), &[]);
    assert_names(&said, "store.tls", "TLS to shard 0");

    // Without a client certificate the server ends the handshake.
    let no_client_cert = s.config("ca.crt", &auth).replace(
        &s.certs.store_tls_yaml("ca.crt"),
        &format!("  tls: {{ ca_file: {:?} }}\n", s.certs.path("ca.crt")),
    );
    let said = s.refused(&no_client_cert, &[]);
    assert_names(&said, "store.tls", "TLS to shard 0");

    // An X.509 v1 client certificate is the client's fault, not the server's: the file is named.
    let v1 = s.config("ca.crt", &auth).replace(
        &s.certs.store_tls_yaml("ca.crt"),
        &format!(
            "  tls: {{ ca_file: {:?}, client_cert_file: {:?}, client_key_file: {:?} }}\n",
            s.certs.path("ca.crt"),
            s.certs.path("client-v1.crt"),
            s.certs.path("client-v1.key")
        ),
    );
    let said = s.refused(&v1, &[]);
    assert_names(&said, "store.tls.client_cert_file", "X.509 v1");
    assert!(
        said.contains(&s.certs.path("client-v1.crt").display().to_string()),
        "{said}"
    );

    // A password in the address is refused before anything connects, without repeating it.
    let in_url = s.config("ca.crt", "").replace(
        "rediss://localhost",
        "rediss://screenlimit:hunter2@localhost",
    );
    let said = s.refused(&in_url, &[]);
    assert_names(&said, "store.redis_shards", "carries credentials");
    assert!(!said.contains("hunter2"), "{said}");
}

#[tokio::test]
async fn a_password_changed_under_a_running_limiter_trips_the_failure_policy() {
    let s = setup();
    let limiter = LimiterProcess::start(&s.config("ca.crt", &s.auth_yaml(LIMITER_USER.0)));
    let api = limiter.client();
    assert_eq!(
        api.play_on("acct-rotate", "tv").await.body["degraded"],
        false
    );

    // The password changes and the limiter's connections are dropped: it signs in again, wrongly.
    let (user, _) = LIMITER_USER;
    let reply = s
        .redis
        .admin(&format!("ACL SETUSER {user} resetpass >rotated-elsewhere"))
        .unwrap();
    assert!(reply.starts_with("+OK"), "{reply}");
    let reply = s.redis.admin(&format!("CLIENT KILL USER {user}")).unwrap();
    assert!(reply.starts_with(':'), "{reply}");

    for device in ["phone", "tablet", "laptop"] {
        let play = api.play_on("acct-rotate-2", device).await;
        assert_eq!(
            play.status,
            StatusCode::OK,
            "the open policy allows: {play:?}"
        );
        assert_eq!(play.body["degraded"], true, "and says so: {play:?}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sentinel_failover_over_tls_with_passwords_is_followed() {
    let s = setup();
    let replica = SecureRedis::start_replica_of(&s.certs, &s.redis);
    let masters = [("shard-0", s.redis.tls_port)];
    let sentinels: Vec<SecureSentinel> = (0..3)
        .map(|_| SecureSentinel::start(&s.certs, &masters))
        .collect();
    let deadline = Instant::now() + Duration::from_secs(15);
    while sentinels
        .iter()
        .any(|x| x.sentinel.known_replicas("shard-0") < 1)
    {
        assert!(
            Instant::now() < deadline,
            "the Sentinels never saw the replica over TLS"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let addresses: Vec<String> = sentinels.iter().map(|x| format!("{:?}", x.url())).collect();
    let config = format!(
        "store:\n  backend: redis\n  timeout: 500ms\n  circuit_probe_interval: 100ms\n{}{}  sentinel:\n    addresses: [{}]\n    masters: [shard-0]\n    poll_interval: 100ms\n\
         stream_id_secret: \"{}\"\n",
        s.certs.store_tls_yaml("ca.crt"),
        s.auth_yaml(LIMITER_USER.0),
        addresses.join(", "),
        support::SECRET
    );
    // The Sentinels have a password of their own, and the master they name is signed in to with
    // the data nodes' credentials.
    let said = s.refused(&config, &[]);
    assert_names(&said, "store.sentinel.auth", "NOAUTH");
    let said = s.refused(
        &config,
        &[
            ("SCREENLIMIT_SENTINEL_PASSWORD", SENTINEL_PASSWORD),
            ("SCREENLIMIT_REDIS_PASSWORD", "not-the-password"),
        ],
    );
    assert_names(&said, "store.auth", "WRONGPASS");
    let limiter = LimiterProcess::try_start(
        &config,
        &[("SCREENLIMIT_SENTINEL_PASSWORD", SENTINEL_PASSWORD)],
    )
    .unwrap_or_else(|said| panic!("{said}"));
    let api = limiter.client();
    let first = api.play_on("acct-ha-tls", "tv").await;
    assert_eq!(
        first.body["degraded"], false,
        "served through Sentinel over TLS: {first:?}"
    );

    let mut primary = s.redis;
    primary.server.kill();
    let killed = Instant::now();
    let new_master = format!("127.0.0.1:{}", replica.tls_port);
    loop {
        let fleet: serde_json::Value = api.get("/v1/fleet").await.json().await.unwrap();
        let endpoint = fleet["shards"][0]["endpoint"]
            .as_str()
            .unwrap_or_default()
            .to_owned();
        let play = api.play_on("acct-after-failover", "tv").await;
        if endpoint.starts_with(&new_master) && play.body["degraded"] == false {
            println!(
                "failover over TLS followed {:?} after the kill",
                killed.elapsed()
            );
            break;
        }
        assert!(
            killed.elapsed() < Duration::from_secs(20),
            "not followed within 20 s: endpoint {endpoint}, play {play:?}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let beat = api.heartbeat("acct-ha-tls", &first.stream_id()).await;
    assert_eq!(
        beat.status,
        StatusCode::OK,
        "the stream lives on the promoted replica: {beat:?}"
    );
}
