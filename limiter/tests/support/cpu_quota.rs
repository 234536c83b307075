//! A CPU quota on one process, as a Kubernetes CPU limit holds a container: a cgroup v1 `cpu`
//! group of its own (these machines mount the v1 hierarchy at `/sys/fs/cgroup/cpu`), removed on
//! drop. For tests where the store, not the limiter, must be what runs out of capacity.

use std::path::PathBuf;
use std::time::Duration;

pub struct CpuQuota {
    dir: PathBuf,
}

impl CpuQuota {
    /// Holds `pid` to `quota` of CPU time in every `period` from now on (the kernel's least
    /// quota is 1 ms).
    pub fn hold(pid: u32, quota: Duration, period: Duration) -> CpuQuota {
        let dir = PathBuf::from(format!(
            "/sys/fs/cgroup/cpu/screenlimit-test-{}-{pid}",
            std::process::id()
        ));
        std::fs::create_dir_all(&dir).unwrap_or_else(|e| {
            panic!(
                "this test needs a writable cgroup v1 cpu hierarchy ({}): {e}",
                dir.display()
            )
        });
        let micros = |d: Duration| d.as_micros().to_string();
        std::fs::write(dir.join("cpu.cfs_period_us"), micros(period)).unwrap();
        std::fs::write(dir.join("cpu.cfs_quota_us"), micros(quota)).unwrap();
        std::fs::write(dir.join("cgroup.procs"), pid.to_string()).unwrap();
        CpuQuota { dir }
    }
}

impl Drop for CpuQuota {
    /// Moves the held processes back to the root group, then removes the group.
    fn drop(&mut self) {
        if let Ok(procs) = std::fs::read_to_string(self.dir.join("cgroup.procs")) {
            for pid in procs.lines() {
                let _ = std::fs::write("/sys/fs/cgroup/cpu/cgroup.procs", pid);
            }
        }
        let _ = std::fs::remove_dir(&self.dir);
    }
}
