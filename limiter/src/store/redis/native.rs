//! The module's native commands (`redis-module/`, `SL.*`): the layout version a module must
//! speak, how their refusals and `SL.VERSION`'s answer are read. Each command takes its script's
//! keys and arguments in the same order, the keys first, and answers as its script does, so a call
//! is built the same way on either path (`call.rs`, with the operations, `Op`) and its reply read
//! by the same code (`mod.rs`); only the head of the command differs: `SL.ACQUIRE key…` against
//! `EVALSHA sha 1 key…`.
//!
//! Operations the module has no command for (the sign-in events, the fleet audit push) stay on
//! their scripts; a heartbeat's common renewal is the lease key's `GETEX` on both paths, and
//! `SL.HEARTBEAT` stands for `touch` and the full heartbeat script.

use redis::{ServerError, Value};

/// The version of the account layout this limiter's scripts read and write (the first byte of
/// an account value, `char(2, limit, #plan)` in the scripts): a module is used only if its
/// `SL.VERSION` answers the same.
pub const LAYOUT_VERSION: i64 = 2;

/// The module's version command.
pub const VERSION_COMMAND: &str = "SL.VERSION";

/// What the limiter asks `SL.VERSION` about besides the layout: whether `SL.HEARTBEAT` takes an
/// account's learning mode (`learning`, `lease_store.rs`'s `LEARNING_ARG`, after the history's
/// bounds; such a module takes those and `SL.ACQUIRE`'s `shadow` too, which came before). A
/// module from before it refuses the word (`bad argument feature`; one from before the history,
/// a wrong number of arguments), and its shard stays on the scripts, which the limiter loads
/// itself: a learning heartbeat would not fit its commands.
pub const LEARNING_FEATURE: &str = "learning";

/// The module's renewal of many lease keys in one command (`renewals.rs`): the `GETEX`es of a
/// batch, merged; not an operation of its own.
pub const RENEW_COMMAND: &str = "SL.RENEW";

/// Why a server refused a native command as a command (`None`: it ran, or refused for another
/// reason that the script would meet too): it has no such command (a replica promoted without
/// the module, a restart without it), or the ACL does not grant it.
pub fn refusal(error: &ServerError) -> Option<&'static str> {
    let details = error.details().unwrap_or_default();
    match error.code() {
        "ERR" if details.starts_with("unknown command") => Some("unknown command"),
        "NOPERM" if details.contains("command") => Some("command not granted by the ACL"),
        _ => None,
    }
}

/// What a shard's answer to `SL.VERSION` says about its path.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    /// The module, speaking this limiter's layout.
    Native,
    /// The scripts, and why.
    Lua(String),
    /// No answer (out of reach, a timeout): the path stays as it was.
    Unknown,
}

/// Reads `SL.VERSION`'s reply (a server error as a value, or `None` for no answer).
pub fn verdict(reply: Option<&Value>) -> Verdict {
    match reply {
        None => Verdict::Unknown,
        Some(Value::Int(LAYOUT_VERSION)) => Verdict::Native,
        Some(Value::Int(other)) => Verdict::Lua(format!(
            "the module speaks layout version {other}, this limiter {LAYOUT_VERSION}"
        )),
        Some(Value::ServerError(error)) => match refusal(error) {
            Some(why) => Verdict::Lua(format!("no module ({VERSION_COMMAND}: {why})")),
            None => match error.code() {
                // Busy, loading, a failover in progress: ask again later.
                "BUSY" | "LOADING" | "MASTERDOWN" | "TRYAGAIN" | "CLUSTERDOWN" => Verdict::Unknown,
                // A module from before learning heartbeats: one with the history refuses the
                // word, an older one any word.
                "ERR"
                    if error.details().is_some_and(|d| {
                        d.starts_with("wrong number of arguments")
                            || d.starts_with("screenlimit: bad argument feature")
                    }) =>
                {
                    Verdict::Lua(format!(
                        "the module predates learning heartbeats ({VERSION_COMMAND} {LEARNING_FEATURE} refused); update it"
                    ))
                }
                _ => Verdict::Lua(format!("{VERSION_COMMAND} refused: {error}")),
            },
        },
        Some(other) => Verdict::Lua(format!("{VERSION_COMMAND} answered {other:?}")),
    }
}

#[cfg(test)]
mod tests;
