//! A ConfigMap volume on the node, written and updated in place as the kubelet's atomic
//! writer does it.

use std::collections::BTreeMap;
use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::os::unix::fs::symlink;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

/// One ConfigMap volume of one pod: where its versions are written on the node.
#[derive(Clone)]
pub(super) struct ConfigVolume {
    pub(super) config_map: String,
    /// On the node; bind-mounted read-only at `mount_path`.
    pub(super) dir: PathBuf,
    pub(super) mount_path: String,
    /// `(key, path, mode)` of the volume's `items`; every key, by its name, when it has none.
    pub(super) items: Option<Vec<(String, String, Option<i32>)>>,
    pub(super) default_mode: u32,
}

/// Tells the versions written apart (two in the same nanosecond).
static VERSION: AtomicU64 = AtomicU64::new(0);

impl ConfigVolume {
    /// Writes `data` as the kubelet's atomic writer does: the files in a new
    /// `..<timestamp>` directory, the `..data` symlink pointed at it by a rename (atomic: a
    /// reader sees the old version or the new one), a visible symlink `<file> -> ..data/<file>`
    /// for each file, then the old version's directory and the visible names it alone had
    /// removed.
    pub(super) fn write(&self, data: &BTreeMap<String, String>) {
        let files: Vec<(String, &String, u32)> = match &self.items {
            Some(items) => items
                .iter()
                .map(|(key, path, mode)| {
                    let value = data.get(key).unwrap_or_else(|| {
                        panic!("ConfigMap {} has no key {key}", self.config_map)
                    });
                    let mode = mode.map_or(self.default_mode, |m| u32::try_from(m).unwrap());
                    (path.clone(), value, mode)
                })
                .collect(),
            None => data
                .iter()
                .map(|(key, value)| (key.clone(), value, self.default_mode))
                .collect(),
        };
        let now = SystemTime::now().duration_since(UNIX_EPOCH).unwrap();
        let version = format!(
            "..{}_{:09}.{}",
            now.as_secs(),
            now.subsec_nanos(),
            VERSION.fetch_add(1, Ordering::Relaxed)
        );
        let version_dir = self.dir.join(&version);
        fs::create_dir(&version_dir).unwrap();
        for (path, value, mode) in &files {
            let file = version_dir.join(path);
            fs::create_dir_all(file.parent().unwrap()).unwrap();
            fs::write(&file, value).unwrap();
            fs::set_permissions(&file, fs::Permissions::from_mode(*mode)).unwrap();
        }
        fs::set_permissions(&version_dir, fs::Permissions::from_mode(0o755)).unwrap();
        let data_link = self.dir.join("..data");
        let old = fs::read_link(&data_link).ok();
        let tmp = self.dir.join("..data_tmp");
        let _ = fs::remove_file(&tmp);
        symlink(&version, &tmp).unwrap();
        fs::rename(&tmp, &data_link).unwrap();
        let visible: Vec<String> = files
            .iter()
            .map(|(path, _, _)| path.split('/').next().unwrap().to_owned())
            .collect();
        for name in &visible {
            let link = self.dir.join(name);
            if fs::symlink_metadata(&link).is_err() {
                symlink(format!("..data/{name}"), &link).unwrap();
            }
        }
        // The visible names only the old version had (mount points of nested volumes are
        // directories, not the writer's: they stay).
        for entry in fs::read_dir(&self.dir).unwrap() {
            let entry = entry.unwrap();
            let name = entry.file_name().to_string_lossy().into_owned();
            if !name.starts_with("..")
                && !visible.contains(&name)
                && entry.file_type().unwrap().is_symlink()
            {
                fs::remove_file(entry.path()).unwrap();
            }
        }
        if let Some(old) = old {
            fs::remove_dir_all(self.dir.join(old)).unwrap();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn read(dir: &std::path::Path, name: &str) -> String {
        fs::read_to_string(dir.join(name)).unwrap()
    }

    #[test]
    fn a_config_map_volume_is_swapped_whole_through_its_data_symlink() {
        let dir = tempfile::tempdir().unwrap();
        let volume = ConfigVolume {
            config_map: "limiter".to_owned(),
            dir: dir.path().to_owned(),
            mount_path: "/etc/screenlimit".to_owned(),
            items: None,
            default_mode: 0o644,
        };
        // A nested volume's mount point, as the layout makes it.
        fs::create_dir(dir.path().join("secret")).unwrap();
        let v1 = BTreeMap::from([
            ("limiter.yaml".to_owned(), "plans: {basic: 1}\n".to_owned()),
            ("old.txt".to_owned(), "gone next".to_owned()),
        ]);
        volume.write(&v1);
        let first = fs::read_link(dir.path().join("..data")).unwrap();
        assert_eq!(
            fs::read_link(dir.path().join("limiter.yaml")).unwrap(),
            PathBuf::from("..data/limiter.yaml")
        );
        assert_eq!(read(dir.path(), "limiter.yaml"), "plans: {basic: 1}\n");
        let mode = fs::metadata(dir.path().join("limiter.yaml"))
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o644);

        let v2 = BTreeMap::from([("limiter.yaml".to_owned(), "plans: {basic: 2}\n".to_owned())]);
        volume.write(&v2);
        let second = fs::read_link(dir.path().join("..data")).unwrap();
        assert_ne!(first, second);
        assert_eq!(read(dir.path(), "limiter.yaml"), "plans: {basic: 2}\n");
        assert!(
            !dir.path().join(&first).exists(),
            "the old version is removed"
        );
        assert!(fs::symlink_metadata(dir.path().join("old.txt")).is_err());
        assert!(dir.path().join("secret").is_dir(), "a mount point stays");
        let mut names: Vec<String> = fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        names.sort();
        assert_eq!(
            names,
            [second.to_str().unwrap(), "..data", "limiter.yaml", "secret"]
        );
    }

    #[test]
    fn a_volume_with_items_writes_only_those_keys_at_their_paths_and_modes() {
        let dir = tempfile::tempdir().unwrap();
        let volume = ConfigVolume {
            config_map: "scripts".to_owned(),
            dir: dir.path().to_owned(),
            mount_path: "/scripts".to_owned(),
            items: Some(vec![(
                "run".to_owned(),
                "bin/run.sh".to_owned(),
                Some(0o755),
            )]),
            default_mode: 0o644,
        };
        let data = BTreeMap::from([
            ("run".to_owned(), "#!/bin/sh\n".to_owned()),
            ("other".to_owned(), "not listed".to_owned()),
        ]);
        volume.write(&data);
        assert_eq!(read(dir.path(), "bin/run.sh"), "#!/bin/sh\n");
        let mode = fs::metadata(dir.path().join("bin/run.sh"))
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o755);
        assert!(fs::symlink_metadata(dir.path().join("other")).is_err());
    }
}
