//! Reads the slot map a node gives (`CLUSTER SHARDS`): each slot range and its primary's
//! address; and the `host:port` addresses in it.

use redis::Value;

use super::slots::SLOTS;

/// The primaries of the cluster as one read of the map named them: slot ranges and an address.
pub(super) type SlotRanges = Vec<(u16, u16, String)>;

pub(super) fn split_address(address: &str) -> Result<(&str, u16), String> {
    let (host, port) = address
        .rsplit_once(':')
        .ok_or_else(|| format!("{address:?} is not host:port"))?;
    let port = port
        .parse()
        .map_err(|_| format!("{address:?} is not host:port"))?;
    Ok((host.trim_start_matches('[').trim_end_matches(']'), port))
}

/// The text or number a map entry holds.
fn text(value: &Value) -> Option<String> {
    match value {
        Value::BulkString(b) => String::from_utf8(b.clone()).ok(),
        Value::SimpleString(s) => Some(s.clone()),
        Value::VerbatimString { text, .. } => Some(text.clone()),
        Value::Int(n) => Some(n.to_string()),
        _ => None,
    }
}

/// The fields of a map reply: a RESP3 map or a RESP2 array of alternating names and values.
fn fields(value: &Value) -> Option<Vec<(String, &Value)>> {
    match value {
        Value::Map(pairs) => pairs.iter().map(|(k, v)| Some((text(k)?, v))).collect(),
        Value::Array(items) if items.len() % 2 == 0 => items
            .chunks(2)
            .map(|pair| Some((text(&pair[0])?, &pair[1])))
            .collect(),
        _ => None,
    }
}

fn field<'a>(fields: &[(String, &'a Value)], name: &str) -> Option<&'a Value> {
    fields.iter().find(|(k, _)| k == name).map(|(_, v)| *v)
}

/// The host of a `host:port` address (`[v6]:port` too).
pub(super) fn host_of(address: &str) -> &str {
    let host = address.rsplit_once(':').map_or(address, |(host, _)| host);
    host.trim_start_matches('[').trim_end_matches(']')
}

/// Reads `CLUSTER SHARDS`: per shard its slot ranges and its primary's address (`tls-port` when
/// the nodes are reached over TLS). A shard without a primary is left out. A node that has not
/// yet learnt its own address (a lone node, before it has met another) reports an empty
/// `endpoint` and `ip`: it is then at `asked_host`, the host the question went to.
pub fn parse_shards(reply: &Value, tls: bool, asked_host: &str) -> Option<SlotRanges> {
    let Value::Array(shards) = reply else {
        return None;
    };
    let mut ranges = Vec::new();
    for shard in shards {
        let shard = fields(shard)?;
        let Value::Array(bounds) = field(&shard, "slots")? else {
            return None;
        };
        let Value::Array(nodes) = field(&shard, "nodes")? else {
            return None;
        };
        let primary = nodes
            .iter()
            .filter_map(fields)
            .find(|node| field(node, "role").and_then(text).as_deref() == Some("master"));
        let Some(primary) = primary else { continue };
        let host = field(&primary, "endpoint")
            .and_then(text)
            .filter(|e| !e.is_empty() && e != "?")
            .or_else(|| {
                field(&primary, "ip")
                    .and_then(text)
                    .filter(|ip| !ip.is_empty())
            })
            .unwrap_or_else(|| asked_host.to_owned());
        let port = match tls {
            true => field(&primary, "tls-port").or_else(|| field(&primary, "port")),
            false => field(&primary, "port"),
        }
        .and_then(text)?;
        let address = match host.contains(':') {
            true => format!("[{host}]:{port}"),
            false => format!("{host}:{port}"),
        };
        for pair in bounds.chunks(2) {
            let [first, last] = pair else { return None };
            let first: u16 = text(first)?.parse().ok()?;
            let last: u16 = text(last)?.parse().ok()?;
            if first > last || usize::from(last) >= SLOTS {
                return None;
            }
            ranges.push((first, last, address.clone()));
        }
    }
    Some(ranges)
}
