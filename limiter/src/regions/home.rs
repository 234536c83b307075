//! An account's home region when nothing names one: weighted rendezvous hashing over the regions.
//! Each region scores the account with a hash of both, scaled by the region's weight
//! (`-weight / ln(u)`, `u` the hash in (0, 1)), and the highest score is the home. Every limiter
//! in every region computes the same home from the same list, with no table to share; a region's
//! share of the accounts is its share of the weights; and a change moves only what it must: a
//! region added takes accounts from the others and gives none between them, a region removed (or
//! its weight set to 0) gives its accounts out and moves no other, a weight raised only draws
//! accounts to that region.
//!
//! A region evacuated (maintenance, an outage) keeps its place in the hash, and the accounts it
//! wins go to its secondary, or, with none that can take them, to the best region of the hash
//! that is not evacuated: every other account stays where it is, and the accounts come back when
//! the evacuation ends.

/// A region as the home rule sees it: its name, its weight (0: home of no account), and whether
/// it is evacuated, with the region that takes its accounts meanwhile.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Region {
    pub name: String,
    pub weight: u32,
    pub evacuated: bool,
    pub secondary: Option<String>,
}

impl Region {
    /// Whether it may be an account's home now.
    pub fn open(&self) -> bool {
        self.weight > 0 && !self.evacuated
    }
}

/// The home of `account_id` among `regions`: the one with the highest score, or when that one is
/// evacuated, its secondary (if open) or else the highest score among the open ones; `None` when
/// no region is open. Ties (equal scores) go to the name that sorts first, so the order of the
/// list does not matter.
pub fn home_of<'a>(account_id: &str, regions: &'a [Region]) -> Option<&'a Region> {
    let hashed = best(account_id, regions.iter().filter(|r| r.weight > 0))?;
    match hashed.evacuated {
        false => Some(hashed),
        true => stand_in(account_id, hashed, regions),
    }
}

/// The home of an account whose home a source names (`named.rs`): that region, unless it is
/// evacuated (then its secondary, if open, else the hash's best open region, as for a hashed
/// home); a name that is no region of the list is taken as none.
pub fn named_home<'a>(
    account_id: &str,
    named: Option<&str>,
    regions: &'a [Region],
) -> Option<&'a Region> {
    let Some(named) = named.and_then(|name| regions.iter().find(|r| r.name == name)) else {
        return home_of(account_id, regions);
    };
    match named.evacuated {
        false => Some(named),
        true => stand_in(account_id, named, regions),
    }
}

/// Where the accounts of `evacuated` go: its secondary if open, else the best open region.
fn stand_in<'a>(account_id: &str, evacuated: &Region, regions: &'a [Region]) -> Option<&'a Region> {
    let secondary = evacuated.secondary.as_deref();
    secondary
        .and_then(|name| regions.iter().find(|r| r.name == name && r.open()))
        .or_else(|| best(account_id, regions.iter().filter(|r| r.open())))
}

fn best<'a>(account_id: &str, regions: impl Iterator<Item = &'a Region>) -> Option<&'a Region> {
    regions
        .map(|r| (score(account_id, r), r))
        .max_by(|(a, ra), (b, rb)| a.total_cmp(b).then_with(|| rb.name.cmp(&ra.name)))
        .map(|(_, r)| r)
}

/// `-weight / ln(u)` with `u` in (0, 1) from a hash of the account and the region's name: larger
/// for a heavier region, and for one weight distributed so that each region wins its share.
fn score(account_id: &str, region: &Region) -> f64 {
    let mut key = Vec::with_capacity(account_id.len() + region.name.len() + 1);
    key.extend_from_slice(region.name.as_bytes());
    // A separator that neither names nor ids contain, so ("ab", "c") and ("a", "bc") differ.
    key.push(0);
    key.extend_from_slice(account_id.as_bytes());
    let hash = xxhash_rust::xxh3::xxh3_64(&key);
    // The top 53 bits as a fraction in (0, 1): never 0 (ln 0) nor 1 (ln 1 = 0).
    let u = ((hash >> 11) as f64 + 0.5) / (1u64 << 53) as f64;
    -f64::from(region.weight) / u.ln()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn regions(list: &[(&str, u32)]) -> Vec<Region> {
        list.iter()
            .map(|&(name, weight)| Region {
                name: name.into(),
                weight,
                ..Region::default()
            })
            .collect()
    }

    fn accounts() -> Vec<String> {
        (0..30_000).map(|i| format!("acct-{i}")).collect()
    }

    fn homes(accounts: &[String], regions: &[Region]) -> Vec<String> {
        accounts
            .iter()
            .map(|a| home_of(a, regions).unwrap().name.clone())
            .collect()
    }

    #[test]
    fn each_region_is_home_to_its_share_of_the_weights() {
        let list = regions(&[("eu", 1), ("us", 1), ("ap", 2)]);
        let accounts = accounts();
        let homes = homes(&accounts, &list);
        for (name, share) in [("eu", 0.25), ("us", 0.25), ("ap", 0.5)] {
            let got = homes.iter().filter(|h| *h == name).count() as f64 / accounts.len() as f64;
            assert!(
                (got - share).abs() < 0.015,
                "{name}: {got:.3}, weight share {share}"
            );
        }
    }

    #[test]
    fn the_order_of_the_list_does_not_matter_and_the_hash_is_fixed() {
        let list = regions(&[("eu", 1), ("us", 1), ("ap", 2)]);
        let mut reversed = list.clone();
        reversed.reverse();
        let accounts = accounts();
        assert_eq!(homes(&accounts, &list), homes(&accounts, &reversed));
        // Fixed values: a change of hash would move homes between releases mid-flight.
        let first: Vec<String> = homes(&accounts[..6], &list);
        assert_eq!(first, ["eu", "ap", "ap", "ap", "ap", "ap"]);
    }

    #[test]
    fn a_region_added_takes_accounts_and_moves_none_between_the_others() {
        let before = regions(&[("eu", 1), ("us", 1)]);
        let after = regions(&[("eu", 1), ("us", 1), ("ap", 1)]);
        let accounts = accounts();
        let (was, is) = (homes(&accounts, &before), homes(&accounts, &after));
        let moved = was.iter().zip(&is).filter(|(w, i)| w != i);
        assert!(
            moved.clone().all(|(_, i)| i == "ap"),
            "only to the new region"
        );
        let share = moved.count() as f64 / accounts.len() as f64;
        assert!((share - 1.0 / 3.0).abs() < 0.015, "{share:.3} moved");
    }

    #[test]
    fn a_region_weighted_0_gives_its_accounts_out_and_moves_no_other() {
        let before = regions(&[("eu", 1), ("us", 1), ("ap", 1)]);
        let after = regions(&[("eu", 1), ("us", 1), ("ap", 0)]);
        let accounts = accounts();
        let (was, is) = (homes(&accounts, &before), homes(&accounts, &after));
        for (w, i) in was.iter().zip(&is) {
            assert!(i != "ap", "a region weighted 0 is home to none");
            if w != "ap" {
                assert_eq!(w, i, "an account of another region moved");
            }
        }
        assert!(home_of("acct-1", &regions(&[("eu", 0)])).is_none());
    }

    #[test]
    fn a_weight_raised_only_draws_accounts_to_its_region() {
        let before = regions(&[("eu", 1), ("us", 1), ("ap", 1)]);
        let after = regions(&[("eu", 1), ("us", 1), ("ap", 3)]);
        let accounts = accounts();
        let (was, is) = (homes(&accounts, &before), homes(&accounts, &after));
        assert!(
            was.iter()
                .zip(&is)
                .filter(|(w, i)| w != i)
                .all(|(_, i)| i == "ap")
        );
    }

    #[test]
    fn an_evacuated_region_gives_its_accounts_to_its_secondary_and_moves_no_other() {
        let before = regions(&[("eu", 1), ("us", 1), ("ap", 1)]);
        let mut after = before.clone();
        after[2].evacuated = true;
        after[2].secondary = Some("eu".into());
        let accounts = accounts();
        let (was, is) = (homes(&accounts, &before), homes(&accounts, &after));
        for (w, i) in was.iter().zip(&is) {
            match w.as_str() {
                "ap" => assert_eq!(i, "eu", "to the secondary"),
                _ => assert_eq!(w, i, "an account of another region moved"),
            }
        }
        // The evacuation over, every account is back where it was.
        after[2].evacuated = false;
        assert_eq!(homes(&accounts, &after), was);
    }

    #[test]
    fn with_no_open_secondary_the_accounts_spread_as_if_the_region_weighed_0() {
        let weighed_0 = regions(&[("eu", 1), ("us", 1), ("ap", 0)]);
        let mut evacuated = regions(&[("eu", 1), ("us", 1), ("ap", 1)]);
        evacuated[2].evacuated = true;
        let accounts = accounts();
        assert_eq!(homes(&accounts, &evacuated), homes(&accounts, &weighed_0));
        // A secondary itself evacuated (or weighing 0) is passed over the same way.
        evacuated[2].secondary = Some("us".into());
        evacuated[1].evacuated = true;
        let only_eu = homes(&accounts, &evacuated);
        assert!(only_eu.iter().all(|h| h == "eu"));
        evacuated[0].evacuated = true;
        assert!(home_of("acct-1", &evacuated).is_none(), "no region is open");
    }

    #[test]
    fn a_named_home_decides_unless_evacuated_and_an_unknown_name_is_none() {
        let mut list = regions(&[("eu", 1), ("us", 1), ("ap", 0)]);
        let account = homes(&accounts()[..1], &list)[0].clone();
        let other = ["eu", "us"].into_iter().find(|r| *r != account).unwrap();
        let named = |name: Option<&str>, list: &[Region]| {
            named_home("acct-0", name, list).map(|r| r.name.clone())
        };
        assert_eq!(named(Some(other), &list).as_deref(), Some(other));
        assert_eq!(
            named(Some("ap"), &list).as_deref(),
            Some("ap"),
            "weight 0 named"
        );
        assert_eq!(
            named(Some("mars"), &list),
            Some(account.clone()),
            "as if none"
        );
        assert_eq!(named(None, &list), Some(account));
        list[2].evacuated = true;
        list[2].secondary = Some("us".into());
        assert_eq!(named(Some("ap"), &list).as_deref(), Some("us"));
    }
}
