//! Which path a shard's lease operations take: the module's native commands where the server
//! answers `SL.VERSION` with the layout version this limiter speaks (`native.rs`), the Lua
//! scripts everywhere else (a managed service, a server without the module, `store.module: off`).
//!
//! A shard learns it ([`learn`]) at first contact, when a cluster primary first appears, and
//! with every health sample (every 5 s). Whatever may put another server behind the shard's
//! address makes it forget the native path until it has asked again ([`ShardPath::forget`]): a
//! Sentinel switch, and a broken connection (the connection manager reconnects on the next call,
//! maybe to a server restarted without the module); meanwhile its calls are scripts, which every
//! server runs. A native command answered "unknown command" all the same (the module unloaded
//! under a live connection) switches the shard to Lua at once, and the call goes again as its
//! script ([`ShardPath::lost_module`]). Each change of path is one log line; a shard that forgets
//! and learns the same path again says nothing.
//!
//! Why forget on a broken connection rather than count on the refusal: Redis 7.0 echoes the first
//! arguments of an unknown command in its error, raw, and a nonce is binary; the client library
//! takes an error line that is not UTF-8 for a broken stream and drops the connection, failing
//! every call of that batch. A server reached again is asked first.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU8, AtomicUsize, Ordering};
use std::time::Duration;

use redis::Value;
use redis::aio::ConnectionLike;

use super::native::{self, Verdict};

const UNKNOWN: u8 = 0;
const LUA: u8 = 1;
const NATIVE: u8 = 2;

/// A shard's path, and the store-wide count of shards on the native path (so that a store none
/// of whose shards has the module does not look a shard up to build a call).
pub struct ShardPath {
    state: AtomicU8,
    /// The path last logged (a change is said once, not each forget and relearn).
    said: AtomicU8,
    /// Set by [`ShardPath::forget`]: the maintenance task asks again at its next tick.
    ask: AtomicBool,
    /// Whether the module answers `SL.RENEW` (a module older than the command does not, nor an
    /// ACL that does not grant it), asked with `SL.VERSION`.
    renews: AtomicBool,
    /// `None` with `store.module: off`: the shard stays on Lua and is never asked.
    native_shards: Option<Arc<AtomicUsize>>,
}

impl ShardPath {
    /// `native_shards`: the store's count, or `None` when the module is off.
    pub fn new(native_shards: Option<Arc<AtomicUsize>>) -> Self {
        ShardPath {
            state: AtomicU8::new(UNKNOWN),
            said: AtomicU8::new(UNKNOWN),
            ask: AtomicBool::new(false),
            renews: AtomicBool::new(false),
            native_shards,
        }
    }

    /// Whether calls for the shard go out as native commands.
    pub fn native(&self) -> bool {
        self.state.load(Ordering::Relaxed) == NATIVE
    }

    /// Whether a batch's renewals go as one `SL.RENEW` (`renewals.rs`): on the native path,
    /// where the module has the command.
    pub fn renews_in_one(&self) -> bool {
        self.native() && self.renews.load(Ordering::Relaxed)
    }

    /// `SL.RENEW` came back refused: each renewal its own `GETEX` until the shard is asked
    /// again. True when this call changed that (the caller logs it).
    pub fn renew_refused(&self) -> bool {
        self.renews.swap(false, Ordering::Relaxed)
    }

    /// `native` or `lua`: the path calls take now (Lua until the shard is known to have the
    /// module).
    pub fn label(&self) -> &'static str {
        match self.native() {
            true => "native",
            false => "lua",
        }
    }

    /// Whether the shard is asked for its path at all (`store.module: auto`).
    pub fn enabled(&self) -> bool {
        self.native_shards.is_some()
    }

    /// Puts `verdict` in force; when that changed the path last said, what it was (the caller
    /// logs it).
    fn set(&self, verdict: &Verdict) -> Option<Was> {
        let next = match verdict {
            Verdict::Native => NATIVE,
            Verdict::Lua(_) => LUA,
            Verdict::Unknown => return None,
        };
        self.put(next);
        // From unknown to Lua is no change of the path calls take, but it is the first word.
        let said = self.said.swap(next, Ordering::Relaxed);
        (said != next).then_some(match said {
            NATIVE => Was::Native,
            _ => Was::LuaOrUnknown,
        })
    }

    /// The state calls read, and the store's count of native shards with it.
    fn put(&self, next: u8) {
        let before = self.state.swap(next, Ordering::Relaxed);
        if let Some(count) = &self.native_shards {
            match (before == NATIVE, next == NATIVE) {
                (false, true) => {
                    count.fetch_add(1, Ordering::Relaxed);
                }
                (true, false) => {
                    count.fetch_sub(1, Ordering::Relaxed);
                }
                _ => {}
            }
        }
    }

    /// Another server may be behind the shard's address now (a broken connection, a Sentinel
    /// switch): scripts until it has been asked again, at the maintenance task's next tick.
    pub fn forget(&self) {
        if !self.enabled() {
            return;
        }
        if self.state.load(Ordering::Relaxed) == NATIVE {
            self.put(UNKNOWN);
        }
        self.ask.store(true, Ordering::Relaxed);
    }

    /// Whether the shard must be asked again now (and no longer after this call).
    pub fn take_ask(&self) -> bool {
        self.ask.swap(false, Ordering::Relaxed)
    }

    /// A native command came back refused as a command (`why`): the shard is on Lua from now on.
    /// True when this call switched it (the caller logs it).
    pub fn lost_module(&self, why: &str) -> bool {
        self.set(&Verdict::Lua(why.to_owned())).is_some()
    }
}

/// The path before a change.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Was {
    Native,
    LuaOrUnknown,
}

impl Drop for ShardPath {
    fn drop(&mut self) {
        if let (true, Some(count)) = (self.native(), &self.native_shards) {
            count.fetch_sub(1, Ordering::Relaxed);
        }
    }
}

/// Asks the shard for its path (`SL.VERSION learning`: the layout, and whether the commands take
/// what this limiter sends, the history's bounds, an account's enforcement and a heartbeat's
/// learning mode; and `SL.RENEW`
/// with no key: whether the module has it; one round trip on `connection` within `deadline`)
/// and puts it in force; one log line when it changes. Nothing when the module is off.
pub async fn learn(
    path: &ShardPath,
    connection: Option<impl ConnectionLike + Send>,
    shard: usize,
    endpoint: impl FnOnce() -> String,
    deadline: Duration,
) {
    if !path.enabled() {
        return;
    }
    let Some(mut connection) = connection else {
        return;
    };
    // As a pipeline of one: a server's refusal comes back as a value, not an error.
    // The probe's one argument is text: a server without the command echoes it in its refusal,
    // and an echoed binary argument would cost the connection (above).
    let mut pipe = redis::pipe();
    pipe.cmd(native::VERSION_COMMAND)
        .arg(native::LEARNING_FEATURE)
        .cmd(native::RENEW_COMMAND)
        .arg(1);
    let asked = tokio::time::timeout(deadline, connection.req_packed_commands(&pipe, 0, 2)).await;
    let reply = match asked {
        Ok(Ok(mut values)) if values.len() == 2 => {
            let renews = matches!(values.pop(), Some(Value::Array(keys)) if keys.is_empty());
            path.renews.store(renews, Ordering::Relaxed);
            values.pop()
        }
        Ok(Err(error)) => {
            if broken(&error) {
                path.forget(); // asked again at the next tick, on the new connection
            }
            None
        }
        _ => None,
    };
    let verdict = native::verdict(reply.as_ref());
    if let Some(was) = path.set(&verdict) {
        say(shard, &endpoint(), &verdict, was);
    }
}

/// Whether `error` means the connection is gone (the manager reconnects on the next call).
pub fn broken(error: &redis::RedisError) -> bool {
    error.is_unrecoverable_error() || error.is_io_error() || error.is_connection_dropped()
}

/// Logs a change of path, once: a shard that leaves the native path is a warning (its
/// server lost the module: a failover, a restart), the rest is news.
pub fn say(shard: usize, endpoint: &str, verdict: &Verdict, was: Was) {
    match verdict {
        Verdict::Native => tracing::info!(
            shard,
            endpoint,
            path = "native",
            "store shard path: native commands (the screenlimit module is loaded)"
        ),
        Verdict::Lua(why) if was == Was::Native => tracing::warn!(
            shard,
            endpoint,
            path = "lua",
            why = why.as_str(),
            "store shard path: Lua scripts, no longer the module's native commands"
        ),
        Verdict::Lua(why) => tracing::info!(
            shard,
            endpoint,
            path = "lua",
            why = why.as_str(),
            "store shard path: Lua scripts"
        ),
        Verdict::Unknown => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_store_counts_its_native_shards() {
        let count = Arc::new(AtomicUsize::new(0));
        let a = ShardPath::new(Some(count.clone()));
        let b = ShardPath::new(Some(count.clone()));
        assert_eq!((a.label(), a.native()), ("lua", false), "Lua until known");
        assert_eq!(a.set(&Verdict::Native), Some(Was::LuaOrUnknown));
        assert_eq!(a.set(&Verdict::Native), None, "no change: no log line");
        assert_eq!(a.set(&Verdict::Unknown), None, "no answer keeps the path");
        assert!(a.native());
        assert!(b.set(&Verdict::Native).is_some());
        assert_eq!(count.load(Ordering::Relaxed), 2);
        assert!(a.lost_module("unknown command"));
        assert!(!a.lost_module("unknown command"), "switched once");
        assert_eq!(count.load(Ordering::Relaxed), 1);
        drop(b);
        assert_eq!(count.load(Ordering::Relaxed), 0, "a dropped node leaves");
        assert!(a.set(&Verdict::Native).is_some(), "back: said");
        a.forget();
        assert!(!a.native(), "scripts until asked again");
        assert_eq!(count.load(Ordering::Relaxed), 0);
        assert!(a.take_ask());
        assert!(!a.take_ask(), "asked once");
        assert_eq!(
            a.set(&Verdict::Native),
            None,
            "the same path again: nothing to say"
        );
        assert!(a.native());
        let off = ShardPath::new(None);
        assert!(!off.enabled());
        assert_eq!(off.label(), "lua");
    }
}
