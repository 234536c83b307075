//! The command lines of the control plane, as pure functions of ports and files (so they are
//! checked here, where no binary runs). Flags are those of envtest's defaults and of
//! Kubernetes v1.30 to v1.36; none that an old or new release rejects.

use std::path::Path;

use super::pki::Pki;

fn path(p: &Path) -> String {
    p.display().to_string()
}

/// etcd on loopback, without fsync (a throwaway store).
pub fn etcd(data_dir: &Path, client_port: u16, peer_port: u16) -> Vec<String> {
    let client = format!("http://127.0.0.1:{client_port}");
    let peer = format!("http://127.0.0.1:{peer_port}");
    vec![
        "--name=default".into(),
        format!("--data-dir={}", path(data_dir)),
        format!("--listen-client-urls={client}"),
        format!("--advertise-client-urls={client}"),
        format!("--listen-peer-urls={peer}"),
        format!("--initial-advertise-peer-urls={peer}"),
        format!("--initial-cluster=default={peer}"),
        "--unsafe-no-fsync=true".into(),
    ]
}

/// What the API server's command line names besides its PKI.
pub struct ApiServerInputs<'a> {
    pub etcd_port: u16,
    pub secure_port: u16,
    pub pki: &'a Pki,
    pub audit_policy: &'a Path,
    pub audit_log: &'a Path,
}

/// kube-apiserver: TLS with the test CA, client certificates from that CA, RBAC, and
/// service-account tokens signed by the test's own key pair.
pub fn apiserver(inputs: &ApiServerInputs) -> Vec<String> {
    let pki = inputs.pki;
    vec![
        format!("--etcd-servers=http://127.0.0.1:{}", inputs.etcd_port),
        "--bind-address=127.0.0.1".into(),
        "--advertise-address=127.0.0.1".into(),
        format!("--secure-port={}", inputs.secure_port),
        format!("--tls-cert-file={}", path(&pki.serving_crt())),
        format!("--tls-private-key-file={}", path(&pki.serving_key())),
        format!("--client-ca-file={}", path(&pki.ca_crt())),
        "--authorization-mode=RBAC".into(),
        "--service-account-issuer=https://kubernetes.default.svc".into(),
        format!("--service-account-key-file={}", path(&pki.sa_pub())),
        format!("--service-account-signing-key-file={}", path(&pki.sa_key())),
        "--service-cluster-ip-range=10.0.0.0/24".into(),
        // TokenRequest (the operator's kubeconfig takes its token from it) needs only the
        // issuer and the key pair above, not this admission plugin. With the plugin on, every
        // Pod would need its ServiceAccount to exist first, and each namespace its `default`
        // one, which only the controller-manager's serviceaccount controller creates; envtest
        // turns it off for that reason, and no pod runs here.
        "--disable-admission-plugins=ServiceAccount".into(),
        "--allow-privileged=true".into(),
        // What service accounts (the operator) asked for, for the RBAC comparison.
        format!("--audit-policy-file={}", path(inputs.audit_policy)),
        format!("--audit-log-path={}", path(inputs.audit_log)),
        "--audit-log-mode=blocking".into(),
    ]
}

/// kube-controller-manager with only the garbage collector (owned objects go with their
/// owner), as the admin. `garbagecollector` is the controller's old name, which newer releases
/// keep as an alias of `garbage-collector-controller`.
pub fn controller_manager(kubeconfig: &Path, secure_port: u16, cert_dir: &Path) -> Vec<String> {
    vec![
        format!("--kubeconfig={}", path(kubeconfig)),
        "--controllers=garbagecollector".into(),
        "--leader-elect=false".into(),
        "--bind-address=127.0.0.1".into(),
        format!("--secure-port={secure_port}"),
        format!("--cert-dir={}", path(cert_dir)),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeSet;

    fn flag_names(args: &[String]) -> Vec<&str> {
        args.iter()
            .map(|a| {
                assert!(a.starts_with("--"), "{a}: every argument is a --flag=value");
                a.split('=').next().unwrap()
            })
            .collect()
    }

    fn no_flag_twice(args: &[String]) {
        let names = flag_names(args);
        let unique: BTreeSet<&str> = names.iter().copied().collect();
        assert_eq!(unique.len(), names.len(), "a flag given twice: {names:?}");
    }

    fn value<'a>(args: &'a [String], flag: &str) -> &'a str {
        args.iter()
            .find_map(|a| a.strip_prefix(&format!("{flag}=")))
            .unwrap_or_else(|| panic!("no {flag} in {args:?}"))
    }

    #[test]
    fn etcd_listens_on_loopback_at_the_given_ports() {
        let args = etcd(Path::new("/d/etcd"), 2379, 2380);
        no_flag_twice(&args);
        assert_eq!(
            value(&args, "--listen-client-urls"),
            "http://127.0.0.1:2379"
        );
        assert_eq!(
            value(&args, "--initial-cluster"),
            "default=http://127.0.0.1:2380"
        );
        assert_eq!(value(&args, "--name"), "default");
        assert_eq!(value(&args, "--data-dir"), "/d/etcd");
    }

    #[test]
    fn the_api_server_has_every_flag_a_real_one_requires() {
        let dir = tempfile::tempdir().unwrap();
        let pki = Pki::at(dir.path());
        let args = apiserver(&ApiServerInputs {
            etcd_port: 2379,
            secure_port: 6443,
            pki: &pki,
            audit_policy: Path::new("/d/audit-policy.yaml"),
            audit_log: Path::new("/d/audit.log"),
        });
        no_flag_twice(&args);
        assert_eq!(value(&args, "--etcd-servers"), "http://127.0.0.1:2379");
        assert_eq!(value(&args, "--secure-port"), "6443");
        assert_eq!(value(&args, "--authorization-mode"), "RBAC");
        assert_eq!(value(&args, "--service-cluster-ip-range"), "10.0.0.0/24");
        assert_eq!(
            value(&args, "--disable-admission-plugins"),
            "ServiceAccount"
        );
        // The three service-account flags a v1.20+ API server refuses to start without.
        assert!(!value(&args, "--service-account-issuer").is_empty());
        assert_eq!(
            value(&args, "--service-account-key-file"),
            pki.sa_pub().display().to_string()
        );
        assert_eq!(
            value(&args, "--service-account-signing-key-file"),
            pki.sa_key().display().to_string()
        );
        assert_eq!(
            value(&args, "--client-ca-file"),
            pki.ca_crt().display().to_string()
        );
        assert_eq!(value(&args, "--audit-log-path"), "/d/audit.log");
        assert_eq!(value(&args, "--audit-policy-file"), "/d/audit-policy.yaml");
    }

    #[test]
    fn the_controller_manager_runs_the_garbage_collector_only() {
        let args = controller_manager(Path::new("/d/admin.kubeconfig"), 10257, Path::new("/d/kcm"));
        no_flag_twice(&args);
        assert_eq!(value(&args, "--controllers"), "garbagecollector");
        assert_eq!(value(&args, "--kubeconfig"), "/d/admin.kubeconfig");
        assert_eq!(value(&args, "--leader-elect"), "false");
    }
}
