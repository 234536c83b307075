//! The OpenAPI document an instance serves at `/openapi.json`: the handlers' annotations, plus
//! what depends on the instance (the plans a request may name, whether calls need the token) and
//! the links that chain a play-start to the calls on its stream. Built once, at start.

use serde_json::{Value, json};
use utoipa::OpenApi;

use super::auth::{ApiAuth, Audience, OPEN_PATHS};
use super::types::ErrorBody;
use super::{history, ops, responses, sessions, streams};

#[derive(OpenApi)]
#[openapi(
    info(
        title = "screenlimit limiter",
        description = "Per-account concurrent-stream leases. Every error answer is `ErrorBody`; \
                       each response lists the `error` codes it can carry. Any call may also be \
                       answered `431 Request Header Fields Too Large` (no body; the connection is \
                       closed) when its request line and headers exceed `http.max_header_bytes`."
    ),
    paths(
        streams::play_start,
        streams::heartbeat,
        streams::release,
        streams::list,
        streams::force_stop,
        streams::set_override,
        streams::clear_override,
        streams::audit,
        history::history,
        streams::fleet,
        sessions::session,
        sessions::event,
        ops::healthz,
        ops::readyz,
        ops::metrics,
    ),
    components(schemas(ErrorBody))
)]
struct ApiDoc;

/// What the document says about this instance.
#[derive(Debug, Clone, Default)]
pub struct Instance {
    /// The plan names a play-start may give; `None` when the plan database decides and a named
    /// plan is ignored.
    pub plans: Option<Vec<String>>,
    /// Which credentials the calls need.
    pub security: Security,
}

/// What the document says about credentials.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Security {
    /// No credential: every call is open.
    #[default]
    None,
    /// One token (`auth_token_file`) opens every call: one scheme, `bearer`.
    SingleToken,
    /// Two schemes: `support` (the support token) on the support routes, `player` (the gateway
    /// token; with `tokens`, a player JWT too) on the player routes; an account's list takes
    /// either.
    Split { tokens: bool },
}

impl Security {
    pub fn of(auth: &ApiAuth) -> Security {
        match (auth.enabled(), auth.split()) {
            (false, _) => Security::None,
            (true, false) => Security::SingleToken,
            (true, true) => Security::Split {
                tokens: auth.players.is_some(),
            },
        }
    }
}

/// The whole document for `instance`.
pub fn document(instance: &Instance) -> Value {
    let mut doc = ApiDoc::openapi();
    let components = doc.components.get_or_insert_with(Default::default);
    for (name, response) in responses::all() {
        components.responses.insert(name.to_owned(), response);
    }
    let mut doc = serde_json::to_value(doc).expect("the document serializes");
    if let Some(plans) = &instance.plans {
        // `null` stays allowed: the field is optional and nullable.
        let names: Vec<Value> = plans
            .iter()
            .map(|p| json!(p))
            .chain([Value::Null])
            .collect();
        doc["components"]["schemas"]["PlayStartRequest"]["properties"]["plan"]["enum"] =
            Value::Array(names);
    }
    match instance.security {
        Security::None => {}
        Security::SingleToken => require_token(&mut doc),
        Security::Split { tokens } => require_credentials(&mut doc, tokens),
    }
    add_links(&mut doc);
    doc
}

/// Declares the bearer scheme, and on every operation but the open paths its requirement and
/// the 401 the middleware answers without it.
fn require_token(doc: &mut Value) {
    doc["components"]["securitySchemes"] = json!({
        "bearer": {"type": "http", "scheme": "bearer", "description": "The service token (`auth_token_file`)"}
    });
    let Some(paths) = doc["paths"].as_object_mut() else {
        return;
    };
    for (path, item) in paths {
        if OPEN_PATHS.contains(&path.as_str()) {
            continue;
        }
        for operation in item
            .as_object_mut()
            .into_iter()
            .flat_map(|m| m.values_mut())
        {
            operation["security"] = json!([{"bearer": []}]);
            operation["responses"]["401"] = json!({"$ref": "#/components/responses/Unauthorized"});
        }
    }
}

/// Declares the two schemes, and on every operation but the open paths the one its audience
/// needs, the 401 the middleware answers without it and the 403 it answers to the other
/// audience's credential (and, with player tokens, to another account's).
fn require_credentials(doc: &mut Value, tokens: bool) {
    let player = if tokens {
        json!({
            "type": "http", "scheme": "bearer", "bearerFormat": "JWT",
            "description": "A player token (a JWT from the video service's auth, `auth.players`: \
                signed with its HS256 secret or a key of its JWKS, `exp`, `iss` and `aud` checked; \
                it opens the player routes for its own account only), or the gateway token \
                (`auth.gateway_token_file`: any account)",
        })
    } else {
        json!({
            "type": "http", "scheme": "bearer",
            "description": "The gateway token (`auth.gateway_token_file`): the player routes, any account",
        })
    };
    doc["components"]["securitySchemes"] = json!({
        "support": {
            "type": "http", "scheme": "bearer",
            "description": "The support token (`auth.support_token_file`): the dashboard's credential, the only one that opens the support routes",
        },
        "player": player,
    });
    let unauthorized = if tokens {
        "PlayerUnauthorized"
    } else {
        "Unauthorized"
    };
    let response = |name: &str| json!({"$ref": format!("#/components/responses/{name}")});
    let Some(paths) = doc["paths"].as_object_mut() else {
        return;
    };
    for (path, item) in paths {
        let audience = Audience::of(path);
        let Some(operations) = item.as_object_mut() else {
            continue;
        };
        for operation in operations.values_mut() {
            let (security, forbidden) = match audience {
                // Not in the document: only other regions of the install call them.
                Audience::Open | Audience::Region => continue,
                Audience::Player if path == "/v1/streams" => {
                    (json!([{"player": []}]), "PlayStartForbidden")
                }
                Audience::Player => (json!([{"player": []}]), "StreamForbidden"),
                Audience::Both => (json!([{"support": []}, {"player": []}]), "ListForbidden"),
                Audience::Support | Audience::Any => (json!([{"support": []}]), "SupportOnly"),
            };
            operation["security"] = security;
            let needs = match audience {
                Audience::Support | Audience::Any => "Unauthorized",
                _ => unauthorized,
            };
            operation["responses"]["401"] = response(needs);
            operation["responses"]["403"] = response(forbidden);
        }
    }
}

/// OpenAPI links: what a client (or a stateful fuzzer) can do next with an answer's ids. A
/// parameter's value is a runtime expression as it stands; inside a request body (a JSON value)
/// an expression is embedded in braces, `"{$request.body#/account_id}"`, else it is a literal
/// string (OpenAPI 3.1, Link Object and Runtime Expressions).
fn add_links(doc: &mut Value) {
    let account_of_request = "$request.body#/account_id";
    let new_stream = "$response.body#/stream_id";
    let embedded = |expression: &str| format!("{{{expression}}}");
    let on_stream = |operation: &str| {
        json!({
            "operationId": operation,
            "parameters": {"stream_id": new_stream},
            "requestBody": {"account_id": embedded(account_of_request)},
        })
    };
    let on_account = |operation: &str| json!({"operationId": operation, "parameters": {"account_id": account_of_request}});
    let play_start = &mut doc["paths"]["/v1/streams"]["post"]["responses"];
    play_start["200"]["links"] = json!({
        "Heartbeat": on_stream("heartbeat"),
        "Stop": on_stream("release"),
        "ForceStop": {
            "operationId": "force_stop",
            "parameters": {"account_id": account_of_request, "stream_id": new_stream},
        },
        "ListAccount": on_account("list"),
        "GrantOverride": on_account("set_override"),
        "ClearOverride": on_account("clear_override"),
        "AccountAudit": on_account("audit"),
        "AccountHistory": on_account("history"),
    });
    play_start["409"]["links"] = json!({
        "AccountHistory": on_account("history"),
        "TakeOver": {
            "operationId": "play_start",
            "requestBody": {
                "account_id": embedded(account_of_request),
                "device_id": embedded("$request.body#/device_id"),
                "replace_stream_id": embedded("$response.body#/active/0/stream_id"),
            },
        },
    });
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ids::tests::{assert_agree, samples};
    use crate::ids::{ID, STREAM_ID, validate_token};

    fn doc() -> Value {
        document(&Instance {
            plans: Some(vec!["basic".into(), "premium".into()]),
            security: Security::SingleToken,
        })
    }

    /// The id schema as the document gives it, as a rule the agreement check can read.
    fn rule_of(schema: &Value) -> crate::ids::TextRule {
        let pattern: &'static str = schema["pattern"].as_str().unwrap().to_owned().leak();
        crate::ids::TextRule {
            min_chars: schema["minLength"].as_u64().unwrap_or(0) as usize,
            max_chars: schema["maxLength"].as_u64().unwrap() as usize,
            pattern,
            words: "as served",
        }
    }

    /// Every link: parameters are bare runtime expressions, and every string of a request body
    /// that is meant as one is embedded in braces (a bare `$…` there is a literal string).
    #[test]
    fn links_embed_their_body_expressions_in_braces() {
        let doc = doc();
        let mut bodies = 0;
        for (path, item) in doc["paths"].as_object().unwrap() {
            for operation in item.as_object().unwrap().values() {
                let Some(responses) = operation.get("responses").and_then(Value::as_object) else {
                    continue;
                };
                for link in responses
                    .values()
                    .filter_map(|r| r.get("links").and_then(Value::as_object))
                    .flat_map(|links| links.values())
                {
                    for value in link["parameters"]
                        .as_object()
                        .into_iter()
                        .flat_map(|m| m.values())
                    {
                        let v = value.as_str().unwrap();
                        assert!(v.starts_with('$'), "{path}: parameter {v}");
                    }
                    for value in link["requestBody"]
                        .as_object()
                        .into_iter()
                        .flat_map(|m| m.values())
                    {
                        let v = value.as_str().unwrap();
                        assert!(v.starts_with("{$") && v.ends_with('}'), "{path}: body {v}");
                        bodies += 1;
                    }
                }
            }
        }
        assert!(bodies >= 4, "expected the links' bodies, saw {bodies}");
    }

    #[test]
    fn every_id_in_the_document_is_the_validators_rule() {
        let doc = doc();
        let schemas = &doc["components"]["schemas"];
        let play = &schemas["PlayStartRequest"]["properties"];
        let mut ids = vec![
            &play["account_id"],
            &play["device_id"],
            &play["plan"],
            &play["profile_id"],
            &play["title_id"],
            &schemas["AccountRef"]["properties"]["account_id"],
            &schemas["HistoryDeviceInfo"]["properties"]["device_id"],
        ];
        let mut stream_ids = vec![&play["replace_stream_id"]];
        for item in doc["paths"].as_object().unwrap().values() {
            for operation in item.as_object().unwrap().values() {
                for param in operation["parameters"].as_array().into_iter().flatten() {
                    match param["name"].as_str().unwrap() {
                        "account_id" => ids.push(&param["schema"]),
                        "stream_id" => stream_ids.push(&param["schema"]),
                        _ => {}
                    }
                }
            }
        }
        assert_eq!(
            (ids.len(), stream_ids.len()),
            (13, 4),
            "every id field and parameter"
        );
        let alphabet = ['a', '.', '-', ':', '_', '/', ' ', 'é'];
        let extra = ["a".repeat(64), "a".repeat(65), ".".repeat(64)].map(String::from);
        for schema in ids {
            assert_eq!(
                rule_of(schema),
                crate::ids::TextRule {
                    words: "as served",
                    ..ID
                }
            );
            assert_agree(
                &rule_of(schema),
                |s| validate_token(s).is_ok(),
                &samples(&alphabet, 3, &extra),
            );
        }
        for schema in stream_ids {
            assert_eq!(
                rule_of(schema),
                crate::ids::TextRule {
                    words: "as served",
                    ..STREAM_ID
                }
            );
        }
    }

    #[test]
    fn the_plans_the_instance_knows_are_the_only_ones_offered() {
        let doc = doc();
        let plan = &doc["components"]["schemas"]["PlayStartRequest"]["properties"]["plan"];
        assert_eq!(plan["enum"], json!(["basic", "premium", null]));
        let open = document(&Instance::default());
        let plan = &open["components"]["schemas"]["PlayStartRequest"]["properties"]["plan"];
        assert!(
            plan.get("enum").is_none(),
            "the plan database decides: {plan}"
        );
    }

    #[test]
    fn with_a_token_every_call_but_the_open_paths_documents_401() {
        let doc = doc();
        for (path, item) in doc["paths"].as_object().unwrap() {
            for (method, operation) in item.as_object().unwrap() {
                let open = OPEN_PATHS.contains(&path.as_str());
                assert_eq!(
                    operation["responses"].get("401").is_some(),
                    !open,
                    "{method} {path}"
                );
                assert_eq!(
                    operation.get("security").is_some(),
                    !open,
                    "{method} {path}"
                );
            }
        }
        let open = document(&Instance::default());
        assert!(open["components"].get("securitySchemes").is_none());
    }

    #[test]
    fn with_two_credentials_each_call_names_its_audience_s_scheme_and_documents_401_and_403() {
        let doc = document(&Instance {
            plans: None,
            security: Security::Split { tokens: true },
        });
        let schemes = doc["components"]["securitySchemes"].as_object().unwrap();
        assert_eq!(
            schemes.keys().collect::<Vec<_>>(),
            ["support", "player"],
            "both schemes, nothing else"
        );
        for (path, item) in doc["paths"].as_object().unwrap() {
            for (method, operation) in item.as_object().unwrap() {
                let expected = match Audience::of(path) {
                    Audience::Open => Value::Null,
                    Audience::Region => panic!("{path}: the region routes are not documented"),
                    Audience::Player => json!([{"player": []}]),
                    Audience::Both => json!([{"support": []}, {"player": []}]),
                    Audience::Support | Audience::Any => json!([{"support": []}]),
                };
                assert_eq!(operation["security"], expected, "{method} {path}");
                if expected.is_null() {
                    continue;
                }
                for status in ["401", "403"] {
                    let reference = operation["responses"][status]["$ref"].as_str().unwrap();
                    let name = reference.rsplit('/').next().unwrap();
                    assert!(
                        doc["components"]["responses"].get(name).is_some(),
                        "{method} {path} {status}: {reference}"
                    );
                }
            }
        }
        let codes = |name: &str| {
            doc["components"]["responses"][name]["content"]["application/json"]["schema"]["allOf"]
                [1]["properties"]["error"]["enum"]
                .clone()
        };
        assert_eq!(
            codes("PlayStartForbidden"),
            json!([
                "unknown_account",
                "players_only",
                "account_mismatch",
                "device_mismatch"
            ]),
            "play-start's own 403 stays documented beside the credential's"
        );
        assert_eq!(codes("SupportOnly"), json!(["support_only"]));
    }

    #[test]
    fn every_body_taking_call_documents_400_413_415_and_422() {
        let doc = doc();
        for (path, item) in doc["paths"].as_object().unwrap() {
            for (method, operation) in item.as_object().unwrap() {
                if operation.get("requestBody").is_none() {
                    continue;
                }
                for status in ["400", "413", "415", "422"] {
                    assert!(
                        operation["responses"].get(status).is_some(),
                        "{method} {path} lacks {status}"
                    );
                }
            }
        }
    }
}
