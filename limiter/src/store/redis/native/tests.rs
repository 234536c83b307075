//! Unit tests of `native.rs`: which refusals send a call to its script, what `SL.VERSION`'s
//! answer decides, and that the ACL rules and the scripts match the module's commands and layout.

use super::*;
use crate::store::redis::call::Op;

fn server_error(reply: &str) -> ServerError {
    match redis::parse_redis_value(reply.as_bytes()).unwrap() {
        Value::ServerError(error) => error,
        other => panic!("{other:?}"),
    }
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
    // A module from before the history refuses any word, one from before learning heartbeats
    // (shadow enforcement's, say) the word it does not know: either keeps its shard on the
    // scripts, and the log line says to update it.
    let before_history = Value::ServerError(server_error(
        "-ERR wrong number of arguments for 'sl.version' command\r\n",
    ));
    let before_learning = Value::ServerError(server_error(
        "-ERR screenlimit: bad argument feature: send the arguments the limiter's script takes\r\n",
    ));
    for older in [before_history, before_learning] {
        assert!(
            matches!(verdict(Some(&older)), Verdict::Lua(why) if why.contains("predates learning heartbeats (SL.VERSION learning refused); update it")),
            "{older:?}"
        );
    }
    let other = Value::ServerError(server_error("-ERR screenlimit: something else\r\n"));
    assert!(
        matches!(verdict(Some(&other)), Verdict::Lua(why) if why.starts_with("SL.VERSION refused")),
    );
    assert_eq!(verdict(None), Verdict::Unknown);
    assert!(matches!(verdict(Some(&Value::Nil)), Verdict::Lua(_)));
}

#[test]
fn the_probe_asks_for_the_argument_a_learning_heartbeat_sends() {
    assert_eq!(LEARNING_FEATURE, super::super::lease_store::LEARNING_ARG);
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
