//! Sign-in throttling, per user name and per client address.
//!
//! Every attempt counts as a failure when it starts (so that a burst of concurrent guesses is
//! counted before any of them is verified); a success takes its count back and clears the user's.
//! The first `free_failures` of a key cost nothing; after that each attempt must wait its turn,
//! `base_delay` doubled for every further failure (at most `max_delay`), and concurrent attempts
//! queue behind each other; an attempt whose turn is further away than `max_delay` is refused
//! at once. At `lockout_after` failures the key is refused for `lockout`. A key with no attempt
//! for `lockout` is forgotten.
//!
//! Memory is bounded: each map holds at most `capacity` keys; when full, forgotten keys go
//! first, then the least recently seen tenth, keys under lockout last.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// The throttle's rules (flags `--signin-*`).
#[derive(Debug, Clone)]
pub struct ThrottleRules {
    /// Failures allowed without delay.
    pub free_failures: u32,
    /// Delay after the first counted failure; doubles with each further one.
    pub base_delay: Duration,
    /// Longest wait an attempt is made to sit through; a longer one is refused (429).
    pub max_delay: Duration,
    /// Failures of one user name that lock it out for `lockout`.
    pub user_lockout_after: u32,
    /// Failures from one client address that lock it out for `lockout`.
    pub address_lockout_after: u32,
    /// How long a lockout lasts; also how long an idle key's count is remembered.
    pub lockout: Duration,
    /// Keys each map holds at most.
    pub capacity: usize,
}

impl Default for ThrottleRules {
    fn default() -> Self {
        ThrottleRules {
            free_failures: 3,
            base_delay: Duration::from_millis(500),
            max_delay: Duration::from_secs(8),
            user_lockout_after: 10,
            address_lockout_after: 30,
            lockout: Duration::from_secs(15 * 60),
            capacity: 10_000,
        }
    }
}

#[derive(Debug, Clone)]
struct Entry {
    failures: u32,
    /// The earliest time the next attempt may be verified.
    next_turn: Instant,
    locked_until: Option<Instant>,
    last_seen: Instant,
}

impl Entry {
    fn new(now: Instant) -> Entry {
        Entry {
            failures: 0,
            next_turn: now,
            locked_until: None,
            last_seen: now,
        }
    }

    fn locked(&self, now: Instant) -> Option<Duration> {
        self.locked_until
            .filter(|until| *until > now)
            .map(|until| until - now)
    }
}

/// One bounded map of counts, keyed by user name or by address.
struct Counts<K> {
    map: HashMap<K, Entry>,
    lockout_after: u32,
}

impl<K: std::hash::Hash + Eq + Clone> Counts<K> {
    fn new(lockout_after: u32) -> Self {
        Counts {
            map: HashMap::new(),
            lockout_after,
        }
    }

    fn forgotten(entry: &Entry, now: Instant, rules: &ThrottleRules) -> bool {
        entry.locked(now).is_none() && now.duration_since(entry.last_seen) >= rules.lockout
    }

    fn entry(&mut self, key: &K, now: Instant, rules: &ThrottleRules) -> &mut Entry {
        if !self.map.contains_key(key) && self.map.len() >= rules.capacity.max(1) {
            self.evict(now, rules);
        }
        let entry = self
            .map
            .entry(key.clone())
            .or_insert_with(|| Entry::new(now));
        if Self::forgotten(entry, now, rules) {
            *entry = Entry::new(now);
        }
        entry
    }

    /// Makes room: forgotten keys first, then the least recently seen tenth (locked keys last).
    fn evict(&mut self, now: Instant, rules: &ThrottleRules) {
        self.map.retain(|_, e| !Self::forgotten(e, now, rules));
        if self.map.len() < rules.capacity.max(1) {
            return;
        }
        let mut order: Vec<(bool, Instant, K)> = self
            .map
            .iter()
            .map(|(k, e)| (e.locked(now).is_some(), e.last_seen, k.clone()))
            .collect();
        order.sort_by_key(|(locked, seen, _)| (*locked, *seen));
        let drop = (self.map.len() / 10).max(1);
        for (_, _, key) in order.into_iter().take(drop) {
            self.map.remove(&key);
        }
    }

    fn len(&self) -> usize {
        self.map.len()
    }
}

/// The key a typed user name is counted under: itself, or for names longer than any user's
/// (the id rules allow 64 characters) one shared key, so a key is never large.
fn user_key(user: &str) -> String {
    if user.len() <= screenlimit_limiter::ids::MAX_ID_LEN {
        user.to_owned()
    } else {
        "\u{0}longer than any user name".to_owned()
    }
}

/// Whether an attempt may go on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    /// Verify after waiting `wait` (zero for the first few failures).
    Proceed { wait: Duration },
    /// Refused; try again after `retry_after`. `lockout_started` is true for the attempt that
    /// started a lockout (logged once per lockout, not once per refused attempt).
    Refused {
        retry_after: Duration,
        locked: bool,
        lockout_started: bool,
    },
}

/// The sign-in throttle: one map of counts per user name, one per client address.
pub struct Throttle {
    rules: ThrottleRules,
    inner: Mutex<(Counts<String>, Counts<IpAddr>)>,
}

impl Throttle {
    pub fn new(rules: ThrottleRules) -> Throttle {
        Throttle {
            inner: Mutex::new((
                Counts::new(rules.user_lockout_after),
                Counts::new(rules.address_lockout_after),
            )),
            rules,
        }
    }

    pub fn rules(&self) -> &ThrottleRules {
        &self.rules
    }

    fn delay(&self, failures: u32) -> Duration {
        if failures < self.rules.free_failures {
            return Duration::ZERO;
        }
        let doublings = (failures - self.rules.free_failures).min(20);
        self.rules
            .base_delay
            .saturating_mul(1 << doublings)
            .min(self.rules.max_delay)
    }

    /// Decides whether an attempt for `user` from `address` may be verified, and counts it as a
    /// failure until [`Throttle::succeeded`] says otherwise.
    pub fn attempt(&self, user: &str, address: IpAddr) -> Verdict {
        self.attempt_at(user, address, Instant::now())
    }

    fn attempt_at(&self, user: &str, address: IpAddr, now: Instant) -> Verdict {
        let mut guard = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        let (users, addresses) = &mut *guard;
        let user_key = user_key(user);
        // Refused at once while either key is locked out.
        let locked = [
            users.entry(&user_key, now, &self.rules).locked(now),
            addresses.entry(&address, now, &self.rules).locked(now),
        ]
        .into_iter()
        .flatten()
        .max();
        if let Some(retry_after) = locked {
            return Verdict::Refused {
                retry_after,
                locked: true,
                lockout_started: false,
            };
        }
        let turn = {
            let u = users.entry(&user_key, now, &self.rules);
            let a_turn = addresses.map.get(&address).map_or(now, |a| a.next_turn);
            u.next_turn.max(a_turn).max(now)
        };
        let wait = turn - now;
        if wait > self.rules.max_delay {
            return Verdict::Refused {
                retry_after: wait,
                locked: false,
                lockout_started: false,
            };
        }
        let mut lockout_started = false;
        let mut counted =
            |entry: &mut Entry, lockout_after: u32, delay: &dyn Fn(u32) -> Duration| {
                entry.last_seen = now;
                entry.next_turn = turn + delay(entry.failures);
                entry.failures += 1;
                if entry.failures > lockout_after {
                    entry.locked_until = Some(now + self.rules.lockout);
                    lockout_started = true;
                }
            };
        let delay = |f| self.delay(f);
        let user_limit = users.lockout_after;
        counted(users.entry(&user_key, now, &self.rules), user_limit, &delay);
        let address_limit = addresses.lockout_after;
        counted(
            addresses.entry(&address, now, &self.rules),
            address_limit,
            &delay,
        );
        if lockout_started {
            return Verdict::Refused {
                retry_after: self.rules.lockout,
                locked: true,
                lockout_started: true,
            };
        }
        Verdict::Proceed { wait }
    }

    /// A verified sign-in: the user's count is cleared, the address's attempt taken back.
    pub fn succeeded(&self, user: &str, address: IpAddr) {
        let mut guard = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        let (users, addresses) = &mut *guard;
        users.map.remove(&user_key(user));
        Self::take_back(addresses.map.get_mut(&address), &self.rules);
    }

    /// An attempt that was never verified (no verification slot in time): not a failure.
    pub fn not_tried(&self, user: &str, address: IpAddr) {
        let mut guard = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        let (users, addresses) = &mut *guard;
        Self::take_back(users.map.get_mut(&user_key(user)), &self.rules);
        Self::take_back(addresses.map.get_mut(&address), &self.rules);
    }

    fn take_back(entry: Option<&mut Entry>, rules: &ThrottleRules) {
        if let Some(entry) = entry {
            entry.failures = entry.failures.saturating_sub(1);
            if entry.failures < rules.free_failures {
                entry.next_turn = entry.last_seen;
            }
        }
    }

    /// Keys held: (user names, addresses).
    pub fn sizes(&self) -> (usize, usize) {
        let guard = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        (guard.0.len(), guard.1.len())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rules() -> ThrottleRules {
        ThrottleRules {
            free_failures: 2,
            base_delay: Duration::from_millis(100),
            max_delay: Duration::from_millis(400),
            user_lockout_after: 6,
            address_lockout_after: 20,
            lockout: Duration::from_secs(60),
            capacity: 100,
        }
    }

    fn ip(last: u8) -> IpAddr {
        IpAddr::from([10, 0, 0, last])
    }

    #[test]
    fn delays_grow_then_lock_out_and_success_clears() {
        let throttle = Throttle::new(rules());
        let t0 = Instant::now();
        let mut now = t0;
        let mut waits = Vec::new();
        for _ in 0..6 {
            match throttle.attempt_at("ana", ip(1), now) {
                Verdict::Proceed { wait } => {
                    now += wait;
                    waits.push(wait.as_millis());
                }
                other => panic!("refused too early: {other:?}"),
            }
        }
        assert_eq!(waits, [0, 0, 0, 100, 200, 400]);
        match throttle.attempt_at("ana", ip(1), now + Duration::from_millis(400)) {
            Verdict::Refused {
                locked: true,
                lockout_started: true,
                ..
            } => {}
            other => panic!("expected a lockout: {other:?}"),
        }
        match throttle.attempt_at("ana", ip(2), now + Duration::from_secs(1)) {
            Verdict::Refused {
                locked: true,
                lockout_started: false,
                retry_after,
            } => assert!(retry_after > Duration::from_secs(50)),
            other => panic!("expected a refusal: {other:?}"),
        }
        // Another user from the same address is not locked out.
        assert!(matches!(
            throttle.attempt_at("bo", ip(1), now + Duration::from_secs(1)),
            Verdict::Proceed { .. }
        ));
        // The lockout ends; a success then clears the user's count.
        let later = now + Duration::from_secs(61);
        assert!(matches!(
            throttle.attempt_at("ana", ip(3), later),
            Verdict::Proceed { .. }
        ));
        throttle.succeeded("ana", ip(3));
        for _ in 0..2 {
            assert_eq!(
                throttle.attempt_at("ana", ip(3), later),
                Verdict::Proceed {
                    wait: Duration::ZERO
                }
            );
        }
    }

    #[test]
    fn concurrent_attempts_queue_and_the_far_ones_are_refused() {
        let throttle = Throttle::new(rules());
        let now = Instant::now();
        let verdicts: Vec<Verdict> = (0..8)
            .map(|_| throttle.attempt_at("ana", ip(1), now))
            .collect();
        let waits: Vec<u128> = verdicts
            .iter()
            .map(|v| match v {
                Verdict::Proceed { wait } => wait.as_millis(),
                Verdict::Refused { .. } => u128::MAX,
            })
            .collect();
        assert_eq!(&waits[..5], [0, 0, 0, 100, 300]);
        assert!(waits[5..].iter().all(|w| *w == u128::MAX), "{waits:?}");
    }

    #[test]
    fn memory_is_bounded() {
        let throttle = Throttle::new(rules());
        let now = Instant::now();
        for i in 0..1000u32 {
            let address = IpAddr::from(i.to_be_bytes());
            throttle.attempt_at(&format!("user-{i}"), address, now);
        }
        let (users, addresses) = throttle.sizes();
        assert!(users <= 100 && addresses <= 100, "{users} {addresses}");
        // However long the names typed, a key stays short.
        let throttle = Throttle::new(rules());
        for i in 0..10u8 {
            throttle.attempt_at(&"x".repeat(10_000 + usize::from(i)), ip(i), now);
        }
        assert_eq!(throttle.sizes().0, 1);
    }
}
