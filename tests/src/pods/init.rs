//! Init containers, run to completion before a pod's first start.

use std::fs;
use std::process::Stdio;
use std::time::{Duration, Instant};

use super::pod::Pod;

/// How long an init container may run.
const INIT_TIMEOUT: Duration = Duration::from_secs(30);

impl Pod {
    /// Runs each init container to completion, in order, as the kubelet does before a pod's
    /// first start: its image's entrypoint (unless it has a command) and args, its emptyDir
    /// mounts, the image's files bound read-only, its plain env. Panics with the log when one
    /// fails or outlives [`INIT_TIMEOUT`].
    pub(super) fn run_init_containers(&mut self) {
        let layer = self.dir.join("layer");
        for (init, image) in &self.init_containers {
            let mut binds: Vec<String> = vec![
                self.hosts.display().to_string(),
                "/etc/hosts".to_owned(),
                "rw".to_owned(),
            ];
            for mount in init.volume_mounts.iter().flatten() {
                fs::create_dir_all(layer.join(mount.mount_path.trim_start_matches('/'))).unwrap();
                let mode = if mount.read_only == Some(true) {
                    "ro"
                } else {
                    "rw"
                };
                binds.extend([
                    self.empty_dir(&mount.name).display().to_string(),
                    mount.mount_path.clone(),
                    mode.to_owned(),
                ]);
            }
            for (host, path) in &image.files {
                let point = layer.join(path.trim_start_matches('/'));
                fs::create_dir_all(point.parent().unwrap()).unwrap();
                fs::write(&point, b"").unwrap();
                binds.extend([host.display().to_string(), path.clone(), "ro".to_owned()]);
            }
            let env: Vec<String> = init
                .env
                .iter()
                .flatten()
                .map(|var| {
                    let value = var.value.as_deref().unwrap_or_else(|| {
                        panic!("{}: init env {} is not a plain value", self.name, var.name)
                    });
                    format!("{}={value}", var.name)
                })
                .collect();
            let mut argv = init.command.clone().unwrap_or(image.entrypoint.clone());
            argv.extend(init.args.clone().unwrap_or_default());
            let log = fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(self.log_path())
                .unwrap();
            let mut child = self
                .sandbox(&binds, &env, &argv)
                .stdin(Stdio::null())
                .stdout(log.try_clone().unwrap())
                .stderr(log)
                .spawn()
                .expect("start an init container");
            let deadline = Instant::now() + INIT_TIMEOUT;
            let status = loop {
                if let Some(status) = child.try_wait().expect("wait for the init container") {
                    break status;
                }
                if Instant::now() >= deadline {
                    let _ = child.kill();
                    let _ = child.wait();
                    panic!(
                        "{}: init container {} still running after {INIT_TIMEOUT:?}:\n{}",
                        self.name,
                        init.name,
                        self.log()
                    );
                }
                std::thread::sleep(Duration::from_millis(20));
            };
            assert!(
                status.success(),
                "{}: init container {} failed ({status}):\n{}",
                self.name,
                init.name,
                self.log()
            );
        }
        self.initialized = true;
    }
}
