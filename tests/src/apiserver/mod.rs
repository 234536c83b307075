//! A real Kubernetes control plane for the suites that need what only an API server does
//! (admission, CEL compilation and cost, defaulting, server-side apply, RBAC, garbage
//! collection), following envtest's convention: `KUBEBUILDER_ASSETS` names a folder with
//! `kube-apiserver` and `etcd`, and, when present, `kube-controller-manager`. Without the
//! variable a suite says so in one line and passes; with it, a missing binary is a failure.
//!
//! [`ApiServer::start_or_skip`] starts etcd and the API server on free loopback ports (RBAC on,
//! service-account tokens signed by a key of its own, service accounts' requests audited), and
//! the controller-manager's garbage collector when the folder has it; everything stops, and its
//! files go, when it is dropped. `scripts/envtest-assets.sh` fetches the binaries;
//! `scripts/test-apiserver.sh` runs the suites.

pub mod args;
pub mod assets;
pub mod audit;
pub mod chart;
pub mod helm;
pub mod kubeconfig;
pub mod objects;
pub mod operator;
mod pki;
pub mod process;
pub mod rbac;
pub mod streamlimiter;
pub mod wait;

use std::path::{Path, PathBuf};
use std::time::Duration;

use k8s_openapi::api::authentication::v1::TokenRequest;
use k8s_openapi::api::core::v1::ServiceAccount;
use kube::api::{Api, PostParams};
use serde_json::json;

pub use assets::ASSETS;
pub use kubeconfig::{Credential, client_for};
pub use pki::Pki;
use process::{Process, free_ports};

/// How long the control plane may take to answer `/readyz` (typically about 10 s).
const READY: Duration = Duration::from_secs(60);

/// A running control plane. Dropping it kills every process (the controller-manager first,
/// etcd last) and removes its folder.
pub struct ApiServer {
    /// `https://127.0.0.1:<port>`.
    pub url: String,
    /// The admin's kubeconfig (client certificate, group `system:masters`).
    pub kubeconfig: PathBuf,
    // Fields drop in this order: the processes before the folder their files are in.
    controller_manager: Option<Process>,
    apiserver: Process,
    etcd: Process,
    pki: Pki,
    audit_log: PathBuf,
    dir: tempfile::TempDir,
}

impl ApiServer {
    /// The control plane, or `None` (after one line saying why) without `KUBEBUILDER_ASSETS`.
    pub async fn start_or_skip(test: &str) -> Option<ApiServer> {
        let assets = assets::folder_or_skip(test)?;
        Some(Self::start(&assets).await)
    }

    async fn start(assets: &Path) -> ApiServer {
        let etcd_binary = assets::required(assets, "etcd");
        let apiserver_binary = assets::required(assets, "kube-apiserver");
        let dir = tempfile::Builder::new()
            .prefix("apiserver-")
            .tempdir()
            .expect("a temporary folder");
        let root = dir.path();
        let pki = Pki::make(&root.join("pki"));
        let ports = free_ports(3);
        let etcd = Process::spawn(
            root,
            "etcd",
            &etcd_binary,
            &args::etcd(&root.join("etcd"), ports[0], ports[1]),
            &[],
        );
        let policy = root.join("audit-policy.yaml");
        std::fs::write(&policy, audit::POLICY).unwrap();
        let audit_log = root.join("audit.log");
        let inputs = args::ApiServerInputs {
            etcd_port: ports[0],
            secure_port: ports[2],
            pki: &pki,
            audit_policy: &policy,
            audit_log: &audit_log,
        };
        let apiserver = Process::spawn(
            root,
            "kube-apiserver",
            &apiserver_binary,
            &args::apiserver(&inputs),
            &[],
        );
        let url = format!("https://127.0.0.1:{}", ports[2]);
        let kubeconfig = root.join("admin.kubeconfig");
        let admin = Credential::Certificate {
            crt: &pki.admin_crt(),
            key: &pki.admin_key(),
        };
        std::fs::write(
            &kubeconfig,
            kubeconfig::kubeconfig(&url, &pki.ca_crt(), &admin),
        )
        .unwrap();
        let mut server = ApiServer {
            url,
            kubeconfig,
            controller_manager: None,
            apiserver,
            etcd,
            pki,
            audit_log,
            dir,
        };
        server.wait_ready().await;
        if let Some(binary) = assets::optional(assets, "kube-controller-manager") {
            let args = args::controller_manager(
                &server.kubeconfig,
                free_ports(1)[0],
                &server.dir.path().join("kcm"),
            );
            let process = Process::spawn(
                server.dir.path(),
                "kube-controller-manager",
                &binary,
                &args,
                &[],
            );
            server.controller_manager = Some(process);
        }
        server
    }

    /// Until `/readyz` answers `ok`; a component that exits, or a server not ready within
    /// [`READY`], fails with the tail of both logs.
    async fn wait_ready(&mut self) {
        let client = client_for(&self.kubeconfig).await;
        let started = std::time::Instant::now();
        loop {
            let request = http::Request::get("/readyz").body(Vec::new()).unwrap();
            let answer =
                tokio::time::timeout(Duration::from_secs(5), client.request_text(request)).await;
            if let Ok(Ok(text)) = &answer
                && text.trim() == "ok"
            {
                return;
            }
            let exited = [&mut self.etcd, &mut self.apiserver]
                .into_iter()
                .find_map(|p| Some((p.name.clone(), p.exited()?)));
            if let Some((name, status)) = exited {
                panic!(
                    "{name} exited ({status}) before the API server was ready:\n{}",
                    self.logs()
                );
            }
            assert!(
                started.elapsed() < READY,
                "the API server was not ready within {READY:?} (last answer: {answer:?}):\n{}",
                self.logs()
            );
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
    }

    /// The tail of every component's log, for a failure message.
    pub fn logs(&self) -> String {
        let mut out = vec![self.etcd.tail(30), self.apiserver.tail(60)];
        out.extend(self.controller_manager.as_ref().map(|p| p.tail(30)));
        out.join("\n")
    }

    /// The admin's client.
    pub async fn client(&self) -> kube::Client {
        client_for(&self.kubeconfig).await
    }

    /// Whether the controller-manager's garbage collector runs (its binary was in the folder);
    /// a controller-manager that has exited fails the test with its log.
    pub fn garbage_collector(&mut self) -> bool {
        let Some(process) = self.controller_manager.as_mut() else {
            return false;
        };
        if let Some(status) = process.exited() {
            panic!(
                "kube-controller-manager exited ({status}):\n{}",
                process.tail(60)
            );
        }
        true
    }

    /// A kubeconfig that signs in as ServiceAccount `name` of `namespace`, with a token (an
    /// hour) from the TokenRequest API.
    pub async fn service_account_kubeconfig(&self, namespace: &str, name: &str) -> PathBuf {
        let accounts: Api<ServiceAccount> = Api::namespaced(self.client().await, namespace);
        let request: TokenRequest =
            serde_json::from_value(json!({"spec": {"audiences": [], "expirationSeconds": 3600}}))
                .unwrap();
        let token = accounts
            .create_token_request(name, &PostParams::default(), &request)
            .await
            .unwrap_or_else(|e| panic!("a token for ServiceAccount {namespace}/{name}: {e}"))
            .status
            .unwrap_or_else(|| panic!("TokenRequest for {namespace}/{name} gave no status"))
            .token;
        let path = self
            .dir
            .path()
            .join(format!("sa-{namespace}-{name}.kubeconfig"));
        let text =
            kubeconfig::kubeconfig(&self.url, &self.pki.ca_crt(), &Credential::Token(&token));
        std::fs::write(&path, text).unwrap();
        path
    }

    /// What service accounts have asked the API server so far.
    pub fn audit(&self) -> Vec<audit::Access> {
        audit::read(&self.audit_log)
    }

    /// A folder of this control plane's own, removed with it.
    pub fn scratch(&self) -> &Path {
        self.dir.path()
    }
}
