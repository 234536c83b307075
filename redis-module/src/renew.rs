//! `SL.RENEW`: the heartbeat's common renewal for many leases in one command. For each lease
//! key, what `GETEX key PX ttl` does (the renewal the limiter sends on both paths), so a batch of
//! renewals for one shard pays the command's dispatch, arguments and reply once instead of once
//! per heartbeat (BENCHMARKS.md, "Part 5"). All renewals of one call end at the same time, so
//! they are replicated as one effect, `EVAL` of a fixed `PEXPIREAT` loop over the keys renewed
//! with that absolute time ([`Keys::replicate_expire_all`]), not one `PEXPIREAT` each: a
//! renewal then costs the primary about 37 % fewer instructions (BENCHMARKS.md, "Part 7").
//!
//! SL.RENEW key [key …] ttl
//! Answers one element per key, in order: the lease key's value (its life now ends one TTL from
//! the server's now), nil when there is no such key, `WRONGTYPE` for a key of another type. With
//! no key it answers an empty array: the limiter's probe for the command (`path.rs`).

use redis_module::RedisValue;

use crate::args::{Arg, Args};
use crate::error::Error;
use crate::keys::{Keys, Renewed};

/// The most keys one call may name: the limiter sends at most one batch's renewals (128).
pub const MAX_KEYS: usize = 1024;

pub fn renew(keys: &Keys, all: &[Arg]) -> Result<RedisValue, Error> {
    let args = Args::at_least(all, 1)?;
    let names = args.len() - 1;
    if names > MAX_KEYS {
        return Err(Error::Arg("keys"));
    }
    let ends = keys.now() + args.ms(names, "ttl")?;
    let mut renewed = Vec::with_capacity(names);
    let answers = (0..names)
        .map(|i| match keys.renew(args.key(i), ends) {
            Renewed::Value(value) => {
                renewed.push(args.key(i));
                RedisValue::StringBuffer(value)
            }
            Renewed::NoKey => RedisValue::Null,
            Renewed::WrongType => RedisValue::StaticError(WRONG_TYPE),
            Renewed::Refused => RedisValue::StaticError(REFUSED),
        })
        .collect();
    keys.replicate_expire_all(&renewed, ends);
    Ok(RedisValue::Array(answers))
}

/// Redis's own `WRONGTYPE` text, as `GETEX` answers it.
const WRONG_TYPE: &str = "WRONGTYPE Operation against a key holding the wrong kind of value";

/// A renewal the server refused: that key is left as it was, the others renewed.
const REFUSED: &str = "ERR screenlimit: the server refused the key's new expiry";
