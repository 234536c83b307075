//! The command's arguments as Redis passes them (`Arg`, read in place, never copied), and the
//! check at load that every module API function this crate calls is there (`missing`). Uses
//! the `api!` macro of the parent module, the one place with `unsafe`.

use std::ffi::{c_char, c_int};

use redis_module::raw;

/// The functions this module calls: a server without one (older than Redis 7.0) refuses to
/// load it, instead of failing on a command later.
pub fn missing() -> Option<&'static str> {
    macro_rules! check {
        ($($name:ident),*) => {
            $(if unsafe { raw::$name }.is_none() { return Some(stringify!($name)); })*
        };
    }
    check!(
        RedisModule_OpenKey,
        RedisModule_CloseKey,
        RedisModule_KeyType,
        RedisModule_StringDMA,
        RedisModule_StringSet,
        RedisModule_StringPtrLen,
        RedisModule_CreateString,
        RedisModule_CreateStringFromLongLong,
        RedisModule_RetainString,
        RedisModule_FreeString,
        RedisModule_DeleteKey,
        RedisModule_GetAbsExpire,
        RedisModule_SetAbsExpire,
        RedisModule_Milliseconds,
        RedisModule_Replicate,
        RedisModule_GetContextFlags,
        RedisModule_ListPush,
        RedisModule_ListPop,
        RedisModule_ListGet,
        RedisModule_ValueLength,
        RedisModule_CreateCommand,
        RedisModule_GetCommand,
        RedisModule_SetCommandInfo,
        RedisModule_ReplyWithArray,
        RedisModule_ReplyWithLongLong,
        RedisModule_ReplyWithStringBuffer,
        RedisModule_ReplyWithNull
    );
    None
}

/// One argument of the running command (its name, a key, a value), as Redis passed it: borrowed
/// for the command, never retained or freed here; `Name` owns the strings the module creates.
#[repr(transparent)]
pub struct Arg(*mut raw::RedisModuleString);

impl Arg {
    /// The command's arguments as Redis passes them (`argv`, `argc`): its own strings, alive
    /// until the command returns. Read in place, not retained and freed one by one.
    pub fn all<'a>(argv: *mut *mut raw::RedisModuleString, argc: c_int) -> &'a [Arg] {
        match argv.is_null() || argc <= 0 {
            true => &[],
            // `Arg` is a transparent wrapper of the pointer.
            false => unsafe { std::slice::from_raw_parts(argv.cast::<Arg>(), argc as usize) },
        }
    }

    /// A string the module created; freed by its owner (`Name`).
    pub(super) fn from_raw(inner: *mut raw::RedisModuleString) -> Arg {
        Arg(inner)
    }

    pub fn inner(&self) -> *mut raw::RedisModuleString {
        self.0
    }

    /// The bytes (`RedisModule_StringPtrLen`).
    pub fn as_slice(&self) -> &[u8] {
        let mut len = 0usize;
        let at: *const c_char = unsafe { api!(RedisModule_StringPtrLen)(self.0, &mut len) };
        match at.is_null() {
            true => &[],
            false => unsafe { std::slice::from_raw_parts(at.cast::<u8>(), len) },
        }
    }
}
