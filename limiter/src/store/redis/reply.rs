//! Reading what a server answered: a refusal as a typed store error, and the values a script or
//! native command returns (the same on both paths).

use redis::Value;

use super::record;
use crate::model::Lease;
use crate::store::error::StoreError;

/// A server's refusal as the error it is; any other reply as it came.
pub(super) fn server_error(shard: usize, reply: Value) -> Result<Value, StoreError> {
    match reply {
        Value::ServerError(error) => Err(StoreError::Backend {
            shard,
            message: match error.code() {
                "MOVED" | "ASK" => format!(
                    "{error}: this shard is a Redis Cluster node; list the cluster's nodes \
                     under store.cluster.nodes instead"
                ),
                _ => error.to_string(),
            },
        }),
        value => Ok(value),
    }
}

pub(super) fn malformed(what: &str) -> StoreError {
    StoreError::Backend {
        shard: usize::MAX,
        message: format!("malformed script reply: {what}"),
    }
}

pub(super) fn int(value: &Value) -> Result<u64, StoreError> {
    match value {
        Value::Int(n) if *n >= 0 => Ok(*n as u64),
        _ => Err(malformed("expected a non-negative integer")),
    }
}

pub(super) fn bytes(value: &Value) -> Result<&[u8], StoreError> {
    match value {
        Value::BulkString(b) => Ok(b),
        Value::SimpleString(s) => Ok(s.as_bytes()),
        _ => Err(malformed("expected a string")),
    }
}

pub(super) fn text(value: &Value) -> Result<String, StoreError> {
    String::from_utf8(bytes(value)?.to_vec()).map_err(|_| malformed("expected UTF-8"))
}

/// Decodes the raw live records a script returns.
pub(super) fn leases(records: &[Value]) -> Result<Vec<Lease>, StoreError> {
    records
        .iter()
        .map(|r| record::decode_lease(bytes(r)?).ok_or_else(|| malformed("lease record")))
        .collect()
}
