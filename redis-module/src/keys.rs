//! The keys a command works on, through the module key API (open, string DMA, expiry), never
//! by calling Redis commands. Each write is replicated as its effect with an absolute time
//! (`SET … PXAT`, `PEXPIREAT`, `SETRANGE`, `DEL`; a batch's renewals as one `EVAL` of a
//! `PEXPIREAT` loop), so a replica or the AOF replays the result, not the command with its own
//! clock; Redis wraps one command's effects in `MULTI`/`EXEC`.
//! Each replicated effect costs Redis more than the key work itself (`RM_Replicate` looks its
//! command up by name), so a key's new expiry is held back until the command ends (`flush`):
//! a later `SET … PXAT` (or `DEL`) of the same key carries it, one effect instead of two.
//!
//! Every write is checked: an effect is replicated only after the key API applied it, so a
//! replica (or the AOF) never gets an effect it would refuse; a refused write is an error reply.
//!
//! The one place with `unsafe` (with `spec.rs`): every pointer comes from Redis for the running
//! command.

use std::cell::RefCell;
use std::ffi::{CStr, c_char, c_int};

use redis_module::{RedisString, raw};

use crate::error::Error;

/// A module API function, checked present when the module loads (`missing`); inside `unsafe`.
macro_rules! api {
    ($name:ident) => {
        raw::$name.expect(concat!(stringify!($name), " checked at load"))
    };
}

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
        RedisModule_CreateString,
        RedisModule_FreeString,
        RedisModule_DeleteKey,
        RedisModule_GetAbsExpire,
        RedisModule_SetAbsExpire,
        RedisModule_Milliseconds,
        RedisModule_Replicate,
        RedisModule_GetContextFlags,
        RedisModule_ListPush,
        RedisModule_ListPop,
        RedisModule_ValueLength,
        RedisModule_GetCommand,
        RedisModule_SetCommandInfo
    );
    None
}

/// Whether a key API call did what it was asked.
fn applied(status: c_int) -> bool {
    status == raw::REDISMODULE_OK as c_int
}

const NO_KEY: i64 = -2;
const NO_EXPIRY: i64 = -1;

/// The running command's view of the keyspace.
pub struct Keys {
    ctx: *mut raw::RedisModuleCtx,
    /// Expiries set but not yet replicated, by key (`flush` at the end of the command).
    held: RefCell<Vec<Held>>,
}

/// A key's new expiry, not yet replicated.
struct Held {
    name: Vec<u8>,
    at: i64,
}

impl Drop for Keys {
    fn drop(&mut self) {
        self.flush();
    }
}

/// What [`Keys::renew`] found.
pub enum Renewed {
    /// The key's value; its life now ends at the time asked.
    Value(Vec<u8>),
    NoKey,
    WrongType,
    /// The server refused the new expiry: the key was left as it was.
    Refused,
}

/// One open key, closed when dropped.
struct Open(*mut raw::RedisModuleKey);

impl Drop for Open {
    fn drop(&mut self) {
        if !self.0.is_null() {
            unsafe { api!(RedisModule_CloseKey)(self.0) };
        }
    }
}

impl Open {
    fn kind(&self) -> isize {
        match self.0.is_null() {
            true => raw::REDISMODULE_KEYTYPE_EMPTY,
            false => (unsafe { api!(RedisModule_KeyType)(self.0) }) as isize,
        }
    }

    /// The string value, or `None` when there is no key; another type is `WRONGTYPE`.
    fn bytes(&self) -> Result<Option<&[u8]>, Error> {
        match self.kind() {
            raw::REDISMODULE_KEYTYPE_EMPTY => Ok(None),
            raw::REDISMODULE_KEYTYPE_STRING => {
                let mut len = 0usize;
                let at = unsafe {
                    api!(RedisModule_StringDMA)(self.0, &mut len, raw::REDISMODULE_READ as c_int)
                };
                match at.is_null() {
                    true => Ok(Some(&[])),
                    false => Ok(Some(unsafe { std::slice::from_raw_parts(at.cast(), len) })),
                }
            }
            _ => Err(Error::WrongType),
        }
    }

    fn expire_time(&self) -> i64 {
        match self.kind() {
            raw::REDISMODULE_KEYTYPE_EMPTY => NO_KEY,
            _ => match unsafe { api!(RedisModule_GetAbsExpire)(self.0) } {
                t if t < 0 => NO_EXPIRY,
                t => t,
            },
        }
    }
}

fn c(text: &'static CStr) -> *const c_char {
    text.as_ptr()
}

impl Keys {
    pub fn new(ctx: *mut raw::RedisModuleCtx) -> Keys {
        Keys {
            ctx,
            held: RefCell::new(Vec::new()),
        }
    }

    /// Replicates the expiries held back (`PEXPIREAT`). Runs when the command's `Keys` is
    /// dropped, before Redis propagates the command's effects.
    pub fn flush(&self) {
        for held in self.held.take() {
            self.replicate_expire(&held.name, held.at);
        }
    }

    /// Holds back `at` as the new expiry of `name` (replacing one held before).
    fn hold_expire(&self, name: &[u8], at: i64) {
        let mut held = self.held.borrow_mut();
        match held.iter_mut().find(|h| h.name == name) {
            Some(h) => h.at = at,
            None => held.push(Held {
                name: name.to_vec(),
                at,
            }),
        }
    }

    /// Forgets what is held back for `name` (a `SET … PXAT` or `DEL` of it carries it).
    fn release_held(&self, name: &[u8]) {
        self.held.borrow_mut().retain(|h| h.name != name);
    }

    fn replicate_expire(&self, k: &[u8], at: i64) {
        unsafe {
            api!(RedisModule_Replicate)(
                self.ctx,
                c(c"PEXPIREAT"),
                c(c"bl"),
                k.as_ptr().cast::<c_char>(),
                k.len(),
                at as std::ffi::c_longlong,
            )
        };
    }

    /// `SET k v PXAT at`, or plain `SET k v` when `at` is no expiry (a replica refuses `PXAT`
    /// below 1).
    fn replicate_set(&self, k: &[u8], v: &[u8], at: i64) {
        if at > 0 {
            unsafe {
                api!(RedisModule_Replicate)(
                    self.ctx,
                    c(c"SET"),
                    c(c"bbcl"),
                    k.as_ptr().cast::<c_char>(),
                    k.len(),
                    v.as_ptr().cast::<c_char>(),
                    v.len(),
                    c(c"PXAT"),
                    at as std::ffi::c_longlong,
                )
            };
        } else {
            unsafe {
                api!(RedisModule_Replicate)(
                    self.ctx,
                    c(c"SET"),
                    c(c"bb"),
                    k.as_ptr().cast::<c_char>(),
                    k.len(),
                    v.as_ptr().cast::<c_char>(),
                    v.len(),
                )
            };
        }
    }

    /// The server's clock in ms.
    pub fn now(&self) -> i64 {
        unsafe { api!(RedisModule_Milliseconds)() }
    }

    /// Whether the server is over its `maxmemory` (a write that adds state is then refused).
    pub fn out_of_memory(&self) -> bool {
        let flags = unsafe { api!(RedisModule_GetContextFlags)(self.ctx) };
        flags & raw::REDISMODULE_CTX_FLAGS_OOM as c_int != 0
    }

    /// A key name made from bytes (a lease key).
    pub fn name(&self, bytes: &[u8]) -> RedisString {
        RedisString::create_from_slice(self.ctx, bytes)
    }

    fn open(&self, name: &RedisString, write: bool) -> Open {
        let mode = match write {
            true => raw::REDISMODULE_READ | raw::REDISMODULE_WRITE,
            false => raw::REDISMODULE_READ,
        };
        Open(unsafe { api!(RedisModule_OpenKey)(self.ctx, name.inner, mode as c_int) }.cast())
    }

    /// `GET`.
    pub fn get(&self, name: &RedisString) -> Result<Option<Vec<u8>>, Error> {
        Ok(self.open(name, false).bytes()?.map(<[u8]>::to_vec))
    }

    /// `GETEX … PXAT at`: the value, the key's life set to end at `at`.
    pub fn get_extending(&self, name: &RedisString, at: i64) -> Result<Option<Vec<u8>>, Error> {
        let key = self.open(name, true);
        let Some(value) = key.bytes()?.map(<[u8]>::to_vec) else {
            return Ok(None);
        };
        self.set_expire(&key, name, at)?;
        Ok(Some(value))
    }

    /// `GETEX … PXAT at` of a lease key in a command that opens each key once (`SL.RENEW`):
    /// not replicated here, nor held back (looking through what is held would cost a batch of
    /// N keys N²); the command replicates all its renewals at once (`replicate_expire_all`).
    pub fn renew(&self, name: &RedisString, at: i64) -> Renewed {
        let key = self.open(name, true);
        match key.bytes() {
            Ok(Some(value)) => {
                let value = value.to_vec();
                match applied(unsafe { api!(RedisModule_SetAbsExpire)(key.0, at) }) {
                    true => Renewed::Value(value),
                    false => Renewed::Refused,
                }
            }
            Ok(None) => Renewed::NoKey,
            Err(_) => Renewed::WrongType,
        }
    }

    /// The new expiry `at` of every key in `names` as one replicated effect: `EVAL` of a fixed
    /// `PEXPIREAT` loop, which a replica without the module and the AOF replay as plain
    /// commands. One `RedisModule_Replicate` for the batch: its command lookup by name and most
    /// of its argument work are paid once, not per key (the keys go as the call's own strings).
    pub fn replicate_expire_all(&self, names: &[&RedisString], at: i64) {
        if names.is_empty() {
            return;
        }
        let mut strings: Vec<*mut raw::RedisModuleString> = names.iter().map(|n| n.inner).collect();
        unsafe {
            api!(RedisModule_Replicate)(
                self.ctx,
                c(c"EVAL"),
                c(c"clvl"),
                c(c"for _, k in ipairs(KEYS) do redis.call('PEXPIREAT', k, ARGV[1]) end"),
                names.len() as std::ffi::c_longlong,
                strings.as_mut_ptr(),
                strings.len(),
                at as std::ffi::c_longlong,
            )
        };
    }

    /// `PEXPIRETIME`: the absolute expiry in ms, -1 without one, -2 without the key.
    pub fn expire_time(&self, name: &RedisString) -> i64 {
        self.open(name, false).expire_time()
    }

    /// `PEXPIREAT`, if the key exists; whether it did.
    pub fn expire_at(&self, name: &RedisString, at: i64) -> Result<bool, Error> {
        let key = self.open(name, true);
        if key.kind() == raw::REDISMODULE_KEYTYPE_EMPTY {
            return Ok(false);
        }
        self.set_expire(&key, name, at)?;
        Ok(true)
    }

    /// The new expiry, held back for replication only once applied.
    fn set_expire(&self, key: &Open, name: &RedisString, at: i64) -> Result<(), Error> {
        if !applied(unsafe { api!(RedisModule_SetAbsExpire)(key.0, at) }) {
            return Err(Error::Refused("a key's expiry"));
        }
        self.hold_expire(name.as_slice(), at);
        Ok(())
    }

    /// `SET name value PXAT at`, or with the key's present expiry (`KEEPTTL`) when `at` is None.
    pub fn set(&self, name: &RedisString, value: &[u8], at: Option<i64>) -> Result<(), Error> {
        let key = self.open(name, true);
        let at = at.unwrap_or_else(|| key.expire_time());
        let string =
            unsafe { api!(RedisModule_CreateString)(self.ctx, value.as_ptr().cast(), value.len()) };
        let stored = applied(unsafe { api!(RedisModule_StringSet)(key.0, string) });
        unsafe { api!(RedisModule_FreeString)(self.ctx, string) };
        if !stored {
            return Err(Error::Refused("a key's value"));
        }
        // The `SET` carries the key's expiry: whatever was held back for it is replicated here.
        self.release_held(name.as_slice());
        if at > 0 && !applied(unsafe { api!(RedisModule_SetAbsExpire)(key.0, at) }) {
            // The value is stored without an expiry: so is the replica's.
            self.replicate_set(name.as_slice(), value, NO_EXPIRY);
            return Err(Error::Refused("a key's expiry"));
        }
        self.replicate_set(name.as_slice(), value, at);
        Ok(())
    }

    /// `SETRANGE name offset bytes` inside the present value (a patch that does not grow it).
    pub fn set_range(&self, name: &RedisString, offset: usize, bytes: &[u8]) -> Result<(), Error> {
        let key = self.open(name, true);
        if key.kind() != raw::REDISMODULE_KEYTYPE_STRING {
            return Err(Error::WrongType);
        }
        let mut len = 0usize;
        let at = unsafe {
            api!(RedisModule_StringDMA)(
                key.0,
                &mut len,
                (raw::REDISMODULE_READ | raw::REDISMODULE_WRITE) as c_int,
            )
        };
        if at.is_null() || offset + bytes.len() > len {
            return Err(Error::Malformed);
        }
        unsafe {
            std::ptr::copy_nonoverlapping(bytes.as_ptr(), at.cast::<u8>().add(offset), bytes.len())
        };
        let k = name.as_slice();
        unsafe {
            api!(RedisModule_Replicate)(
                self.ctx,
                c(c"SETRANGE"),
                c(c"blb"),
                k.as_ptr().cast::<c_char>(),
                k.len(),
                offset as std::ffi::c_longlong,
                bytes.as_ptr().cast::<c_char>(),
                bytes.len(),
            )
        };
        Ok(())
    }

    /// `DEL`; whether there was a key.
    pub fn del(&self, name: &RedisString) -> Result<bool, Error> {
        let key = self.open(name, true);
        if key.kind() == raw::REDISMODULE_KEYTYPE_EMPTY {
            return Ok(false);
        }
        if !applied(unsafe { api!(RedisModule_DeleteKey)(key.0) }) {
            return Err(Error::Refused("a key's deletion"));
        }
        let k = name.as_slice();
        self.release_held(k);
        unsafe {
            api!(RedisModule_Replicate)(
                self.ctx,
                c(c"DEL"),
                c(c"b"),
                k.as_ptr().cast::<c_char>(),
                k.len(),
            )
        };
        Ok(true)
    }

    /// Whether the key is a list or absent.
    pub fn is_list_or_empty(&self, name: &RedisString) -> bool {
        matches!(
            self.open(name, false).kind(),
            raw::REDISMODULE_KEYTYPE_EMPTY | raw::REDISMODULE_KEYTYPE_LIST
        )
    }

    /// `LPUSH name value`, then `LTRIM name 0 keep-1` when the list grew past `keep`. A key of
    /// another type is refused (`WRONGTYPE`) and nothing replicated: a replica would refuse the
    /// `LPUSH` too.
    pub fn list_push_capped(
        &self,
        name: &RedisString,
        value: &[u8],
        keep: usize,
    ) -> Result<(), Error> {
        let key = self.open(name, true);
        if !matches!(
            key.kind(),
            raw::REDISMODULE_KEYTYPE_EMPTY | raw::REDISMODULE_KEYTYPE_LIST
        ) {
            return Err(Error::WrongType);
        }
        let k = name.as_slice();
        let element =
            unsafe { api!(RedisModule_CreateString)(self.ctx, value.as_ptr().cast(), value.len()) };
        let pushed = applied(unsafe {
            api!(RedisModule_ListPush)(key.0, raw::REDISMODULE_LIST_HEAD as c_int, element)
        });
        unsafe { api!(RedisModule_FreeString)(self.ctx, element) };
        if !pushed {
            return Err(Error::Refused("the audit entry's push"));
        }
        unsafe {
            api!(RedisModule_Replicate)(
                self.ctx,
                c(c"LPUSH"),
                c(c"bb"),
                k.as_ptr().cast::<c_char>(),
                k.len(),
                value.as_ptr().cast::<c_char>(),
                value.len(),
            );
        }
        let mut trimmed = false;
        while unsafe { api!(RedisModule_ValueLength)(key.0) } > keep {
            let dropped =
                unsafe { api!(RedisModule_ListPop)(key.0, raw::REDISMODULE_LIST_TAIL as c_int) };
            if dropped.is_null() {
                break;
            }
            unsafe { api!(RedisModule_FreeString)(self.ctx, dropped) };
            trimmed = true;
        }
        if trimmed {
            unsafe {
                api!(RedisModule_Replicate)(
                    self.ctx,
                    c(c"LTRIM"),
                    c(c"bll"),
                    k.as_ptr().cast::<c_char>(),
                    k.len(),
                    0 as std::ffi::c_longlong,
                    (keep as std::ffi::c_longlong) - 1,
                )
            };
        }
        Ok(())
    }
}
