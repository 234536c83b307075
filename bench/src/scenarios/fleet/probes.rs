//! The store-side tools: the redis:// URL's address, the `redis-benchmark` SET baseline, and
//! PING round trips on a connection of the run's own.

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};

use crate::procs::RedisStats;

/// `redis://host:port[/db]` → (host, port).
pub(super) fn host_port(url: &str) -> anyhow::Result<(String, u16)> {
    let rest = url
        .strip_prefix("redis://")
        .with_context(|| format!("{url}: a redis:// URL"))?;
    let rest = rest.rsplit('@').next().unwrap_or(rest);
    let authority = rest.split('/').next().unwrap_or(rest);
    let (host, port) = authority.rsplit_once(':').unwrap_or((authority, "6379"));
    Ok((host.to_owned(), port.parse().context("redis port")?))
}

/// The SET baseline: `redis-benchmark -c CLIENTS -n N -t set` on the same server.
pub(super) fn redis_benchmark(
    host: &str,
    port: u16,
    clients: usize,
    n: u64,
) -> anyhow::Result<(f64, String)> {
    let bin = std::env::var("REDIS_BENCHMARK_BIN").unwrap_or_else(|_| "redis-benchmark".into());
    let out = Command::new(&bin)
        .args(["-h", host, "-p", &port.to_string()])
        .args(["-c", &clients.to_string(), "-n", &n.to_string()])
        .args(["-t", "set", "--csv"])
        .stderr(Stdio::null())
        .output()
        .map_err(|e| {
            if e.kind() == std::io::ErrorKind::NotFound {
                anyhow::anyhow!(
                    "{bin} not found: the fleet scenario's SET baseline needs Debian's redis-benchmark \
                     (apt-get install redis-tools), or set REDIS_BENCHMARK_BIN"
                )
            } else {
                anyhow::anyhow!("run {bin}: {e}")
            }
        })?;
    if !out.status.success() {
        bail!("{bin} failed ({})", out.status);
    }
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let rps = text
        .lines()
        .nth(1)
        .and_then(|l| l.split(',').nth(1))
        .and_then(|f| f.trim_matches('"').parse().ok())
        .with_context(|| format!("redis-benchmark output: {text}"))?;
    Ok((rps, text))
}

/// PING round trips on a connection of its own, one every 10 ms, for `span`: microseconds.
pub(super) fn ping_probe(url: &str, span: Duration) -> anyhow::Result<Vec<u64>> {
    let mut stats = RedisStats::connect(url)?;
    let end = Instant::now() + span;
    let mut out = Vec::new();
    while Instant::now() < end {
        let t = Instant::now();
        stats.ping()?;
        out.push(t.elapsed().as_micros() as u64);
        std::thread::sleep(Duration::from_millis(10));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn redis_urls_give_host_and_port() {
        assert_eq!(
            host_port("redis://127.0.0.1:6400").unwrap(),
            ("127.0.0.1".to_owned(), 6400)
        );
        assert_eq!(
            host_port("redis://:pw@10.0.0.1:7000/2").unwrap(),
            ("10.0.0.1".to_owned(), 7000)
        );
        assert_eq!(host_port("redis://r").unwrap(), ("r".to_owned(), 6379));
    }
}
