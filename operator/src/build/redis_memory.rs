//! How much memory a managed shard may hold: `maxmemory` from the container's memory limit, so
//! that a full shard refuses new plays (`noeviction`, the failure policy decides) instead of
//! growing until the kubelet kills it and every lease and tombstone is lost at once.

use crate::crd::StreamLimiter;

/// `maxmemory` is this share of the container's memory limit. Redis counts its dataset against
/// `maxmemory`, not what else the process holds: the allocator's fragmentation (10–20 % on
/// small keys that churn, as leases do), the replicas' output buffers and the replication
/// backlog, and the copy-on-write pages of the fork a replica's full resync makes. The 30 %
/// left covers those.
pub const MAXMEMORY_PERCENT: u64 = 70;

/// The shard's `maxmemory` in bytes: [`MAXMEMORY_PERCENT`] of `spec.redis.resources.limits.memory`,
/// or `None` when no limit is set (or it cannot be read).
pub fn maxmemory(sl: &StreamLimiter) -> Option<u64> {
    let limit = memory_limit(sl)?;
    Some(bytes(&limit)? / 100 * MAXMEMORY_PERCENT)
}

/// `spec.redis.resources.limits.memory` as written.
pub fn memory_limit(sl: &StreamLimiter) -> Option<String> {
    let resources = sl.spec.redis.resources.as_ref()?;
    let limits = resources.limits.as_ref()?;
    limits.get("memory").map(|q| q.0.clone())
}

/// A Kubernetes quantity of bytes (`4Gi`, `512Mi`, `1G`, `1500000000`); `None` for forms a
/// memory limit does not take (milli, exponents) or a malformed one.
pub fn bytes(quantity: &str) -> Option<u64> {
    let quantity = quantity.trim();
    let split = quantity
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(quantity.len());
    let (number, suffix) = quantity.split_at(split);
    let number: u64 = number.parse().ok()?;
    let factor: u64 = match suffix {
        "" => 1,
        "k" => 1_000,
        "M" => 1_000_000,
        "G" => 1_000_000_000,
        "T" => 1_000_000_000_000,
        "Ki" => 1 << 10,
        "Mi" => 1 << 20,
        "Gi" => 1 << 30,
        "Ti" => 1 << 40,
        _ => return None,
    };
    number.checked_mul(factor)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quantities_read_as_bytes() {
        assert_eq!(bytes("4Gi"), Some(4 << 30));
        assert_eq!(bytes("512Mi"), Some(512 << 20));
        assert_eq!(bytes("1G"), Some(1_000_000_000));
        assert_eq!(bytes("1500000"), Some(1_500_000));
        assert_eq!(bytes("100m"), None);
        assert_eq!(bytes("1.5Gi"), None);
        assert_eq!(bytes("Gi"), None);
    }
}
