//! Cluster DNS as a hosts file every pod shares: pods' and Services' names.

use std::fs;
use std::io::Write;
use std::os::unix::fs::PermissionsExt;
use std::path::PathBuf;

use super::cluster::Cluster;
use super::pod::Pod;

impl Cluster {
    /// Service `name` with `pod` as its one endpoint: the short name and `<name>.<ns>.svc`
    /// resolve to the pod, as cluster DNS resolves a Service. Pointing it at another pod later
    /// is a new endpoint.
    pub fn add_service(&mut self, name: &str, pod: &Pod) {
        for alias in [name.to_owned(), format!("{name}.{}.svc", self.namespace)] {
            self.hosts.insert(alias, pod.ip);
        }
        self.write_hosts();
    }

    pub(super) fn hosts_path(&self) -> PathBuf {
        self.dir.path().join("hosts")
    }

    /// Rewritten in place: every pod's bind mount keeps seeing the same file, like DNS.
    pub(super) fn write_hosts(&self) {
        let mut text = String::from("127.0.0.1 localhost\n");
        for (name, ip) in &self.hosts {
            text.push_str(&format!("{ip} {name}\n"));
        }
        let mut file = fs::OpenOptions::new()
            .create(true)
            .write(true)
            .truncate(true)
            .open(self.hosts_path())
            .expect("hosts file");
        file.write_all(text.as_bytes()).expect("hosts file");
        fs::set_permissions(self.hosts_path(), fs::Permissions::from_mode(0o644)).unwrap();
    }
}
