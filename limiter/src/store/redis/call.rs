//! A script the limiter loads and calls by its SHA1. A call names its keys first and is built
//! straight into one `EVALSHA` command (arguments are written once, into the command), so that it
//! can travel inside a shard's batch with other commands. A call may instead be built as the
//! module's native command for the same operation ([`Op`]; the module itself: `native.rs`): the
//! same keys and arguments behind another name, and it remembers which ([`Native`]), so that it
//! can be sent again as the script.

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
        Call {
            command: self.command(keys.len(), keys.iter().map(AsRef::as_ref)),
            native: None,
        }
    }

    /// `EVALSHA <sha> <number of keys>` and then `args` (the keys first).
    pub fn command<'a>(&self, keys: usize, args: impl Iterator<Item = &'a [u8]>) -> Cmd {
        let mut command = redis::cmd("EVALSHA");
        command.arg(&self.sha).arg(keys);
        for arg in args {
            command.arg(arg);
        }
        command
    }
}

/// One call being built: its keys are in, arguments are appended.
pub struct Call {
    command: Cmd,
    /// Set when the command is the module's (`native.rs`), not the script's.
    native: Option<Native>,
}

impl Call {
    /// A native command (`SL.*`) with its keys in, for `native`'s operation.
    pub fn native(command: Cmd, native: Native) -> Call {
        Call {
            command,
            native: Some(native),
        }
    }

    pub fn arg<T: ToRedisArgs>(&mut self, arg: T) -> &mut Self {
        self.command.arg(arg);
        self
    }

    /// The command, and which native operation it is (`None`: a script's).
    pub fn into_parts(self) -> (Cmd, Option<Native>) {
        (self.command, self.native)
    }

    pub fn into_command(self) -> Cmd {
        self.command
    }
}

/// An operation the module has a command for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Op {
    Acquire,
    Heartbeat,
    Release,
    ForceStop,
    List,
    SetOverride,
}

impl Op {
    pub const ALL: [Op; 6] = [
        Op::Acquire,
        Op::Heartbeat,
        Op::Release,
        Op::ForceStop,
        Op::List,
        Op::SetOverride,
    ];

    /// The command's name, as the module registers it (case does not matter to Redis).
    pub fn command(self) -> &'static str {
        match self {
            Op::Acquire => "SL.ACQUIRE",
            Op::Heartbeat => "SL.HEARTBEAT",
            Op::Release => "SL.RELEASE",
            Op::ForceStop => "SL.FORCE_STOP",
            Op::List => "SL.LIST",
            Op::SetOverride => "SL.SET_OVERRIDE",
        }
    }

    /// `SL.<op> <keys>`; the arguments follow with [`Call::arg`], as for the script.
    pub fn call<K: AsRef<[u8]>>(self, keys: &[K]) -> Call {
        let mut command = redis::cmd(self.command());
        for key in keys {
            command.arg(key.as_ref());
        }
        Call::native(
            command,
            Native {
                op: self,
                keys: keys.len(),
            },
        )
    }
}

/// What a native command is: its operation and how many of its arguments are keys.
#[derive(Debug, Clone, Copy)]
pub struct Native {
    pub op: Op,
    keys: usize,
}

impl Native {
    /// The same call as `script`'s `EVALSHA`: the native command's arguments (keys first), after
    /// the script's head. For a call a server refused because it lacks the module.
    pub fn as_script(&self, command: &Cmd, script: &LuaScript) -> Cmd {
        let args = command.args_iter().skip(1).filter_map(|arg| match arg {
            redis::Arg::Simple(bytes) => Some(bytes),
            _ => None, // a cursor: no command here has one
        });
        script.command(self.keys, args)
    }
}

#[cfg(test)]
mod tests;
