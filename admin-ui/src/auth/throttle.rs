//! Sign-in throttling that strangers cannot turn against the rightful user (OWASP's "device
//! cookies"): a browser that signed in as a user before carries a signed device cookie
//! (`auth::device`), and is judged apart from everyone else.
//!
//! - **A known browser** (a valid device cookie for the name typed) has its own budget:
//!   `device_failures` failures answered at once; past them its cookie is distrusted for
//!   `lockout` and it is judged like a new browser. Strangers' failures never touch it.
//! - **Everyone else** is counted per user name and per client address. Per name, the first
//!   `free_failures` cost nothing; after that every attempt waits `base_delay`, doubled for each
//!   further failure, at most `max_delay`: delayed, never refused, so the rightful user signs in
//!   from a new browser within `max_delay` whatever strangers try. Per address, attempts also
//!   queue behind each other (the same ladder, one at a time), an attempt whose turn is further
//!   away than `max_delay` is refused at once, and at `address_lockout_after` failures the
//!   address is refused for `lockout`.
//!
//! Every attempt counts as a failure when it starts (so that a burst of concurrent guesses is
//! counted before any of them is verified); a success takes its count back (and clears the
//! name's count, or the browser's). A key with no attempt for `lockout` is forgotten.
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
    /// Failures allowed without delay (per name, per address).
    pub free_failures: u32,
    /// Delay after the first counted failure; doubles with each further one.
    pub base_delay: Duration,
    /// Longest wait: a name's attempts wait at most this long; an address's attempt whose turn
    /// is further away is refused (429).
    pub max_delay: Duration,
    /// Failures one known browser may make (answered at once) before its device cookie is
    /// distrusted for `lockout`.
    pub device_failures: u32,
    /// Failures from one client address that lock it out for `lockout`.
    pub address_lockout_after: u32,
    /// How long a lockout lasts; also how long an idle key's count is remembered.
    pub lockout: Duration,
    /// How long a device cookie lasts.
    pub device_ttl: Duration,
    /// Keys each map holds at most.
    pub capacity: usize,
}

impl Default for ThrottleRules {
    fn default() -> Self {
        ThrottleRules {
            free_failures: 3,
            base_delay: Duration::from_millis(500),
            max_delay: Duration::from_secs(8),
            device_failures: 5,
            address_lockout_after: 30,
            lockout: Duration::from_secs(15 * 60),
            device_ttl: Duration::from_secs(90 * 24 * 3600),
            capacity: 10_000,
        }
    }
}

#[derive(Debug, Clone)]
struct Entry {
    failures: u32,
    /// The earliest time the next attempt may be verified (addresses only).
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

/// One bounded map of counts, keyed by user name, address or device cookie.
struct Counts<K> {
    map: HashMap<K, Entry>,
}

impl<K: std::hash::Hash + Eq + Clone> Counts<K> {
    fn new() -> Self {
        Counts {
            map: HashMap::new(),
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

    fn take_back(&mut self, key: &K, rules: &ThrottleRules) {
        if let Some(entry) = self.map.get_mut(key) {
            entry.failures = entry.failures.saturating_sub(1);
            if entry.failures < rules.free_failures {
                entry.next_turn = entry.last_seen;
            }
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

/// What an attempt was counted as, to take back or clear when it is decided.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Ticket {
    user: String,
    address: IpAddr,
    /// The known browser's device id, when the attempt was judged as one.
    device: Option<String>,
    /// This attempt used up its browser's budget: from now on that browser is a new one.
    pub device_distrusted: bool,
}

impl Ticket {
    /// Whether the attempt came from a browser that signed in as this user before.
    pub fn known_browser(&self) -> bool {
        self.device.is_some()
    }
}

/// Whether an attempt may go on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    /// Verify after waiting `wait` (zero for the first few failures and known browsers).
    Proceed { wait: Duration, ticket: Ticket },
    /// Refused (only ever for an address); try again after `retry_after`. `lockout_started` is
    /// true for the attempt that started a lockout (logged once per lockout, not once per
    /// refused attempt).
    Refused {
        retry_after: Duration,
        locked: bool,
        lockout_started: bool,
    },
}

struct Maps {
    users: Counts<String>,
    addresses: Counts<IpAddr>,
    devices: Counts<String>,
}

/// The sign-in throttle: counts per known browser, per user name and per client address.
pub struct Throttle {
    rules: ThrottleRules,
    inner: Mutex<Maps>,
}

impl Throttle {
    pub fn new(rules: ThrottleRules) -> Throttle {
        Throttle {
            inner: Mutex::new(Maps {
                users: Counts::new(),
                addresses: Counts::new(),
                devices: Counts::new(),
            }),
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
    /// failure until [`Throttle::succeeded`] or [`Throttle::not_tried`] says otherwise.
    /// `device` is the id in the browser's device cookie when that cookie is genuine and names
    /// `user`.
    pub fn attempt(&self, user: &str, address: IpAddr, device: Option<&str>) -> Verdict {
        self.attempt_at(user, address, device, Instant::now())
    }

    fn attempt_at(
        &self,
        user: &str,
        address: IpAddr,
        device: Option<&str>,
        now: Instant,
    ) -> Verdict {
        let mut guard = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        let maps = &mut *guard;
        let user_key = user_key(user);
        if let Some(device) = device {
            let entry = maps.devices.entry(&device.to_owned(), now, &self.rules);
            if entry.locked(now).is_none() {
                entry.last_seen = now;
                entry.failures += 1;
                let device_distrusted = entry.failures >= self.rules.device_failures.max(1);
                if device_distrusted {
                    entry.locked_until = Some(now + self.rules.lockout);
                }
                return Verdict::Proceed {
                    wait: Duration::ZERO,
                    ticket: Ticket {
                        user: user_key,
                        address,
                        device: Some(device.to_owned()),
                        device_distrusted,
                    },
                };
            }
        }
        // A new browser (or one whose budget is spent). The address first: refused at once
        // while it is locked out, or when its turn is too far away.
        let rules = &self.rules;
        let a = maps.addresses.entry(&address, now, rules);
        if let Some(retry_after) = a.locked(now) {
            return Verdict::Refused {
                retry_after,
                locked: true,
                lockout_started: false,
            };
        }
        let turn = a.next_turn.max(now);
        if turn - now > rules.max_delay {
            return Verdict::Refused {
                retry_after: turn - now,
                locked: false,
                lockout_started: false,
            };
        }
        a.last_seen = now;
        a.next_turn = turn + self.delay(a.failures);
        a.failures += 1;
        if a.failures > rules.address_lockout_after {
            a.locked_until = Some(now + rules.lockout);
            return Verdict::Refused {
                retry_after: rules.lockout,
                locked: true,
                lockout_started: true,
            };
        }
        // Then the name: a delay that grows with its failures, never a refusal.
        let u = maps.users.entry(&user_key, now, rules);
        let name_wait = self.delay(u.failures);
        u.last_seen = now;
        u.failures += 1;
        Verdict::Proceed {
            wait: (turn - now).max(name_wait).min(rules.max_delay),
            ticket: Ticket {
                user: user_key,
                address,
                device: None,
                device_distrusted: false,
            },
        }
    }

    /// A verified sign-in: the count it was judged by is cleared (the browser's, or the
    /// name's), the address's attempt taken back.
    pub fn succeeded(&self, ticket: &Ticket) {
        let mut guard = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        let maps = &mut *guard;
        match &ticket.device {
            Some(device) => {
                maps.devices.map.remove(device);
            }
            None => {
                maps.users.map.remove(&ticket.user);
                maps.addresses.take_back(&ticket.address, &self.rules);
            }
        }
    }

    /// Failed sign-ins under `user` that every replica reported (the limiter keeps them): the
    /// name's count here is raised to them, so that N replicas give a guesser one budget, not N.
    /// A count is never lowered by it (this replica's own attempt in flight is not in it yet).
    pub fn shared_failures(&self, user: &str, failures: u64) {
        self.shared_failures_at(user, failures, Instant::now());
    }

    fn shared_failures_at(&self, user: &str, failures: u64, now: Instant) {
        if failures == 0 {
            return;
        }
        let mut guard = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        let entry = guard.users.entry(&user_key(user), now, &self.rules);
        let shared = u32::try_from(failures).unwrap_or(u32::MAX);
        if shared > entry.failures {
            entry.failures = shared;
            entry.last_seen = now;
        }
    }

    /// An attempt that was never verified (no verification slot in time): not a failure.
    pub fn not_tried(&self, ticket: &Ticket) {
        let mut guard = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        let maps = &mut *guard;
        match &ticket.device {
            Some(device) => {
                if let Some(entry) = maps.devices.map.get_mut(device) {
                    entry.failures = entry.failures.saturating_sub(1);
                    if ticket.device_distrusted {
                        entry.locked_until = None;
                    }
                }
            }
            None => {
                maps.users.take_back(&ticket.user, &self.rules);
                maps.addresses.take_back(&ticket.address, &self.rules);
            }
        }
    }

    /// Keys held: (user names, addresses, known browsers).
    pub fn sizes(&self) -> (usize, usize, usize) {
        let guard = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        (
            guard.users.len(),
            guard.addresses.len(),
            guard.devices.len(),
        )
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
            device_failures: 3,
            address_lockout_after: 6,
            lockout: Duration::from_secs(60),
            capacity: 100,
            ..ThrottleRules::default()
        }
    }

    fn ip(last: u8) -> IpAddr {
        IpAddr::from([10, 0, 0, last])
    }

    fn wait_of(verdict: &Verdict) -> Option<u128> {
        match verdict {
            Verdict::Proceed { wait, .. } => Some(wait.as_millis()),
            Verdict::Refused { .. } => None,
        }
    }

    #[test]
    fn other_replicas_failures_delay_a_name_here_and_never_lower_its_count() {
        let throttle = Throttle::new(rules());
        let now = Instant::now();
        // Three failures elsewhere: the next attempt here waits as the fourth would.
        throttle.shared_failures_at("ana", 3, now);
        assert_eq!(
            wait_of(&throttle.attempt_at("ana", ip(1), None, now)),
            Some(200)
        );
        // A smaller shared count (this replica's attempt not yet in it) lowers nothing.
        throttle.shared_failures_at("ana", 1, now);
        assert_eq!(
            wait_of(&throttle.attempt_at("ana", ip(2), None, now)),
            Some(400)
        );
        throttle.shared_failures_at("bo", 0, now);
        assert_eq!(throttle.sizes().0, 1, "a zero count keeps nothing");
    }

    #[test]
    fn an_address_is_slowed_then_locked_out_and_a_success_clears_the_name() {
        let throttle = Throttle::new(rules());
        let mut now = Instant::now();
        let mut waits = Vec::new();
        for _ in 0..6 {
            let verdict = throttle.attempt_at("ana", ip(1), None, now);
            let wait = wait_of(&verdict).unwrap_or_else(|| panic!("refused: {verdict:?}"));
            now += Duration::from_millis(wait as u64);
            waits.push(wait);
        }
        assert_eq!(waits, [0, 0, 100, 200, 400, 400]);
        match throttle.attempt_at("ana", ip(1), None, now + Duration::from_millis(400)) {
            Verdict::Refused {
                locked: true,
                lockout_started: true,
                ..
            } => {}
            other => panic!("expected a lockout: {other:?}"),
        }
        match throttle.attempt_at("bo", ip(1), None, now + Duration::from_secs(1)) {
            Verdict::Refused {
                locked: true,
                lockout_started: false,
                retry_after,
            } => assert!(retry_after > Duration::from_secs(50)),
            other => panic!("the address stays refused: {other:?}"),
        }
        // The name is only ever delayed, never refused: from another address it waits at
        // most the longest delay.
        let verdict = throttle.attempt_at("ana", ip(2), None, now + Duration::from_secs(1));
        assert_eq!(wait_of(&verdict), Some(400));
        let Verdict::Proceed { ticket, .. } = verdict else {
            unreachable!()
        };
        throttle.succeeded(&ticket);
        let later = now + Duration::from_secs(2);
        for _ in 0..2 {
            assert_eq!(
                wait_of(&throttle.attempt_at("ana", ip(3), None, later)),
                Some(0)
            );
        }
    }

    #[test]
    fn strangers_never_touch_a_known_browser_and_each_has_its_own_budget() {
        let throttle = Throttle::new(rules());
        let now = Instant::now();
        // Strangers from many addresses make a hundred guesses at ana.
        for i in 0..100u8 {
            throttle.attempt_at("ana", ip(i), None, now);
        }
        // ana's own browser is answered at once...
        let verdict = throttle.attempt_at("ana", ip(200), Some("dev-1"), now);
        assert_eq!(wait_of(&verdict), Some(0));
        let Verdict::Proceed { ticket, .. } = verdict else {
            unreachable!()
        };
        assert!(ticket.known_browser());
        throttle.succeeded(&ticket);
        // ...even from an address that is locked out.
        for _ in 0..10 {
            throttle.attempt_at("bo", ip(7), None, now);
        }
        assert!(wait_of(&throttle.attempt_at("bo", ip(7), None, now)).is_none());
        assert_eq!(
            wait_of(&throttle.attempt_at("ana", ip(7), Some("dev-1"), now)),
            Some(0)
        );
        // A browser that keeps failing spends its own budget (three here), then is judged as a
        // new browser: delayed, not refused; another known browser is not affected.
        let throttle = Throttle::new(rules());
        let mut distrusted = Vec::new();
        for i in 0..3u8 {
            match throttle.attempt_at("ana", ip(i), Some("dev-1"), now) {
                Verdict::Proceed { wait, ticket } => {
                    assert_eq!(wait, Duration::ZERO);
                    distrusted.push(ticket.device_distrusted);
                }
                other => panic!("{other:?}"),
            }
        }
        assert_eq!(distrusted, [false, false, true]);
        match throttle.attempt_at("ana", ip(9), Some("dev-1"), now) {
            Verdict::Proceed { ticket, .. } => assert!(!ticket.known_browser()),
            other => panic!("{other:?}"),
        }
        match throttle.attempt_at("ana", ip(9), Some("dev-2"), now) {
            Verdict::Proceed { ticket, wait } => {
                assert!(ticket.known_browser());
                assert_eq!(wait, Duration::ZERO);
            }
            other => panic!("{other:?}"),
        }
        // The budget comes back after the lockout.
        let later = now + Duration::from_secs(61);
        match throttle.attempt_at("ana", ip(9), Some("dev-1"), later) {
            Verdict::Proceed { ticket, .. } => assert!(ticket.known_browser()),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn concurrent_attempts_from_one_address_queue_and_the_far_ones_are_refused() {
        let throttle = Throttle::new(rules());
        let now = Instant::now();
        let waits: Vec<Option<u128>> = (0..8)
            .map(|_| wait_of(&throttle.attempt_at("ana", ip(1), None, now)))
            .collect();
        assert_eq!(
            &waits[..5],
            [Some(0), Some(0), Some(100), Some(200), Some(400)]
        );
        assert!(waits[5..].iter().all(Option::is_none), "{waits:?}");
    }

    #[test]
    fn an_untried_attempt_is_taken_back() {
        let throttle = Throttle::new(rules());
        let now = Instant::now();
        for _ in 0..20 {
            let verdict = throttle.attempt_at("ana", ip(1), Some("dev-1"), now);
            let Verdict::Proceed { ticket, .. } = verdict else {
                panic!("{verdict:?}")
            };
            assert!(ticket.known_browser());
            throttle.not_tried(&ticket);
        }
        for _ in 0..20 {
            let verdict = throttle.attempt_at("ana", ip(1), None, now);
            assert_eq!(wait_of(&verdict), Some(0));
            let Verdict::Proceed { ticket, .. } = verdict else {
                unreachable!()
            };
            throttle.not_tried(&ticket);
        }
    }

    #[test]
    fn memory_is_bounded() {
        let throttle = Throttle::new(rules());
        let now = Instant::now();
        for i in 0..1000u32 {
            let address = IpAddr::from(i.to_be_bytes());
            throttle.attempt_at(&format!("user-{i}"), address, None, now);
            throttle.attempt_at("ana", address, Some(&format!("dev-{i}")), now);
        }
        let (users, addresses, devices) = throttle.sizes();
        assert!(
            users <= 100 && addresses <= 100 && devices <= 100,
            "{users} {addresses} {devices}"
        );
        // However long the names typed, a key stays short.
        let throttle = Throttle::new(rules());
        for i in 0..10u8 {
            throttle.attempt_at(&"x".repeat(10_000 + usize::from(i)), ip(i), None, now);
        }
        assert_eq!(throttle.sizes().0, 1);
    }
}
