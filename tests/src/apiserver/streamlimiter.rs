//! A `StreamLimiter` on the API server, as the suites that run the operator see it: applied
//! from an example, its status once the operator has observed its generation, and the objects
//! the operator's pure build renders for it, checked against what the server holds.

use std::time::Duration;

use kube::api::{Api, Patch, PatchParams};
use kube::core::ObjectMeta;
use screenlimit_operator::build::{Desired, build};
use screenlimit_operator::crd::StreamLimiter;
use screenlimit_operator::names::FIELD_MANAGER;
use screenlimit_operator::status::{DEGRADED, PROGRESSING, READY};
use serde_json::Value;

use super::objects::{self, describe, desired_objects};
use super::wait::until;

/// How long the operator may take to act on a change.
pub const ACT: Duration = Duration::from_secs(60);

/// The manager a user's `kubectl apply --server-side` writes as.
pub const USER: &str = "kubectl";

/// `examples/<file>` as JSON.
pub fn example_json(file: &str) -> Value {
    let path = crate::workspace_root().join("examples").join(file);
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    serde_yaml_ng::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// Applies `object` (a StreamLimiter as JSON) as a user would.
pub async fn apply(client: &kube::Client, object: &Value) {
    let ns = object["metadata"]["namespace"]
        .as_str()
        .expect("a namespace");
    let name = object["metadata"]["name"].as_str().expect("a name");
    let api: Api<StreamLimiter> = Api::namespaced(client.clone(), ns);
    api.patch(
        name,
        &PatchParams::apply(USER).force(),
        &Patch::Apply(object),
    )
    .await
    .unwrap_or_else(|e| panic!("the API server refused {}: {e}", describe(object)));
}

/// The StreamLimiter once its status is of its current generation and has the three
/// conditions.
pub async fn observed(
    client: &kube::Client,
    ns: &str,
    name: &str,
    context: impl Fn() -> String,
) -> StreamLimiter {
    let api: Api<StreamLimiter> = Api::namespaced(client.clone(), ns);
    until(
        &format!("a status of StreamLimiter {ns}/{name}'s current generation with Ready, Progressing and Degraded"),
        ACT,
        || async {
            let sl = api.get(name).await.ok()?;
            let status = sl.status.as_ref()?;
            let types: Vec<&str> = status.conditions.iter().map(|c| c.type_.as_str()).collect();
            let current = status.observed_generation.is_some()
                && status.observed_generation == sl.metadata.generation;
            (current && [READY, PROGRESSING, DEGRADED].iter().all(|t| types.contains(t)))
                .then_some(sl)
        },
        context,
    )
    .await
}

/// Written by the operator's field manager and controlled by the StreamLimiter `uid`.
pub fn owned_by_operator(meta: &ObjectMeta, uid: &str) -> Result<(), String> {
    let managers: Vec<&str> = meta
        .managed_fields
        .iter()
        .flatten()
        .filter_map(|m| m.manager.as_deref())
        .collect();
    if !managers.contains(&FIELD_MANAGER) {
        return Err(format!(
            "no field manager {FIELD_MANAGER} (managers: {managers:?})"
        ));
    }
    let controlled = meta
        .owner_references
        .iter()
        .flatten()
        .any(|o| o.uid == uid && o.controller == Some(true));
    if !controlled {
        return Err(format!(
            "no controller reference to {uid}: {:?}",
            meta.owner_references
        ));
    }
    Ok(())
}

/// What the build renders for `sl` as the server holds it (its uid, its defaults).
pub fn desired(sl: &StreamLimiter) -> Desired {
    build(sl).unwrap_or_else(|e| panic!("the operator's build of {:?}: {e}", sl.metadata.name))
}

/// Waits until every object `desired` renders is in the API server, written by the operator
/// and controlled by `sl`; the same for the Secrets it generates.
pub async fn assert_built_objects_present(
    client: &kube::Client,
    sl: &StreamLimiter,
    desired: &Desired,
    context: impl Fn() -> String,
) {
    let ns = sl.metadata.namespace.clone().expect("a namespace");
    let uid = sl.metadata.uid.clone().expect("a uid");
    let mut wanted = desired_objects(desired);
    for secret in [&desired.stream_id_secret, &desired.redis_auth_secret]
        .into_iter()
        .flatten()
    {
        wanted.push(serde_json::json!({
            "apiVersion": "v1", "kind": "Secret", "metadata": {"name": secret, "namespace": ns}
        }));
    }
    for object in &wanted {
        let what = describe(object);
        let got = until(
            &format!("{what} from the operator"),
            ACT,
            || objects::live(client, object, &ns),
            &context,
        )
        .await;
        if let Err(why) = owned_by_operator(&got.metadata, &uid) {
            panic!("{what}: {why}");
        }
    }
}

/// Waits (`limit` in all) until none of `gone` is in the API server.
pub async fn assert_absent(
    client: &kube::Client,
    gone: &[Value],
    ns: &str,
    why: &str,
    limit: Duration,
    context: impl Fn() -> String,
) {
    let started = std::time::Instant::now();
    for object in gone {
        until(
            &format!("{} deleted ({why})", describe(object)),
            limit
                .saturating_sub(started.elapsed())
                .max(Duration::from_secs(1)),
            || async {
                objects::live(client, object, ns)
                    .await
                    .is_none()
                    .then_some(())
            },
            &context,
        )
        .await;
    }
}

/// `before`'s objects that `after` no longer has (by kind and name).
pub fn dropped(before: &[Value], after: &[Value]) -> Vec<Value> {
    let key = |o: &Value| (o["kind"].clone(), o["metadata"]["name"].clone());
    let kept: Vec<_> = after.iter().map(key).collect();
    before
        .iter()
        .filter(|o| !kept.contains(&key(o)))
        .cloned()
        .collect()
}
