//! Unit tests of the cluster module: key slots, redirections, the `CLUSTER SHARDS` reply and
//! node addresses (moved as they were from `cluster.rs`).

use super::slot_map::{host_of, split_address};
use super::slots::crc16;
use super::*;

#[test]
fn slots_are_the_ones_redis_computes() {
    // Values from `CLUSTER KEYSLOT` on Redis 7.
    assert_eq!(crc16(b"123456789"), 0x31C3);
    assert_eq!(key_slot(b"foo"), 12182);
    assert_eq!(key_slot(b"sl:{a}"), 15495);
    assert_eq!(key_slot(b"sl:audit"), key_slot(b"sl:audit"));
    assert_eq!(key_slot(b"{user1000}.following"), key_slot(b"user1000"));
    assert_eq!(key_slot(b"foo{}{bar}"), crc16(b"foo{}{bar}") % 16384);
    assert_eq!(key_slot(b"foo{{bar}}zap"), crc16(b"{bar") % 16384);
    for tag in ["acct-1", "a", "user.name:x"] {
        let keys = [
            format!("sl:{{{tag}}}"),
            format!("sl:audit:{{{tag}}}"),
            format!("sl:session:{{{tag}}}"),
            format!("sl:{{{tag}}}12345678"),
        ];
        for key in keys {
            assert_eq!(key_slot(key.as_bytes()), tag_slot(tag), "{key}");
        }
    }
}

#[test]
fn redirections_are_read() {
    let read = |reply: &str| match redis::parse_redis_value(reply.as_bytes()).unwrap() {
        Value::ServerError(error) => Redirect::parse(&error),
        other => panic!("{other:?}"),
    };
    assert_eq!(
        read("-MOVED 3999 127.0.0.1:6381\r\n"),
        Some(Redirect::Moved {
            slot: 3999,
            address: "127.0.0.1:6381".into()
        })
    );
    assert_eq!(
        read("-ASK 3999 10.0.0.2:7000\r\n"),
        Some(Redirect::Ask {
            address: "10.0.0.2:7000".into()
        })
    );
    assert_eq!(
        read("-TRYAGAIN the slot is migrating\r\n"),
        Some(Redirect::TryAgain)
    );
    assert_eq!(read("-NOSCRIPT No matching script\r\n"), None);
    assert_eq!(read("-MOVED nonsense\r\n"), None);
}

fn bulk(s: &str) -> Value {
    Value::BulkString(s.as_bytes().to_vec())
}

fn node(id: &str, port: i64, role: &str) -> Value {
    Value::Array(vec![
        bulk("id"),
        bulk(id),
        bulk("port"),
        Value::Int(port),
        bulk("ip"),
        bulk("127.0.0.1"),
        bulk("endpoint"),
        bulk("127.0.0.1"),
        bulk("role"),
        bulk(role),
        bulk("health"),
        bulk("online"),
    ])
}

#[test]
fn a_cluster_shards_reply_names_each_range_s_primary() {
    let reply = Value::Array(vec![
        Value::Array(vec![
            bulk("slots"),
            Value::Array(vec![
                Value::Int(0),
                Value::Int(5460),
                Value::Int(10923),
                Value::Int(10923),
            ]),
            bulk("nodes"),
            Value::Array(vec![node("r", 7004, "replica"), node("p", 7001, "master")]),
        ]),
        Value::Array(vec![
            bulk("slots"),
            Value::Array(vec![]),
            bulk("nodes"),
            Value::Array(vec![node("q", 7009, "master")]),
        ]),
    ]);
    assert_eq!(
        parse_shards(&reply, false, "10.0.0.9").unwrap(),
        [
            (0, 5460, "127.0.0.1:7001".to_owned()),
            (10923, 10923, "127.0.0.1:7001".to_owned())
        ]
    );
    assert!(parse_shards(&Value::Int(1), false, "10.0.0.9").is_none());
}

#[test]
fn a_lone_node_that_does_not_know_its_address_is_where_it_was_asked() {
    // What Redis 7.0 answers on a node that owns every slot and has met no other node.
    let lone = Value::Array(vec![Value::Array(vec![
        bulk("slots"),
        Value::Array(vec![bulk("0"), bulk("16383")]),
        bulk("nodes"),
        Value::Array(vec![Value::Array(vec![
            bulk("port"),
            Value::Int(7501),
            bulk("ip"),
            bulk(""),
            bulk("endpoint"),
            bulk(""),
            bulk("role"),
            bulk("master"),
        ])]),
    ])]);
    assert_eq!(
        parse_shards(&lone, false, host_of("127.0.0.5:7501")).unwrap(),
        [(0, 16383, "127.0.0.5:7501".to_owned())]
    );
    assert_eq!(host_of("[::1]:7000"), "::1");
}

#[test]
fn addresses_split_into_host_and_port() {
    assert_eq!(split_address("10.0.0.1:6379").unwrap(), ("10.0.0.1", 6379));
    assert_eq!(split_address("[::1]:7000").unwrap(), ("::1", 7000));
    assert!(split_address("nowhere").is_err());
}
