//! Kubeconfig files for the test's control plane (the admin's client certificate, a
//! ServiceAccount's token) and the `kube::Client` one gives, with short deadlines so a hung API
//! server fails a test instead of stalling it.

use std::path::Path;
use std::time::Duration;

use kube::config::{KubeConfigOptions, Kubeconfig};
use serde_json::json;

/// How a kubeconfig's user signs in.
pub enum Credential<'a> {
    /// A client certificate and its key (files).
    Certificate { crt: &'a Path, key: &'a Path },
    /// A bearer token (a ServiceAccount's, from TokenRequest).
    Token(&'a str),
}

/// A kubeconfig (YAML) for `server`, trusting the CA in `ca`, signing in with `credential`.
pub fn kubeconfig(server: &str, ca: &Path, credential: &Credential) -> String {
    let user = match credential {
        Credential::Certificate { crt, key } => json!({
            "client-certificate": crt.display().to_string(),
            "client-key": key.display().to_string(),
        }),
        Credential::Token(token) => json!({ "token": token }),
    };
    let config = json!({
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "test", "cluster": {
            "server": server,
            "certificate-authority": ca.display().to_string(),
        }}],
        "users": [{"name": "user", "user": user}],
        "contexts": [{"name": "test", "context": {"cluster": "test", "user": "user"}}],
        "current-context": "test",
    });
    serde_yaml_ng::to_string(&config).expect("a kubeconfig as YAML")
}

/// A client for the kubeconfig file at `path`.
pub async fn client_for(path: &Path) -> kube::Client {
    let text = std::fs::read_to_string(path)
        .unwrap_or_else(|e| panic!("kubeconfig {}: {e}", path.display()));
    let parsed = Kubeconfig::from_yaml(&text)
        .unwrap_or_else(|e| panic!("kubeconfig {}: {e}", path.display()));
    let mut config = kube::Config::from_custom_kubeconfig(parsed, &KubeConfigOptions::default())
        .await
        .unwrap_or_else(|e| panic!("kubeconfig {}: {e}", path.display()));
    // The test's own requests are short (it never watches): a stuck one fails fast.
    config.connect_timeout = Some(Duration::from_secs(10));
    config.read_timeout = Some(Duration::from_secs(30));
    config.write_timeout = Some(Duration::from_secs(30));
    kube::Client::try_from(config)
        .unwrap_or_else(|e| panic!("a client for {}: {e}", path.display()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::apiserver::pki::Pki;
    use crate::apiserver::process::{Process, free_ports};

    #[test]
    fn a_kubeconfig_names_the_server_the_ca_and_the_user() {
        let ca = Path::new("/tmp/ca.crt");
        let text = kubeconfig("https://127.0.0.1:6443", ca, &Credential::Token("a.b-c_d"));
        let parsed = Kubeconfig::from_yaml(&text).expect("valid kubeconfig YAML");
        let cluster = parsed.clusters[0].cluster.as_ref().unwrap();
        assert_eq!(cluster.server.as_deref(), Some("https://127.0.0.1:6443"));
        assert_eq!(
            cluster.certificate_authority.as_deref(),
            Some("/tmp/ca.crt")
        );
        let user = parsed.auth_infos[0].auth_info.as_ref().unwrap();
        assert!(user.token.is_some());
        assert_eq!(parsed.current_context.as_deref(), Some("test"));
        let certs = kubeconfig(
            "https://127.0.0.1:6443",
            ca,
            &Credential::Certificate {
                crt: Path::new("/p/admin.crt"),
                key: Path::new("/p/admin.key"),
            },
        );
        let parsed = Kubeconfig::from_yaml(&certs).unwrap();
        let user = parsed.auth_infos[0].auth_info.as_ref().unwrap();
        assert_eq!(user.client_certificate.as_deref(), Some("/p/admin.crt"));
        assert_eq!(user.client_key.as_deref(), Some("/p/admin.key"));
    }

    /// The kube client trusts the serving certificate (an IP SAN for 127.0.0.1) and presents the
    /// admin's certificate to a TLS server that demands one: what the API server will do.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn the_admin_kubeconfig_gets_through_a_server_with_the_serving_certificate() {
        let dir = tempfile::tempdir().unwrap();
        let pki = Pki::make(&dir.path().join("pki"));
        let port = free_ports(1)[0];
        let args: Vec<String> = [
            "s_server",
            "-accept",
            &format!("127.0.0.1:{port}"),
            "-cert",
            &pki.serving_crt().display().to_string(),
            "-key",
            &pki.serving_key().display().to_string(),
            "-CAfile",
            &pki.ca_crt().display().to_string(),
            "-Verify",
            "1",
            "-www",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        let openssl = Path::new("openssl");
        let server = Process::spawn(dir.path(), "s_server", openssl, &args, &[]);
        let path = dir.path().join("admin.kubeconfig");
        let credential = Credential::Certificate {
            crt: &pki.admin_crt(),
            key: &pki.admin_key(),
        };
        let url = format!("https://127.0.0.1:{port}");
        std::fs::write(&path, kubeconfig(&url, &pki.ca_crt(), &credential)).unwrap();
        let client = client_for(&path).await;
        let deadline = std::time::Instant::now() + Duration::from_secs(20);
        let answer = loop {
            let request = http::Request::get("/readyz").body(Vec::new()).unwrap();
            match client.request_text(request).await {
                Ok(text) => break text,
                Err(e) => assert!(
                    std::time::Instant::now() < deadline,
                    "no TLS session with the test PKI: {e}\n{}",
                    server.tail(20)
                ),
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        };
        // s_server's status page names the client certificate it verified.
        assert!(answer.contains("admin"), "{answer}");
    }
}
