//! JSON Schemas built from the input rules themselves (`ids::TextRule`, the numeric bounds), so
//! `/openapi.json` says exactly what the validators enforce and cannot drift from them.
//! Fields and parameters name these functions in `#[schema(schema_with = ...)]`.

use utoipa::openapi::schema::{Object, ObjectBuilder, SchemaType, Type};

use super::limits::{ACTOR, ADDRESS, MAX_OVERRIDE_SEC, REASON};
use crate::config::MAX_STREAMS_CEILING;
use crate::ids::{DEVICE_META, ID, STREAM_ID, TextRule};
use crate::model::AUDIT_RECENT;

fn text_schema(rule: &TextRule, nullable: bool) -> Object {
    let schema_type = if nullable {
        SchemaType::from_iter([Type::String, Type::Null])
    } else {
        SchemaType::from(Type::String)
    };
    ObjectBuilder::new()
        .schema_type(schema_type)
        .min_length((rule.min_chars > 0).then_some(rule.min_chars))
        .max_length(Some(rule.max_chars))
        .pattern(Some(rule.pattern))
        .description(Some(rule.words))
        .build()
}

fn integer(min: u64, max: u64, description: &str) -> Object {
    ObjectBuilder::new()
        .schema_type(Type::Integer)
        .minimum(Some(min))
        .maximum(Some(max))
        .description(Some(description))
        .build()
}

/// An account, device, profile, title or plan id.
pub fn id() -> Object {
    text_schema(&ID, false)
}

/// An optional id: absent, `null` or an id.
pub fn optional_id() -> Object {
    text_schema(&ID, true)
}

/// A stream id in a path.
pub fn stream_id() -> Object {
    text_schema(&STREAM_ID, false)
}

/// `replace_stream_id`: absent, `null` or a stream id.
pub fn optional_stream_id() -> Object {
    text_schema(&STREAM_ID, true)
}

/// `device_meta`: absent, `null` or a display name.
pub fn device_meta() -> Object {
    text_schema(&DEVICE_META, true)
}

/// Force-stop `actor`: absent or `null` (then `api`), or a name.
pub fn actor() -> Object {
    text_schema(&ACTOR, true)
}

/// Force-stop `reason`: absent, `null` or text.
pub fn reason() -> Object {
    text_schema(&REASON, true)
}

/// A sign-in event's client `address`: absent, `null` or an address.
pub fn address() -> Object {
    text_schema(&ADDRESS, true)
}

/// `max_streams` of a limit override.
pub fn override_max_streams() -> Object {
    integer(
        1,
        u64::from(MAX_STREAMS_CEILING),
        "The account's limit while the override lasts",
    )
}

/// `expires_in_sec` of a limit override.
pub fn override_expires_in_sec() -> Object {
    integer(
        1,
        MAX_OVERRIDE_SEC,
        "How long it lasts, in seconds (at most 30 days)",
    )
}

/// `limit` of a history query.
pub fn history_limit() -> Object {
    integer(
        1,
        u64::from(crate::config::MAX_HISTORY_EVENTS),
        "How many entries, newest first (default 50)",
    )
}

/// `limit` of an audit query.
pub fn audit_limit() -> Object {
    integer(
        1,
        AUDIT_RECENT as u64,
        "How many entries, newest first (default 50)",
    )
}
