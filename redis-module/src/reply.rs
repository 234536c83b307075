//! Reply values as the scripts' tables become replies: numbers as integers, strings as bulk.

use redis_module::RedisValue;

pub fn int(n: i64) -> RedisValue {
    RedisValue::Integer(n)
}

pub fn text(bytes: &[u8]) -> RedisValue {
    RedisValue::StringBuffer(bytes.to_vec())
}
