//! The Lua scripts as the limiter loads them: each operation's script assembled from the shared
//! helpers, its fast path and the prelude, with the memory flags Redis enforces (`#!lua`), and
//! on a Redis Cluster behind the migration guard.

use super::call::{LuaScript, Op};

/// A script is the shared helpers (`fast.lua`), the prelude and one operation; acquire and
/// release put a fast path between the helpers and the prelude, which returns before the prelude
/// runs when it can decide alone.
macro_rules! lease_script {
    ($op:literal) => {
        concat!(
            include_str!("lua/fast.lua"),
            include_str!("lua/common.lua"),
            include_str!(concat!("lua/", $op, ".lua"))
        )
    };
    (fast $op:literal) => {
        concat!(
            include_str!("lua/fast.lua"),
            include_str!(concat!("lua/", $op, "_fast.lua")),
            include_str!("lua/common.lua"),
            include_str!(concat!("lua/", $op, ".lua"))
        )
    };
}

/// `touch`: the account key's life renewed for a natively renewed lease (the helpers and its
/// four calls; no prelude).
macro_rules! touch_script {
    () => {
        concat!(include_str!("lua/fast.lua"), include_str!("lua/touch.lua"))
    };
}

/// What every script starts with on a Redis Cluster: it stops before any write while its slot
/// migrates (see the file).
const CLUSTER_GUARD: &str = include_str!("lua/cluster_guard.lua");

/// The scripts, one per operation, `touch`, and the fleet audit list's push.
pub struct Scripts {
    pub acquire: LuaScript,
    pub touch: LuaScript,
    pub heartbeat: LuaScript,
    pub release: LuaScript,
    pub force_stop: LuaScript,
    pub list: LuaScript,
    pub set_override: LuaScript,
    pub session_event: LuaScript,
    pub fleet_audit: LuaScript,
    /// The sources as loaded (after a `NOSCRIPT`, and at start).
    pub(super) loaded: Vec<(&'static str, String)>,
}

impl Scripts {
    /// The scripts for a server or a Sentinel master.
    pub fn new() -> Self {
        Self::build(false)
    }

    /// The scripts for a Redis Cluster: each starts with the migration guard (but the fleet
    /// audit push, whose key has no hash tag and which fails before its only write).
    pub fn for_cluster() -> Self {
        Self::build(true)
    }

    fn build(cluster: bool) -> Self {
        let loaded: Vec<(&'static str, String)> = Self::sources()
            .into_iter()
            .map(|(name, source)| match cluster && name != "fleet_audit" {
                // The flags line must stay first: Redis reads it only there.
                true => {
                    let (flags, body) = source.split_once('\n').expect("a flags line");
                    (name, format!("{flags}\n{CLUSTER_GUARD}{body}"))
                }
                false => (name, source.to_owned()),
            })
            .collect();
        let script = |i: usize| LuaScript::new(&loaded[i].1);
        Scripts {
            acquire: script(0),
            touch: script(1),
            heartbeat: script(2),
            release: script(3),
            force_stop: script(4),
            list: script(5),
            set_override: script(6),
            session_event: script(7),
            fleet_audit: script(8),
            loaded,
        }
    }

    /// The source of every script by operation name (in the order of the fields), as loaded on
    /// a server, for tools such as the benchmark. Each starts with its flags (`#!lua`, Redis
    /// 7): what adds state is refused by a full Redis before it runs (`OOM`); what frees state
    /// or only renews it may run there (`allow-oom`); what only reads is `no-writes`. Without
    /// the line Redis checks memory only at a script's first write, and `GETEX` (not marked
    /// `deny-oom`) comes first in ours, so they wrote past `maxmemory`.
    pub fn sources() -> [(&'static str, &'static str); 9] {
        [
            ("acquire", concat!("#!lua\n", lease_script!(fast "acquire"))),
            // A renewal adds no memory: a lease must outlive a full Redis.
            ("touch", concat!("#!lua flags=allow-oom\n", touch_script!())),
            // It may re-register a lost lease: new state.
            ("heartbeat", concat!("#!lua\n", lease_script!("heartbeat"))),
            (
                "release",
                concat!("#!lua flags=allow-oom\n", lease_script!(fast "release")),
            ),
            // Frees a slot (its audit entry is capped per account).
            (
                "force_stop",
                concat!("#!lua flags=allow-oom\n", lease_script!("force_stop")),
            ),
            (
                "list",
                concat!("#!lua flags=no-writes\n", lease_script!("list")),
            ),
            (
                "set_override",
                concat!("#!lua\n", lease_script!("set_override")),
            ),
            (
                "session_event",
                concat!("#!lua\n", include_str!("lua/session_event.lua")),
            ),
            // Sent only after a script Redis ran (a force-stop's entry must not be lost); capped.
            (
                "fleet_audit",
                concat!(
                    "#!lua flags=allow-oom\n",
                    include_str!("lua/fleet_audit.lua")
                ),
            ),
        ]
    }
}

impl Scripts {
    /// The script of an operation the module also has a command for.
    pub(super) fn of(&self, op: Op) -> &LuaScript {
        match op {
            Op::Acquire => &self.acquire,
            Op::Heartbeat => &self.heartbeat,
            Op::Release => &self.release,
            Op::ForceStop => &self.force_stop,
            Op::List => &self.list,
            Op::SetOverride => &self.set_override,
        }
    }
}

impl Default for Scripts {
    fn default() -> Self {
        Self::new()
    }
}
