//! One control-plane process (etcd, kube-apiserver, the controller-manager, the operator): in a
//! process group of its own, its output in a log file, the whole group killed when dropped, so a
//! failed test leaves nothing running.

use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};

/// A running process and its log.
pub struct Process {
    pub name: String,
    child: Child,
    log: PathBuf,
}

impl Process {
    /// Starts `program args…` in a new process group, stdout and stderr into `<dir>/<name>.log`,
    /// with `env` added to the test's environment.
    pub fn spawn(
        dir: &Path,
        name: &str,
        program: &Path,
        args: &[String],
        env: &[(&str, &str)],
    ) -> Process {
        let log = dir.join(format!("{name}.log"));
        let file = std::fs::File::create(&log).unwrap_or_else(|e| panic!("{}: {e}", log.display()));
        let mut command = Command::new(program);
        command
            .args(args)
            .envs(env.iter().copied())
            .stdin(Stdio::null())
            .stdout(file.try_clone().expect("a second handle on the log"))
            .stderr(file)
            .process_group(0);
        let child = command
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start {name} ({}): {e}", program.display()));
        Process {
            name: name.to_owned(),
            child,
            log,
        }
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Its exit status, once it has ended.
    pub fn exited(&mut self) -> Option<ExitStatus> {
        self.child.try_wait().ok().flatten()
    }

    /// Everything it wrote so far.
    pub fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// The last `lines` lines it wrote, headed by its name.
    pub fn tail(&self, lines: usize) -> String {
        format!(
            "--- {} ({}):\n{}",
            self.name,
            self.log.display(),
            tail(&self.log(), lines)
        )
    }

    /// Kills the whole group and reaps the process.
    pub fn kill(&mut self) {
        if self.exited().is_none() {
            let group = i32::try_from(self.child.id()).expect("a pid fits an i32");
            // SAFETY: kill(2) on our own child's group (its pgid is its pid: process_group(0)).
            unsafe {
                libc::kill(-group, libc::SIGKILL);
            }
        }
        let _ = self.child.wait();
    }
}

impl Drop for Process {
    fn drop(&mut self) {
        self.kill();
    }
}

/// The last `lines` lines of `text`.
pub fn tail(text: &str, lines: usize) -> String {
    let all: Vec<&str> = text.lines().collect();
    all[all.len().saturating_sub(lines)..].join("\n")
}

/// `n` distinct free loopback ports (all held open until every one is picked, so none repeats).
pub fn free_ports(n: usize) -> Vec<u16> {
    let listeners: Vec<std::net::TcpListener> = (0..n)
        .map(|_| std::net::TcpListener::bind("127.0.0.1:0").expect("a free loopback port"))
        .collect();
    listeners
        .iter()
        .map(|l| l.local_addr().expect("a bound address").port())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::{Duration, Instant};

    fn alive(pid: i32) -> bool {
        // SAFETY: signal 0 only asks whether the process exists.
        unsafe { libc::kill(pid, 0) == 0 }
    }

    #[test]
    fn dropping_a_process_kills_its_children_too() {
        let dir = tempfile::tempdir().unwrap();
        let script = "sleep 300 & echo $!; wait";
        let process = Process::spawn(
            dir.path(),
            "sh",
            Path::new("/bin/sh"),
            &["-c".into(), script.into()],
            &[],
        );
        let deadline = Instant::now() + Duration::from_secs(10);
        let child: i32 = loop {
            if let Ok(pid) = process.log().trim().parse() {
                break pid;
            }
            assert!(
                Instant::now() < deadline,
                "the script never wrote its child's pid"
            );
            std::thread::sleep(Duration::from_millis(20));
        };
        assert!(alive(child));
        drop(process);
        let deadline = Instant::now() + Duration::from_secs(10);
        // The grandchild is reaped by init once killed; until then it may linger as a zombie.
        while alive(child) && !zombie(child) {
            assert!(
                Instant::now() < deadline,
                "the group's sleep survived the drop"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    fn zombie(pid: i32) -> bool {
        std::fs::read_to_string(format!("/proc/{pid}/stat"))
            .map(|s| {
                s.rsplit(')')
                    .next()
                    .unwrap_or("")
                    .trim_start()
                    .starts_with('Z')
            })
            .unwrap_or(true)
    }

    #[test]
    fn a_tail_is_the_last_lines_and_ports_do_not_repeat() {
        assert_eq!(tail("a\nb\nc\n", 2), "b\nc");
        assert_eq!(tail("a", 5), "a");
        let ports = free_ports(3);
        let mut unique = ports.clone();
        unique.sort_unstable();
        unique.dedup();
        assert_eq!(unique.len(), 3, "{ports:?}");
    }
}
