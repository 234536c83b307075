//! A pod's stop as the kubelet does it: preStop hook, SIGTERM, SIGKILL after the grace period.

use std::process::Stdio;
use std::time::{Duration, Instant};

use super::pod::Pod;

/// A pod's stop ([`Pod::terminate`]).
pub struct Terminated {
    /// The stopped pod (its log).
    pub pod: Pod,
    pub status: std::process::ExitStatus,
    /// From the start of the preStop hook (or the SIGTERM) to the exit.
    pub took: Duration,
    /// The grace period ran out: SIGKILL.
    pub killed: bool,
}

impl Pod {
    /// The kubelet's stop of a deleted pod: the container's preStop hook (an exec in its
    /// sandbox, or a sleep), then SIGTERM, then SIGKILL once `terminationGracePeriodSeconds`
    /// (counted from the start of the hook) has passed. Blocks until the container is gone.
    pub fn terminate(mut self) -> Terminated {
        let started = Instant::now();
        let deadline = started + self.grace;
        let hook = self
            .container
            .lifecycle
            .as_ref()
            .and_then(|l| l.pre_stop.clone());
        if let Some(hook) = hook {
            if let Some(command) = hook.exec.and_then(|e| e.command) {
                let mut child = self
                    .sandboxed(&command)
                    .stdin(Stdio::null())
                    .stdout(Stdio::null())
                    .stderr(Stdio::null())
                    .spawn()
                    .expect("run the preStop hook");
                while child.try_wait().ok().flatten().is_none() && Instant::now() < deadline {
                    std::thread::sleep(Duration::from_millis(50));
                }
                let _ = child.kill();
                let _ = child.wait();
            } else if let Some(sleep) = hook.sleep {
                std::thread::sleep(
                    Duration::from_secs(u64::try_from(sleep.seconds).unwrap())
                        .min(deadline.saturating_duration_since(Instant::now())),
                );
            } else {
                panic!("{}: a preStop hook this runner does not run", self.name);
            }
        }
        let mut child = self.child.take().expect("a running container to stop");
        // SAFETY: a signal to our own child, which has not been reaped (no pid reuse).
        unsafe { libc::kill(i32::try_from(child.id()).unwrap(), libc::SIGTERM) };
        let mut killed = false;
        let status = loop {
            if let Some(status) = child.try_wait().expect("wait for the container") {
                break status;
            }
            if Instant::now() >= deadline {
                killed = true;
                let _ = child.kill();
                break child.wait().expect("wait for the container");
            }
            std::thread::sleep(Duration::from_millis(20));
        };
        Terminated {
            took: started.elapsed(),
            status,
            killed,
            pod: self,
        }
    }
}
