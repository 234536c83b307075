//! The commands registered (`register`: names, functions, flags, key positions, ACL category),
//! then what each command does with each key it names (key specs), declared once they exist.
//! Registration gives Redis only the legacy key range (first, last, step), from which it derives
//! one spec for every key, read-write (`RW access update`): a user who may only read `sl:*` keys
//! (`%R~sl:*`) could then not run `SL.LIST`, which writes nothing. So each key gets the access
//! the command really has; ACL key permissions and cluster routing read them, and the legacy
//! range Redis recomputes from them is the same as before.

use std::ffi::{CStr, CString, c_int};
use std::mem::size_of;
use std::ptr::{null, null_mut};

use redis_module::commands::{BeginSearch, FindKeys, KeySpec, KeySpecFlags, get_redis_key_spec};
use redis_module::{Context, raw};

/// A command's keys: access, the first key's argument index, the last key's (relative to the
/// first, or from the end when negative).
type Keys = (KeySpecFlags, i32, i32);

/// Reads the value and answers from it.
fn reads() -> KeySpecFlags {
    KeySpecFlags::READ_ONLY | KeySpecFlags::ACCESS
}

/// Reads the value, answers from it and rewrites it (or its expiry, or deletes the key).
fn updates() -> KeySpecFlags {
    KeySpecFlags::READ_WRITE | KeySpecFlags::ACCESS | KeySpecFlags::UPDATE
}

/// Adds an entry to a list (capped: only the oldest entries past the cap go), as `LPUSH`.
fn appends() -> KeySpecFlags {
    KeySpecFlags::READ_WRITE | KeySpecFlags::INSERT
}

fn table() -> [(&'static str, Vec<Keys>); 7] {
    let account = || (updates(), 1, 0);
    let audit = || (appends(), 2, 0);
    [
        ("sl.list", vec![(reads(), 1, 0)]),
        ("sl.acquire", vec![account()]),
        ("sl.heartbeat", vec![account()]),
        ("sl.release", vec![account()]),
        // Every argument but the last: lease keys, each read and its life renewed (as `GETEX`).
        ("sl.renew", vec![(updates(), 1, -2)]),
        ("sl.force_stop", vec![account(), audit()]),
        ("sl.set_override", vec![account(), audit()]),
    ]
}

/// A command as Redis calls it.
pub type Handler =
    extern "C" fn(*mut raw::RedisModuleCtx, *mut *mut raw::RedisModuleString, c_int) -> c_int;

/// A command to register: name, function, flags, first key, last key, key step.
pub type Command = (&'static CStr, Handler, &'static CStr, c_int, c_int, c_int);

/// Registers the commands (as the `redis_module!` macro would, without its per-call argument
/// vector: each of its arguments retained and freed again, a `Vec`, a reply through
/// `RedisValue` by value). A server without ACL categories for commands (before Redis 7.2)
/// gets them without, as the macro does.
pub fn register(ctx: &Context, commands: &[Command]) -> Result<(), String> {
    for &(name, handler, flags, first, last, step) in commands {
        let created = unsafe {
            raw::RedisModule_CreateCommand.expect("checked at load")(
                ctx.ctx,
                name.as_ptr(),
                Some(handler),
                flags.as_ptr(),
                first,
                last,
                step,
            )
        };
        if created != raw::REDISMODULE_OK as c_int {
            return Err(format!("the server refused the command {name:?}"));
        }
        let Some(set_categories) = (unsafe { raw::RedisModule_SetCommandACLCategories }) else {
            continue;
        };
        let command = unsafe {
            raw::RedisModule_GetCommand.expect("checked at load")(ctx.ctx, name.as_ptr())
        };
        if command.is_null() {
            return Err(format!("{name:?} is not registered"));
        }
        if unsafe { set_categories(command, c"screenlimit".as_ptr()) }
            != raw::REDISMODULE_OK as c_int
        {
            ctx.log_warning(&format!(
                "screenlimit: the server refused the ACL category screenlimit for {name:?}"
            ));
        }
    }
    Ok(())
}

/// Declares every command's key specs; the first refusal, named.
pub fn declare(ctx: &Context) -> Result<(), String> {
    let version = raw::RedisModuleCommandInfoVersion {
        version: 1,
        sizeof_historyentry: size_of::<raw::RedisModuleCommandHistoryEntry>(),
        sizeof_keyspec: size_of::<raw::RedisModuleCommandKeySpec>(),
        sizeof_arg: size_of::<raw::RedisModuleCommandArg>(),
    };
    for (name, keys) in table() {
        let specs = keys
            .into_iter()
            .map(|(flags, first, last)| {
                KeySpec::new(
                    None,
                    flags,
                    BeginSearch::new_index(first),
                    FindKeys::new_range(last, 1, 0),
                )
            })
            .collect();
        // Ends with the zeroed spec Redis stops at; no notes or keywords, so nothing to free.
        let mut specs = get_redis_key_spec(specs);
        let mut info = raw::RedisModuleCommandInfo {
            version: &version,
            summary: null(),
            complexity: null(),
            since: null(),
            history: null_mut(),
            tips: null(),
            arity: 0, // unchanged: the commands check their own
            key_specs: specs.as_mut_ptr(),
            args: null_mut(),
        };
        let c_name = CString::new(name).expect("a command name has no NUL");
        // Both functions checked present at load (`keys::missing`).
        let command = unsafe {
            raw::RedisModule_GetCommand.expect("checked at load")(ctx.ctx, c_name.as_ptr())
        };
        if command.is_null() {
            return Err(format!("{name} is not registered"));
        }
        let status = unsafe {
            raw::RedisModule_SetCommandInfo.expect("checked at load")(command, &mut info)
        };
        if status != raw::REDISMODULE_OK as i32 {
            return Err(format!("the server refused the key specs of {name}"));
        }
    }
    Ok(())
}
