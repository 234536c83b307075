//! The limiter instances' decision counters as sampled by this dashboard process, turned into
//! per-second rates for the tables and into the last minutes' history for the charts.
//!
//! Samples are taken when someone looks at the fleet page (each htmx refresh is one), so the
//! history covers the time the page was open; a stretch nobody watched is a gap, not a guess.
//! Memory is bounded: at most [`MAX_SAMPLES`] per instance, [`MAX_INSTANCES`] instances.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::sync::Mutex;
use std::time::{Duration, Instant};

pub type Counters = BTreeMap<String, u64>;

/// How far back the charts reach.
pub const HISTORY: Duration = Duration::from_secs(10 * 60);
/// The table's rates average over at most this long.
const RATE_WINDOW: Duration = Duration::from_secs(60);
/// A rate needs two samples at least this far apart; samples closer than this are not kept.
const MIN_SPAN: Duration = Duration::from_secs(2);
/// Two samples further apart than this leave a gap in the charts (the page was closed).
const MAX_GAP: Duration = Duration::from_secs(30);
/// Samples kept per instance: one per `MIN_SPAN` over `HISTORY`.
pub const MAX_SAMPLES: usize = (HISTORY.as_secs() / MIN_SPAN.as_secs()) as usize;
/// Instances remembered; beyond it the one sampled longest ago is forgotten.
pub const MAX_INSTANCES: usize = 64;
/// The charts' resolution: `HISTORY` in this many buckets.
pub const BUCKETS: usize = 60;

/// Recent counter samples per instance.
#[derive(Default)]
pub struct Samples {
    by_url: Mutex<HashMap<String, VecDeque<(Instant, Counters)>>>,
}

/// What each counter grew by from `before` to `after`; a counter that went down was reset (the
/// instance restarted), so all of its value is new.
fn increase(before: &Counters, after: &Counters) -> Counters {
    after
        .iter()
        .map(|(name, &value)| {
            let base = before.get(name).copied().unwrap_or(0);
            let grown = if value >= base { value - base } else { value };
            (name.clone(), grown)
        })
        .collect()
}

/// The fleet's decisions per second in each bucket of the last [`HISTORY`], oldest first;
/// `None` where no instance was sampled.
pub type Buckets = Vec<Option<BTreeMap<String, f64>>>;

impl Samples {
    /// Records `counters` of the instance at `url` and returns its per-second rates over the
    /// last minute, once a sample at least [`MIN_SPAN`] old exists.
    pub fn rates(
        &self,
        url: &str,
        now: Instant,
        counters: &Counters,
    ) -> Option<BTreeMap<String, f64>> {
        let mut by_url = self.by_url.lock().expect("samples lock");
        if !by_url.contains_key(url) && by_url.len() >= MAX_INSTANCES {
            let stalest = by_url
                .iter()
                .min_by_key(|(_, samples)| samples.back().map(|(at, _)| *at))
                .map(|(url, _)| url.clone());
            if let Some(stalest) = stalest {
                by_url.remove(&stalest);
            }
        }
        let samples = by_url.entry(url.to_owned()).or_default();
        samples.retain(|(at, _)| now.saturating_duration_since(*at) <= HISTORY);
        let mut grown = Counters::new();
        let mut since = None;
        let mut previous = counters;
        for (at, sample) in samples.iter().rev() {
            if now.saturating_duration_since(*at) > RATE_WINDOW {
                break;
            }
            for (name, value) in increase(sample, previous) {
                *grown.entry(name).or_default() += value;
            }
            previous = sample;
            since = Some(*at);
        }
        let rates = since
            .map(|at| now.saturating_duration_since(at))
            .filter(|span| *span >= MIN_SPAN)
            .map(|span| {
                counters
                    .keys()
                    .map(|name| {
                        let value = grown.get(name).copied().unwrap_or(0);
                        (name.clone(), value as f64 / span.as_secs_f64())
                    })
                    .collect()
            });
        if samples
            .back()
            .is_none_or(|(at, _)| now.saturating_duration_since(*at) >= MIN_SPAN)
        {
            samples.push_back((now, counters.clone()));
            while samples.len() > MAX_SAMPLES {
                samples.pop_front();
            }
        }
        rates
    }

    /// The fleet's decisions per second over the last [`HISTORY`] in [`BUCKETS`] buckets ending
    /// at `now`: each instance's growth between two samples is spread over the buckets their
    /// span covers, divided by the time covered; the instances' rates are added.
    pub fn history(&self, now: Instant) -> Buckets {
        let width = HISTORY / BUCKETS as u32;
        // Bucket `i` covers [start, start + width), the last one ending at `now`.
        let starts: Vec<Option<Instant>> = (0..BUCKETS)
            .map(|i| now.checked_sub(width * (BUCKETS - i) as u32))
            .collect();
        let by_url = self.by_url.lock().expect("samples lock");
        let mut fleet: Buckets = vec![None; BUCKETS];
        for samples in by_url.values() {
            // Per bucket: what grew in it, and for how long it was covered.
            let mut grown = vec![(BTreeMap::<String, f64>::new(), Duration::ZERO); BUCKETS];
            for ((from, before), (to, after)) in samples.iter().zip(samples.iter().skip(1)) {
                let span = to.saturating_duration_since(*from);
                if span.is_zero() || span > MAX_GAP {
                    continue;
                }
                let increase = increase(before, after);
                for ((counts, covered), start) in grown.iter_mut().zip(&starts) {
                    let Some(start) = *start else { continue };
                    let overlap = (*to)
                        .min(start + width)
                        .saturating_duration_since((*from).max(start));
                    if overlap.is_zero() {
                        continue;
                    }
                    let share = overlap.as_secs_f64() / span.as_secs_f64();
                    for (name, value) in &increase {
                        *counts.entry(name.clone()).or_default() += *value as f64 * share;
                    }
                    *covered += overlap;
                }
            }
            for (slot, (counts, covered)) in fleet.iter_mut().zip(grown) {
                if covered.is_zero() {
                    continue;
                }
                let rates = slot.get_or_insert_with(BTreeMap::new);
                for (name, count) in counts {
                    *rates.entry(name).or_default() += count / covered.as_secs_f64();
                }
            }
        }
        fleet
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn counters(allowed: u64) -> Counters {
        [("allowed".to_owned(), allowed)].into_iter().collect()
    }

    fn secs(s: u64) -> Duration {
        Duration::from_secs(s)
    }

    #[test]
    fn rates_need_two_samples_two_seconds_apart() {
        let samples = Samples::default();
        let t0 = Instant::now();
        assert!(samples.rates("a", t0, &counters(10)).is_none());
        assert!(
            samples
                .rates("a", t0 + Duration::from_millis(300), &counters(12))
                .is_none()
        );
        let rates = samples.rates("a", t0 + secs(2), &counters(30)).unwrap();
        assert_eq!(rates["allowed"], 10.0);
    }

    #[test]
    fn a_restart_counts_from_zero_instead_of_going_negative() {
        let samples = Samples::default();
        let t0 = Instant::now();
        samples.rates("a", t0, &counters(100));
        samples.rates("a", t0 + secs(5), &counters(150));
        // Restarted: the counter is back to 20, all of it new.
        let rates = samples.rates("a", t0 + secs(10), &counters(20)).unwrap();
        assert_eq!(rates["allowed"], 7.0, "(50 + 20) / 10 s");
    }

    #[test]
    fn the_table_rate_looks_back_one_minute() {
        let samples = Samples::default();
        let t0 = Instant::now();
        samples.rates("a", t0, &counters(0));
        samples.rates("a", t0 + secs(30), &counters(3000));
        samples.rates("a", t0 + secs(60), &counters(3060));
        let rates = samples.rates("a", t0 + secs(90), &counters(3120)).unwrap();
        assert_eq!(
            rates["allowed"], 2.0,
            "the burst before the last minute is out"
        );
    }

    #[test]
    fn memory_is_bounded_per_instance_and_in_instances() {
        let samples = Samples::default();
        let t0 = Instant::now();
        for i in 0..(MAX_SAMPLES as u64 * 2) {
            samples.rates("a", t0 + secs(i * 2), &counters(i));
        }
        for i in 0..(MAX_INSTANCES + 10) {
            samples.rates(&format!("u{i}"), t0 + secs(10_000 + i as u64), &counters(1));
        }
        let by_url = samples.by_url.lock().unwrap();
        assert_eq!(by_url.len(), MAX_INSTANCES);
        assert!(by_url.values().all(|s| s.len() <= MAX_SAMPLES));
        assert!(!by_url.contains_key("a"), "the stalest instance went first");
    }

    #[test]
    fn history_is_empty_until_two_samples_exist() {
        let samples = Samples::default();
        let t0 = Instant::now() + HISTORY;
        assert!(samples.history(t0).iter().all(Option::is_none));
        samples.rates("a", t0, &counters(5));
        let history = samples.history(t0 + secs(1));
        assert_eq!(history.len(), BUCKETS);
        assert!(history.iter().all(Option::is_none), "one sample is no rate");
    }

    #[test]
    fn history_spreads_growth_over_buckets_and_adds_instances() {
        let samples = Samples::default();
        // Start far enough in the future that `now - HISTORY` exists.
        let t0 = Instant::now() + HISTORY;
        // Instance a: 10/s for 20 s (two 10 s buckets); instance b: 1/s over the same time.
        samples.rates("a", t0, &counters(0));
        samples.rates("a", t0 + secs(20), &counters(200));
        samples.rates("b", t0, &counters(0));
        samples.rates("b", t0 + secs(20), &counters(20));
        let history = samples.history(t0 + secs(20));
        let filled: Vec<f64> = history
            .iter()
            .flatten()
            .map(|rates| rates["allowed"])
            .collect();
        assert_eq!(filled, [11.0, 11.0]);
        assert!(history[BUCKETS - 1].is_some() && history[BUCKETS - 3].is_none());
    }

    #[test]
    fn a_long_unwatched_stretch_is_a_gap_and_a_reset_is_not_negative() {
        let samples = Samples::default();
        let t0 = Instant::now() + HISTORY;
        samples.rates("a", t0, &counters(0));
        samples.rates("a", t0 + secs(10), &counters(100));
        // Nobody watched for 4 minutes, then the instance restarted.
        samples.rates("a", t0 + secs(250), &counters(90_000));
        samples.rates("a", t0 + secs(260), &counters(30));
        let history = samples.history(t0 + secs(260));
        let filled: Vec<f64> = history
            .iter()
            .flatten()
            .map(|rates| rates["allowed"])
            .collect();
        assert_eq!(filled, [10.0, 3.0], "the 4 minutes between are not drawn");
    }
}
