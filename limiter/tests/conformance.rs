//! One conformance suite, two backends: every case runs against the embedded store and against a
//! real `redis-server` started for the test. The cases assert the invariants of DESIGN.md through
//! the store interface, on the store's own clock.

mod support;

use std::sync::Arc;
use std::time::Duration;

use screenlimit_limiter::config::StoreConfig;
use screenlimit_limiter::ids::{PlanTag, StreamIdCodec, StreamRef};
use screenlimit_limiter::model::{
    AcquireCmd, AcquireOutcome, AuditKind, DenyRule, Device, DeviceCaps, DeviceType, ForceStopCmd,
    ForceStopOutcome, HeartbeatOutcome, HistoryDevice, HistoryEvent, OverrideCmd, OverrideGrant,
    Plan, RefusalRule, ReleaseOutcome, SessionEventCmd, Timing,
};
use screenlimit_limiter::plan_book::PlanBook;
use screenlimit_limiter::store::LeaseStore;
use screenlimit_limiter::store::memory::MemoryStore;
use screenlimit_limiter::store::redis::access::Access;
use screenlimit_limiter::store::redis::{RedisOptions, RedisStore, ShardSpec};
use support::cluster::RedisCluster;
use support::tls::{Certificates, LIMITER_USER, SecureRedis};
use support::{RedisServer, SentinelServer};

/// Short enough for quick tests, long enough for a loaded 2-core machine.
const TTL: Duration = Duration::from_millis(600);

fn basic() -> Plan {
    Plan::new("basic", 1)
}

/// Standard (2 streams) with at most one phone.
fn standard_one_mobile() -> Plan {
    let mut plan = Plan::new("standard", 2);
    plan.device_caps = DeviceCaps::default().with(DeviceType::Mobile, 1);
    plan
}

/// Premium (4 streams) with at most two phones.
fn premium_two_mobile() -> Plan {
    let mut plan = Plan::new("premium", 4);
    plan.device_caps = DeviceCaps::default().with(DeviceType::Mobile, 2);
    plan
}

fn plan(name: &str, limit: u32) -> Option<Plan> {
    Some(Plan::new(name, limit))
}

fn play(account: &str, device: &str, plan: Option<Plan>) -> AcquireCmd {
    AcquireCmd {
        account_id: account.into(),
        device: Device {
            id: device.into(),
            ..Device::default()
        },
        nonce: StreamIdCodec::new_nonce(),
        plan,
        replace: None,
        shadow: false,
    }
}

async fn granted<S: LeaseStore>(store: &S, cmd: &AcquireCmd) -> StreamRef {
    match store.acquire(cmd).await.unwrap() {
        AcquireOutcome::Granted { plan, .. } => StreamRef {
            device_id: cmd.device.id.clone(),
            nonce: cmd.nonce,
            plan,
        },
        denied => panic!("expected a grant for {}, got {denied:?}", cmd.device.id),
    }
}

/// Runs `attempts` all at once; how many were granted.
async fn racing_winners<S: LeaseStore>(store: &S, attempts: &[AcquireCmd]) -> usize {
    let results = futures::future::join_all(attempts.iter().map(|c| store.acquire(c))).await;
    results
        .iter()
        .filter(|r| matches!(r, Ok(AcquireOutcome::Granted { .. })))
        .count()
}

async fn kick<S: LeaseStore>(store: &S, account: &str, stream: &StreamRef) -> ForceStopOutcome {
    let cmd = ForceStopCmd {
        account_id: account.into(),
        stream: stream.clone(),
        stream_id: format!("id-of-{}", stream.device_id),
        actor: "alice@support".into(),
        reason: "customer asked".into(),
    };
    store.force_stop(&cmd).await.unwrap()
}

/// Support grants `limit` streams for `duration_ms` (or with `None` removes the temporary limit).
fn change_limit(account: &str, grant: Option<(u32, u64)>) -> OverrideCmd {
    OverrideCmd {
        account_id: account.into(),
        grant: grant.map(|(limit, duration_ms)| OverrideGrant { limit, duration_ms }),
        actor: "bo@support".into(),
        reason: "family visit".into(),
    }
}

async fn active_devices<S: LeaseStore>(store: &S, account: &str) -> Vec<String> {
    let mut devices: Vec<String> = store
        .list(account)
        .await
        .unwrap()
        .active
        .into_iter()
        .map(|l| l.device.id)
        .collect();
    devices.sort();
    devices
}

mod cases {
    use super::*;

    pub async fn grants_up_to_the_limit_then_denies_with_the_device_list<S: LeaseStore>(store: &S) {
        let tv = play("acct", "tv", plan("standard", 2));
        match store.acquire(&tv).await.unwrap() {
            AcquireOutcome::Granted {
                limit,
                active_count,
                ..
            } => assert_eq!((limit, active_count), (2, 1)),
            other => panic!("{other:?}"),
        }
        granted(store, &play("acct", "phone", None)).await;
        match store.acquire(&play("acct", "tablet", None)).await.unwrap() {
            AcquireOutcome::Denied {
                limit,
                active,
                rule,
                ..
            } => {
                assert_eq!(rule, DenyRule::MaxStreams);
                assert_eq!(limit, 2);
                let mut devices: Vec<_> = active.iter().map(|l| l.device.id.as_str()).collect();
                devices.sort();
                assert_eq!(devices, ["phone", "tv"]);
            }
            other => panic!("the third device must be denied, got {other:?}"),
        }
    }

    pub async fn racing_devices_get_exactly_the_free_slots<S: LeaseStore>(store: &S) {
        granted(store, &play("family", "tv", plan("premium", 4))).await;
        let attempts: Vec<AcquireCmd> = (0..60)
            .map(|i| play("family", &format!("dev-{i}"), None))
            .collect();
        let winners = racing_winners(store, &attempts).await;
        assert_eq!(winners, 3, "60 racers for 3 free slots");
        assert_eq!(store.list("family").await.unwrap().active.len(), 4);
    }

    /// Heartbeats alone, for many TTLs, with nothing else happening on the account: the lease
    /// stays live and counted (on Redis the account key must outlive its natively renewed leases).
    pub async fn a_lease_heartbeated_alone_for_many_ttls_stays_counted<S: LeaseStore>(store: &S) {
        let tv = granted(store, &play("acct", "tv", None)).await;
        let started = tokio::time::Instant::now();
        while started.elapsed() < TTL * 8 {
            tokio::time::sleep(TTL / 4).await;
            let beat = store.heartbeat("acct", &tv).await.unwrap();
            assert!(
                matches!(beat, HeartbeatOutcome::Renewed { .. }),
                "after {:?}: {beat:?}",
                started.elapsed()
            );
        }
        assert!(matches!(
            store.acquire(&play("acct", "phone", None)).await.unwrap(),
            AcquireOutcome::Denied { .. }
        ));
        assert_eq!(active_devices(store, "acct").await, ["tv"]);
    }

    pub async fn a_lease_not_renewed_frees_its_slot_after_the_ttl<S: LeaseStore>(store: &S) {
        granted(store, &play("acct", "crashed-tv", None)).await;
        assert!(matches!(
            store.acquire(&play("acct", "phone", None)).await.unwrap(),
            AcquireOutcome::Denied { .. }
        ));
        tokio::time::sleep(TTL + Duration::from_millis(150)).await;
        // No background job ran: the acquire itself reaps the dead lease.
        granted(store, &play("acct", "phone", None)).await;
        assert_eq!(active_devices(store, "acct").await, ["phone"]);
    }

    pub async fn heartbeats_keep_a_lease_alive_past_its_first_ttl<S: LeaseStore>(store: &S) {
        let tv = granted(store, &play("acct", "tv", None)).await;
        for _ in 0..8 {
            tokio::time::sleep(TTL / 4).await;
            assert!(matches!(
                store.heartbeat("acct", &tv).await.unwrap(),
                HeartbeatOutcome::Renewed { .. }
            ));
        }
        assert!(matches!(
            store.acquire(&play("acct", "phone", None)).await.unwrap(),
            AcquireOutcome::Denied { .. }
        ));
    }

    pub async fn a_new_play_from_the_same_device_replaces_its_lease<S: LeaseStore>(store: &S) {
        let first = granted(store, &play("acct", "tv", None)).await;
        let second = granted(store, &play("acct", "tv", None)).await;
        assert_eq!(
            active_devices(store, "acct").await,
            ["tv"],
            "one device, one slot"
        );
        assert_eq!(
            store.heartbeat("acct", &first).await.unwrap(),
            HeartbeatOutcome::Revoked
        );
        assert!(matches!(
            store.heartbeat("acct", &second).await.unwrap(),
            HeartbeatOutcome::Renewed { .. }
        ));
    }

    pub async fn a_force_stopped_stream_stays_revoked_past_its_ttl<S: LeaseStore>(store: &S) {
        let tv = granted(store, &play("acct", "tv", None)).await;
        assert_eq!(kick(store, "acct", &tv).await, ForceStopOutcome::Stopped);
        assert_eq!(
            kick(store, "acct", &tv).await,
            ForceStopOutcome::AlreadyStopped
        );
        assert!(
            store.list("acct").await.unwrap().active.is_empty(),
            "the slot is free at once"
        );
        assert_eq!(
            store.heartbeat("acct", &tv).await.unwrap(),
            HeartbeatOutcome::Revoked
        );
        tokio::time::sleep(TTL + Duration::from_millis(200)).await;
        assert_eq!(
            store.heartbeat("acct", &tv).await.unwrap(),
            HeartbeatOutcome::Revoked,
            "still revoked after one TTL, not re-registered"
        );
        // The kicked device may start a new play, and only the new stream is alive.
        let again = granted(store, &play("acct", "tv", None)).await;
        assert_eq!(
            store.heartbeat("acct", &tv).await.unwrap(),
            HeartbeatOutcome::Revoked
        );
        assert!(matches!(
            store.heartbeat("acct", &again).await.unwrap(),
            HeartbeatOutcome::Renewed { .. }
        ));
    }

    pub async fn an_expired_lease_re_registers_when_there_is_room<S: LeaseStore>(store: &S) {
        let tv = granted(store, &play("acct", "tv", None)).await;
        tokio::time::sleep(TTL + Duration::from_millis(150)).await;
        assert!(matches!(
            store.heartbeat("acct", &tv).await.unwrap(),
            HeartbeatOutcome::Reregistered { .. }
        ));
        assert_eq!(active_devices(store, "acct").await, ["tv"]);
    }

    pub async fn an_expired_lease_on_a_full_account_is_told_to_re_acquire<S: LeaseStore>(
        store: &S,
    ) {
        let tv = granted(store, &play("acct", "tv", None)).await;
        tokio::time::sleep(TTL + Duration::from_millis(150)).await;
        granted(store, &play("acct", "phone", None)).await;
        assert_eq!(
            store.heartbeat("acct", &tv).await.unwrap(),
            HeartbeatOutcome::Expired
        );
    }

    pub async fn a_lease_lost_with_the_store_re_registers_for_its_device<S: LeaseStore>(store: &S) {
        // A stream id the store has never seen, as after a store restart.
        let lost = StreamRef {
            device_id: "tv".into(),
            nonce: StreamIdCodec::new_nonce(),
            plan: PlanTag {
                name: "basic".into(),
                limit: 1,
            },
        };
        assert!(matches!(
            store.heartbeat("acct", &lost).await.unwrap(),
            HeartbeatOutcome::Reregistered { .. }
        ));
        assert_eq!(active_devices(store, "acct").await, ["tv"]);
        assert!(matches!(
            store.acquire(&play("acct", "phone", None)).await.unwrap(),
            AcquireOutcome::Denied { .. }
        ));
    }

    pub async fn a_graceful_stop_frees_the_slot_at_once<S: LeaseStore>(store: &S) {
        let tv = granted(store, &play("acct", "tv", None)).await;
        assert_eq!(
            store.release("acct", &tv).await.unwrap(),
            ReleaseOutcome::Released
        );
        assert_eq!(
            store.release("acct", &tv).await.unwrap(),
            ReleaseOutcome::NotHeld,
            "idempotent"
        );
        granted(store, &play("acct", "phone", None)).await;
        assert_eq!(
            store.heartbeat("acct", &tv).await.unwrap(),
            HeartbeatOutcome::Expired,
            "a late heartbeat of a stopped stream does not take a slot back"
        );
    }

    pub async fn a_replaced_stream_stays_revoked_after_its_successor_stops<S: LeaseStore>(
        store: &S,
    ) {
        let first = granted(store, &play("acct", "tv", None)).await;
        let second = granted(store, &play("acct", "tv", None)).await;
        store.release("acct", &second).await.unwrap();
        assert_eq!(
            store.heartbeat("acct", &first).await.unwrap(),
            HeartbeatOutcome::Revoked
        );
    }

    pub async fn take_over_stops_the_named_stream_and_takes_its_slot<S: LeaseStore>(store: &S) {
        let tv = granted(store, &play("acct", "tv", None)).await;
        let mut phone = play("acct", "phone", None);
        phone.replace = Some(tv.clone());
        granted(store, &phone).await;
        assert_eq!(active_devices(store, "acct").await, ["phone"]);
        assert_eq!(
            store.heartbeat("acct", &tv).await.unwrap(),
            HeartbeatOutcome::Revoked
        );
        // Naming a stream that is no longer live takes nothing: the account is full again.
        let mut tablet = play("acct", "tablet", None);
        tablet.replace = Some(tv);
        assert!(matches!(
            store.acquire(&tablet).await.unwrap(),
            AcquireOutcome::Denied { .. }
        ));
    }

    pub async fn lists_never_show_an_expired_lease<S: LeaseStore>(store: &S) {
        granted(store, &play("acct", "tv", plan("standard", 2))).await;
        let phone = granted(store, &play("acct", "phone", None)).await;
        for _ in 0..4 {
            tokio::time::sleep(TTL / 4).await;
            store.heartbeat("acct", &phone).await.unwrap();
        }
        tokio::time::sleep(TTL / 4).await;
        assert_eq!(
            active_devices(store, "acct").await,
            ["phone"],
            "tv expired without any play-start"
        );
    }

    pub async fn a_lost_lease_comes_back_under_the_plan_its_stream_carries<S: LeaseStore>(
        store: &S,
    ) {
        // After a store restart or a reshard the account's plan is gone; its streams know it.
        let premium = PlanTag {
            name: "premium".into(),
            limit: 4,
        };
        for device in ["tv", "phone", "tablet"] {
            let lost = StreamRef {
                device_id: device.into(),
                nonce: StreamIdCodec::new_nonce(),
                plan: premium.clone(),
            };
            let beat = store.heartbeat("family", &lost).await.unwrap();
            assert!(
                matches!(beat, HeartbeatOutcome::Reregistered { .. }),
                "{device}: {beat:?}"
            );
        }
        let view = store.list("family").await.unwrap();
        assert_eq!(
            (view.plan.name.as_str(), view.limit, view.active.len()),
            ("premium", 4, 3)
        );
    }

    pub async fn the_plan_of_the_latest_play_start_holds<S: LeaseStore>(store: &S) {
        granted(store, &play("acct", "tv", plan("premium", 4))).await;
        granted(store, &play("acct", "phone", None)).await;
        granted(store, &play("acct", "tablet", None)).await;
        let view = store.list("acct").await.unwrap();
        assert_eq!(
            (view.plan.name.as_str(), view.limit, view.active.len()),
            ("premium", 4, 3)
        );
        let fresh = store.list("nobody").await.unwrap();
        assert_eq!(
            (fresh.plan.name.as_str(), fresh.limit, fresh.active.len()),
            ("basic", 1, 0)
        );
    }

    pub async fn device_details_come_back_in_lists<S: LeaseStore>(store: &S) {
        let mut cmd = play("acct", "tv-1", None);
        cmd.device = Device {
            id: "tv-1".into(),
            kind: DeviceType::Tv,
            meta: "Grandma's <b>TV</b> 📺".into(),
            profile_id: "profile-7".into(),
            title_id: "title:tt0111161".into(),
        };
        granted(store, &cmd).await;
        let lease = store.list("acct").await.unwrap().active.remove(0);
        assert_eq!(lease.device, cmd.device);
        assert_eq!(lease.nonce, cmd.nonce);
        assert!(lease.expires_at > lease.started_at);
        assert_eq!(lease.expires_at - lease.started_at, TTL.as_millis() as u64);
    }

    pub async fn accounts_are_independent<S: LeaseStore>(store: &S) {
        let a = granted(store, &play("acct-a", "tv", None)).await;
        granted(store, &play("acct-b", "tv", None)).await;
        assert_eq!(
            kick(store, "acct-b", &a).await,
            ForceStopOutcome::AlreadyStopped
        );
        assert!(matches!(
            store.heartbeat("acct-a", &a).await.unwrap(),
            HeartbeatOutcome::Renewed { .. }
        ));
        assert_eq!(kick(store, "acct-c", &a).await, ForceStopOutcome::Unknown);
    }
}

/// Accounts in shadow (`AcquireCmd::shadow`): a play the limits would refuse is granted as a normal
/// lease, answered with the rule that would have refused it, and kept in the account's history as
/// a refusal that would have been; the switch back to enforcing cuts nothing that plays.
mod shadow_cases {
    use super::*;

    fn shadow(mut cmd: AcquireCmd) -> AcquireCmd {
        cmd.shadow = true;
        cmd
    }

    fn on(account: &str, id: &str, kind: DeviceType, plan: Option<Plan>) -> AcquireCmd {
        let mut cmd = play(account, id, plan);
        cmd.device.kind = kind;
        cmd.device.meta = format!("{id}'s screen");
        cmd
    }

    fn seen(id: &str, kind: DeviceType) -> HistoryDevice {
        HistoryDevice {
            device_id: id.into(),
            device_type: kind,
            device_meta: format!("{id}'s screen"),
        }
    }

    /// Grants `cmd`, which the limits would refuse by `rule`; returns its stream and the count.
    async fn let_through<S: LeaseStore>(
        store: &S,
        cmd: &AcquireCmd,
        rule: DenyRule,
    ) -> (StreamRef, u32) {
        match store.acquire(cmd).await.unwrap() {
            AcquireOutcome::Granted {
                plan,
                active_count,
                would_refuse,
                ..
            } => {
                assert_eq!(would_refuse, Some(rule), "{}", cmd.device.id);
                let stream = StreamRef {
                    device_id: cmd.device.id.clone(),
                    nonce: cmd.nonce,
                    plan,
                };
                (stream, active_count)
            }
            other => panic!("{} was not let through: {other:?}", cmd.device.id),
        }
    }

    async fn events<S: LeaseStore>(store: &S, account: &str) -> Vec<HistoryEvent> {
        let entries = store.history(account, 50).await.unwrap();
        entries.into_iter().map(|e| e.event).collect()
    }

    pub async fn a_play_over_the_limit_is_let_through_and_recorded<S: LeaseStore>(store: &S) {
        use DeviceType::{Tablet, Tv, Web};
        let a = "shadow-limit";
        let standard = || plan("standard", 2);
        let tv = granted(store, &shadow(on(a, "tv", Tv, standard()))).await;
        let web = granted(store, &shadow(on(a, "web", Web, standard()))).await;
        // Under the limit a play in shadow is an ordinary grant: no entry.
        assert!(events(store, a).await.is_empty());
        let (tablet, count) = let_through(
            store,
            &shadow(on(a, "tablet", Tablet, standard())),
            DenyRule::MaxStreams,
        )
        .await;
        assert_eq!(
            count, 3,
            "the store holds the truth: three streams on a plan of two"
        );
        assert_eq!(active_devices(store, a).await, ["tablet", "tv", "web"]);
        assert_eq!(
            events(store, a).await,
            vec![HistoryEvent::ShadowRefused {
                device: seen("tablet", Tablet),
                rule: RefusalRule::PlanLimit,
                limit: 2,
                holders: vec![seen("tv", Tv), seen("web", Web)],
            }]
        );
        // Enforcing again cuts none of them: each renews, and a new play sees the limit.
        for stream in [&tv, &web, &tablet] {
            assert!(matches!(
                store.heartbeat(a, stream).await.unwrap(),
                HeartbeatOutcome::Renewed { .. }
            ));
        }
        match store
            .acquire(&on(a, "phone", DeviceType::Mobile, standard()))
            .await
            .unwrap()
        {
            AcquireOutcome::Denied { rule, active, .. } => {
                assert_eq!(rule, DenyRule::MaxStreams);
                assert_eq!(active.len(), 3);
            }
            other => panic!("an enforced play on a full account was not refused: {other:?}"),
        }
        assert_eq!(active_devices(store, a).await, ["tablet", "tv", "web"]);
    }

    pub async fn a_device_type_cap_is_let_through_and_recorded<S: LeaseStore>(store: &S) {
        use DeviceType::Mobile;
        let a = "shadow-cap";
        let capped = || Some(standard_one_mobile());
        granted(store, &shadow(on(a, "phone-1", Mobile, capped()))).await;
        let cap = DenyRule::DeviceTypeCap {
            kind: Mobile,
            cap: 1,
        };
        let (_, count) = let_through(store, &shadow(on(a, "phone-2", Mobile, capped())), cap).await;
        assert_eq!(count, 2);
        // The account's limit now refuses a third play before the cap does.
        let (_, count) = let_through(
            store,
            &shadow(on(a, "phone-3", Mobile, capped())),
            DenyRule::MaxStreams,
        )
        .await;
        assert_eq!(count, 3);
        let first = seen("phone-1", Mobile);
        assert_eq!(
            events(store, a).await,
            vec![
                HistoryEvent::ShadowRefused {
                    device: seen("phone-3", Mobile),
                    rule: RefusalRule::PlanLimit,
                    limit: 2,
                    holders: vec![first.clone(), seen("phone-2", Mobile)],
                },
                HistoryEvent::ShadowRefused {
                    device: seen("phone-2", Mobile),
                    rule: RefusalRule::DeviceTypeCap,
                    limit: 1,
                    holders: vec![first],
                },
            ]
        );
    }

    pub async fn a_take_over_over_the_limit_stops_its_target_and_is_recorded<S: LeaseStore>(
        store: &S,
    ) {
        use DeviceType::{Console, Tablet, Tv, Web};
        let a = "shadow-take-over";
        let basic = || plan("basic", 1);
        let tv = granted(store, &shadow(on(a, "tv", Tv, basic()))).await;
        let (web, _) = let_through(
            store,
            &shadow(on(a, "web", Web, basic())),
            DenyRule::MaxStreams,
        )
        .await;
        // Taking the TV's slot still leaves the web stream over a plan of one.
        let mut console = shadow(on(a, "console", Console, basic()));
        console.replace = Some(tv.clone());
        let (_, count) = let_through(store, &console, DenyRule::MaxStreams).await;
        assert_eq!(count, 2);
        assert_eq!(
            store.heartbeat(a, &tv).await.unwrap(),
            HeartbeatOutcome::Revoked
        );
        assert_eq!(active_devices(store, a).await, ["console", "web"]);
        let events = events(store, a).await;
        assert_eq!(
            events[..3],
            [
                HistoryEvent::Revoked {
                    device_id: "tv".into()
                },
                HistoryEvent::TakeOver {
                    device: seen("console", Console),
                    replaced: seen("tv", Tv),
                },
                HistoryEvent::ShadowRefused {
                    device: seen("console", Console),
                    rule: RefusalRule::PlanLimit,
                    limit: 1,
                    holders: vec![seen("web", Web)],
                },
            ]
        );
        // An enforced take-over of a slot over the limit is refused: the account stays at two.
        let mut tablet = on(a, "tablet", Tablet, basic());
        tablet.replace = Some(web);
        assert!(matches!(
            store.acquire(&tablet).await.unwrap(),
            AcquireOutcome::Denied { .. }
        ));
    }
}

/// Learning mode (`LeaseStore::learn`): for one TTL after an account's home moved here, a live
/// stream this store does not hold comes back by heartbeat even on a full account, so the move
/// refuses no stream that plays; a revoked, replaced or stopped one is told so as by `heartbeat`.
mod learning_cases {
    use super::*;

    /// A stream this store never saw, as a heartbeat names it after the account's home moved.
    fn unseen(device: &str) -> StreamRef {
        StreamRef {
            device_id: device.into(),
            nonce: StreamIdCodec::new_nonce(),
            plan: PlanTag {
                name: "basic".into(),
                limit: 1,
            },
        }
    }

    pub async fn a_learning_heartbeat_takes_a_lease_back_on_a_full_account<S: LeaseStore>(
        store: &S,
    ) {
        let a = "moved";
        let tv = granted(store, &play(a, "tv", None)).await;
        let phone = unseen("phone");
        assert_eq!(
            store.heartbeat(a, &phone).await.unwrap(),
            HeartbeatOutcome::Expired
        );
        let learnt = store.learn(a, &phone).await.unwrap();
        assert!(
            matches!(learnt, HeartbeatOutcome::Reregistered { .. }),
            "{learnt:?}"
        );
        assert_eq!(active_devices(store, a).await, ["phone", "tv"]);
        // A re-registration, as any: no history of its own.
        assert_eq!(store.history(a, 50).await.unwrap(), []);
        // Held now: renewed, learning or not.
        let renewed = store.learn(a, &phone).await.unwrap();
        assert!(
            matches!(renewed, HeartbeatOutcome::Renewed { .. }),
            "{renewed:?}"
        );
        // A lease held expired, on an account full again: taken back too.
        tokio::time::sleep(TTL + Duration::from_millis(150)).await;
        granted(store, &play(a, "tablet", None)).await;
        assert_eq!(
            store.heartbeat(a, &tv).await.unwrap(),
            HeartbeatOutcome::Expired
        );
        let learnt = store.learn(a, &tv).await.unwrap();
        assert!(
            matches!(learnt, HeartbeatOutcome::Reregistered { .. }),
            "{learnt:?}"
        );
        assert_eq!(active_devices(store, a).await, ["tablet", "tv"]);
    }

    pub async fn a_learning_heartbeat_still_tells_a_revoked_replaced_or_stopped_stream<
        S: LeaseStore,
    >(
        store: &S,
    ) {
        let a = "moved-stopped";
        let tv = granted(store, &play(a, "tv", None)).await;
        assert_eq!(kick(store, a, &tv).await, ForceStopOutcome::Stopped);
        assert_eq!(
            store.learn(a, &tv).await.unwrap(),
            HeartbeatOutcome::Revoked
        );
        // The device played again: its earlier stream was replaced.
        let again = granted(store, &play(a, "tv", None)).await;
        assert_eq!(
            store.learn(a, &tv).await.unwrap(),
            HeartbeatOutcome::Revoked
        );
        assert_eq!(
            store.release(a, &again).await.unwrap(),
            ReleaseOutcome::Released
        );
        assert_eq!(
            store.learn(a, &again).await.unwrap(),
            HeartbeatOutcome::Expired
        );
        assert_eq!(active_devices(store, a).await, Vec::<String>::new());
    }
}

mod history_cases {
    use super::*;

    /// A play from a device with a type and a display name.
    fn play_on(account: &str, id: &str, kind: DeviceType, plan: Option<Plan>) -> AcquireCmd {
        let mut cmd = play(account, id, plan);
        cmd.device.kind = kind;
        cmd.device.meta = format!("{id}'s screen");
        cmd
    }

    async fn refused<S: LeaseStore>(store: &S, cmd: &AcquireCmd) {
        let outcome = store.acquire(cmd).await.unwrap();
        assert!(
            matches!(outcome, AcquireOutcome::Denied { .. }),
            "{} was not refused: {outcome:?}",
            cmd.device.id
        );
    }

    fn seen(id: &str, kind: DeviceType) -> HistoryDevice {
        HistoryDevice {
            device_id: id.into(),
            device_type: kind,
            device_meta: format!("{id}'s screen"),
        }
    }

    /// The events, newest first, with the times a store sets (a temporary limit's end) zeroed.
    async fn events<S: LeaseStore>(store: &S, account: &str) -> Vec<HistoryEvent> {
        let entries = store.history(account, 50).await.unwrap();
        assert!(
            entries.windows(2).all(|w| w[0].at >= w[1].at),
            "not newest first: {entries:?}"
        );
        entries
            .into_iter()
            .map(|e| match e.event {
                HistoryEvent::LimitGranted { limit, actor, .. } => HistoryEvent::LimitGranted {
                    limit,
                    until: 0,
                    actor,
                },
                HistoryEvent::LimitRemoved { limit, actor, .. } => HistoryEvent::LimitRemoved {
                    limit,
                    until: 0,
                    actor,
                },
                event => event,
            })
            .collect()
    }

    pub async fn refusals_take_overs_revocations_stops_and_limits_are_kept_newest_first<
        S: LeaseStore,
    >(
        store: &S,
    ) {
        use DeviceType::{Console, Mobile, Tablet, Tv, Web};
        let a = "hist";
        let standard = || Some(standard_one_mobile());
        let tv = granted(store, &play_on(a, "tv", Tv, standard())).await;
        let phone = granted(store, &play_on(a, "phone-1", Mobile, standard())).await;
        // Two streams of two: the plan's limit refuses.
        refused(store, &play_on(a, "tablet", Tablet, standard())).await;
        // A third stream for a while; a second phone is still one phone too many.
        store
            .set_override(&change_limit(a, Some((3, 60_000))))
            .await
            .unwrap();
        refused(store, &play_on(a, "phone-2", Mobile, standard())).await;
        let tablet = granted(store, &play_on(a, "tablet", Tablet, standard())).await;
        // Three of three: the temporary limit refuses; the laptop takes the tablet's slot.
        refused(store, &play_on(a, "laptop", Web, standard())).await;
        let mut take_over = play_on(a, "laptop", Web, standard());
        take_over.replace = Some(tablet.clone());
        let laptop = granted(store, &take_over).await;
        // The tablet hears it twice; the history tells it once.
        for _ in 0..2 {
            assert_eq!(
                store.heartbeat(a, &tablet).await.unwrap(),
                HeartbeatOutcome::Revoked
            );
        }
        assert_eq!(kick(store, a, &laptop).await, ForceStopOutcome::Stopped);
        store.set_override(&change_limit(a, None)).await.unwrap();
        // Nothing else writes it: renewals, stops, grants.
        assert!(matches!(
            store.heartbeat(a, &tv).await.unwrap(),
            HeartbeatOutcome::Renewed { .. }
        ));
        assert_eq!(
            store.release(a, &phone).await.unwrap(),
            ReleaseOutcome::Released
        );
        granted(store, &play_on(a, "console", Console, standard())).await;

        let holders = vec![seen("tv", Tv), seen("phone-1", Mobile)];
        assert_eq!(
            events(store, a).await,
            vec![
                HistoryEvent::LimitRemoved {
                    limit: 3,
                    until: 0,
                    actor: "bo@support".into(),
                },
                HistoryEvent::ForceStop {
                    device: seen("laptop", Web),
                    actor: "alice@support".into(),
                },
                HistoryEvent::Revoked {
                    device_id: "tablet".into(),
                },
                HistoryEvent::TakeOver {
                    device: seen("laptop", Web),
                    replaced: seen("tablet", Tablet),
                },
                HistoryEvent::Refused {
                    device: seen("laptop", Web),
                    rule: RefusalRule::TemporaryLimit,
                    limit: 3,
                    holders: [holders.clone(), vec![seen("tablet", Tablet)]].concat(),
                },
                HistoryEvent::Refused {
                    device: seen("phone-2", Mobile),
                    rule: RefusalRule::DeviceTypeCap,
                    limit: 1,
                    holders: holders.clone(),
                },
                HistoryEvent::LimitGranted {
                    limit: 3,
                    until: 0,
                    actor: "bo@support".into(),
                },
                HistoryEvent::Refused {
                    device: seen("tablet", Tablet),
                    rule: RefusalRule::PlanLimit,
                    limit: 2,
                    holders,
                },
            ]
        );
        // A temporary limit's end is the store's: a minute after it was granted.
        let entries = store.history(a, 50).await.unwrap();
        let granted_at = entries.iter().find_map(|e| match e.event {
            HistoryEvent::LimitGranted { until, .. } => Some(until - e.at),
            _ => None,
        });
        assert_eq!(granted_at, Some(60_000));
        // The newest few, as asked; another account has none.
        assert_eq!(store.history(a, 2).await.unwrap(), entries[..2].to_vec());
        assert!(store.history("hist-other", 50).await.unwrap().is_empty());
    }

    pub async fn a_lease_that_ended_unstopped_is_kept_once_it_is_forgotten<S: LeaseStore>(
        store: &S,
    ) {
        let a = "hist-expired";
        let tv = play_on(a, "tv", DeviceType::Tv, None);
        let ends = match store.acquire(&tv).await.unwrap() {
            AcquireOutcome::Granted { expires_at, .. } => expires_at,
            other => panic!("{other:?}"),
        };
        // The player goes silent: its lease ends, and a TTL later the store forgets it, which
        // the next play on the account finds.
        tokio::time::sleep(TTL * 2 + Duration::from_millis(300)).await;
        granted(store, &play_on(a, "phone", DeviceType::Mobile, None)).await;
        let entries = store.history(a, 50).await.unwrap();
        match entries.as_slice() {
            [entry] => match &entry.event {
                HistoryEvent::Expired { device, ended_at } => {
                    assert_eq!(device, &seen("tv", DeviceType::Tv));
                    assert!(ended_at.abs_diff(ends) < 50, "{ended_at} vs {ends}");
                    assert!(entry.at >= ends + TTL.as_millis() as u64 - 50);
                }
                other => panic!("{other:?}"),
            },
            other => panic!("expected one expired lease, got {other:?}"),
        }
    }

    pub async fn the_history_keeps_the_newest_fifty<S: LeaseStore>(store: &S) {
        let a = "hist-many";
        granted(store, &play_on(a, "tv", DeviceType::Tv, plan("basic", 1))).await;
        for i in 0..55 {
            refused(
                store,
                &play_on(a, &format!("phone-{i}"), DeviceType::Mobile, None),
            )
            .await;
        }
        let entries = store.history(a, 100).await.unwrap();
        let devices: Vec<String> = entries
            .iter()
            .map(|e| match &e.event {
                HistoryEvent::Refused { device, .. } => device.device_id.clone(),
                other => panic!("{other:?}"),
            })
            .collect();
        let newest: Vec<String> = (5..55).rev().map(|i| format!("phone-{i}")).collect();
        assert_eq!(devices, newest);
    }

    pub async fn plays_renewals_and_stops_write_no_history<S: LeaseStore>(store: &S) {
        let a = "hist-quiet";
        let tv = granted(
            store,
            &play_on(a, "tv", DeviceType::Tv, plan("standard", 2)),
        )
        .await;
        let phone = granted(store, &play_on(a, "phone", DeviceType::Mobile, None)).await;
        for _ in 0..3 {
            assert!(matches!(
                store.heartbeat(a, &tv).await.unwrap(),
                HeartbeatOutcome::Renewed { .. }
            ));
        }
        // The same device again: its own earlier lease goes, no one else's.
        granted(store, &play_on(a, "tv", DeviceType::Tv, None)).await;
        assert_eq!(
            store.release(a, &phone).await.unwrap(),
            ReleaseOutcome::Released
        );
        let _ = store.list(a).await.unwrap();
        assert_eq!(store.history(a, 50).await.unwrap(), vec![]);
    }
}

mod audit_cases {
    use super::*;

    pub async fn force_stops_are_audited_newest_first<S: LeaseStore>(store: &S) {
        let mut tv = play("acct-a", "tv", None);
        tv.device.meta = "Living Room TV".into();
        let tv = granted(store, &tv).await;
        let phone = granted(store, &play("acct-b", "phone", None)).await;
        assert_eq!(kick(store, "acct-a", &tv).await, ForceStopOutcome::Stopped);
        assert_eq!(
            kick(store, "acct-a", &tv).await,
            ForceStopOutcome::AlreadyStopped
        );
        assert_eq!(
            kick(store, "acct-b", &phone).await,
            ForceStopOutcome::Stopped
        );

        let fleet = store.audit(None, None, 10).await.unwrap();
        let who: Vec<_> = fleet
            .iter()
            .map(|e| (e.account_id.as_str(), e.device_id.as_str()))
            .collect();
        assert_eq!(
            who,
            [("acct-b", "phone"), ("acct-a", "tv")],
            "newest first, repeats not logged"
        );
        let entry = &store.audit(Some("acct-a"), None, 10).await.unwrap()[0];
        assert_eq!(
            (
                entry.stream_id.as_str(),
                entry.device_meta.as_str(),
                entry.actor.as_str(),
                entry.reason.as_str()
            ),
            (
                "id-of-tv",
                "Living Room TV",
                "alice@support",
                "customer asked"
            )
        );
        assert!(entry.at > 0);
        assert_eq!(
            store.audit(Some("acct-a"), None, 10).await.unwrap().len(),
            1,
            "filtered by account"
        );
        assert_eq!(
            store.audit(None, None, 1).await.unwrap().len(),
            1,
            "limited"
        );
        assert_eq!(entry.kind, AuditKind::ForceStop);
        assert_eq!(
            (entry.limit_from, entry.limit_to, entry.limit_until),
            (None, None, None)
        );
    }

    /// (kind, limit from, limit to) of an account's audit log, newest first; checks the rest.
    async fn limit_log<S: LeaseStore>(
        store: &S,
        account: &str,
    ) -> Vec<(AuditKind, Option<u32>, Option<u32>)> {
        let entries = store.audit(Some(account), None, 10).await.unwrap();
        for e in &entries {
            assert_eq!(e.account_id, account);
            assert_eq!(
                (e.actor.as_str(), e.reason.as_str()),
                ("bo@support", "family visit")
            );
            assert_eq!((e.stream_id.as_str(), e.device_id.as_str()), ("", ""));
        }
        entries
            .iter()
            .map(|e| (e.kind, e.limit_from, e.limit_to))
            .collect()
    }

    pub async fn limit_changes_are_audited_with_actor_from_to_until_and_reason<S: LeaseStore>(
        store: &S,
    ) {
        use AuditKind::{LimitGranted, LimitRemoved};
        // Nothing to remove: nothing changes, nothing is logged (as a repeated force-stop).
        store
            .set_override(&change_limit("acct-a", None))
            .await
            .unwrap();
        assert!(limit_log(store, "acct-a").await.is_empty());

        let first = store
            .set_override(&change_limit("acct-a", Some((3, 60_000))))
            .await
            .unwrap()
            .unwrap();
        let entry = &store.audit(Some("acct-a"), None, 1).await.unwrap()[0];
        assert_eq!(entry.limit_until, Some(first.until), "until when");
        assert_eq!(entry.at + 60_000, first.until, "on the store's clock");
        // Replacing it logs the limit it replaced; removing it, the plan's limit it brings back
        // and when the removed one would have ended.
        let second = store
            .set_override(&change_limit("acct-a", Some((2, 30_000))))
            .await
            .unwrap()
            .unwrap();
        store
            .set_override(&change_limit("acct-a", None))
            .await
            .unwrap();
        store
            .set_override(&change_limit("acct-a", None))
            .await
            .unwrap();
        assert_eq!(
            limit_log(store, "acct-a").await,
            [
                (LimitRemoved, Some(2), Some(1)),
                (LimitGranted, Some(3), Some(2)),
                (LimitGranted, Some(1), Some(3)),
            ],
            "newest first, the no-op removal not logged"
        );
        let removed = &store.audit(Some("acct-a"), None, 1).await.unwrap()[0];
        assert_eq!(removed.limit_until, Some(second.until));

        // The plan the account is held to is what "from" and, after a removal, "to" name.
        granted(store, &play("acct-b", "tv", plan("standard", 2))).await;
        store
            .set_override(&change_limit("acct-b", Some((4, 60_000))))
            .await
            .unwrap();
        store
            .set_override(&change_limit("acct-b", None))
            .await
            .unwrap();
        assert_eq!(
            limit_log(store, "acct-b").await,
            [
                (LimitRemoved, Some(4), Some(2)),
                (LimitGranted, Some(2), Some(4))
            ]
        );
        // An override that ended by itself is not in force: removing it logs nothing, and a
        // new grant starts from the plan's limit.
        store
            .set_override(&change_limit("acct-c", Some((5, 200))))
            .await
            .unwrap();
        tokio::time::sleep(Duration::from_millis(300)).await;
        store
            .set_override(&change_limit("acct-c", None))
            .await
            .unwrap();
        store
            .set_override(&change_limit("acct-c", Some((2, 1_000))))
            .await
            .unwrap();
        assert_eq!(
            limit_log(store, "acct-c").await,
            [
                (LimitGranted, Some(1), Some(2)),
                (LimitGranted, Some(1), Some(5))
            ]
        );
    }

    pub async fn the_audit_log_filters_by_kind_and_account<S: LeaseStore>(store: &S) {
        let tv = granted(store, &play("acct-a", "tv", None)).await;
        assert_eq!(kick(store, "acct-a", &tv).await, ForceStopOutcome::Stopped);
        for account in ["acct-a", "acct-b"] {
            store
                .set_override(&change_limit(account, Some((3, 60_000))))
                .await
                .unwrap();
        }
        store
            .set_override(&change_limit("acct-b", None))
            .await
            .unwrap();

        let log = |account: Option<&'static str>, kind: Option<AuditKind>, limit: usize| async move {
            let entries = store.audit(account, kind, limit).await.unwrap();
            entries
                .into_iter()
                .map(|e| (e.account_id, e.kind))
                .collect::<Vec<_>>()
        };
        let a = || "acct-a".to_owned();
        let b = || "acct-b".to_owned();
        use AuditKind::{ForceStop, LimitGranted, LimitRemoved};
        assert_eq!(
            log(None, None, 10).await,
            [
                (b(), LimitRemoved),
                (b(), LimitGranted),
                (a(), LimitGranted),
                (a(), ForceStop)
            ]
        );
        assert_eq!(
            log(None, Some(LimitGranted), 10).await,
            [(b(), LimitGranted), (a(), LimitGranted)]
        );
        assert_eq!(
            log(None, Some(LimitGranted), 1).await,
            [(b(), LimitGranted)],
            "limited after filtering"
        );
        assert_eq!(log(None, Some(ForceStop), 10).await, [(a(), ForceStop)]);
        assert_eq!(
            log(Some("acct-a"), Some(LimitGranted), 10).await,
            [(a(), LimitGranted)]
        );
        assert_eq!(
            log(Some("acct-b"), Some(LimitRemoved), 10).await,
            [(b(), LimitRemoved)]
        );
        assert!(log(Some("acct-b"), Some(ForceStop), 10).await.is_empty());
    }

    fn session_event(user: &str, kind: AuditKind, address: &str) -> SessionEventCmd {
        SessionEventCmd {
            user: user.to_owned(),
            kind,
            address: address.to_owned(),
            reason: String::new(),
            failure_window_ms: 0,
        }
    }

    pub async fn failed_sign_ins_count_against_the_name_until_a_sign_in_or_their_window<
        S: LeaseStore,
    >(
        store: &S,
    ) {
        use AuditKind::{SignIn, SignInFailed, SignInThrottled};
        let failed = |user: &str, window_ms: u64| {
            let cmd = SessionEventCmd {
                failure_window_ms: window_ms,
                ..session_event(user, SignInFailed, "10.0.0.9")
            };
            async move { store.session_event(&cmd).await.unwrap().failures }
        };
        assert_eq!(store.session_state("cy").await.unwrap().failures, 0);
        assert_eq!(failed("cy", 60_000).await, 1);
        assert_eq!(failed("cy", 60_000).await, 2);
        assert_eq!(
            failed("cy", 0).await,
            2,
            "without a window a failure is not counted"
        );
        let throttled = session_event("cy", SignInThrottled, "10.0.0.9");
        assert_eq!(store.session_event(&throttled).await.unwrap().failures, 2);
        assert_eq!(store.session_state("cy").await.unwrap().failures, 2);
        assert_eq!(
            store.session_state("dee").await.unwrap().failures,
            0,
            "per user"
        );
        let signed_in = store
            .session_event(&session_event("cy", SignIn, "10.0.0.1"))
            .await;
        assert_eq!(signed_in.unwrap().failures, 0, "a sign-in clears them");
        assert_eq!(store.session_state("cy").await.unwrap().failures, 0);
        // The window runs from the last failure.
        assert_eq!(failed("dee", 1000).await, 1);
        tokio::time::sleep(Duration::from_millis(600)).await;
        assert_eq!(failed("dee", 1000).await, 2);
        tokio::time::sleep(Duration::from_millis(600)).await;
        assert_eq!(store.session_state("dee").await.unwrap().failures, 2);
        tokio::time::sleep(Duration::from_millis(700)).await;
        assert_eq!(store.session_state("dee").await.unwrap().failures, 0);
        assert_eq!(
            failed("dee", 1000).await,
            1,
            "a count past its window starts again"
        );
        assert_eq!(store.session_state("dee").await.unwrap().generation, 0);
    }

    pub async fn a_sign_out_ends_the_user_s_sessions_and_sign_ins_are_audited<S: LeaseStore>(
        store: &S,
    ) {
        use AuditKind::{SignIn, SignInFailed, SignInThrottled, SignOut};
        assert_eq!(store.session_state("ana").await.unwrap().generation, 0);
        let event = |user, kind, address| {
            let cmd = session_event(user, kind, address);
            async move { store.session_event(&cmd).await.unwrap().generation }
        };
        assert_eq!(event("ana", SignInFailed, "10.0.0.9").await, 0);
        assert_eq!(
            event("ana", SignIn, "10.0.0.1").await,
            0,
            "a sign-in reads it"
        );
        assert_eq!(
            event("ana", SignOut, "10.0.0.1").await,
            1,
            "a sign-out bumps it"
        );
        assert_eq!(store.session_state("ana").await.unwrap().generation, 1);
        assert_eq!(event("bo", SignInThrottled, "::1").await, 0);
        assert_eq!(
            store.session_state("bo").await.unwrap().generation,
            0,
            "per user"
        );
        assert_eq!(event("ana", SignOut, "10.0.0.1").await, 2);

        let entries = store.audit(None, None, 10).await.unwrap();
        let seen: Vec<(String, AuditKind, String, String)> = entries
            .iter()
            .map(|e| {
                (
                    e.actor.clone(),
                    e.kind,
                    e.address.clone(),
                    e.account_id.clone(),
                )
            })
            .collect();
        let row = |user: &str, kind, address: &str| {
            (user.to_owned(), kind, address.to_owned(), String::new())
        };
        assert_eq!(
            seen,
            [
                row("ana", SignOut, "10.0.0.1"),
                row("bo", SignInThrottled, "::1"),
                row("ana", SignOut, "10.0.0.1"),
                row("ana", SignIn, "10.0.0.1"),
                row("ana", SignInFailed, "10.0.0.9"),
            ]
        );
        let failed = store.audit(None, Some(SignInFailed), 10).await.unwrap();
        assert_eq!(failed.len(), 1);
        assert!(failed[0].at > 0);
        assert!(
            store.audit(Some("ana"), None, 10).await.unwrap().is_empty(),
            "sign-in events belong to no account"
        );
    }
}

mod plan_rule_cases {
    use super::*;

    fn on(account: &str, device: &str, kind: DeviceType, plan: Option<Plan>) -> AcquireCmd {
        let mut cmd = super::play(account, device, plan);
        cmd.device.kind = kind;
        cmd
    }

    fn standard_one_mobile() -> Option<Plan> {
        Some(super::standard_one_mobile())
    }

    /// The second phone is refused by the mobile cap.
    async fn refused_by_the_mobile_cap<S: LeaseStore>(store: &S, cmd: &AcquireCmd) {
        match store.acquire(cmd).await.unwrap() {
            AcquireOutcome::Denied { rule, .. } => assert_eq!(
                rule,
                DenyRule::DeviceTypeCap {
                    kind: DeviceType::Mobile,
                    cap: 1
                }
            ),
            other => panic!("{} must meet the mobile cap, got {other:?}", cmd.device.id),
        }
    }

    pub async fn caps_of_the_remembered_plan_hold_when_a_play_names_none<S: LeaseStore>(store: &S) {
        granted(
            store,
            &on("acct", "phone-1", DeviceType::Mobile, standard_one_mobile()),
        )
        .await;
        refused_by_the_mobile_cap(store, &on("acct", "phone-2", DeviceType::Mobile, None)).await;
        // The plan's other slot is still there for another kind of device.
        granted(store, &on("acct", "tv", DeviceType::Tv, None)).await;
    }

    pub async fn racing_phones_naming_no_plan_get_exactly_the_mobile_cap<S: LeaseStore>(store: &S) {
        // Premium: four streams, two phones; the TV leaves room for three more streams.
        granted(
            store,
            &on("family", "tv", DeviceType::Tv, Some(premium_two_mobile())),
        )
        .await;
        let attempts: Vec<AcquireCmd> = (0..40)
            .map(|i| on("family", &format!("phone-{i}"), DeviceType::Mobile, None))
            .collect();
        let winners = racing_winners(store, &attempts).await;
        assert_eq!(
            winners, 2,
            "40 phones racing, no plan named, mobile cap of 2"
        );
    }

    /// Run on stores whose default plan is `standard_one_mobile`.
    pub async fn caps_of_the_default_plan_hold_when_no_plan_is_named<S: LeaseStore>(store: &S) {
        granted(store, &on("new", "phone-1", DeviceType::Mobile, None)).await;
        refused_by_the_mobile_cap(store, &on("new", "phone-2", DeviceType::Mobile, None)).await;
        let attempts: Vec<AcquireCmd> = (0..20)
            .map(|i| on("fresh", &format!("phone-{i}"), DeviceType::Mobile, None))
            .collect();
        let winners = racing_winners(store, &attempts).await;
        assert_eq!(
            winners, 1,
            "20 phones racing on a new account of a capped default plan"
        );
    }

    pub async fn a_device_type_cap_holds_inside_the_plan<S: LeaseStore>(store: &S) {
        granted(
            store,
            &on("acct", "phone-1", DeviceType::Mobile, standard_one_mobile()),
        )
        .await;
        match store
            .acquire(&on(
                "acct",
                "phone-2",
                DeviceType::Mobile,
                standard_one_mobile(),
            ))
            .await
            .unwrap()
        {
            AcquireOutcome::Denied {
                limit,
                rule,
                active,
                ..
            } => {
                assert_eq!(limit, 2);
                assert_eq!(
                    rule,
                    DenyRule::DeviceTypeCap {
                        kind: DeviceType::Mobile,
                        cap: 1
                    }
                );
                assert_eq!(active.len(), 1);
            }
            other => panic!("a second phone must be refused, got {other:?}"),
        }
        granted(
            store,
            &on("acct", "tv", DeviceType::Tv, standard_one_mobile()),
        )
        .await;
        // The phone's own replay still fits: one device, one slot.
        granted(
            store,
            &on("acct", "phone-1", DeviceType::Mobile, standard_one_mobile()),
        )
        .await;
    }

    pub async fn racing_phones_get_exactly_the_mobile_cap<S: LeaseStore>(store: &S) {
        let attempts: Vec<AcquireCmd> = (0..40)
            .map(|i| {
                on(
                    "family",
                    &format!("phone-{i}"),
                    DeviceType::Mobile,
                    standard_one_mobile(),
                )
            })
            .collect();
        let winners = racing_winners(store, &attempts).await;
        assert_eq!(winners, 1, "40 phones racing under a mobile cap of 1");
    }

    pub async fn an_override_raises_the_limit_until_it_expires<S: LeaseStore>(store: &S) {
        let set = store
            .set_override(&change_limit("acct", Some((2, 400))))
            .await
            .unwrap()
            .expect("override set");
        assert_eq!(set.limit, 2);
        granted(store, &play("acct", "tv", None)).await;
        granted(store, &play("acct", "phone", None)).await;
        let view = store.list("acct").await.unwrap();
        assert_eq!(
            (view.limit, view.limit_override.map(|o| o.limit)),
            (2, Some(2))
        );
        tokio::time::sleep(Duration::from_millis(450)).await;
        let view = store.list("acct").await.unwrap();
        assert_eq!(
            (view.limit, view.limit_override),
            (1, None),
            "back to the plan's limit"
        );
        assert_eq!(view.active.len(), 2, "running streams are not cut off");
        assert!(matches!(
            store.acquire(&play("acct", "tablet", None)).await.unwrap(),
            AcquireOutcome::Denied {
                rule: DenyRule::MaxStreams,
                ..
            }
        ));
    }

    pub async fn an_override_outlives_an_idle_account_and_can_be_cleared<S: LeaseStore>(store: &S) {
        store
            .set_override(&change_limit("idle", Some((3, 5_000))))
            .await
            .unwrap();
        tokio::time::sleep(TTL * 2 + Duration::from_millis(200)).await;
        assert_eq!(
            store.list("idle").await.unwrap().limit,
            3,
            "kept past the account's idle expiry"
        );
        assert_eq!(
            store
                .set_override(&change_limit("idle", None))
                .await
                .unwrap(),
            None
        );
        let view = store.list("idle").await.unwrap();
        assert_eq!((view.limit, view.limit_override), (1, None));
    }
}

struct Backend<S> {
    store: Arc<S>,
    /// The servers (and files) the store uses, stopped when the case ends.
    _redis: Option<Box<dyn std::any::Any>>,
    /// On servers with the screenlimit module: the store, whose every shard must be on the
    /// native path before the case runs (else the case would prove nothing about it).
    native: Option<Arc<RedisStore>>,
}

/// Waits until every shard of `store` takes the native path (it learns it in the background).
async fn every_shard_native(store: &RedisStore) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(15);
    loop {
        let states = store.shard_states();
        if !states.is_empty() && states.iter().all(|(_, s)| s.path == Some("native")) {
            return;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "the shards never took the native path: {:?}",
            states.iter().map(|(i, s)| (i, s.path)).collect::<Vec<_>>()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

fn timing() -> Timing {
    Timing::from_ttl(TTL)
}

fn memory_backend() -> Backend<MemoryStore> {
    memory_backend_with(basic())
}

fn memory_backend_with(default_plan: Plan) -> Backend<MemoryStore> {
    Backend {
        store: Arc::new(MemoryStore::new(default_plan, timing())),
        _redis: None,
        native: None,
    }
}

/// Basic by default; Standard and Premium with their mobile caps are configured too.
fn redis_backend() -> Backend<RedisStore> {
    redis_backend_with(PlanBook::new(
        basic(),
        [standard_one_mobile(), premium_two_mobile()],
    ))
}

fn redis_backend_with(plans: PlanBook) -> Backend<RedisStore> {
    lua_backend_on(RedisServer::start(), &plans)
}

/// The plans most cases run with: Basic by default, Standard and Premium with their mobile caps.
fn default_plans() -> PlanBook {
    PlanBook::new(basic(), [standard_one_mobile(), premium_two_mobile()])
}

/// A store on `server` alone, on the Lua scripts.
fn lua_backend_on(server: RedisServer, plans: &PlanBook) -> Backend<RedisStore> {
    Backend {
        store: redis_store(server.url(), Access::default(), plans),
        _redis: Some(Box::new(server)),
        native: None,
    }
}

/// A store on `server` alone, which has the screenlimit module: the native commands.
fn native_backend_on(server: RedisServer, plans: &PlanBook) -> Backend<RedisStore> {
    let store = redis_store(server.url(), Access::default(), plans);
    Backend {
        native: Some(store.clone()),
        store,
        _redis: Some(Box::new(server)),
    }
}

/// A Redis with the screenlimit module loaded: the native commands.
fn redis_module_backend() -> Backend<RedisStore> {
    redis_module_backend_with(PlanBook::new(
        basic(),
        [standard_one_mobile(), premium_two_mobile()],
    ))
}

fn redis_module_backend_with(plans: PlanBook) -> Backend<RedisStore> {
    native_backend_on(RedisServer::start_with_module(&[]), &plans)
}

/// Valkey 8 on the Lua scripts.
fn valkey_backend() -> Backend<RedisStore> {
    lua_backend_on(RedisServer::start_valkey(&[]), &default_plans())
}

/// Valkey 8 with the screenlimit module loaded: the native commands.
fn valkey_module_backend() -> Backend<RedisStore> {
    native_backend_on(RedisServer::start_valkey_with_module(&[]), &default_plans())
}

/// A primary with the screenlimit module and its replica, found through a Sentinel (the
/// limiter's `store.sentinel` mode, as the operator's Sentinel shards run).
fn redis_sentinel_module_backend() -> Backend<RedisStore> {
    let primary = RedisServer::start_with_module(&[]);
    let primary_port = primary.port.to_string();
    let replica = RedisServer::start_with_module(&["--replicaof", "127.0.0.1", &primary_port]);
    let sentinel = SentinelServer::start(&[("shard-0", primary.port)]);
    let shards = ShardSpec::Sentinel {
        addresses: vec![sentinel.url()],
        masters: vec!["shard-0".into()],
        poll_interval: Duration::from_millis(500),
    };
    let store = store_on(shards, Access::default(), &default_plans());
    Backend {
        native: Some(store.clone()),
        store,
        _redis: Some(Box::new((primary, replica, sentinel))),
    }
}

/// Redis over TLS (client certificates required), signed in as the limiter's ACL user.
fn redis_tls_backend() -> Backend<RedisStore> {
    let certs = Certificates::make();
    let redis = SecureRedis::start(&certs);
    let mut config = StoreConfig::default();
    config.tls.ca_file = Some(certs.path("ca.crt"));
    config.tls.client_cert_file = Some(certs.path("client.crt"));
    config.tls.client_key_file = Some(certs.path("client.key"));
    config.auth.username = Some(LIMITER_USER.0.into());
    config.auth.password = Some(LIMITER_USER.1.into());
    let plans = PlanBook::new(basic(), [standard_one_mobile(), premium_two_mobile()]);
    Backend {
        store: redis_store(redis.url(), Access::resolve(&config).unwrap(), &plans),
        _redis: Some(Box::new((redis, certs))),
        native: None,
    }
}

/// A store on the one shard at `url`, reached with `access`.
fn redis_store(url: String, access: Access, plans: &PlanBook) -> Arc<RedisStore> {
    store_on(ShardSpec::Urls(vec![url]), access, plans)
}

/// A store on `shards`, reached with `access`, the module's commands used where loaded.
fn store_on(shards: ShardSpec, access: Access, plans: &PlanBook) -> Arc<RedisStore> {
    let options = RedisOptions {
        shards,
        deadline: Duration::from_secs(2),
        batch_window: Duration::ZERO,
        admission: true,
        failure_threshold: 3,
        probe_interval: Duration::from_millis(100),
        access,
        module: true,
    };
    RedisStore::new(&options, plans, timing()).unwrap()
}

/// A Redis Cluster of three primaries with a replica each, the limiter given every node as a seed.
fn redis_cluster_backend() -> Backend<RedisStore> {
    redis_cluster_backend_with(PlanBook::new(
        basic(),
        [standard_one_mobile(), premium_two_mobile()],
    ))
}

fn redis_cluster_backend_with(plans: PlanBook) -> Backend<RedisStore> {
    let cluster = RedisCluster::start(3, 1);
    let store = cluster_store(&cluster, &plans);
    Backend {
        store,
        _redis: Some(Box::new(cluster)),
        native: None,
    }
}

/// A Redis Cluster of three primaries (no replicas: quicker to start), each with the module.
fn redis_cluster_module_backend() -> Backend<RedisStore> {
    redis_cluster_module_backend_with(PlanBook::new(
        basic(),
        [standard_one_mobile(), premium_two_mobile()],
    ))
}

fn redis_cluster_module_backend_with(plans: PlanBook) -> Backend<RedisStore> {
    let cluster = RedisCluster::start_with_module(3, 0);
    let store = cluster_store(&cluster, &plans);
    Backend {
        native: Some(store.clone()),
        store,
        _redis: Some(Box::new(cluster)),
    }
}

/// A store on `cluster`, every node given as a seed.
fn cluster_store(cluster: &RedisCluster, plans: &PlanBook) -> Arc<RedisStore> {
    let options = RedisOptions {
        shards: ShardSpec::Cluster {
            nodes: cluster.urls(),
            refresh_interval: Duration::from_secs(5),
        },
        deadline: Duration::from_secs(2),
        batch_window: Duration::ZERO,
        admission: true,
        failure_threshold: 3,
        probe_interval: Duration::from_millis(100),
        access: Access::default(),
        module: true,
    };
    RedisStore::new(&options, plans, timing()).unwrap()
}

/// Both backends with Standard and its mobile cap as the default plan.
fn memory_backend_capped_default() -> Backend<MemoryStore> {
    memory_backend_with(standard_one_mobile())
}

fn redis_backend_capped_default() -> Backend<RedisStore> {
    redis_backend_with(PlanBook::new(standard_one_mobile(), [basic()]))
}

fn redis_cluster_backend_capped_default() -> Backend<RedisStore> {
    redis_cluster_backend_with(PlanBook::new(standard_one_mobile(), [basic()]))
}

fn redis_module_backend_capped_default() -> Backend<RedisStore> {
    redis_module_backend_with(PlanBook::new(standard_one_mobile(), [basic()]))
}

fn redis_cluster_module_backend_capped_default() -> Backend<RedisStore> {
    redis_cluster_module_backend_with(PlanBook::new(standard_one_mobile(), [basic()]))
}

/// One module of cases from `$cases`, each run on every backend: by default `memory_backend`,
/// `redis_backend`, `redis_tls_backend`, `redis_cluster_backend`, and the native commands of
/// the screenlimit module on `redis_module_backend`, `redis_cluster_module_backend` and
/// `redis_sentinel_module_backend`, and Valkey 8 both ways (`valkey_backend`,
/// `valkey_module_backend`); or the five given.
macro_rules! conformance_module {
    ($module:ident, $cases:ident, $($case:ident),* $(,)?) => {
        mod $module {
            conformance_module!(@on memory, memory_backend, $cases; $($case),*);
            conformance_module!(@on redis, redis_backend, $cases; $($case),*);
            conformance_module!(@on redis_tls, redis_tls_backend, $cases; $($case),*);
            conformance_module!(@on redis_cluster, redis_cluster_backend, $cases; $($case),*);
            conformance_module!(@on redis_module, redis_module_backend, $cases; $($case),*);
            conformance_module!(@on redis_cluster_module, redis_cluster_module_backend, $cases; $($case),*);
            conformance_module!(@on redis_sentinel_module, redis_sentinel_module_backend, $cases; $($case),*);
            conformance_module!(@on valkey, valkey_backend, $cases; $($case),*);
            conformance_module!(@on valkey_module, valkey_module_backend, $cases; $($case),*);
        }
    };
    ($module:ident, $cases:ident, $memory:ident, $redis:ident, $cluster:ident, $module_redis:ident, $module_cluster:ident; $($case:ident),* $(,)?) => {
        mod $module {
            conformance_module!(@on memory, $memory, $cases; $($case),*);
            conformance_module!(@on redis, $redis, $cases; $($case),*);
            conformance_module!(@on redis_cluster, $cluster, $cases; $($case),*);
            conformance_module!(@on redis_module, $module_redis, $cases; $($case),*);
            conformance_module!(@on redis_cluster_module, $module_cluster, $cases; $($case),*);
        }
    };
    (@on $backend:ident, $make:ident, $cases:ident; $($case:ident),*) => {
        mod $backend {
            $(#[tokio::test]
            async fn $case() {
                let backend = super::super::$make();
                if let Some(store) = &backend.native {
                    super::super::every_shard_native(store).await;
                }
                super::super::$cases::$case(&*backend.store).await;
            })*
        }
    };
}

conformance_module!(
    leases,
    cases,
    grants_up_to_the_limit_then_denies_with_the_device_list,
    racing_devices_get_exactly_the_free_slots,
    a_lease_not_renewed_frees_its_slot_after_the_ttl,
    heartbeats_keep_a_lease_alive_past_its_first_ttl,
    a_lease_heartbeated_alone_for_many_ttls_stays_counted,
    a_new_play_from_the_same_device_replaces_its_lease,
    a_force_stopped_stream_stays_revoked_past_its_ttl,
    an_expired_lease_re_registers_when_there_is_room,
    an_expired_lease_on_a_full_account_is_told_to_re_acquire,
    a_lease_lost_with_the_store_re_registers_for_its_device,
    a_lost_lease_comes_back_under_the_plan_its_stream_carries,
    a_graceful_stop_frees_the_slot_at_once,
    a_replaced_stream_stays_revoked_after_its_successor_stops,
    take_over_stops_the_named_stream_and_takes_its_slot,
    lists_never_show_an_expired_lease,
    the_plan_of_the_latest_play_start_holds,
    device_details_come_back_in_lists,
    accounts_are_independent,
);

conformance_module!(
    plan_rules,
    plan_rule_cases,
    a_device_type_cap_holds_inside_the_plan,
    racing_phones_get_exactly_the_mobile_cap,
    caps_of_the_remembered_plan_hold_when_a_play_names_none,
    racing_phones_naming_no_plan_get_exactly_the_mobile_cap,
    an_override_raises_the_limit_until_it_expires,
    an_override_outlives_an_idle_account_and_can_be_cleared,
);

conformance_module!(
    history,
    history_cases,
    refusals_take_overs_revocations_stops_and_limits_are_kept_newest_first,
    a_lease_that_ended_unstopped_is_kept_once_it_is_forgotten,
    the_history_keeps_the_newest_fifty,
    plays_renewals_and_stops_write_no_history,
);

conformance_module!(
    shadow,
    shadow_cases,
    a_play_over_the_limit_is_let_through_and_recorded,
    a_device_type_cap_is_let_through_and_recorded,
    a_take_over_over_the_limit_stops_its_target_and_is_recorded,
);

conformance_module!(
    learning,
    learning_cases,
    a_learning_heartbeat_takes_a_lease_back_on_a_full_account,
    a_learning_heartbeat_still_tells_a_revoked_replaced_or_stopped_stream,
);

conformance_module!(
    audit,
    audit_cases,
    force_stops_are_audited_newest_first,
    limit_changes_are_audited_with_actor_from_to_until_and_reason,
    the_audit_log_filters_by_kind_and_account,
    a_sign_out_ends_the_user_s_sessions_and_sign_ins_are_audited,
    failed_sign_ins_count_against_the_name_until_a_sign_in_or_their_window,
);

conformance_module!(
    capped_default_plan,
    plan_rule_cases,
    memory_backend_capped_default,
    redis_backend_capped_default,
    redis_cluster_backend_capped_default,
    redis_module_backend_capped_default,
    redis_cluster_module_backend_capped_default;
    caps_of_the_default_plan_hold_when_no_plan_is_named,
);
