//! Objects as JSON, wherever they belong: the API of any kind (found by discovery, so a kind is
//! never mistyped in a table), server-side apply, namespaces, CRDs until `Established`, and
//! every object the operator's pure build renders.

use std::time::Duration;

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, DynamicObject, Patch, PatchParams};
use kube::core::GroupVersionKind;
use kube::discovery::{Scope, pinned_kind};
use screenlimit_operator::build::Desired;
use serde_json::{Value, json};

use super::wait::until;

/// The `(apiVersion, kind, name)` of an object, for messages.
pub fn describe(object: &Value) -> String {
    format!(
        "{} {}/{}",
        object["apiVersion"].as_str().unwrap_or("?"),
        object["kind"].as_str().unwrap_or("?"),
        object["metadata"]["name"].as_str().unwrap_or("?")
    )
}

/// The API that serves `object`'s kind: in its namespace (or `namespace` when it names none)
/// for a namespaced kind.
pub async fn api_for(client: &kube::Client, object: &Value, namespace: &str) -> Api<DynamicObject> {
    let api_version = object["apiVersion"].as_str().expect("an apiVersion");
    let kind = object["kind"].as_str().expect("a kind");
    let (group, version) = api_version.split_once('/').unwrap_or(("", api_version));
    let gvk = GroupVersionKind::gvk(group, version, kind);
    let (resource, capabilities) = pinned_kind(client, &gvk)
        .await
        .unwrap_or_else(|e| panic!("the API server does not serve {api_version} {kind}: {e}"));
    match capabilities.scope {
        Scope::Cluster => Api::all_with(client.clone(), &resource),
        Scope::Namespaced => {
            let ns = object["metadata"]["namespace"]
                .as_str()
                .unwrap_or(namespace);
            Api::namespaced_with(client.clone(), ns, &resource)
        }
    }
}

fn name_of(object: &Value) -> &str {
    object["metadata"]["name"].as_str().expect("a name")
}

/// Server-side applies `object` as `manager` (forcing conflicts), in `namespace` unless it
/// names its own.
pub async fn apply(
    client: &kube::Client,
    object: &Value,
    namespace: &str,
    manager: &str,
) -> DynamicObject {
    let api = api_for(client, object, namespace).await;
    api.patch(
        name_of(object),
        &PatchParams::apply(manager).force(),
        &Patch::Apply(object),
    )
    .await
    .unwrap_or_else(|e| panic!("the API server refused {}: {e}", describe(object)))
}

/// The live object of `object`'s kind and name, if there is one.
pub async fn live(client: &kube::Client, object: &Value, namespace: &str) -> Option<DynamicObject> {
    let api = api_for(client, object, namespace).await;
    api.get_opt(name_of(object))
        .await
        .unwrap_or_else(|e| panic!("reading {}: {e}", describe(object)))
}

/// Namespace `name`, created if absent.
pub async fn namespace(client: &kube::Client, name: &str, manager: &str) {
    let ns = json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}});
    apply(client, &ns, "", manager).await;
}

/// Applies the CRD in the YAML file `path` (relative to the checkout) and waits until the
/// server has `Established` it.
pub async fn install_crd(client: &kube::Client, path: &str, manager: &str) -> String {
    let file = crate::workspace_root().join(path);
    let text = std::fs::read_to_string(&file).unwrap_or_else(|e| panic!("{path}: {e}"));
    let crd: Value = serde_yaml_ng::from_str(&text).unwrap_or_else(|e| panic!("{path}: {e}"));
    let name = name_of(&crd).to_owned();
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    crds.patch(
        &name,
        &PatchParams::apply(manager).force(),
        &Patch::Apply(&crd),
    )
    .await
    .unwrap_or_else(|e| panic!("the API server refused the CRD in {path}: {e}"));
    established(client, &name).await;
    name
}

/// Waits (30 s at most) until CRD `name` is `Established`.
pub async fn established(client: &kube::Client, name: &str) {
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    let status = || async {
        let crd = crds.get(name).await.ok()?;
        let conditions = crd.status?.conditions?;
        conditions
            .iter()
            .any(|c| c.type_ == "Established" && c.status == "True")
            .then_some(())
    };
    until(
        &format!("CRD {name} Established"),
        Duration::from_secs(30),
        status,
        String::new,
    )
    .await;
}

/// Every object the operator's build renders, as JSON (apiVersion and kind included), in the
/// order the operator applies them.
pub fn desired_objects(desired: &Desired) -> Vec<Value> {
    fn all<T: serde::Serialize>(objects: &[T]) -> Vec<Value> {
        objects
            .iter()
            .map(|o| serde_json::to_value(o).expect("a built object as JSON"))
            .collect()
    }
    let mut out = Vec::new();
    out.extend(all(&desired.network_policies));
    out.extend(all(&desired.services));
    out.extend(all(&desired.config_maps));
    out.extend(all(&desired.pdbs));
    out.extend(all(&desired.deployments));
    out.extend(all(&desired.hpas));
    out.extend(all(&desired.stateful_sets));
    out
}

/// A fixture or example as a user sends it: no server-set metadata, in `namespace`.
pub fn as_sent(mut object: Value, namespace: &str) -> Value {
    if let Some(metadata) = object["metadata"].as_object_mut() {
        for key in [
            "uid",
            "generation",
            "resourceVersion",
            "creationTimestamp",
            "managedFields",
            "ownerReferences",
        ] {
            metadata.remove(key);
        }
        metadata.insert("namespace".into(), namespace.into());
    }
    if let Some(map) = object.as_object_mut() {
        map.remove("status");
    }
    object
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_built_object_says_its_kind_and_server_fields_are_dropped() {
        let sl = crate::example("production.yaml");
        let desired = screenlimit_operator::build::build(&sl).unwrap();
        let objects = desired_objects(&desired);
        assert!(objects.len() > 10, "{}", objects.len());
        for o in &objects {
            assert!(o["apiVersion"].is_string() && o["kind"].is_string(), "{o}");
            assert!(o["metadata"]["name"].is_string(), "{o}");
        }
        let sent = as_sent(
            json!({"metadata": {"name": "a", "uid": "u", "generation": 3, "namespace": "x"}, "status": {}}),
            "rules",
        );
        assert_eq!(
            sent,
            json!({"metadata": {"name": "a", "namespace": "rules"}})
        );
    }
}
