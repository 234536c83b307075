//! screenlimit's lease operations as native Redis commands: one command per Lua script of the
//! limiter's Redis store, with the same keys, the same byte layout and the same answers, working
//! on the keys directly (key API, string DMA, expiry) with the server's clock, replicating their
//! effects. See README.md beside this crate.

mod account;
mod acquire;
mod args;
mod audit;
mod error;
mod heartbeat;
mod keys;
mod layout;
mod list;
mod names;
mod release;
mod renew;
mod reply;
mod spec;
mod support;

use std::panic::{AssertUnwindSafe, catch_unwind};

use redis_module::{
    AclCategory, Context, ContextFlags, RedisError, RedisResult, RedisString, RedisValue, Status,
    redis_module,
};

use crate::error::Error;
use crate::keys::Keys;
use crate::names::Shape;

/// A command's body: its answer from the keyspace and its arguments.
type Body = fn(&Keys, &[RedisString]) -> Result<RedisValue, Error>;

/// Runs a command so that nothing it does can cross into Redis: a panic (a bug) becomes an
/// error reply and one log line, never an abort of the server.
fn guarded(ctx: &Context, run: impl FnOnce(&Keys) -> RedisResult) -> RedisResult {
    let keys = Keys::new(ctx.ctx);
    match catch_unwind(AssertUnwindSafe(|| run(&keys))) {
        Ok(answer) => answer,
        Err(_) => {
            ctx.log_warning("screenlimit: a command panicked; answered with an error");
            Err(Error::Panic.into())
        }
    }
}

/// A command on an account's keys. First its key names, which must be the limiter's
/// (`names.rs`): any other would put the keys the command writes beside them, and the probe
/// below, in another slot. Then, on a Redis Cluster, what `cluster_guard.lua` does for the
/// scripts: while the account's slot migrates, the source node may hold some of its keys and not
/// others (the key API does not ask where a key lives), so the command stops before any write
/// with `TRYAGAIN`, which the limiter sends again. The probe is a `GET` of a key that never
/// exists, in the account's slot (the first key's tag): Redis refuses a module's call on a key
/// that is not local (`RedisModule_Call` answers `EPERM`: the slot migrates away and the key is
/// not here); on a steady slot it costs one lookup. The first key itself Redis routes before the
/// command runs.
fn keyed(ctx: &Context, args: &[RedisString], shape: Shape, body: Body) -> RedisResult {
    guarded(ctx, |keys| {
        names::check(shape, args)?;
        if ctx.get_flags().contains(ContextFlags::CLUSTER)
            && let Some(key) = args.get(1)
        {
            let mut probe = key.as_slice().to_vec();
            probe.push(b'?');
            // A refused call comes back as an error value (`Error on method call`), not `Err`.
            let steady = ctx.call("GET", &[probe.as_slice()]);
            if matches!(steady, Err(_) | Ok(RedisValue::StaticError(_))) {
                return Err(RedisError::Str("TRYAGAIN the slot is migrating"));
            }
        }
        Ok(body(keys, args)?)
    })
}

/// `SL.VERSION`: the account layout version this module reads and writes. A limiter uses the
/// module only if it speaks the same version, else the Lua scripts.
fn version(_: &Keys, args: &[RedisString]) -> Result<RedisValue, Error> {
    args::Args::new(args, 0)?;
    Ok(RedisValue::Integer(i64::from(layout::LAYOUT_VERSION)))
}

fn sl_version(ctx: &Context, args: Vec<RedisString>) -> RedisResult {
    guarded(ctx, |keys| Ok(version(keys, &args)?))
}

fn sl_acquire(ctx: &Context, args: Vec<RedisString>) -> RedisResult {
    keyed(ctx, &args, Shape::Account, acquire::acquire)
}

fn sl_heartbeat(ctx: &Context, args: Vec<RedisString>) -> RedisResult {
    keyed(ctx, &args, Shape::Account, heartbeat::heartbeat)
}

fn sl_release(ctx: &Context, args: Vec<RedisString>) -> RedisResult {
    keyed(ctx, &args, Shape::Account, release::release)
}

/// With keys, guarded as every command on an account's keys (on a Redis Cluster they are all in
/// one slot, or Redis refuses the call); with none it is the limiter's probe and touches nothing.
fn sl_renew(ctx: &Context, args: Vec<RedisString>) -> RedisResult {
    match args.len() > 2 {
        true => keyed(ctx, &args, Shape::Leases, renew::renew),
        false => guarded(ctx, |keys| Ok(renew::renew(keys, &args)?)),
    }
}

fn sl_list(ctx: &Context, args: Vec<RedisString>) -> RedisResult {
    keyed(ctx, &args, Shape::Account, list::list)
}

fn sl_force_stop(ctx: &Context, args: Vec<RedisString>) -> RedisResult {
    keyed(ctx, &args, Shape::AccountAndAudit, support::force_stop)
}

fn sl_set_override(ctx: &Context, args: Vec<RedisString>) -> RedisResult {
    keyed(ctx, &args, Shape::AccountAndAudit, support::set_override)
}

/// Refuses to load into a server that lacks a module API function the commands call, or that
/// refuses their key specs (`spec.rs`): without them a read-only ACL user could not list.
fn init(ctx: &Context, _args: &[RedisString]) -> Status {
    if let Some(name) = keys::missing() {
        ctx.log_warning(&format!(
            "screenlimit: this server lacks {name} (Redis 7.0 or later, or Valkey, is needed); not loaded"
        ));
        return Status::Err;
    }
    match spec::declare(ctx) {
        Ok(()) => Status::Ok,
        Err(e) => {
            ctx.log_warning(&format!("screenlimit: {e}; not loaded"));
            Status::Err
        }
    }
}

// Each command names its account key first (key positions 1..1 step 1, so a Redis Cluster
// routes it by the account's hash tag; `init` then declares each key's access, `spec.rs`); the
// support actions name the account's audit list second (1..2), in the same slot. Lease keys are
// the account key plus nonce bytes, in the same slot (the names are checked, `names.rs`). `write deny-oom` where a command adds
// state, as the scripts' flags (`Scripts::sources` in the limiter): a play-start, a limit
// override. What frees a slot runs over `maxmemory` as its script does (`allow-oom`): a stop,
// a force-stop (its audit entry is capped per account). The heartbeat, whose renewal must go on
// under `maxmemory`, refuses only its re-registration there (heartbeat.rs). `SL.RENEW` names
// lease keys only, every argument but the last (1..-2), `write fast` as `GETEX`.
redis_module! {
    name: "screenlimit",
    version: 1,
    allocator: (redis_module::alloc::RedisAlloc, redis_module::alloc::RedisAlloc),
    data_types: [],
    acl_categories: [
        "screenlimit",
    ],
    init: init,
    commands: [
        ["sl.version", sl_version, "readonly fast", 0, 0, 0, "", "screenlimit"],
        ["sl.acquire", sl_acquire, "write deny-oom", 1, 1, 1, "", "screenlimit"],
        ["sl.heartbeat", sl_heartbeat, "write", 1, 1, 1, "", "screenlimit"],
        ["sl.release", sl_release, "write", 1, 1, 1, "", "screenlimit"],
        ["sl.renew", sl_renew, "write fast", 1, -2, 1, "", "screenlimit"],
        ["sl.list", sl_list, "readonly", 1, 1, 1, "", "screenlimit"],
        ["sl.force_stop", sl_force_stop, "write", 1, 2, 1, "", "screenlimit"],
        ["sl.set_override", sl_set_override, "write deny-oom", 1, 2, 1, "", "screenlimit"],
    ],
}
