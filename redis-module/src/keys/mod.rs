//! The keys a command works on, through the module key API (open, string DMA, expiry), never
//! by calling Redis commands. Each write is replicated as its effect with an absolute time
//! (`SET … PXAT`, `PEXPIREAT`, `DEL`, `LPUSH`, `LTRIM`; a value patched in place as a `SET … PXAT`
//! of the whole new value; a batch's renewals as one `EVAL` of a `PEXPIREAT` loop), so a replica
//! or the AOF replays the result, not the command with its own clock; Redis wraps one command's
//! effects in `MULTI`/`EXEC`.
//! Each replicated effect costs Redis more than the key work itself (`RM_Replicate` looks its
//! command up by name and makes an object of each argument), so a key's new expiry is held back
//! until the command ends (`flush`): a later `SET … PXAT` (or `DEL`) of the same key carries it,
//! one effect instead of two. The arguments go as the strings the command already has where it
//! can (its key, a value it stored), not copies.
//!
//! Every write is checked: an effect is replicated only after the key API applied it, so a
//! replica (or the AOF) never gets an effect it would refuse; a refused write is an error reply.
//!
//! The one place with `unsafe` (with `spec.rs`): every pointer comes from Redis for the running
//! command. So the command's arguments (`Arg`, read in place) and its reply calls are here too.

use std::cell::RefCell;
use std::ffi::{CStr, c_char, c_int, c_long, c_longlong};
use std::sync::atomic::{AtomicPtr, Ordering};

use redis_module::raw;

use crate::error::Error;

/// A module API function, checked present when the module loads (`missing`); inside `unsafe`.
macro_rules! api {
    ($name:ident) => {
        raw::$name.expect(concat!(stringify!($name), " checked at load"))
    };
}

mod arg;

pub use arg::{Arg, missing};

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
    held: RefCell<HeldSet>,
}

/// A key's new expiry, not yet replicated; the name retained until then.
struct Held {
    name: *mut raw::RedisModuleString,
    at: i64,
}

impl Held {
    fn is(&self, name: &Arg) -> bool {
        self.name == name.inner() || Arg::from_raw(self.name).as_slice() == name.as_slice()
    }
}

/// The expiries held back: a command holds one or two (its account key, a lease key, an audit
/// list), kept inline, without an allocation; any more in a `Vec`.
#[derive(Default)]
struct HeldSet {
    inline: [Option<Held>; 4],
    more: Vec<Held>,
}

impl HeldSet {
    fn iter_mut(&mut self) -> impl Iterator<Item = &mut Held> {
        self.inline.iter_mut().flatten().chain(self.more.iter_mut())
    }

    fn push(&mut self, held: Held) {
        match self.inline.iter_mut().find(|slot| slot.is_none()) {
            Some(slot) => *slot = Some(held),
            None => self.more.push(held),
        }
    }

    /// Takes out the entries `is_out` names, in order.
    fn take_where(&mut self, mut is_out: impl FnMut(&Held) -> bool, mut out: impl FnMut(Held)) {
        for slot in &mut self.inline {
            if slot.as_ref().is_some_and(&mut is_out)
                && let Some(held) = slot.take()
            {
                out(held);
            }
        }
        if !self.more.is_empty() {
            let mut kept = Vec::with_capacity(self.more.len());
            for held in self.more.drain(..) {
                match is_out(&held) {
                    true => out(held),
                    false => kept.push(held),
                }
            }
            self.more = kept;
        }
    }
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

/// A string the module made (a lease key's name, a value), freed when dropped.
pub struct Name {
    ctx: *mut raw::RedisModuleCtx,
    arg: Arg,
}

impl std::ops::Deref for Name {
    type Target = Arg;

    fn deref(&self) -> &Arg {
        &self.arg
    }
}

impl Drop for Name {
    fn drop(&mut self) {
        if !self.arg.inner().is_null() {
            unsafe { api!(RedisModule_FreeString)(self.ctx, self.arg.inner()) };
        }
    }
}

/// One open key, closed when dropped. The value read through it (`bytes`) is Redis's own
/// memory: every write takes `&mut self`, so no read outlives the write that could move it.
pub struct Open<'k> {
    keys: &'k Keys,
    name: &'k Arg,
    ptr: *mut raw::RedisModuleKey,
}

impl Drop for Open<'_> {
    fn drop(&mut self) {
        if !self.ptr.is_null() {
            unsafe { api!(RedisModule_CloseKey)(self.ptr) };
        }
    }
}

impl Open<'_> {
    pub fn kind(&self) -> isize {
        match self.ptr.is_null() {
            true => raw::REDISMODULE_KEYTYPE_EMPTY,
            false => (unsafe { api!(RedisModule_KeyType)(self.ptr) }) as isize,
        }
    }

    /// The string value, or `None` when there is no key; another type is `WRONGTYPE`.
    pub fn bytes(&self) -> Result<Option<&[u8]>, Error> {
        match self.kind() {
            raw::REDISMODULE_KEYTYPE_EMPTY => Ok(None),
            raw::REDISMODULE_KEYTYPE_STRING => {
                let mut len = 0usize;
                let at = unsafe {
                    api!(RedisModule_StringDMA)(self.ptr, &mut len, raw::REDISMODULE_READ as c_int)
                };
                match at.is_null() {
                    true => Ok(Some(&[])),
                    false => Ok(Some(unsafe { std::slice::from_raw_parts(at.cast(), len) })),
                }
            }
            _ => Err(Error::WrongType),
        }
    }

    /// `PEXPIRETIME`: the absolute expiry in ms, -1 without one, -2 without the key.
    pub fn expire_time(&self) -> i64 {
        match self.kind() {
            raw::REDISMODULE_KEYTYPE_EMPTY => NO_KEY,
            _ => match unsafe { api!(RedisModule_GetAbsExpire)(self.ptr) } {
                t if t < 0 => NO_EXPIRY,
                t => t,
            },
        }
    }

    /// The new expiry `at`, held back for replication only once applied (the key exists).
    pub fn set_expire(&mut self, at: i64) -> Result<(), Error> {
        if !applied(unsafe { api!(RedisModule_SetAbsExpire)(self.ptr, at) }) {
            return Err(Error::Refused("a key's expiry"));
        }
        self.keys.hold_expire(self.name, at);
        Ok(())
    }

    /// `SET name value PXAT at`, or with the key's present expiry (`KEEPTTL`) when `at` is
    /// None; a value the module made (`Keys::string`, `Keys::number`), stored as it is (Redis
    /// keeps a reference) and replicated as the same string.
    pub fn set(&mut self, value: &Name, at: Option<i64>) -> Result<(), Error> {
        let at = at.unwrap_or_else(|| self.expire_time());
        if !applied(unsafe { api!(RedisModule_StringSet)(self.ptr, value.inner()) }) {
            return Err(Error::Refused("a key's value"));
        }
        // The `SET` carries the key's expiry: whatever was held back for it is replicated here.
        self.keys.release_held(self.name);
        if at > 0 && !applied(unsafe { api!(RedisModule_SetAbsExpire)(self.ptr, at) }) {
            // The value is stored without an expiry: so is the replica's.
            self.keys
                .replicate_set(self.name, Value::String(value), NO_EXPIRY);
            return Err(Error::Refused("a key's expiry"));
        }
        self.keys.replicate_set(self.name, Value::String(value), at);
        Ok(())
    }

    /// Overwrites `bytes.len()` bytes at `offset` inside the present string value (a patch that
    /// does not grow it). Not replicated: the caller replicates the key's new state.
    pub fn patch(&mut self, offset: usize, bytes: &[u8]) -> Result<(), Error> {
        if self.kind() != raw::REDISMODULE_KEYTYPE_STRING {
            return Err(Error::WrongType);
        }
        let mut len = 0usize;
        let at = unsafe {
            api!(RedisModule_StringDMA)(
                self.ptr,
                &mut len,
                (raw::REDISMODULE_READ | raw::REDISMODULE_WRITE) as c_int,
            )
        };
        if at.is_null() || offset.checked_add(bytes.len()).is_none_or(|end| end > len) {
            return Err(Error::Malformed);
        }
        unsafe {
            std::ptr::copy_nonoverlapping(bytes.as_ptr(), at.cast::<u8>().add(offset), bytes.len())
        };
        Ok(())
    }

    /// Replicates the key as it now is, `SET name value PXAT at`, and forgets what was held
    /// back for it: one effect where a patch and a new expiry would be two.
    pub fn replicate_value(&self, at: i64) -> Result<(), Error> {
        let value = self.bytes()?.ok_or(Error::Malformed)?;
        self.keys.release_held(self.name);
        self.keys.replicate_set(self.name, Value::Bytes(value), at);
        Ok(())
    }

    /// `DEL`; whether there was a key.
    pub fn delete(&mut self) -> Result<bool, Error> {
        if self.kind() == raw::REDISMODULE_KEYTYPE_EMPTY {
            return Ok(false);
        }
        if !applied(unsafe { api!(RedisModule_DeleteKey)(self.ptr) }) {
            return Err(Error::Refused("a key's deletion"));
        }
        self.keys.release_held(self.name);
        unsafe {
            api!(RedisModule_Replicate)(self.keys.ctx, c(c"DEL"), c(c"s"), self.name.inner())
        };
        Ok(true)
    }
}

fn c(text: &'static CStr) -> *const c_char {
    text.as_ptr()
}

/// A replicated `SET`'s value.
enum Value<'v> {
    /// A string the module made (stored in the key: Redis takes another reference).
    String(&'v Arg),
    /// Bytes (the key's value as it now is), copied into the effect.
    Bytes(&'v [u8]),
}

/// The string `PXAT`, made once at load (`make_strings`) for every replicated `SET … PXAT`;
/// null until then (each effect then makes its own).
static PXAT: AtomicPtr<raw::RedisModuleString> = AtomicPtr::new(std::ptr::null_mut());

/// Makes the strings every command shares (`PXAT`), kept until the module unloads.
pub fn make_strings() {
    let pxat = unsafe { api!(RedisModule_CreateString)(std::ptr::null_mut(), c(c"PXAT"), 4) };
    PXAT.store(pxat, Ordering::Relaxed);
}

/// Frees the shared strings (the module unloads: no command runs, no effect holds them).
pub fn free_strings() {
    let pxat = PXAT.swap(std::ptr::null_mut(), Ordering::Relaxed);
    if !pxat.is_null() {
        unsafe { api!(RedisModule_FreeString)(std::ptr::null_mut(), pxat) };
    }
}

impl Keys {
    pub fn new(ctx: *mut raw::RedisModuleCtx) -> Keys {
        Keys {
            ctx,
            held: RefCell::new(HeldSet::default()),
        }
    }

    /// Replicates the expiries held back (`PEXPIREAT`). Runs when the command's `Keys` is
    /// dropped, before Redis propagates the command's effects.
    pub fn flush(&self) {
        let mut held = self.held.take();
        held.take_where(
            |_| true,
            |held| {
                let mut digits = itoa::Buffer::new();
                let at = digits.format(held.at);
                unsafe {
                    api!(RedisModule_Replicate)(
                        self.ctx,
                        c(c"PEXPIREAT"),
                        c(c"sb"),
                        held.name,
                        at.as_ptr().cast::<c_char>(),
                        at.len(),
                    );
                    api!(RedisModule_FreeString)(std::ptr::null_mut(), held.name);
                }
            },
        );
    }

    /// Holds back `at` as the new expiry of `name` (replacing one held before).
    fn hold_expire(&self, name: &Arg, at: i64) {
        let mut held = self.held.borrow_mut();
        if let Some(h) = held.iter_mut().find(|h| h.is(name)) {
            h.at = at;
            return;
        }
        unsafe { api!(RedisModule_RetainString)(std::ptr::null_mut(), name.inner()) };
        held.push(Held {
            name: name.inner(),
            at,
        });
    }

    /// Forgets what is held back for `name` (a `SET … PXAT` or `DEL` of it carries it).
    fn release_held(&self, name: &Arg) {
        self.held.borrow_mut().take_where(
            |h| h.is(name),
            |h| unsafe { api!(RedisModule_FreeString)(std::ptr::null_mut(), h.name) },
        );
    }

    /// `SET k v PXAT at`, or plain `SET k v` when `at` is no expiry (a replica refuses `PXAT`
    /// below 1). The key and a string value go as they are (Redis takes a reference), bytes are
    /// copied once; the time as digits written here, `PXAT` as the string made at load: each
    /// argument object Redis makes for a replicated effect is an allocation, freed again once
    /// the effect is propagated.
    fn replicate_set(&self, k: &Arg, v: Value, at: i64) {
        let pxat = PXAT.load(Ordering::Relaxed);
        // The time as decimal digits on the stack: Redis would otherwise make an object of it.
        let mut digits = itoa::Buffer::new();
        let t = digits.format(at);
        let (ctx, set, k) = (self.ctx, c(c"SET"), k.inner());
        // One call per case: a C variadic call's arguments are fixed where it is written.
        unsafe {
            let replicate = api!(RedisModule_Replicate);
            match (v, at > 0, pxat.is_null()) {
                (Value::String(v), true, false) => replicate(
                    ctx,
                    set,
                    c(c"sssb"),
                    k,
                    v.inner(),
                    pxat,
                    t.as_ptr().cast::<c_char>(),
                    t.len(),
                ),
                (Value::String(v), true, true) => replicate(
                    ctx,
                    set,
                    c(c"sscb"),
                    k,
                    v.inner(),
                    c(c"PXAT"),
                    t.as_ptr().cast::<c_char>(),
                    t.len(),
                ),
                (Value::String(v), false, _) => replicate(ctx, set, c(c"ss"), k, v.inner()),
                (Value::Bytes(v), true, false) => {
                    let (p, n) = (v.as_ptr().cast::<c_char>(), v.len());
                    replicate(
                        ctx,
                        set,
                        c(c"sbsb"),
                        k,
                        p,
                        n,
                        pxat,
                        t.as_ptr().cast::<c_char>(),
                        t.len(),
                    )
                }
                (Value::Bytes(v), true, true) => {
                    let (p, n) = (v.as_ptr().cast::<c_char>(), v.len());
                    replicate(
                        ctx,
                        set,
                        c(c"sbcb"),
                        k,
                        p,
                        n,
                        c(c"PXAT"),
                        t.as_ptr().cast::<c_char>(),
                        t.len(),
                    )
                }
                (Value::Bytes(v), false, _) => {
                    let (p, n) = (v.as_ptr().cast::<c_char>(), v.len());
                    replicate(ctx, set, c(c"sb"), k, p, n)
                }
            };
        }
    }

    /// Starts an array reply of `len` elements.
    pub fn reply_array(&self, len: usize) {
        unsafe { api!(RedisModule_ReplyWithArray)(self.ctx, len as c_long) };
    }

    pub fn reply_int(&self, n: i64) {
        unsafe { api!(RedisModule_ReplyWithLongLong)(self.ctx, n as c_longlong) };
    }

    pub fn reply_bulk(&self, bytes: &[u8]) {
        unsafe {
            api!(RedisModule_ReplyWithStringBuffer)(self.ctx, bytes.as_ptr().cast(), bytes.len())
        };
    }

    pub fn reply_null(&self) {
        unsafe { api!(RedisModule_ReplyWithNull)(self.ctx) };
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

    /// A string made from bytes (a key name, a value).
    pub fn string(&self, bytes: &[u8]) -> Name {
        let inner =
            unsafe { api!(RedisModule_CreateString)(self.ctx, bytes.as_ptr().cast(), bytes.len()) };
        Name {
            ctx: self.ctx,
            arg: Arg::from_raw(inner),
        }
    }

    /// A number's decimal digits as a string (a lease key's value), without formatting in Rust.
    pub fn number(&self, n: i64) -> Name {
        let inner =
            unsafe { api!(RedisModule_CreateStringFromLongLong)(self.ctx, n as c_longlong) };
        Name {
            ctx: self.ctx,
            arg: Arg::from_raw(inner),
        }
    }

    /// The key `name`, opened to read (`write` false) or to read and write.
    pub fn open<'k>(&'k self, name: &'k Arg, write: bool) -> Open<'k> {
        let mode = match write {
            true => raw::REDISMODULE_READ | raw::REDISMODULE_WRITE,
            false => raw::REDISMODULE_READ,
        };
        let ptr = unsafe { api!(RedisModule_OpenKey)(self.ctx, name.inner(), mode as c_int) };
        Open {
            keys: self,
            name,
            ptr: ptr.cast(),
        }
    }

    /// `GET`.
    pub fn get(&self, name: &Arg) -> Result<Option<Vec<u8>>, Error> {
        Ok(self.open(name, false).bytes()?.map(<[u8]>::to_vec))
    }

    /// `GETEX … PXAT at` of a lease key in a command that opens each key once (`SL.RENEW`):
    /// not replicated here, nor held back (looking through what is held would cost a batch of
    /// N keys N²); the command replicates all its renewals at once (`replicate_expire_all`).
    pub fn renew(&self, name: &Arg, at: i64) -> Renewed {
        let key = self.open(name, true);
        match key.bytes() {
            Ok(Some(value)) => {
                let value = value.to_vec();
                match applied(unsafe { api!(RedisModule_SetAbsExpire)(key.ptr, at) }) {
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
    pub fn replicate_expire_all(&self, names: &[&Arg], at: i64) {
        if names.is_empty() {
            return;
        }
        let mut strings: Vec<*mut raw::RedisModuleString> =
            names.iter().map(|n| n.inner()).collect();
        unsafe {
            api!(RedisModule_Replicate)(
                self.ctx,
                c(c"EVAL"),
                c(c"clvl"),
                c(c"for _, k in ipairs(KEYS) do redis.call('PEXPIREAT', k, ARGV[1]) end"),
                names.len() as c_longlong,
                strings.as_mut_ptr(),
                strings.len(),
                at as c_longlong,
            )
        };
    }

    /// `PEXPIRETIME`: the absolute expiry in ms, -1 without one, -2 without the key.
    pub fn expire_time(&self, name: &Arg) -> i64 {
        self.open(name, false).expire_time()
    }

    /// `PEXPIREAT`, if the key exists; whether it did.
    pub fn expire_at(&self, name: &Arg, at: i64) -> Result<bool, Error> {
        let mut key = self.open(name, true);
        if key.kind() == raw::REDISMODULE_KEYTYPE_EMPTY {
            return Ok(false);
        }
        key.set_expire(at)?;
        Ok(true)
    }

    /// `SET name value PXAT at`, or with the key's present expiry (`KEEPTTL`) when `at` is None.
    pub fn set(&self, name: &Arg, value: &[u8], at: Option<i64>) -> Result<(), Error> {
        let value = self.string(value);
        self.open(name, true).set(&value, at)
    }

    /// `DEL`; whether there was a key.
    pub fn del(&self, name: &Arg) -> Result<bool, Error> {
        self.open(name, true).delete()
    }

    /// Whether the key is a list or absent.
    pub fn is_list_or_empty(&self, name: &Arg) -> bool {
        matches!(
            self.open(name, false).kind(),
            raw::REDISMODULE_KEYTYPE_EMPTY | raw::REDISMODULE_KEYTYPE_LIST
        )
    }

    /// The list's newest entry (`LRANGE name 0 0`): `None` when there is no list, it is empty,
    /// or the key holds another type.
    pub fn list_head(&self, name: &Arg) -> Option<Vec<u8>> {
        let key = self.open(name, false);
        if key.kind() != raw::REDISMODULE_KEYTYPE_LIST {
            return None;
        }
        let element = unsafe { api!(RedisModule_ListGet)(key.ptr, 0) };
        if element.is_null() {
            return None;
        }
        let head = Arg::from_raw(element).as_slice().to_vec();
        unsafe { api!(RedisModule_FreeString)(self.ctx, element) };
        Some(head)
    }

    /// `LPUSH name value`, then `LTRIM name 0 keep-1` when the list grew past `keep`. A key of
    /// another type is refused (`WRONGTYPE`) and nothing replicated: a replica would refuse the
    /// `LPUSH` too.
    pub fn list_push_capped(&self, name: &Arg, value: &[u8], keep: usize) -> Result<(), Error> {
        let key = self.open(name, true);
        if !matches!(
            key.kind(),
            raw::REDISMODULE_KEYTYPE_EMPTY | raw::REDISMODULE_KEYTYPE_LIST
        ) {
            return Err(Error::WrongType);
        }
        let element = self.string(value);
        let pushed = applied(unsafe {
            api!(RedisModule_ListPush)(
                key.ptr,
                raw::REDISMODULE_LIST_HEAD as c_int,
                element.inner(),
            )
        });
        if !pushed {
            return Err(Error::Refused("a list entry's push"));
        }
        unsafe {
            api!(RedisModule_Replicate)(
                self.ctx,
                c(c"LPUSH"),
                c(c"ss"),
                name.inner(),
                element.inner(),
            );
        }
        let mut trimmed = false;
        while unsafe { api!(RedisModule_ValueLength)(key.ptr) } > keep {
            let dropped =
                unsafe { api!(RedisModule_ListPop)(key.ptr, raw::REDISMODULE_LIST_TAIL as c_int) };
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
                    c(c"sll"),
                    name.inner(),
                    0 as c_longlong,
                    (keep as c_longlong) - 1,
                )
            };
        }
        Ok(())
    }
}
