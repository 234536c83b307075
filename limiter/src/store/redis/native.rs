//! The module's native commands (`redis-module/`, `SL.*`): how an operation is encoded for them,
//! how their refusals and `SL.VERSION`'s answer are read. Each command takes its script's keys
//! and arguments in the same order, the keys first, and answers as its script does, so a call is
//! built the same way on either path and its reply read by the same code (`mod.rs`); only the
//! head of the command differs: `SL.ACQUIRE key…` against `EVALSHA sha 1 key…`.
//!
//! Operations the module has no command for (the sign-in events, the fleet audit push) stay on
//! their scripts; a heartbeat's common renewal is the lease key's `GETEX` on both paths, and
//! `SL.HEARTBEAT` stands for `touch` and the full heartbeat script.

use redis::{Cmd, ServerError, Value};

use super::call::{Call, LuaScript};

/// The version of the account layout this limiter's scripts read and write (the first byte of
/// an account value, `char(2, limit, #plan)` in the scripts): a module is used only if its
/// `SL.VERSION` answers the same.
pub const LAYOUT_VERSION: i64 = 2;

/// The module's version command.
pub const VERSION_COMMAND: &str = "SL.VERSION";

/// The module's renewal of many lease keys in one command (`renewals.rs`): the `GETEX`es of a
/// batch, merged; not an operation of its own.
pub const RENEW_COMMAND: &str = "SL.RENEW";

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
                _ => Verdict::Lua(format!("{VERSION_COMMAND} refused: {error}")),
            },
        },
        Some(other) => Verdict::Lua(format!("{VERSION_COMMAND} answered {other:?}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn server_error(reply: &str) -> ServerError {
        match redis::parse_redis_value(reply.as_bytes()).unwrap() {
            Value::ServerError(error) => error,
            other => panic!("{other:?}"),
        }
    }

    fn args(command: &Cmd) -> Vec<Vec<u8>> {
        command
            .args_iter()
            .filter_map(|a| match a {
                redis::Arg::Simple(b) => Some(b.to_vec()),
                _ => None,
            })
            .collect()
    }

    #[test]
    fn a_native_call_is_the_script_s_call_behind_another_head() {
        let script = LuaScript::new("return 1");
        let build = |mut call: Call| {
            call.arg(600_u64).arg(&b"nonce\x00\xff"[..]).arg("");
            call.into_parts()
        };
        let keys = ["sl:{a}", "sl:audit:{a}"];
        let (native_command, native) = build(Op::ForceStop.call(&keys));
        let (lua_command, none) = build(script.call(&keys));
        assert!(none.is_none());
        let native = native.expect("a native call says so");
        assert_eq!(native.op, Op::ForceStop);
        let native_args = args(&native_command);
        assert_eq!(native_args[0], b"SL.FORCE_STOP");
        let lua_args = args(&lua_command);
        assert_eq!(lua_args[..3], [&b"EVALSHA"[..], &lua_args[1], b"2"]);
        assert_eq!(native_args[1..], lua_args[3..], "same keys and arguments");
        assert_eq!(
            args(&native.as_script(&native_command, &script)),
            lua_args,
            "sent again as the script: the very same command"
        );
    }

    #[test]
    fn only_a_refusal_of_the_command_itself_sends_a_call_to_the_script() {
        let refused = [
            "-ERR unknown command 'SL.ACQUIRE', with args beginning with: 'sl:{a}' \r\n",
            "-NOPERM User limiter has no permissions to run the 'sl.acquire' command\r\n",
        ];
        for reply in refused {
            assert!(refusal(&server_error(reply)).is_some(), "{reply}");
        }
        let ran = [
            "-OOM command not allowed when used memory > 'maxmemory'.\r\n",
            "-READONLY You can't write against a read only replica.\r\n",
            "-NOPERM No permissions to access a key\r\n",
            "-ERR screenlimit: the nonce must be 16 bytes\r\n",
            "-WRONGTYPE Operation against a key holding the wrong kind of value\r\n",
        ];
        for reply in ran {
            assert_eq!(refusal(&server_error(reply)), None, "{reply}");
        }
    }

    #[test]
    fn the_version_decides_the_path() {
        assert_eq!(verdict(Some(&Value::Int(2))), Verdict::Native);
        assert!(
            matches!(verdict(Some(&Value::Int(3))), Verdict::Lua(why) if why.contains("layout version 3"))
        );
        let unknown = Value::ServerError(server_error(
            "-ERR unknown command 'SL.VERSION', with args beginning with: \r\n",
        ));
        assert!(matches!(verdict(Some(&unknown)), Verdict::Lua(why) if why.contains("no module")));
        let loading = Value::ServerError(server_error(
            "-LOADING Redis is loading the dataset in memory\r\n",
        ));
        assert_eq!(verdict(Some(&loading)), Verdict::Unknown);
        assert_eq!(verdict(None), Verdict::Unknown);
        assert!(matches!(verdict(Some(&Value::Nil)), Verdict::Lua(_)));
    }

    #[test]
    fn the_module_acl_rules_grant_every_native_command_the_limiter_sends() {
        let rules = super::super::access::LIMITER_MODULE_ACL_RULES;
        let mut granted: Vec<&str> = rules.split_whitespace().collect();
        granted.sort_unstable();
        let mut sent: Vec<String> = Op::ALL
            .iter()
            .map(|op| op.command())
            .chain([VERSION_COMMAND, RENEW_COMMAND])
            .map(|name| format!("+{}", name.to_lowercase()))
            .collect();
        sent.sort_unstable();
        assert_eq!(granted, sent);
    }

    #[test]
    fn the_scripts_write_the_layout_version_the_module_is_asked_for() {
        let acquire = super::super::Scripts::sources()[0].1;
        assert!(acquire.contains(&format!("char({LAYOUT_VERSION}, limit, #plan)")));
    }
}
