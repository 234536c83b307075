//! What a command answers instead of a result: each error says what was wrong and what to do.

use redis_module::RedisError;

#[derive(Debug)]
pub enum Error {
    /// Wrong number of arguments (Redis's own message).
    Arity,
    /// An argument out of its rules, by its name.
    Arg(&'static str),
    /// A key name the limiter never sends (`names.rs`), by what the key is.
    Key(&'static str),
    /// A key holds another type than a string.
    WrongType,
    /// The key API refused a write (by what it was); nothing of it was applied or replicated.
    Refused(&'static str),
    /// The account value does not follow the layout (written by something else).
    Malformed,
    /// A write that adds state while the server is over `maxmemory`.
    OutOfMemory,
    /// A bug in this module, caught before it could cross into Redis.
    Panic,
}

impl From<crate::layout::Malformed> for Error {
    fn from(_: crate::layout::Malformed) -> Error {
        Error::Malformed
    }
}

impl From<Error> for RedisError {
    fn from(error: Error) -> RedisError {
        // Static text only: nothing a client sent is echoed (it could hold any byte).
        match error {
            Error::Arity => RedisError::WrongArity,
            Error::Arg(what) => RedisError::String(format!(
                "ERR screenlimit: bad argument {what}: send the arguments the limiter's script takes"
            )),
            Error::Key(what) => RedisError::String(format!(
                "ERR screenlimit: bad {what}: the limiter's names are sl:{{<account id>}}, sl:audit:{{<the same id>}} and lease keys sl:{{<account id>}} with 8 nonce bytes, which keep an account's keys in its hash slot"
            )),
            Error::WrongType => RedisError::WrongType,
            Error::Refused(what) => RedisError::String(format!(
                "ERR screenlimit: the server refused {what}; the command stopped there, its earlier writes kept and replicated"
            )),
            Error::Malformed => RedisError::Str(
                "ERR screenlimit: the account value does not follow layout 2; delete the key or check what else writes sl:* keys",
            ),
            Error::OutOfMemory => RedisError::Str(
                "OOM screenlimit: command not allowed when used memory > 'maxmemory'",
            ),
            Error::Panic => RedisError::Str(
                "ERR screenlimit: internal error in the module (see the server log); the command may have stopped part way",
            ),
        }
    }
}
