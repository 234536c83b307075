//! A script the limiter loads and calls by its SHA1. A call names its keys first and is built
//! straight into one `EVALSHA` command (arguments are written once, into the command), so that it
//! can travel inside a shard's batch with other commands.

use redis::{Cmd, Script, ToRedisArgs};

pub struct LuaScript {
    sha: String,
}

impl LuaScript {
    pub fn new(source: &str) -> Self {
        LuaScript {
            sha: Script::new(source).get_hash().to_owned(),
        }
    }

    /// `EVALSHA <sha> <number of keys> <keys>`; the arguments follow with [`Call::arg`].
    pub fn call<K: AsRef<[u8]>>(&self, keys: &[K]) -> Call {
        let mut command = redis::cmd("EVALSHA");
        command.arg(&self.sha).arg(keys.len());
        for key in keys {
            command.arg(key.as_ref());
        }
        Call { command }
    }
}

/// One script call being built: its keys are in, arguments are appended.
pub struct Call {
    command: Cmd,
}

impl Call {
    pub fn arg<T: ToRedisArgs>(&mut self, arg: T) -> &mut Self {
        self.command.arg(arg);
        self
    }

    pub fn into_command(self) -> Cmd {
        self.command
    }
}
