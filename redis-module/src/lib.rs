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
mod history;
mod keys;
mod layout;
mod list;
mod names;
mod release;
mod renew;
mod reply;
mod spec;
mod support;

use std::ffi::c_int;
use std::panic::{AssertUnwindSafe, catch_unwind};

use redis_module::{
    AclCategory, Context, ContextFlags, RedisError, RedisResult, RedisString, RedisValue, Status,
    raw, redis_module,
};

use crate::args::Arg;
use crate::error::Error;
use crate::keys::Keys;
use crate::names::Shape;

/// A command's body: its answer from the keyspace and its arguments.
type Body = fn(&Keys, &[Arg]) -> Result<RedisValue, Error>;

/// Runs a command so that nothing it does can cross into Redis: a panic (a bug) becomes an
/// error reply and one log line, never an abort of the server. The arguments are Redis's own,
/// read in place (not retained and freed one by one); the expiries held back are replicated
/// when `Keys` goes, once the command has answered.
fn run(
    ctx: *mut raw::RedisModuleCtx,
    argv: *mut *mut raw::RedisModuleString,
    argc: c_int,
    body: impl FnOnce(&Context, &Keys, &[Arg]) -> RedisResult,
) -> c_int {
    let context = Context::new(ctx);
    let keys = Keys::new(ctx);
    let args = Arg::all(argv, argc);
    let answer = match catch_unwind(AssertUnwindSafe(|| body(&context, &keys, args))) {
        Ok(answer) => answer,
        Err(_) => {
            context.log_warning("screenlimit: a command panicked; answered with an error");
            Err(Error::Panic.into())
        }
    };
    if catch_unwind(AssertUnwindSafe(|| reply::send(&context, &keys, answer))).is_err() {
        context.log_warning("screenlimit: a reply panicked part way");
    }
    raw::REDISMODULE_OK as c_int
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
fn keyed(ctx: &Context, keys: &Keys, args: &[Arg], shape: Shape, body: Body) -> RedisResult {
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
}

/// `SL.VERSION [history|shadow|learning]`: the account layout version this module reads and
/// writes. A limiter uses the module only if it speaks the same version, else the Lua scripts.
/// With a feature word it asks too whether the commands take what it sends: `history`, the
/// account history's bounds; `shadow`, `SL.ACQUIRE`'s enforcement argument after them;
/// `learning`, `SL.HEARTBEAT`'s mode argument after them (a module from before any of these
/// refuses the word). Any other word is refused.
fn version(_: &Keys, args: &[Arg]) -> Result<RedisValue, Error> {
    if args.len() > 1 {
        let asked = args::Args::new(args, 1)?;
        let features = [history::FEATURE, acquire::SHADOW, heartbeat::LEARNING];
        if !features.contains(&asked.bytes(0)) {
            return Err(Error::Arg("feature"));
        }
    }
    Ok(RedisValue::Integer(i64::from(layout::LAYOUT_VERSION)))
}

/// The function Redis calls for a command on an account's keys (`keyed`).
macro_rules! keyed_command {
    ($name:ident, $shape:expr, $body:path) => {
        extern "C" fn $name(
            ctx: *mut raw::RedisModuleCtx,
            argv: *mut *mut raw::RedisModuleString,
            argc: c_int,
        ) -> c_int {
            run(ctx, argv, argc, |ctx, keys, args| {
                keyed(ctx, keys, args, $shape, $body)
            })
        }
    };
}

keyed_command!(sl_acquire, Shape::Account, acquire::acquire);
keyed_command!(sl_heartbeat, Shape::Account, heartbeat::heartbeat);
keyed_command!(sl_release, Shape::Account, release::release);
keyed_command!(sl_list, Shape::Account, list::list);
keyed_command!(sl_force_stop, Shape::AccountAndAudit, support::force_stop);
keyed_command!(
    sl_set_override,
    Shape::AccountAndAudit,
    support::set_override
);

extern "C" fn sl_version(
    ctx: *mut raw::RedisModuleCtx,
    argv: *mut *mut raw::RedisModuleString,
    argc: c_int,
) -> c_int {
    run(ctx, argv, argc, |_, keys, args| Ok(version(keys, args)?))
}

/// With keys, guarded as every command on an account's keys (on a Redis Cluster they are all in
/// one slot, or Redis refuses the call); with none it is the limiter's probe and touches nothing.
extern "C" fn sl_renew(
    ctx: *mut raw::RedisModuleCtx,
    argv: *mut *mut raw::RedisModuleString,
    argc: c_int,
) -> c_int {
    run(ctx, argv, argc, |ctx, keys, args| match args.len() > 2 {
        true => keyed(ctx, keys, args, Shape::Leases, renew::renew),
        false => Ok(renew::renew(keys, args)?),
    })
}

// Each command names its account key first (key positions 1..1 step 1, so a Redis Cluster
// routes it by the account's hash tag; `init` then declares each key's access, `spec.rs`); the
// support actions name the account's audit list second (1..2), in the same slot. Lease keys are
// the account key plus nonce bytes, in the same slot (the names are checked, `names.rs`).
// `write deny-oom` where a command adds state, as the scripts' flags (`Scripts::sources` in the
// limiter): a play-start, a limit override. What frees a slot runs over `maxmemory` as its
// script does (`allow-oom`): a stop, a force-stop (its audit entry is capped per account). The
// heartbeat, whose renewal must go on under `maxmemory`, refuses only its re-registration there
// (heartbeat.rs). `SL.RENEW` names lease keys only, every argument but the last (1..-2),
// `write fast` as `GETEX`. Every command is in the module's ACL category `screenlimit`.
const COMMANDS: [spec::Command; 8] = [
    (c"sl.version", sl_version, c"readonly fast", 0, 0, 0),
    (c"sl.acquire", sl_acquire, c"write deny-oom", 1, 1, 1),
    (c"sl.heartbeat", sl_heartbeat, c"write", 1, 1, 1),
    (c"sl.release", sl_release, c"write", 1, 1, 1),
    (c"sl.renew", sl_renew, c"write fast", 1, -2, 1),
    (c"sl.list", sl_list, c"readonly", 1, 1, 1),
    (c"sl.force_stop", sl_force_stop, c"write", 1, 2, 1),
    (
        c"sl.set_override",
        sl_set_override,
        c"write deny-oom",
        1,
        2,
        1,
    ),
];

/// Refuses to load into a server that lacks a module API function the commands call, or that
/// refuses their key specs (`spec.rs`): without them a read-only ACL user could not list.
fn init(ctx: &Context, _args: &[RedisString]) -> Status {
    if let Some(name) = keys::missing() {
        ctx.log_warning(&format!(
            "screenlimit: this server lacks {name} (Redis 7.0 or later, or Valkey, is needed); not loaded"
        ));
        return Status::Err;
    }
    keys::make_strings();
    match spec::register(ctx, &COMMANDS).and_then(|()| spec::declare(ctx)) {
        Ok(()) => Status::Ok,
        Err(e) => {
            ctx.log_warning(&format!("screenlimit: {e}; not loaded"));
            Status::Err
        }
    }
}

fn deinit(_ctx: &Context) -> Status {
    keys::free_strings();
    Status::Ok
}

redis_module! {
    name: "screenlimit",
    version: 1,
    allocator: (redis_module::alloc::RedisAlloc, redis_module::alloc::RedisAlloc),
    data_types: [],
    acl_categories: [
        "screenlimit",
    ],
    init: init,
    deinit: deinit,
}
