//! Reply values as the scripts' tables become replies: numbers as integers, strings as bulk.

use redis_module::{Context, RedisResult, RedisValue};

use crate::keys::Keys;

pub fn int(n: i64) -> RedisValue {
    RedisValue::Integer(n)
}

pub fn text(bytes: &[u8]) -> RedisValue {
    RedisValue::StringBuffer(bytes.to_vec())
}

/// One element of an answer written as it is made (`now`).
pub enum Item<'a> {
    Int(i64),
    Bulk(&'a [u8]),
}

/// Replies at once with an array of numbers and strings, without building values for it (a
/// `Vec` of them, a copy of each string): for a command's last step, the answer of a granted
/// play. The command then answers `NoReply`, which `send` leaves alone.
pub fn now(keys: &Keys, items: &[Item]) -> RedisValue {
    keys.reply_array(items.len());
    for item in items {
        match *item {
            Item::Int(n) => keys.reply_int(n),
            Item::Bulk(bytes) => keys.reply_bulk(bytes),
        }
    }
    RedisValue::NoReply
}

/// Replies with a command's answer: the values the commands answer written straight through
/// the reply calls, an error (or any other value) as the `redis-module` crate writes it.
pub fn send(ctx: &Context, keys: &Keys, answer: RedisResult) {
    match answer {
        Ok(value) => value_reply(ctx, keys, value),
        Err(e) => {
            ctx.reply(Err(e));
        }
    }
}

fn value_reply(ctx: &Context, keys: &Keys, value: RedisValue) {
    match value {
        RedisValue::Integer(n) => keys.reply_int(n),
        RedisValue::StringBuffer(bytes) => keys.reply_bulk(&bytes),
        // Answered already (`now`).
        RedisValue::NoReply => {}
        RedisValue::Null => keys.reply_null(),
        RedisValue::Array(values) => {
            keys.reply_array(values.len());
            for value in values {
                value_reply(ctx, keys, value);
            }
        }
        other => {
            ctx.reply(Ok(other));
        }
    }
}
