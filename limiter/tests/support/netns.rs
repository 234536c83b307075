//! A network namespace of the test's own, as a region's own network: held open by a process
//! (`unshare --net`), joined to the host by a veth pair, programs started inside it through
//! `nsenter`, and a thread's move into it (`setns`). The veth's names and its /30 come from the
//! holder's pid, unique among the live processes of the machine, so that tests running at once
//! never share a subnet or an interface name. Gone, veth and all, when dropped.
//!
//! Needs root and `unshare` (util-linux) and `ip` (iproute2); [`Netns::new`] says why when the
//! machine cannot make one, so that a suite can skip.

use std::fs;
use std::io::Read;
use std::net::Ipv4Addr;
use std::os::fd::AsRawFd;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

pub struct Netns {
    holder: Child,
    /// The host's end of the veth pair.
    host_link: String,
    /// The host's end's address: what the namespace reaches the host by.
    pub host_ip: Ipv4Addr,
    /// The namespace's end's address: what the host reaches the namespace by.
    pub ip: Ipv4Addr,
}

impl Netns {
    /// A namespace with its loopback up and its veth end addressed; `Err` says why the machine
    /// cannot make one (not root, no `unshare` or `ip`).
    pub fn new() -> Result<Netns, String> {
        let mut holder = Command::new("unshare")
            .args(["--net", "sh", "-c", "ip link set lo up && exec sleep 86400"])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .map_err(|e| format!("unshare: {e}"))?;
        // `sleep` runs once the namespace exists and its loopback is up.
        let comm = format!("/proc/{}/comm", holder.id());
        let deadline = Instant::now() + Duration::from_secs(5);
        while !fs::read_to_string(&comm).is_ok_and(|c| c.trim() == "sleep") {
            if let Ok(Some(status)) = holder.try_wait() {
                let mut why = String::new();
                if let Some(mut stderr) = holder.stderr.take() {
                    let _ = stderr.read_to_string(&mut why);
                }
                let why = why.split_whitespace().collect::<Vec<_>>().join(" ");
                return Err(format!("unshare --net: {status}: {why}"));
            }
            if Instant::now() > deadline {
                let _ = holder.kill();
                let _ = holder.wait();
                return Err("unshare --net: no namespace within 5s".into());
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        // A pid is below 2^22 (the kernel's ceiling for pid_max): a /30 each in 10.0.0.0/8.
        let pid = holder.id();
        let base = (10 << 24) | (pid << 2);
        let netns = Netns {
            host_link: format!("sl{pid}h"),
            host_ip: Ipv4Addr::from(base + 1),
            ip: Ipv4Addr::from(base + 2),
            holder,
        };
        let (inner, pid) = (format!("sl{pid}n"), pid.to_string());
        let host_link = netns.host_link.as_str();
        let (host_cidr, cidr) = (format!("{}/30", netns.host_ip), format!("{}/30", netns.ip));
        let veth = [
            "link", "add", host_link, "type", "veth", "peer", "name", &inner, "netns", &pid,
        ];
        run(Command::new("ip").args(veth));
        run(Command::new("ip").args(["addr", "add", &host_cidr, "dev", host_link]));
        run(Command::new("ip").args(["link", "set", host_link, "up"]));
        run(netns
            .command("ip")
            .args(["addr", "add", &cidr, "dev", &inner]));
        run(netns.command("ip").args(["link", "set", &inner, "up"]));
        Ok(netns)
    }

    /// `program` to be run inside this namespace (its network only: the host's files).
    pub fn command(&self, program: &str) -> Command {
        let mut command = Command::new("nsenter");
        command
            .args(["-t", &self.holder.id().to_string(), "-n"])
            .arg(program);
        command
    }

    /// The namespace's file, for a thread to [`enter`].
    pub fn file(&self) -> fs::File {
        fs::File::open(format!("/proc/{}/ns/net", self.holder.id())).expect("the namespace's file")
    }
}

/// Moves the calling thread (and the threads it starts after) into the namespace of `file`.
pub fn enter(file: &fs::File) {
    // SAFETY: setns on an open namespace fd; it changes only this thread's namespace.
    let entered = unsafe { libc::setns(file.as_raw_fd(), libc::CLONE_NEWNET) };
    assert_eq!(entered, 0, "setns: {}", std::io::Error::last_os_error());
}

fn run(command: &mut Command) {
    let output = command.output().expect("ip (iproute2)");
    assert!(
        output.status.success(),
        "{command:?}: {}",
        String::from_utf8_lossy(&output.stderr)
    );
}

impl Drop for Netns {
    fn drop(&mut self) {
        // The pair goes at once with its host end; the namespace's teardown would lag behind
        // the holder's death, and a new holder may get the same pid (and names).
        let _ = Command::new("ip")
            .args(["link", "del", &self.host_link])
            .output();
        let _ = self.holder.kill();
        let _ = self.holder.wait();
    }
}
