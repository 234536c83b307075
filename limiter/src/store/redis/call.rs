//! A script the limiter loads and calls by its SHA1. A call is built like redis's
//! `ScriptInvocation` (`key`, `arg`) but comes out as one `EVALSHA` command, so that it can
//! travel inside a shard's batch with other commands.

use redis::{Cmd, Script, ToRedisArgs};

pub struct LuaScript {
    source: &'static str,
    sha: String,
}

impl LuaScript {
    pub fn new(source: &'static str) -> Self {
        LuaScript {
            source,
            sha: Script::new(source).get_hash().to_owned(),
        }
    }

    /// A call with `key` as its first key.
    pub fn key<T: ToRedisArgs>(&self, key: T) -> Call<'_> {
        let mut call = self.prepare_call();
        call.key(key);
        call
    }

    pub fn prepare_call(&self) -> Call<'_> {
        Call {
            script: self,
            keys: Vec::new(),
            args: Vec::new(),
        }
    }

    /// `SCRIPT LOAD` of this script (after a `NOSCRIPT`).
    pub fn load_command(&self) -> Cmd {
        let mut command = redis::cmd("SCRIPT");
        command.arg("LOAD").arg(self.source);
        command
    }
}

pub struct Call<'a> {
    script: &'a LuaScript,
    keys: Vec<Vec<u8>>,
    args: Vec<Vec<u8>>,
}

impl Call<'_> {
    pub fn key<T: ToRedisArgs>(&mut self, key: T) -> &mut Self {
        self.keys.extend(key.to_redis_args());
        self
    }

    pub fn arg<T: ToRedisArgs>(&mut self, arg: T) -> &mut Self {
        self.args.extend(arg.to_redis_args());
        self
    }

    /// `EVALSHA <sha> <number of keys> <keys> <args>`.
    pub fn command(&self) -> Cmd {
        let mut command = redis::cmd("EVALSHA");
        command
            .arg(&self.script.sha)
            .arg(self.keys.len())
            .arg(&self.keys)
            .arg(&self.args);
        command
    }
}
