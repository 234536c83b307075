//! Certificates made for one test (openssl, EC P-256, valid a day) and a `redis-server` that
//! speaks TLS and signs its clients in with ACL users: a plain admin port on loopback for the test
//! itself, a TLS port (client certificates required) for the limiter.

use std::path::{Path, PathBuf};
use std::process::Command;

use screenlimit_limiter::store::redis::access::LIMITER_ACL_RULES;

use super::{RedisServer, SentinelServer, free_port};

/// The limiter's ACL user and password on a [`SecureRedis`].
pub const LIMITER_USER: (&str, &str) = ("screenlimit", "limiter-secret-1");
/// The test's own user, with every permission; replicas and Sentinels sign in with it too.
pub const ADMIN_USER: (&str, &str) = ("admin", "admin-secret-1");
/// The Sentinels' `requirepass`.
pub const SENTINEL_PASSWORD: &str = "sentinel-secret-1";

/// A CA, a server certificate for `localhost` and 127.0.0.1 signed by it, a client certificate
/// signed by it, and a second CA that signed nothing here.
pub struct Certificates {
    dir: tempfile::TempDir,
}

fn openssl(dir: &Path, args: &[&str]) {
    let out = Command::new("openssl")
        .args(args)
        .current_dir(dir)
        .output()
        .expect("openssl (scripts/install-test-deps.sh installs it)");
    assert!(
        out.status.success(),
        "openssl {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

const EC: [&str; 4] = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1"];

fn make_ca(dir: &Path, name: &str) {
    let (key, crt, subject) = (
        format!("{name}.key"),
        format!("{name}.crt"),
        format!("/CN={name}"),
    );
    let mut args = vec!["req", "-x509", "-nodes", "-days", "1", "-subj", &subject];
    args.extend(EC);
    args.extend(["-keyout", &key, "-out", &crt]);
    openssl(dir, &args);
}

fn make_signed(dir: &Path, name: &str, extensions: &str) {
    let (key, csr, crt, ext) = (
        format!("{name}.key"),
        format!("{name}.csr"),
        format!("{name}.crt"),
        format!("{name}.ext"),
    );
    std::fs::write(dir.join(&ext), extensions).unwrap();
    let subject = format!("/CN={name}");
    let mut args = vec!["req", "-nodes", "-subj", &subject];
    args.extend(EC);
    args.extend(["-keyout", &key, "-out", &csr]);
    openssl(dir, &args);
    openssl(
        dir,
        &[
            "x509",
            "-req",
            "-in",
            &csr,
            "-CA",
            "ca.crt",
            "-CAkey",
            "ca.key",
            "-CAcreateserial",
            "-days",
            "1",
            "-extfile",
            &ext,
            "-out",
            &crt,
        ],
    );
}

impl Certificates {
    pub fn make() -> Self {
        let dir = tempfile::tempdir().unwrap();
        make_ca(dir.path(), "ca");
        make_ca(dir.path(), "other-ca");
        make_signed(
            dir.path(),
            "server",
            "subjectAltName=DNS:localhost,IP:127.0.0.1\nextendedKeyUsage=serverAuth,clientAuth\n",
        );
        make_signed(dir.path(), "client", "extendedKeyUsage=clientAuth\n");
        // No extensions: `openssl x509 -req` makes an X.509 v1 certificate, which rustls refuses.
        make_signed(dir.path(), "client-v1", "");
        Certificates { dir }
    }

    /// `ca.crt`, `other-ca.crt`, `server.crt`, `server.key`, `client.crt`, `client.key`,
    /// `client-v1.crt`, `client-v1.key`.
    pub fn path(&self, file: &str) -> PathBuf {
        self.dir.path().join(file)
    }

    /// The `store.tls` block trusting `ca` (a file name above), with the client certificate.
    pub fn store_tls_yaml(&self, ca: &str) -> String {
        format!(
            "  tls: {{ ca_file: {:?}, client_cert_file: {:?}, client_key_file: {:?} }}\n",
            self.path(ca),
            self.path("client.crt"),
            self.path("client.key")
        )
    }
}

/// A `redis-server` with a TLS port that requires client certificates, the `default` user
/// switched off, [`ADMIN_USER`] for the test and [`LIMITER_USER`] with the limiter's ACL.
pub struct SecureRedis {
    pub server: RedisServer,
    pub tls_port: u16,
}

/// The TLS settings of a server (or Sentinel) on `tls_port`, as `(directive, value)` pairs.
fn tls_settings(certs: &Certificates, tls_port: u16) -> Vec<(&'static str, String)> {
    let path = |file: &str| certs.path(file).to_str().unwrap().to_owned();
    vec![
        ("tls-port", tls_port.to_string()),
        ("tls-cert-file", path("server.crt")),
        ("tls-key-file", path("server.key")),
        ("tls-ca-cert-file", path("ca.crt")),
        ("tls-auth-clients", "yes".into()),
        // Replication and Sentinel's links to servers and to each other go over TLS too.
        ("tls-replication", "yes".into()),
    ]
}

impl SecureRedis {
    pub fn start(certs: &Certificates) -> Self {
        Self::start_with(certs, &[])
    }

    /// A replica of `primary`, replicating over TLS as [`ADMIN_USER`].
    pub fn start_replica_of(certs: &Certificates, primary: &SecureRedis) -> Self {
        let (user, password) = ADMIN_USER;
        let port = primary.tls_port.to_string();
        let args = [
            "--replicaof",
            "127.0.0.1",
            &port,
            "--masteruser",
            user,
            "--masterauth",
            password,
        ];
        Self::start_with(certs, &args)
    }

    fn start_with(certs: &Certificates, extra: &[&str]) -> Self {
        let mut last_error = String::new();
        for _ in 0..5 {
            let tls_port = free_port();
            let settings: Vec<String> = tls_settings(certs, tls_port)
                .into_iter()
                .flat_map(|(directive, value)| [format!("--{directive}"), value])
                .collect();
            let mut args: Vec<&str> = settings.iter().map(String::as_str).collect();
            args.extend(extra);
            match RedisServer::spawn(free_port(), &args) {
                Ok(server) => {
                    let secure = SecureRedis { server, tls_port };
                    secure.set_up_users();
                    return secure;
                }
                Err(e) => last_error = e,
            }
        }
        panic!("{last_error}")
    }

    fn set_up_users(&self) {
        let (admin, admin_password) = ADMIN_USER;
        let (user, password) = LIMITER_USER;
        for command in [
            format!("ACL SETUSER {admin} on >{admin_password} ~* &* +@all"),
            format!("ACL SETUSER {user} {LIMITER_ACL_RULES} >{password}"),
        ] {
            let reply = self.server.command(&command).unwrap_or_default();
            assert!(reply.starts_with("+OK"), "{command}: {reply}");
        }
        let reply = self.admin("ACL SETUSER default off").unwrap_or_default();
        assert!(reply.starts_with("+OK"), "default user off: {reply}");
    }

    /// The TLS address the limiter uses; `localhost` is the name in the server's certificate.
    pub fn url(&self) -> String {
        format!("rediss://localhost:{}", self.tls_port)
    }

    /// A command on the admin port as [`ADMIN_USER`].
    pub fn admin(&self, command: &str) -> Option<String> {
        self.server.command_as(Some(ADMIN_USER), command)
    }

    /// A command on the admin port as the limiter's user: what its ACL allows.
    pub fn as_limiter(&self, command: &str) -> Option<String> {
        self.server.command_as(Some(LIMITER_USER), command)
    }
}

/// A Sentinel with a TLS port (and a plain one on loopback for the test), `requirepass`
/// [`SENTINEL_PASSWORD`], reaching the servers it monitors over TLS as [`ADMIN_USER`].
pub struct SecureSentinel {
    pub sentinel: SentinelServer,
    pub tls_port: u16,
}

impl SecureSentinel {
    /// Monitors `masters` (name, TLS port).
    pub fn start(certs: &Certificates, masters: &[(&str, u16)]) -> Self {
        let (user, password) = ADMIN_USER;
        let mut last_error = String::new();
        for _ in 0..5 {
            let tls_port = free_port();
            let mut extra: String = tls_settings(certs, tls_port)
                .into_iter()
                .map(|(directive, value)| format!("{directive} {value}\n"))
                .collect();
            for (name, _) in masters {
                extra.push_str(&format!(
                    "sentinel auth-user {name} {user}\nsentinel auth-pass {name} {password}\n"
                ));
            }
            match SentinelServer::try_start(masters, &extra, Some(SENTINEL_PASSWORD)) {
                Ok(sentinel) => return SecureSentinel { sentinel, tls_port },
                Err(e) => last_error = e,
            }
        }
        panic!("{last_error}")
    }

    /// The address the limiter uses (127.0.0.1 is in the server certificate).
    pub fn url(&self) -> String {
        format!("rediss://127.0.0.1:{}", self.tls_port)
    }
}
