//! A pod's files on the node: its volumes (ConfigMap, Secret, emptyDir), its user, its env.

use std::collections::BTreeMap;
use std::fs;
use std::os::unix::fs::{PermissionsExt, chown};
use std::path::PathBuf;

use k8s_openapi::api::core::v1::{Container, PodSpec, Volume};

use super::config_volume::ConfigVolume;
use super::pod::Pod;

impl Pod {
    /// Writes the read-only layer (ConfigMap files at their mount paths, mount points for the
    /// rest) and creates the emptyDirs, world-writable as the kubelet makes them.
    pub(super) fn lay_out(
        mut self,
        spec: &PodSpec,
        config_maps: &BTreeMap<String, BTreeMap<String, String>>,
        secrets: &BTreeMap<String, BTreeMap<String, String>>,
    ) -> Pod {
        self.env = resolve_env(&self.container, secrets);
        let layer = self.dir.join("layer");
        fs::create_dir_all(self.dir.join("ns")).unwrap();
        fs::create_dir_all(&layer).unwrap();
        let volumes: BTreeMap<&str, &Volume> = spec
            .volumes
            .iter()
            .flatten()
            .map(|v| (v.name.as_str(), v))
            .collect();
        for mount in self.container.volume_mounts.clone().unwrap_or_default() {
            let volume = volumes
                .get(mount.name.as_str())
                .unwrap_or_else(|| panic!("volume {} is not in the pod", mount.name));
            let target = layer.join(mount.mount_path.trim_start_matches('/'));
            fs::create_dir_all(&target).unwrap();
            if let Some(source) = &volume.config_map {
                let data = config_maps
                    .get(&source.name)
                    .unwrap_or_else(|| panic!("ConfigMap {} was not rendered", source.name));
                let volume = ConfigVolume {
                    config_map: source.name.clone(),
                    dir: self.dir.join("volumes").join(&mount.name),
                    mount_path: mount.mount_path.clone(),
                    items: source.items.as_ref().map(|items| {
                        items
                            .iter()
                            .map(|i| (i.key.clone(), i.path.clone(), i.mode))
                            .collect()
                    }),
                    default_mode: u32::try_from(source.default_mode.unwrap_or(0o644)).unwrap(),
                };
                fs::create_dir_all(&volume.dir).unwrap();
                fs::set_permissions(&volume.dir, fs::Permissions::from_mode(0o755)).unwrap();
                volume.write(data);
                self.config_volumes.push(volume);
            } else if let Some(source) = &volume.secret {
                let name = source.secret_name.as_deref().expect("secretName");
                let data = secrets
                    .get(name)
                    .unwrap_or_else(|| panic!("Secret {name} was not added to the cluster"));
                let mode = u32::try_from(source.default_mode.unwrap_or(0o644)).unwrap();
                let items: Vec<(String, String)> = match &source.items {
                    Some(items) => items
                        .iter()
                        .map(|i| (i.key.clone(), i.path.clone()))
                        .collect(),
                    None => data.keys().map(|k| (k.clone(), k.clone())).collect(),
                };
                for (key, path) in items {
                    let value = data
                        .get(&key)
                        .unwrap_or_else(|| panic!("Secret {name} has no key {key}"));
                    let file = target.join(path);
                    fs::write(&file, value).unwrap();
                    fs::set_permissions(&file, fs::Permissions::from_mode(mode)).unwrap();
                    // The kubelet gives Secret files to the pod's fsGroup.
                    chown(&file, Some(0), Some(u32::try_from(self.run_as.1).unwrap())).unwrap();
                }
                fs::set_permissions(&target, fs::Permissions::from_mode(0o555)).unwrap();
            } else if volume.empty_dir.is_some() {
                let host = self.empty_dir(&mount.name);
                self.empty_dirs.push((host, mount.mount_path.clone()));
            } else {
                panic!(
                    "volume {} has a kind this runner does not lay out",
                    mount.name
                );
            }
        }
        // A volume mounted inside a ConfigMap volume (a Secret at `/etc/screenlimit/secret`
        // under the config at `/etc/screenlimit`) needs its mount point in the ConfigMap's
        // directory, which the container runtime creates there on a node too.
        let mounts: Vec<String> = self
            .container
            .volume_mounts
            .iter()
            .flatten()
            .map(|m| m.mount_path.clone())
            .collect();
        for volume in &self.config_volumes {
            for path in &mounts {
                if let Some(inner) = path.strip_prefix(&format!("{}/", volume.mount_path)) {
                    fs::create_dir_all(volume.dir.join(inner)).unwrap();
                }
            }
        }
        // Mount point for the shared hosts file.
        fs::create_dir_all(layer.join("etc")).unwrap();
        fs::write(layer.join("etc/hosts"), "").unwrap();
        self
    }

    /// An emptyDir's directory on the node, made (world-writable, the pod's group) if it is new.
    pub(super) fn empty_dir(&self, volume: &str) -> PathBuf {
        let host = self.dir.join("volumes").join(volume);
        if !host.exists() {
            fs::create_dir_all(&host).unwrap();
            fs::set_permissions(&host, fs::Permissions::from_mode(0o777)).unwrap();
            chown(&host, Some(0), Some(u32::try_from(self.run_as.1).unwrap())).unwrap();
        }
        host
    }
}

/// The user the container runs as: the container's `runAsUser`, else the pod's; the group
/// is the pod's `fsGroup` (it owns the volumes), else the user's.
pub(super) fn run_as(spec: &PodSpec) -> (i64, i64) {
    let container = &spec.containers[0];
    let uid = container
        .security_context
        .as_ref()
        .and_then(|s| s.run_as_user)
        .or_else(|| spec.security_context.as_ref().and_then(|s| s.run_as_user))
        .expect("a runAsUser: pods here never run as root");
    let gid = spec
        .security_context
        .as_ref()
        .and_then(|s| s.fs_group)
        .unwrap_or(uid);
    (uid, gid)
}

/// The container's env as `NAME=value`: plain values, and `secretKeyRef`s looked up in the
/// cluster's Secrets (a missing one fails, as `CreateContainerConfigError` would).
fn resolve_env(
    container: &Container,
    secrets: &BTreeMap<String, BTreeMap<String, String>>,
) -> Vec<String> {
    container
        .env
        .iter()
        .flatten()
        .map(|var| {
            let value = match (&var.value, &var.value_from) {
                (Some(value), _) => value.clone(),
                (None, Some(from)) => {
                    let r = from.secret_key_ref.as_ref().unwrap_or_else(|| {
                        panic!("env {}: only secretKeyRef is supported", var.name)
                    });
                    secrets
                        .get(&r.name)
                        .and_then(|data| data.get(&r.key))
                        .unwrap_or_else(|| {
                            panic!("env {}: no Secret key {}/{}", var.name, r.name, r.key)
                        })
                        .clone()
                }
                (None, None) => String::new(),
            };
            format!("{}={value}", var.name)
        })
        .collect()
}
