//! Certificates for one test, made with `openssl` (EC P-256, valid a day), cert-manager style:
//! the Secret keys `ca.crt`, `tls.crt`, `tls.key`.

use std::collections::BTreeMap;
use std::path::Path;
use std::process::Command;

/// Runs `openssl` with `args` in `dir`, failing the test with what it said.
pub(crate) fn openssl(dir: &Path, args: &[&str]) {
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

const EC: [&str; 5] = [
    "-newkey",
    "ec",
    "-pkeyopt",
    "ec_paramgen_curve:prime256v1",
    "-nodes",
];

/// A CA and a server certificate it signed for every DNS name in `dns_names` (wildcards
/// allowed): the keys of a cert-manager TLS Secret.
pub fn tls_secret(dns_names: &[&str]) -> BTreeMap<String, String> {
    let dir = tempfile::tempdir().unwrap();
    let dir = dir.path();
    let mut ca = vec!["req", "-x509", "-days", "1", "-subj", "/CN=test-ca"];
    ca.extend(["-keyout", "ca.key", "-out", "ca.crt"]);
    ca.extend(EC);
    openssl(dir, &ca);
    let mut csr = vec!["req", "-subj", "/CN=server"];
    csr.extend(["-keyout", "tls.key", "-out", "tls.csr"]);
    csr.extend(EC);
    openssl(dir, &csr);
    let names: Vec<String> = dns_names.iter().map(|n| format!("DNS:{n}")).collect();
    std::fs::write(
        dir.join("san.ext"),
        format!("subjectAltName={}\n", names.join(",")),
    )
    .unwrap();
    openssl(
        dir,
        &[
            "x509",
            "-req",
            "-in",
            "tls.csr",
            "-CA",
            "ca.crt",
            "-CAkey",
            "ca.key",
            "-CAcreateserial",
            "-days",
            "1",
            "-extfile",
            "san.ext",
            "-out",
            "tls.crt",
        ],
    );
    ["tls.crt", "tls.key", "ca.crt"]
        .into_iter()
        .map(|f| (f.to_owned(), std::fs::read_to_string(dir.join(f)).unwrap()))
        .collect()
}
