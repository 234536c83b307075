//! The keys and certificates a throwaway control plane needs, made with `openssl` as
//! `crate::certs` makes the pods' (RSA here: etcd, kube-apiserver and Helm's Go client all read
//! it): one CA for the serving certificate and the clients, a serving certificate for
//! `127.0.0.1`, the admin's client certificate (group `system:masters`), and the
//! service-account signing key pair.

use std::path::{Path, PathBuf};

use crate::certs::openssl;

/// The files of one control plane's PKI, in its own folder.
pub struct Pki {
    pub dir: PathBuf,
}

impl Pki {
    pub fn ca_crt(&self) -> PathBuf {
        self.dir.join("ca.crt")
    }
    pub fn serving_crt(&self) -> PathBuf {
        self.dir.join("serving.crt")
    }
    pub fn serving_key(&self) -> PathBuf {
        self.dir.join("serving.key")
    }
    pub fn admin_crt(&self) -> PathBuf {
        self.dir.join("admin.crt")
    }
    pub fn admin_key(&self) -> PathBuf {
        self.dir.join("admin.key")
    }
    pub fn sa_key(&self) -> PathBuf {
        self.dir.join("sa.key")
    }
    pub fn sa_pub(&self) -> PathBuf {
        self.dir.join("sa.pub")
    }

    /// The files' paths in `dir`, made or not.
    pub fn at(dir: &Path) -> Pki {
        Pki {
            dir: dir.to_owned(),
        }
    }

    /// Makes every file in `dir` (valid a day; RSA 2048, which every component reads).
    pub fn make(dir: &Path) -> Pki {
        std::fs::create_dir_all(dir).unwrap();
        let rsa = ["-newkey", "rsa:2048", "-nodes"];
        let mut ca = vec![
            "req",
            "-x509",
            "-days",
            "1",
            "-subj",
            "/CN=screenlimit-test-ca",
        ];
        ca.extend(["-keyout", "ca.key", "-out", "ca.crt"]);
        ca.extend(rsa);
        openssl(dir, &ca);
        std::fs::write(
            dir.join("serving.ext"),
            "subjectAltName=IP:127.0.0.1,DNS:localhost,DNS:kubernetes,DNS:kubernetes.default.svc\n\
             extendedKeyUsage=serverAuth\n",
        )
        .unwrap();
        std::fs::write(dir.join("client.ext"), "extendedKeyUsage=clientAuth\n").unwrap();
        Self::signed(dir, "serving", "/CN=kube-apiserver", "serving.ext");
        Self::signed(dir, "admin", "/O=system:masters/CN=admin", "client.ext");
        openssl(
            dir,
            &[
                "genpkey",
                "-algorithm",
                "RSA",
                "-pkeyopt",
                "rsa_keygen_bits:2048",
                "-out",
                "sa.key",
            ],
        );
        openssl(dir, &["pkey", "-in", "sa.key", "-pubout", "-out", "sa.pub"]);
        Pki::at(dir)
    }

    /// `<name>.crt`/`<name>.key` for `subject`, signed by the CA with the extensions in `ext`.
    fn signed(dir: &Path, name: &str, subject: &str, ext: &str) {
        let (key, csr, crt) = (
            format!("{name}.key"),
            format!("{name}.csr"),
            format!("{name}.crt"),
        );
        openssl(
            dir,
            &[
                "req", "-newkey", "rsa:2048", "-nodes", "-subj", subject, "-keyout", &key, "-out",
                &csr,
            ],
        );
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
                ext,
                "-out",
                &crt,
            ],
        );
    }
}

#[cfg(test)]
mod tests {
    use std::process::Command;

    use super::*;

    fn x509(args: &[&str], file: &Path) -> String {
        let out = Command::new("openssl")
            .arg("x509")
            .args(args)
            .arg("-in")
            .arg(file)
            .output()
            .unwrap();
        assert!(out.status.success(), "{out:?}");
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    #[test]
    fn the_pki_has_every_file_the_admin_is_a_master_and_the_server_is_127_0_0_1() {
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
        let subject = x509(&["-noout", "-subject"], &pki.admin_crt());
        assert!(
            subject.contains("O = system:masters") && subject.contains("CN = admin"),
            "{subject}"
        );
        let serving = x509(&["-noout", "-ext", "subjectAltName"], &pki.serving_crt());
        assert!(serving.contains("IP Address:127.0.0.1"), "{serving}");
        for leaf in [pki.serving_crt(), pki.admin_crt()] {
            let verified = Command::new("openssl")
                .args(["verify", "-CAfile"])
                .arg(pki.ca_crt())
                .arg(&leaf)
                .output()
                .unwrap();
            assert!(verified.status.success(), "{verified:?}");
        }
    }
}
