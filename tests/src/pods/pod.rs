//! One pod: its state, and its container's start, kill, exec and log.

use std::fs;
use std::net::Ipv4Addr;
use std::path::PathBuf;
use std::process::{Child, Output, Stdio};
use std::time::Duration;

use k8s_openapi::api::core::v1::Container;

use super::config_volume::ConfigVolume;
use super::image::Image;
use super::netns::Netns;

/// One pod: its network namespace, its files, its running container (if any).
pub struct Pod {
    pub name: String,
    /// `<pod>.<service>.<namespace>.svc`
    pub dns: String,
    /// Its address on the bridge.
    pub ip: Ipv4Addr,
    pub(super) netns: Netns,
    pub(super) dir: PathBuf,
    pub(super) container: Container,
    /// The init containers and their images, run before the first start.
    pub(super) init_containers: Vec<(Container, Image)>,
    pub(super) initialized: bool,
    pub(super) run_as: (i64, i64),
    pub(super) hosts: PathBuf,
    /// `(host dir, mount path)` of each emptyDir.
    pub(super) empty_dirs: Vec<(PathBuf, String)>,
    /// Each ConfigMap volume, bind-mounted read-only.
    pub(super) config_volumes: Vec<ConfigVolume>,
    /// The container's env as `NAME=value`, Secret references resolved.
    pub(super) env: Vec<String>,
    /// `terminationGracePeriodSeconds` (30 when the spec says none).
    pub(super) grace: Duration,
    pub(super) child: Option<Child>,
}

impl Pod {
    /// The value of the container's env variable `name`, Secret references resolved.
    pub fn env_value(&self, name: &str) -> Option<&str> {
        self.env.iter().find_map(|kv| {
            kv.strip_prefix(name)
                .and_then(|rest| rest.strip_prefix('='))
        })
    }

    pub fn log_path(&self) -> PathBuf {
        self.dir.join("log")
    }

    /// Everything the container printed, over all its starts.
    pub fn log(&self) -> String {
        fs::read_to_string(self.log_path()).unwrap_or_default()
    }

    /// Starts the container's command (`command` + `args`), its output appended to the log;
    /// at the first start, the init containers before it.
    pub fn start(&mut self) {
        assert!(self.child.is_none(), "{} is already running", self.name);
        if !self.initialized {
            self.run_init_containers();
        }
        let mut argv = self.container.command.clone().unwrap_or_default();
        argv.extend(self.container.args.clone().unwrap_or_default());
        assert!(
            !argv.is_empty(),
            "{}: the runner needs an explicit command",
            self.name
        );
        let log = fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.log_path())
            .unwrap();
        let child = self
            .sandboxed(&argv)
            .stdin(Stdio::null())
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .spawn()
            .expect("start the pod's container");
        self.child = Some(child);
    }

    /// Kills the container (SIGKILL, a crash) and reaps it; the emptyDirs stay.
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// The container's exit, if it has exited.
    pub fn exited(&mut self) -> Option<std::process::ExitStatus> {
        self.child
            .as_mut()
            .and_then(|c| c.try_wait().ok().flatten())
    }

    /// `kubectl exec`: a command in the pod's sandbox, as the container's user.
    pub fn exec(&self, args: &[&str]) -> Output {
        let args: Vec<String> = args.iter().map(|s| (*s).to_owned()).collect();
        self.sandboxed(&args)
            .stdin(Stdio::null())
            .output()
            .expect("exec in the pod")
    }

    /// `exec` that must succeed; its standard output, trimmed.
    pub fn exec_ok(&self, args: &[&str]) -> String {
        let output = self.exec(args);
        assert!(
            output.status.success(),
            "{} exec {args:?}: {}{}",
            self.name,
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        );
        String::from_utf8_lossy(&output.stdout).trim().to_owned()
    }

    /// The running container's process id (the command itself: every step of the sandbox
    /// `exec`s the next), `None` when it is not running.
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    /// `terminationGracePeriodSeconds`.
    pub fn grace_period(&self) -> Duration {
        self.grace
    }
}

impl Drop for Pod {
    fn drop(&mut self) {
        self.kill();
    }
}
