//! The error answers, one reusable OpenAPI response each, with the `error` codes it carries.
//! Handlers list the ones they can give in `#[utoipa::path(responses(...))]`; `openapi.rs`
//! registers them all under `components/responses`.

use utoipa::openapi::header::HeaderBuilder;
use utoipa::openapi::schema::{AllOfBuilder, ObjectBuilder, Schema, Type};
use utoipa::openapi::{ContentBuilder, Ref, RefOr, Response, ResponseBuilder};

/// `allOf: [ErrorBody, {error: enum codes}]`: the shared shape, narrowed to this answer's codes.
fn error_response(description: &str, codes: &[&str], headers: &[(&str, &str)]) -> Response {
    let narrowed = ObjectBuilder::new().property(
        "error",
        ObjectBuilder::new()
            .schema_type(Type::String)
            .enum_values(Some(codes.iter().copied())),
    );
    let schema = AllOfBuilder::new()
        .item(Ref::from_schema_name("ErrorBody"))
        .item(narrowed)
        .build();
    let mut response = ResponseBuilder::new().description(description).content(
        "application/json",
        ContentBuilder::new()
            .schema(Some(Schema::AllOf(schema)))
            .build(),
    );
    for (name, what) in headers {
        response = response.header(
            *name,
            HeaderBuilder::new()
                .schema(ObjectBuilder::new().schema_type(Type::String))
                .description(Some(*what))
                .build(),
        );
    }
    response.build()
}

macro_rules! error_responses {
    ($($name:ident => $description:literal, [$($code:literal),+] $(, headers [$(($header:literal, $what:literal)),+])?;)+) => {
        $(
            #[doc = $description]
            pub struct $name;

            impl<'r> utoipa::ToResponse<'r> for $name {
                fn response() -> (&'r str, RefOr<Response>) {
                    (
                        stringify!($name),
                        RefOr::T(error_response($description, &[$($code),+], &[$($(($header, $what)),+)?])),
                    )
                }
            }
        )+

        /// Every error response, for `components/responses`.
        pub fn all() -> Vec<(&'static str, RefOr<Response>)> {
            vec![$(<$name as utoipa::ToResponse>::response()),+]
        }
    };
}

error_responses! {
    BadJson => "The body is not valid JSON", ["bad_json"];
    Unauthorized => "No `Authorization: Bearer <token>` with a configured credential",
        ["unauthorized"], headers [("WWW-Authenticate", "`Bearer`")];
    PlayerUnauthorized => "No `Authorization: Bearer <token>` with a configured credential (`unauthorized`), or a player token that does not check out: `token_expired` (get a new one), `invalid_token` (`reason` names the check that failed)",
        ["unauthorized", "invalid_token", "token_expired"], headers [("WWW-Authenticate", "`Bearer`, or `Bearer error=\"invalid_token\"`")];
    SupportOnly => "A player or gateway credential on a support route (`support_only`)",
        ["support_only"];
    PlayStartForbidden => "The plan database has no plan for this account (`unknown_account`), the support token on a player route (`players_only`), or a player token for another account (`account_mismatch`) or device (`device_mismatch`)",
        ["unknown_account", "players_only", "account_mismatch", "device_mismatch"];
    StreamForbidden => "The support token on a player route (`players_only`), or a player token for another account (`account_mismatch`) or, bound to a device, for another device than the stream's (`device_mismatch`)",
        ["players_only", "account_mismatch", "device_mismatch"];
    ListForbidden => "A player token for another account (`account_mismatch`): a player lists its own account only",
        ["account_mismatch"];
    UnknownAccount => "The plan database has no plan for this account (`unknown_account: deny`)",
        ["unknown_account"];
    UnknownStream => "No such stream on this account (an id issued for another account, or not issued at all)",
        ["unknown_stream"];
    StreamGone => "`lease_expired` (action `re_acquire`: play again) or `stream_revoked` (action `stop`)",
        ["lease_expired", "stream_revoked"];
    PayloadTooLarge => "The body is larger than `max_body_bytes`", ["payload_too_large"];
    UnsupportedMediaType => "The body is not sent as `Content-Type: application/json`",
        ["unsupported_media_type"];
    InvalidRequest => "A field, path or query value breaks its rule (`field` names it) or the body has the wrong shape",
        ["invalid_request"];
    InvalidPlayStart => "A field breaks its rule (`field` names it), the body has the wrong shape, or `plan` is not configured",
        ["invalid_request", "unknown_plan"];
    StoreUnavailable => "The stream store cannot answer, or this instance is at `http.max_in_flight` and sheds the request (for play-start, heartbeat and stop only under the `closed` failure policy; under `open` they are answered degraded); retry",
        ["store_unavailable", "overloaded"], headers [("Retry-After", "Seconds to wait: `1`")];
    RequestTimeout => "The body did not arrive within `http.body_read_timeout`; the connection is closed after this answer",
        ["request_timeout"], headers [("Connection", "`close`")];
}
