//! The traffic model: the closed loop's workers, the open loop's households and players (each
//! heartbeating on its own jittered schedule, restarted on demand), and the final account check.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use rand::random_range;
use tokio::sync::{Notify, watch};

use super::super::common::{beat_label, kind, short};
use crate::api::{Api, Beat, Play, PlayArgs};
use crate::stats::Recorder;

/// `clients` workers, each sending its next call when the last was answered, for `step`:
/// heartbeats on `pool` when given, else play-starts on premium accounts.
pub(super) async fn closed_loop(
    api: &Api,
    clients: usize,
    step: Duration,
    pool: Option<Arc<Vec<(String, String)>>>,
    tag: &str,
    accounts: usize,
) {
    let end = Instant::now() + step;
    let workers: Vec<_> = (0..clients)
        .map(|_| {
            let (api, pool, tag) = (api.clone(), pool.clone(), tag.to_owned());
            tokio::spawn(async move {
                while Instant::now() < end {
                    if let Some(pool) = &pool {
                        let (account, id) = &pool[random_range(0..pool.len())];
                        let beat = api.heartbeat(account, id, Instant::now()).await;
                        if beat != Beat::Ok {
                            api.rec.fail(&format!("heartbeat: {}", beat_label(&beat)));
                        }
                    } else {
                        let a = random_range(0..accounts.max(1));
                        let d = random_range(0..4usize);
                        let account = format!("fc-{tag}-{a}");
                        let device = format!("dev-{d}");
                        let play = PlayArgs::new(&account, &device, Some("premium"), kind(a + d));
                        match api.play("play_start", &play, Instant::now()).await {
                            Play::Granted {
                                limit,
                                active_count,
                                ..
                            } => check_count(&api.rec, limit, active_count),
                            other => api.rec.fail(&format!("play_start: {}", short(&other))),
                        }
                    }
                }
            })
        })
        .collect();
    for w in workers {
        let _ = w.await;
    }
}

/// A granted play's answer: the account's live leases, this one included, within its limit.
pub(super) fn check_count(rec: &Recorder, limit: u32, active_count: Option<u32>) {
    if let Some(active) = active_count {
        rec.checked("no_account_above_cap", 1);
        if active > limit {
            rec.violated("no_account_above_cap");
            eprintln!("VIOLATION: a play was granted with {active} live leases, limit {limit}");
        }
    }
}

// ------------------------------------------------------------------------------ open loop

pub(super) struct Household {
    pub(super) name: String,
    pub(super) plan: &'static str,
    pub(super) limit: u32,
    pub(super) players: Vec<usize>,
}

pub(super) struct Player {
    pub(super) household: usize,
    pub(super) slot: usize,
    pub(super) restart: Notify,
    pub(super) pending: AtomicBool,
    pub(super) stream: Mutex<String>,
}

pub(super) struct Shared {
    pub(super) households: Vec<Household>,
    pub(super) players: Vec<Player>,
    /// The current phase's client (its recorder changes at each phase boundary).
    pub(super) api: Mutex<Api>,
    pub(super) interval: Duration,
    /// While true the players send nothing (a background-alone window between rounds)...
    pub(super) pause: watch::Sender<bool>,
    /// ...and their schedules move by every pause's length (µs), so none bursts afterwards.
    pub(super) shift_us: AtomicU64,
}

impl Shared {
    pub(super) fn api(&self) -> Api {
        self.api.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }

    pub(super) fn phase(&self, rec: &Arc<Recorder>) {
        self.api.lock().unwrap_or_else(|e| e.into_inner()).rec = rec.clone();
    }

    pub(super) fn shift(&self) -> Duration {
        Duration::from_micros(self.shift_us.load(Ordering::Acquire))
    }
}

/// Households: every third premium (limit 4) with 3 players, the others standard (limit 2) and
/// full with 2: on average 2.33 streams per account.
pub(super) fn households(tag: &str, players: usize) -> (Vec<Household>, Vec<Player>) {
    let (mut hs, mut ps) = (Vec::new(), Vec::new());
    while ps.len() < players {
        let h = hs.len();
        let (plan, limit, size) = if h % 3 == 0 {
            ("premium", 4, 3)
        } else {
            ("standard", 2, 2)
        };
        let mut members = Vec::new();
        for slot in 0..size {
            if ps.len() == players {
                break;
            }
            members.push(ps.len());
            ps.push(Player {
                household: h,
                slot,
                restart: Notify::new(),
                pending: AtomicBool::new(false),
                stream: Mutex::new(String::new()),
            });
        }
        hs.push(Household {
            name: format!("fo-{tag}-{h}"),
            plan,
            limit,
            players: members,
        });
    }
    (hs, ps)
}

/// One player: heartbeats on its own jittered schedule from `first`; on a restart, a graceful
/// stop and a new play from a new device, after which its schedule starts again.
pub(super) async fn player(
    shared: Arc<Shared>,
    i: usize,
    first: Instant,
    mut stop: watch::Receiver<bool>,
) {
    let p = &shared.players[i];
    let h = &shared.households[p.household];
    let mut stream = p.stream.lock().unwrap_or_else(|e| e.into_inner()).clone();
    let mut generation = 0usize;
    let mut next = first;
    let jittered = |interval: Duration| interval.mul_f64(random_range(0.9..1.1f64));
    let mut pause = shared.pause.subscribe();
    loop {
        // `next` is on the unshifted schedule; every pause so far moves it on.
        let due = next + shared.shift();
        tokio::select! {
            _ = tokio::time::sleep_until(due.into()) => {
                if *pause.borrow_and_update() {
                    tokio::select! {
                        _ = pause.wait_for(|p| !*p) => {}
                        _ = stop.changed() => break,
                    }
                    continue;
                }
                if next + shared.shift() > Instant::now() {
                    continue; // a pause moved it on while this task slept
                }
                let api = shared.api();
                let beat = api.heartbeat(&h.name, &stream, due).await;
                if beat != Beat::Ok {
                    api.rec.fail(&format!("heartbeat: {}", beat_label(&beat)));
                }
                next += jittered(shared.interval);
            }
            _ = p.restart.notified() => {
                let api = shared.api();
                if !api.release(&h.name, &stream, Instant::now()).await {
                    api.rec.fail("release: not 200");
                }
                generation += 1;
                let device = format!("p{}-g{generation}", p.slot);
                let play = PlayArgs::new(&h.name, &device, Some(h.plan), kind(i + generation));
                match api.play("play_start", &play, Instant::now()).await {
                    Play::Granted { stream_id, limit, active_count, .. } => {
                        check_count(&api.rec, limit, active_count);
                        stream = stream_id;
                    }
                    other => api.rec.fail(&format!("play_start: {}", short(&other))),
                }
                p.pending.store(false, Ordering::Release);
                let now = Instant::now();
                next = now.checked_sub(shared.shift()).unwrap_or(now) + jittered(shared.interval);
            }
            _ = stop.changed() => break,
        }
    }
    *p.stream.lock().unwrap_or_else(|e| e.into_inner()) = stream;
}

/// Lists household `h`: within its cap, and exactly the leases its players hold.
pub(super) async fn verify_account(api: Api, shared: Arc<Shared>, h: usize) {
    let hh = &shared.households[h];
    let holding = hh
        .players
        .iter()
        .filter(|&&p| {
            !shared.players[p]
                .stream
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .is_empty()
        })
        .count();
    let Some((limit, active)) = api.list(&hh.name).await else {
        api.rec.fail("list: no answer");
        return;
    };
    api.rec.checked("no_account_above_cap", 1);
    if active.len() as u32 > limit.min(hh.limit) {
        api.rec.violated("no_account_above_cap");
        eprintln!("VIOLATION: {} holds {} streams", hh.name, active.len());
    }
    api.rec.checked("live_leases_match_players", 1);
    if active.len() != holding {
        api.rec.violated("live_leases_match_players");
        eprintln!(
            "VIOLATION: {} lists {} live leases, its players hold {holding}",
            hh.name,
            active.len()
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn households_mix_premium_and_full_standard_accounts() {
        let (hs, ps) = households("t", 8);
        assert_eq!(ps.len(), 8);
        assert_eq!(hs[0].plan, "premium");
        assert_eq!(hs[0].players.len(), 3);
        assert_eq!(hs[1].players.len(), 2);
        assert!(hs.iter().all(|h| h.players.len() as u32 <= h.limit));
    }
}
