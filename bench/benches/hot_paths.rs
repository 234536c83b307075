//! The limiter's hot in-process paths: account -> shard, request parsing and validation, stream
//! id encode/decode, the embedded store's acquire and heartbeat.
//!
//! `cargo bench -p screenlimit-bench --bench hot_paths`; figures in BENCHMARKS.md.

use std::hint::black_box;
use std::time::Duration;

use criterion::{BatchSize, Criterion, criterion_group, criterion_main};
use futures::executor::block_on;
use screenlimit_limiter::api::types::PlayStartRequest;
use screenlimit_limiter::ids::{PlanTag, StreamIdCodec, StreamRef};
use screenlimit_limiter::model::{
    AcquireCmd, AcquireOutcome, Device, DeviceType, HeartbeatOutcome, Plan, Timing,
};
use screenlimit_limiter::store::LeaseStore;
use screenlimit_limiter::store::memory::MemoryStore;
use screenlimit_limiter::store::redis::ring::shard_for;

const BODY: &[u8] = br#"{"account_id":"acct-00042424","device_id":"mobile-7f3a9c2e1b4d","plan":"premium","device_type":"mobile","device_meta":"Samsung Galaxy S23","profile_id":"profile-1","title_id":"title:tt0111161"}"#;

fn sharding(c: &mut Criterion) {
    let accounts: Vec<String> = (0..1024).map(|i| format!("acct-{:08}", i * 7919)).collect();
    let mut i = 0;
    c.bench_function("shard_for/27_shards", |b| {
        b.iter(|| {
            i = (i + 1) & 1023;
            black_box(shard_for(black_box(&accounts[i]), 27))
        })
    });
    c.bench_function("shard_for/512_shards", |b| {
        b.iter(|| {
            i = (i + 1) & 1023;
            black_box(shard_for(black_box(&accounts[i]), 512))
        })
    });
}

fn validation(c: &mut Criterion) {
    c.bench_function("play_start_request/parse_and_validate", |b| {
        b.iter(|| {
            let req: PlayStartRequest = serde_json::from_slice(black_box(BODY)).unwrap();
            black_box(req.validate().is_ok())
        })
    });
    let parsed: PlayStartRequest = serde_json::from_slice(BODY).unwrap();
    c.bench_function("play_start_request/validate_only", |b| {
        b.iter_batched(
            || PlayStartRequest {
                ..clone_req(&parsed)
            },
            |req| black_box(req.validate().is_ok()),
            BatchSize::SmallInput,
        )
    });
}

fn clone_req(r: &PlayStartRequest) -> PlayStartRequest {
    PlayStartRequest {
        account_id: r.account_id.clone(),
        device_id: r.device_id.clone(),
        plan: r.plan.clone(),
        device_type: r.device_type,
        device_meta: r.device_meta.clone(),
        profile_id: r.profile_id.clone(),
        title_id: r.title_id.clone(),
        replace_stream_id: r.replace_stream_id.clone(),
    }
}

fn stream_ids(c: &mut Criterion) {
    let codec = StreamIdCodec::new(b"a-long-shared-secret-for-the-benchmark");
    let stream = StreamRef {
        device_id: "mobile-7f3a9c2e1b4d".into(),
        nonce: [7; 16],
        plan: PlanTag {
            name: "premium".into(),
            limit: 4,
        },
    };
    c.bench_function("stream_id/encode", |b| {
        b.iter(|| black_box(codec.encode(black_box("acct-00042424"), &stream)))
    });
    let id = codec.encode("acct-00042424", &stream);
    c.bench_function("stream_id/decode_and_verify", |b| {
        b.iter(|| black_box(codec.decode(black_box("acct-00042424"), black_box(&id))))
    });
}

fn device(i: usize) -> Device {
    Device {
        id: format!("dev-{}", i % 4),
        kind: DeviceType::ALL[i % 5],
        meta: "Samsung Galaxy S23".into(),
        profile_id: "profile-1".into(),
        title_id: "title:tt0111161".into(),
    }
}

fn memory_store(c: &mut Criterion) {
    let timing = Timing::from_ttl(Duration::from_secs(90));
    let premium = Plan::new("premium", 4);
    let store = MemoryStore::new(Plan::new("basic", 1), timing);
    const ACCOUNTS: usize = 100_000;
    let accounts: Vec<String> = (0..ACCOUNTS).map(|i| format!("acct-{i:08}")).collect();
    // One live stream per account to renew.
    let mut streams = Vec::with_capacity(ACCOUNTS);
    for (i, account) in accounts.iter().enumerate() {
        let cmd = AcquireCmd {
            account_id: account.clone(),
            device: device(i * 4),
            nonce: [i as u8; 16],
            plan: Some(premium.clone()),
            replace: None,
            shadow: false,
        };
        match block_on(store.acquire(&cmd)).unwrap() {
            AcquireOutcome::Granted { .. } => {}
            other => panic!("not granted: {other:?}"),
        }
        streams.push(StreamRef {
            device_id: cmd.device.id.clone(),
            nonce: cmd.nonce,
            plan: PlanTag {
                name: "premium".into(),
                limit: 4,
            },
        });
    }
    let mut i = 0usize;
    c.bench_function(
        "memory_store/acquire (100k accounts, replaces own device)",
        |b| {
            b.iter_batched(
                || {
                    i = (i * 2654435761 + 1) % ACCOUNTS;
                    AcquireCmd {
                        account_id: accounts[i].clone(),
                        device: device(i * 4 + 1 + (i % 3)),
                        nonce: [9; 16],
                        plan: Some(premium.clone()),
                        replace: None,
                        shadow: false,
                    }
                },
                |cmd| black_box(block_on(store.acquire(&cmd)).unwrap()),
                BatchSize::SmallInput,
            )
        },
    );
    let mut j = 0usize;
    c.bench_function("memory_store/heartbeat (100k accounts)", |b| {
        b.iter(|| {
            j = (j * 2654435761 + 1) % ACCOUNTS;
            let out = block_on(store.heartbeat(&accounts[j], &streams[j])).unwrap();
            debug_assert!(matches!(out, HeartbeatOutcome::Renewed { .. }));
            black_box(out)
        })
    });
}

criterion_group! {
    name = benches;
    config = Criterion::default()
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(3));
    targets = sharding, validation, stream_ids, memory_store
}
criterion_main!(benches);
