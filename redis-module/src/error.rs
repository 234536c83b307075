//! What a command answers instead of a result: each error says what was wrong and what to do.

use redis_module::RedisError;

#[derive(Debug)]
pub enum Error {
    /// Wrong number of arguments (Redis's own message).
    Arity,
    /// An argument out of its rules, by its name.
    Arg(&'static str),
    /// A key holds another type than a string.
    WrongType,
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
            Error::WrongType => RedisError::WrongType,
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
