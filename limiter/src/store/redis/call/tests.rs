//! Unit tests of `call.rs`: a native call is its script's call behind another head.

use super::*;

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
