//! A container's sandbox: a fresh mount namespace over the pod's files, as the pod's user.

use std::process::Command;

use super::pod::Pod;

/// The image's `PATH` (the official Redis image's), so the scripts find the same tools.
const PATH: &str = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";

/// Sets up one container start inside a fresh mount namespace, then execs the command as the
/// pod's user. `$1` pod dir, `$2` uid, `$3` gid, `$4` number of `src dst rw|ro` binds, then
/// the binds, then the command. The layer is copied onto a tmpfs first: overlayfs refuses a
/// lower layer that sits on the same filesystem as `/` below it.
const SANDBOX: &str = r#"set -eu
pod=$1 uid=$2 gid=$3 binds=$4
shift 4
mount -t tmpfs tmpfs "$pod/ns"
cp -a "$pod/layer" "$pod/ns/layer"
mkdir "$pod/ns/root"
mount -t overlay overlay -o "ro,lowerdir=$pod/ns/layer:/" "$pod/ns/root"
while [ "$binds" -gt 0 ]; do
  mount --bind "$1" "$pod/ns/root$2"
  if [ "$3" = ro ]; then mount -o remount,bind,ro "$pod/ns/root$2"; fi
  shift 3
  binds=$((binds - 1))
done
mount --rbind /proc "$pod/ns/root/proc"
mount --rbind /dev "$pod/ns/root/dev"
exec chroot "$pod/ns/root" setpriv --reuid "$uid" --regid "$gid" --clear-groups \
  --inh-caps=-all --bounding-set=-all --no-new-privs "$@"
"#;

impl Pod {
    /// `args` run in this pod's sandbox: network, files and user as its container has them.
    pub(super) fn sandboxed(&self, args: &[String]) -> Command {
        let mut binds: Vec<String> = vec![
            self.hosts.display().to_string(),
            "/etc/hosts".to_owned(),
            "rw".to_owned(),
        ];
        let mut mounts: Vec<[String; 3]> = Vec::new();
        for (host, path) in &self.empty_dirs {
            mounts.push([host.display().to_string(), path.clone(), "rw".to_owned()]);
        }
        for volume in &self.config_volumes {
            mounts.push([
                volume.dir.display().to_string(),
                volume.mount_path.clone(),
                "ro".to_owned(),
            ]);
        }
        // What the layer holds (Secret files) under a ConfigMap volume is hidden by its bind:
        // bound again from the layer, after it.
        for mount in self.container.volume_mounts.iter().flatten() {
            let path = &mount.mount_path;
            let nested = self
                .config_volumes
                .iter()
                .any(|v| path.starts_with(&format!("{}/", v.mount_path)));
            let bound = self.empty_dirs.iter().any(|(_, p)| p == path)
                || self.config_volumes.iter().any(|v| &v.mount_path == path);
            if nested && !bound {
                let source = self.dir.join("layer").join(path.trim_start_matches('/'));
                mounts.push([source.display().to_string(), path.clone(), "ro".to_owned()]);
            }
        }
        // Parents before what they hold.
        mounts.sort_by_key(|[_, path, _]| path.matches('/').count());
        binds.extend(mounts.into_iter().flatten());
        self.sandbox(&binds, &self.env, args)
    }

    /// `args` in a fresh mount namespace of this pod: `binds` (`src dst rw|ro`, flat) over the
    /// layer, `env` only, as the pod's user.
    pub(super) fn sandbox(&self, binds: &[String], env: &[String], args: &[String]) -> Command {
        let mut command = self
            .netns
            .command("unshare", &["--mount", "--propagation", "private"]);
        command
            .args(["sh", "-c", SANDBOX, "sandbox"])
            .arg(&self.dir)
            .arg(self.run_as.0.to_string())
            .arg(self.run_as.1.to_string())
            .arg((binds.len() / 3).to_string())
            .args(binds)
            .args([
                "env",
                "-i",
                &format!("PATH={PATH}"),
                &format!("HOSTNAME={}", self.name),
            ])
            .args(env)
            .args(args);
        command
    }
}
