//! Which accounts the limits refuse plays for: every account (`enforce`), none (`shadow`: a play
//! the limits would refuse is let through and counted), or a share chosen by a stable hash of the
//! account id, so an account does not flip between plays and a higher share only adds accounts.
//! A plan may have its own (`plans.<name>.enforcement`).

use std::collections::BTreeMap;

/// Seeds the account's bucket apart from its shard (`store/redis/ring.rs` hashes the same id
/// unseeded): the accounts enforced first are not those of one shard.
const BUCKET_SEED: u64 = 0x5c4e_e11f_0e7c_e000;

/// The share of accounts enforced, in percent.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Enforcement {
    percent: u8,
}

impl Default for Enforcement {
    fn default() -> Self {
        Enforcement::ENFORCE
    }
}

impl Enforcement {
    pub const ENFORCE: Enforcement = Enforcement { percent: 100 };
    pub const SHADOW: Enforcement = Enforcement { percent: 0 };

    /// `percent` of the accounts enforced (above 100 counts as 100).
    pub fn percent(percent: u32) -> Enforcement {
        Enforcement {
            percent: percent.min(100) as u8,
        }
    }

    /// The share enforced, 0 to 100.
    pub fn enforced_percent(self) -> u8 {
        self.percent
    }

    /// Whether a play of `account_id` over a limit is refused (else it is let through in shadow).
    pub fn enforces(self, account_id: &str) -> bool {
        match self.percent {
            100 => true,
            0 => false,
            share => bucket(account_id) < share,
        }
    }
}

/// The account's place among 100 buckets, the same in every process and release.
pub fn bucket(account_id: &str) -> u8 {
    (xxhash_rust::xxh3::xxh3_64_with_seed(account_id.as_bytes(), BUCKET_SEED) % 100) as u8
}

/// The enforcement in force: the top-level one, and the plans that have their own.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct EnforcementBook {
    pub default: Enforcement,
    pub plans: BTreeMap<String, Enforcement>,
}

impl EnforcementBook {
    /// The enforcement of an account on `plan` (`None`: a play that names no plan, held to the
    /// plan the store remembers, follows the top-level block).
    pub fn of_plan(&self, plan: Option<&str>) -> Enforcement {
        plan.and_then(|name| self.plans.get(name).copied())
            .unwrap_or(self.default)
    }

    /// Whether `account_id` on `plan` is enforced.
    pub fn enforces(&self, account_id: &str, plan: Option<&str>) -> bool {
        self.of_plan(plan).enforces(account_id)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_share_enforced_is_close_to_its_percent_and_only_grows_with_it() {
        let accounts: Vec<String> = (0..20_000).map(|i| format!("acct-{i}")).collect();
        let enforced = |percent| {
            let rule = Enforcement::percent(percent);
            accounts.iter().filter(|a| rule.enforces(a)).count()
        };
        assert_eq!(enforced(0), 0);
        assert_eq!(enforced(100), accounts.len());
        for percent in [1, 10, 25, 50, 90] {
            let share = enforced(percent) as f64 / accounts.len() as f64 * 100.0;
            assert!(
                (share - percent as f64).abs() < 1.5,
                "{percent}% asked, {share:.2}% enforced"
            );
        }
        // Raising the share adds accounts and never drops one.
        let ten = Enforcement::percent(10);
        let thirty = Enforcement::percent(30);
        assert!(
            accounts
                .iter()
                .filter(|a| ten.enforces(a))
                .all(|a| thirty.enforces(a))
        );
    }

    #[test]
    fn an_account_keeps_its_bucket_across_processes_and_releases() {
        // Fixed values: a change of hash or seed would move accounts between sides mid-rollout.
        let buckets: Vec<u8> = ["acct-1", "acct-2", "family-42"].map(bucket).to_vec();
        assert_eq!(buckets, KNOWN_BUCKETS.to_vec());
    }

    const KNOWN_BUCKETS: [u8; 3] = [82, 19, 41];

    #[test]
    fn a_plan_of_its_own_wins_over_the_top_level_block() {
        let book = EnforcementBook {
            default: Enforcement::ENFORCE,
            plans: [("standard".to_owned(), Enforcement::SHADOW)].into(),
        };
        assert!(!book.enforces("acct-1", Some("standard")));
        assert!(book.enforces("acct-1", Some("premium")));
        assert!(book.enforces("acct-1", None));
    }
}
