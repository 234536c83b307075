//! The permissions RBAC rules grant, one `(group, resource, verb)` each, and those of them a
//! user never exercised: the chart should grant the operator what it uses and nothing more.

use std::collections::BTreeSet;

use serde_json::Value;

/// One permission: API group (`""` for core), resource (`pods/proxy` for a subresource), verb.
pub type Permission = (String, String, String);

/// A permission a test cannot exercise, and why that is fine.
pub struct Exempt {
    pub group: &'static str,
    pub resource: &'static str,
    pub verb: &'static str,
    pub why: &'static str,
}

/// Every permission the `rules` of a Role or ClusterRole grant (`*` is kept as written).
pub fn granted(rules: &Value) -> BTreeSet<Permission> {
    let strings = |rule: &Value, key: &str| -> Vec<String> {
        rule.get(key)
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .filter_map(|v| v.as_str().map(str::to_owned))
            .collect()
    };
    let mut out = BTreeSet::new();
    for rule in rules.as_array().into_iter().flatten() {
        for group in strings(rule, "apiGroups") {
            for resource in strings(rule, "resources") {
                for verb in strings(rule, "verbs") {
                    out.insert((group.clone(), resource.clone(), verb));
                }
            }
        }
    }
    out
}

/// The granted permissions never used and not exempt, as `verb group/resource` lines.
pub fn unused(
    granted: &BTreeSet<Permission>,
    used: &BTreeSet<Permission>,
    exempt: &[Exempt],
) -> Vec<String> {
    granted
        .iter()
        .filter(|p| !used.contains(*p))
        .filter(|(g, r, v)| {
            !exempt
                .iter()
                .any(|e| e.group == g && e.resource == r && e.verb == v)
        })
        .map(|(g, r, v)| {
            let group = if g.is_empty() { "core" } else { g };
            format!("{v} {group}/{r}")
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn p(g: &str, r: &str, v: &str) -> Permission {
        (g.into(), r.into(), v.into())
    }

    #[test]
    fn rules_expand_to_one_permission_each_and_the_unused_are_named() {
        let rules = json!([
            {"apiGroups": ["apps"], "resources": ["deployments", "statefulsets"], "verbs": ["get", "patch"]},
            {"apiGroups": [""], "resources": ["pods/proxy"], "verbs": ["get"]},
        ]);
        let granted = granted(&rules);
        assert_eq!(granted.len(), 5);
        let used = BTreeSet::from([
            p("apps", "deployments", "patch"),
            p("apps", "statefulsets", "patch"),
        ]);
        let exempt = [Exempt {
            group: "",
            resource: "pods/proxy",
            verb: "get",
            why: "no kubelet",
        }];
        assert_eq!(
            unused(&granted, &used, &exempt),
            ["get apps/deployments", "get apps/statefulsets"]
        );
        assert!(unused(&granted, &used, &[]).contains(&"get core/pods/proxy".to_owned()));
    }
}
