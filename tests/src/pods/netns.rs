//! Network namespaces: one held open per pod and one for the bridge (the node), and a
//! thread's move into the node's.

use std::fs;
use std::io;
use std::os::fd::AsRawFd;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use super::wait::wait_for;

/// A process that holds a network namespace open for as long as it lives.
pub(super) struct Netns(Child);

impl Netns {
    pub(super) fn new() -> Netns {
        let child = Command::new("unshare")
            .args(["--net", "sh", "-c", "ip link set lo up && exec sleep 86400"])
            .stdin(Stdio::null())
            .spawn()
            .expect("unshare --net (the pod tests need root and util-linux)");
        let netns = Netns(child);
        // `sleep` runs once the namespace exists and its loopback is up.
        let comm = format!("/proc/{}/comm", netns.pid());
        wait_for(Duration::from_secs(5), "network namespace", || {
            fs::read_to_string(&comm).is_ok_and(|c| c.trim() == "sleep")
        });
        netns
    }

    pub(super) fn pid(&self) -> String {
        self.0.id().to_string()
    }

    /// `program args` inside this namespace (network only; the host's files).
    pub(super) fn command(&self, program: &str, args: &[&str]) -> Command {
        let mut command = Command::new("nsenter");
        command.args(["-t", &self.pid(), "-n", program]).args(args);
        command
    }

    pub(super) fn run(&self, program: &str, args: &[&str]) {
        let output = self.command(program, args).output().expect("nsenter");
        assert!(
            output.status.success(),
            "{program} {args:?}: {}",
            String::from_utf8_lossy(&output.stderr)
        );
    }
}

impl Drop for Netns {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Moves this thread (and those it starts) into the node's network namespace.
pub(super) fn enter(netns: &fs::File) {
    // SAFETY: setns on an open namespace fd; it changes only this thread's namespace.
    let entered = unsafe { libc::setns(netns.as_raw_fd(), libc::CLONE_NEWNET) };
    assert_eq!(entered, 0, "setns: {}", io::Error::last_os_error());
}
