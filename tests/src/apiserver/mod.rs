//! A real Kubernetes control plane for the suites that need what only an API server does
//! (admission, CEL compilation and cost, defaulting, server-side apply, RBAC, garbage
//! collection), following envtest's convention: `KUBEBUILDER_ASSETS` names a folder with
//! `kube-apiserver` and `etcd`, and, when present, `kube-controller-manager`. Without the
//! variable a suite says so in one line and passes; with it, a missing binary is a failure.
//!
//! [`ApiServer::start_or_skip`] starts etcd and the API server on free loopback ports (RBAC on,
//! service-account tokens signed by a key of its own), and the controller-manager (garbage
//! collection, namespaces) when the folder has it; everything stops when it is dropped.
//! `scripts/envtest-assets.sh` fetches the binaries; `scripts/test-apiserver.sh` runs the suites.

pub mod chart;
mod pki;

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use kube::config::{KubeConfigOptions, Kubeconfig};

pub use pki::Pki;

/// The variable envtest's tools set.
pub const ASSETS: &str = "KUBEBUILDER_ASSETS";

/// How long the control plane may take to start (typically about 10 s).
const START: Duration = Duration::from_secs(90);

/// A running control plane; stopped (and its files removed) when dropped.
pub struct ApiServer {
    /// `https://127.0.0.1:<port>`.
    pub url: String,
    /// The admin's kubeconfig (client certificate, group `system:masters`).
    pub kubeconfig: PathBuf,
    /// Whether a controller-manager runs (garbage collection of owned objects).
    pub controller_manager: bool,
    pki: Pki,
    processes: Vec<(&'static str, Child)>,
    dir: tempfile::TempDir,
}

/// The assets folder, or `None` after one line saying why the suite is skipped.
pub fn assets_or_skip(test: &str) -> Option<PathBuf> {
    match std::env::var_os(ASSETS).filter(|v| !v.is_empty()) {
        Some(dir) => Some(PathBuf::from(dir)),
        None => {
            println!(
                "skipped {test}: {ASSETS} is not set (a folder with kube-apiserver and etcd, as \
                 setup-envtest gives; scripts/envtest-assets.sh)"
            );
            None
        }
    }
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free loopback port")
        .port()
}

fn binary(assets: &Path, name: &str) -> PathBuf {
    let path = assets.join(name);
    assert!(
        path.is_file(),
        "{ASSETS}={} has no {name}: give a folder with kube-apiserver and etcd (setup-envtest)",
        assets.display()
    );
    path
}

/// Starts `program` with `args`, its output in `<dir>/<name>.log`.
fn spawn(dir: &Path, name: &'static str, program: &Path, args: &[String]) -> (&'static str, Child) {
    let log = std::fs::File::create(dir.join(format!("{name}.log"))).unwrap();
    let child = Command::new(program)
        .args(args)
        .stdin(Stdio::null())
        .stdout(log.try_clone().unwrap())
        .stderr(log)
        .spawn()
        .unwrap_or_else(|e| panic!("{}: {e}", program.display()));
    (name, child)
}

/// A kubeconfig for `server` trusting the test CA, signing in with `user` (its YAML lines).
pub fn kubeconfig(server: &str, ca: &Path, user: &str) -> String {
    format!(
        "apiVersion: v1\nkind: Config\nclusters:\n- name: test\n  cluster:\n    server: {server}\n    certificate-authority: {}\n\
         users:\n- name: user\n  user:\n{user}\ncontexts:\n- name: test\n  context: {{cluster: test, user: user}}\ncurrent-context: test\n",
        ca.display()
    )
}

/// A client for a kubeconfig file.
pub async fn client_for(kubeconfig: &Path) -> kube::Client {
    let text = std::fs::read_to_string(kubeconfig).unwrap();
    let parsed = Kubeconfig::from_yaml(&text).expect("a kubeconfig");
    let config = kube::Config::from_custom_kubeconfig(parsed, &KubeConfigOptions::default())
        .await
        .expect("a client config");
    kube::Client::try_from(config).expect("a client")
}

impl ApiServer {
    /// The control plane, or `None` (after one line) without `KUBEBUILDER_ASSETS`.
    pub async fn start_or_skip(test: &str) -> Option<ApiServer> {
        let assets = assets_or_skip(test)?;
        Some(Self::start(&assets).await)
    }

    async fn start(assets: &Path) -> ApiServer {
        let (etcd, apiserver) = (binary(assets, "etcd"), binary(assets, "kube-apiserver"));
        let dir = tempfile::tempdir().unwrap();
        let pki = Pki::make(&dir.path().join("pki"));
        let (client, peer, secure) = (free_port(), free_port(), free_port());
        let mut processes = vec![spawn(
            dir.path(),
            "etcd",
            &etcd,
            &[
                format!("--data-dir={}", dir.path().join("etcd").display()),
                format!("--listen-client-urls=http://127.0.0.1:{client}"),
                format!("--advertise-client-urls=http://127.0.0.1:{client}"),
                format!("--listen-peer-urls=http://127.0.0.1:{peer}"),
                format!("--initial-advertise-peer-urls=http://127.0.0.1:{peer}"),
                format!("--initial-cluster=default=http://127.0.0.1:{peer}"),
                "--unsafe-no-fsync=true".into(),
            ],
        )];
        let path = |p: PathBuf| p.display().to_string();
        processes.push(spawn(
            dir.path(),
            "kube-apiserver",
            &apiserver,
            &[
                format!("--etcd-servers=http://127.0.0.1:{client}"),
                "--bind-address=127.0.0.1".into(),
                "--advertise-address=127.0.0.1".into(),
                format!("--secure-port={secure}"),
                format!("--tls-cert-file={}", path(pki.serving_crt())),
                format!("--tls-private-key-file={}", path(pki.serving_key())),
                format!("--client-ca-file={}", path(pki.ca_crt())),
                "--authorization-mode=RBAC".into(),
                "--service-account-issuer=https://kubernetes.default.svc".into(),
                format!("--service-account-key-file={}", path(pki.sa_pub())),
                format!("--service-account-signing-key-file={}", path(pki.sa_key())),
                "--service-cluster-ip-range=10.0.0.0/24".into(),
                // As envtest: no controller creates default ServiceAccounts here, and pods are
                // never scheduled. TokenRequest works without the admission plugin.
                "--disable-admission-plugins=ServiceAccount".into(),
                "--allow-privileged=true".into(),
            ],
        ));
        let url = format!("https://127.0.0.1:{secure}");
        let kubeconfig = dir.path().join("admin.kubeconfig");
        let admin = format!(
            "    client-certificate: {}\n    client-key: {}",
            pki.admin_crt().display(),
            pki.admin_key().display()
        );
        std::fs::write(&kubeconfig, self::kubeconfig(&url, &pki.ca_crt(), &admin)).unwrap();
        let mut server = ApiServer {
            url,
            kubeconfig,
            controller_manager: false,
            pki,
            processes,
            dir,
        };
        server.wait_ready().await;
        let manager = assets.join("kube-controller-manager");
        if manager.is_file() {
            let args = [
                format!("--kubeconfig={}", server.kubeconfig.display()),
                "--controllers=garbagecollector,namespace".into(),
                "--leader-elect=false".into(),
                "--bind-address=127.0.0.1".into(),
                format!("--secure-port={}", free_port()),
                format!("--cert-dir={}", server.dir.path().join("kcm").display()),
            ];
            let started = spawn(
                server.dir.path(),
                "kube-controller-manager",
                &manager,
                &args,
            );
            server.processes.push(started);
            server.controller_manager = true;
        }
        server
    }

    /// Until `/readyz` answers `ok`, or the logs of what did not come up.
    async fn wait_ready(&mut self) {
        let started = Instant::now();
        loop {
            if let Ok(client) =
                tokio::time::timeout(Duration::from_secs(5), client_for(&self.kubeconfig)).await
            {
                let request = http::Request::get("/readyz").body(Vec::new()).unwrap();
                if let Ok(Ok(text)) =
                    tokio::time::timeout(Duration::from_secs(5), client.request_text(request)).await
                    && text.trim() == "ok"
                {
                    return;
                }
            }
            let exited = self
                .processes
                .iter_mut()
                .find_map(|(name, child)| Some((*name, child.try_wait().ok()??)));
            if let Some((name, status)) = exited {
                panic!("{name} exited ({status}):\n{}", self.log(name));
            }
            assert!(
                started.elapsed() < START,
                "the API server was not ready after {START:?}:\n{}\n{}",
                self.log("etcd"),
                self.log("kube-apiserver")
            );
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
    }

    /// The last 60 lines a component wrote.
    pub fn log(&self, name: &str) -> String {
        let text = std::fs::read_to_string(self.dir.path().join(format!("{name}.log")))
            .unwrap_or_default();
        let lines: Vec<&str> = text.lines().collect();
        lines[lines.len().saturating_sub(60)..].join("\n")
    }

    /// The admin's client.
    pub async fn client(&self) -> kube::Client {
        client_for(&self.kubeconfig).await
    }

    /// A kubeconfig file that signs in with `token` (a ServiceAccount's, from TokenRequest).
    pub fn token_kubeconfig(&self, name: &str, token: &str) -> PathBuf {
        let path = self.dir.path().join(format!("{name}.kubeconfig"));
        let user = format!("    token: {token}");
        std::fs::write(&path, kubeconfig(&self.url, &self.pki.ca_crt(), &user)).unwrap();
        path
    }

    /// A folder of this control plane's own, removed with it.
    pub fn scratch(&self) -> &Path {
        self.dir.path()
    }
}

impl Drop for ApiServer {
    fn drop(&mut self) {
        // The API server before etcd, the controller-manager first.
        for (_, child) in self.processes.iter_mut().rev() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_kubeconfig_names_the_server_the_ca_and_the_user() {
        let text = kubeconfig(
            "https://127.0.0.1:6443",
            Path::new("/tmp/ca.crt"),
            "    token: abc",
        );
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
    }

    #[test]
    fn the_pki_has_every_file_and_the_admin_is_a_master() {
        let dir = tempfile::tempdir().unwrap();
        let pki = Pki::make(dir.path());
        for file in [
            pki.ca_crt(),
            pki.serving_crt(),
            pki.serving_key(),
            pki.admin_crt(),
            pki.admin_key(),
            pki.sa_key(),
            pki.sa_pub(),
        ] {
            assert!(file.is_file(), "{}", file.display());
        }
        let subject = Command::new("openssl")
            .args(["x509", "-noout", "-subject", "-in"])
            .arg(pki.admin_crt())
            .output()
            .unwrap();
        let subject = String::from_utf8_lossy(&subject.stdout);
        assert!(subject.contains("system:masters"), "{subject}");
        let verified = Command::new("openssl")
            .args(["verify", "-CAfile"])
            .arg(pki.ca_crt())
            .arg(pki.serving_crt())
            .output()
            .unwrap();
        assert!(verified.status.success(), "{verified:?}");
    }

    #[test]
    fn without_the_variable_a_suite_is_skipped() {
        if std::env::var_os(ASSETS).is_none() {
            assert!(assets_or_skip("this test").is_none());
        }
    }
}
