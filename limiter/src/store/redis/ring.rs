//! Which shard owns an account: a stable 64-bit hash of the account id fed to Lamping and
//! Veach's jump consistent hash. Growing from N to N+1 shards moves about 1/(N+1) of accounts and
//! nothing else; shards must therefore only ever be appended to the configured list.

/// The shard index for `account_id` among `shards` shards (`shards` >= 1).
pub fn shard_for(account_id: &str, shards: usize) -> usize {
    jump_hash(
        xxhash_rust::xxh3::xxh3_64(account_id.as_bytes()),
        shards as i64,
    ) as usize
}

/// "A Fast, Minimal Memory, Consistent Hash Algorithm", Lamping & Veach, 2014.
fn jump_hash(mut key: u64, buckets: i64) -> i64 {
    let (mut b, mut j) = (-1i64, 0i64);
    while j < buckets {
        b = j;
        key = key.wrapping_mul(2862933555777941757).wrapping_add(1);
        j = ((b + 1) as f64 * ((1i64 << 31) as f64 / ((key >> 33) + 1) as f64)) as i64;
    }
    b
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_shard_owns_everything() {
        assert_eq!(shard_for("anything", 1), 0);
    }

    #[test]
    fn the_mapping_is_stable_across_processes() {
        // Fixed values: a change here would move every account to another shard on upgrade.
        let got: Vec<usize> = (1..=8)
            .map(|i| shard_for(&format!("acct-{i}"), 8))
            .collect();
        assert_eq!(got, [3, 3, 4, 0, 6, 6, 4, 6]);
        assert_eq!(jump_hash(0xdead_beef, 1000), 285);
        assert_eq!(jump_hash(0, 10), 0);
        assert_eq!(jump_hash(0xdead_beef, 1000), jump_hash(0xdead_beef, 1000));
    }

    #[test]
    fn adding_a_shard_moves_about_one_in_n_accounts_and_only_to_the_new_shard() {
        let accounts: Vec<String> = (0..30_000).map(|i| format!("acct-{i}")).collect();
        for shards in [2usize, 3, 8, 27] {
            let mut moved = 0;
            for a in &accounts {
                let (before, after) = (shard_for(a, shards), shard_for(a, shards + 1));
                if before != after {
                    assert_eq!(after, shards, "an account may move only to the new shard");
                    moved += 1;
                }
            }
            let expected = accounts.len() as f64 / (shards + 1) as f64;
            let ratio = moved as f64 / expected;
            assert!(
                (0.9..1.1).contains(&ratio),
                "{shards}->{}: moved {moved}, expected ~{expected}",
                shards + 1
            );
        }
    }

    #[test]
    fn accounts_spread_evenly() {
        let mut counts = [0usize; 4];
        for i in 0..40_000 {
            counts[shard_for(&format!("acct-{i}"), 4)] += 1;
        }
        for c in counts {
            assert!((9_000..11_000).contains(&c), "{counts:?}");
        }
    }
}
