//! Where the control plane's binaries come from: envtest's convention, a folder named by
//! `KUBEBUILDER_ASSETS`. Without the variable a suite is skipped (one line, and it passes); with
//! it, a binary missing from the folder is a failure that names the file.

use std::path::{Path, PathBuf};

/// The variable envtest's tools (setup-envtest) set.
pub const ASSETS: &str = "KUBEBUILDER_ASSETS";

/// The one line a suite prints when it is skipped.
pub fn skip_line(test: &str) -> String {
    format!(
        "skipped {test}: {ASSETS} is not set (a folder with kube-apiserver and etcd, as \
         setup-envtest gives; scripts/envtest-assets.sh fetches one)"
    )
}

/// The folder of binaries, from the value of `KUBEBUILDER_ASSETS` (unset or empty: none).
pub fn folder(value: Option<std::ffi::OsString>) -> Option<PathBuf> {
    value.filter(|v| !v.is_empty()).map(PathBuf::from)
}

/// The folder, or `None` after printing [`skip_line`].
pub fn folder_or_skip(test: &str) -> Option<PathBuf> {
    let found = folder(std::env::var_os(ASSETS));
    if found.is_none() {
        println!("{}", skip_line(test));
    }
    found
}

/// `name` in the folder; a failure naming the file when it is not there.
pub fn required(assets: &Path, name: &str) -> PathBuf {
    let path = assets.join(name);
    assert!(
        path.is_file(),
        "{ASSETS}={} has no {name} ({} is missing): give a folder with kube-apiserver and etcd \
         (scripts/envtest-assets.sh), or unset {ASSETS} to skip these suites",
        assets.display(),
        path.display()
    );
    path
}

/// `name` in the folder when it is there (the controller-manager is optional).
pub fn optional(assets: &Path, name: &str) -> Option<PathBuf> {
    let path = assets.join(name);
    path.is_file().then_some(path)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unset_or_empty_means_skip_and_the_line_says_why() {
        assert_eq!(folder(None), None);
        assert_eq!(folder(Some("".into())), None);
        assert_eq!(folder(Some("/k8s".into())), Some(PathBuf::from("/k8s")));
        let line = skip_line("apiserver_crd");
        assert!(!line.contains('\n'), "one line: {line}");
        assert!(line.starts_with("skipped apiserver_crd: KUBEBUILDER_ASSETS is not set"));
        assert!(line.contains("kube-apiserver and etcd"), "{line}");
    }

    #[test]
    fn a_missing_binary_fails_naming_the_file() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("etcd"), "").unwrap();
        assert_eq!(required(dir.path(), "etcd"), dir.path().join("etcd"));
        assert_eq!(optional(dir.path(), "kube-controller-manager"), None);
        let missing = std::panic::catch_unwind(|| required(dir.path(), "kube-apiserver"))
            .expect_err("a missing binary is a failure");
        let message = missing
            .downcast_ref::<String>()
            .expect("a formatted message");
        assert!(message.contains("has no kube-apiserver"), "{message}");
        assert!(
            message.contains(&dir.path().join("kube-apiserver").display().to_string()),
            "{message}"
        );
    }
}
