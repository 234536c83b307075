//! The API server's audit log, kept for service accounts only (the operator signs in as one):
//! which verbs on which resources each one used, so a test can hold the chart's RBAC rules to
//! what the operator really does.

use std::collections::BTreeSet;
use std::path::Path;

use serde_json::Value;

/// The audit policy: every request of a ServiceAccount at `Metadata` level (no bodies), once,
/// when answered; nothing else.
pub const POLICY: &str = "\
apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: [RequestReceived]
rules:
  - level: Metadata
    userGroups: [\"system:serviceaccounts\"]
  - level: None
";

/// One request as the audit log has it.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct Access {
    pub user: String,
    /// `""` for the core group.
    pub group: String,
    /// `pods`, or `pods/proxy` for a subresource.
    pub resource: String,
    pub verb: String,
    pub namespace: Option<String>,
    /// The HTTP status the API server answered (0 when absent).
    pub code: u16,
}

/// The resource requests of one audit log (JSON lines); requests for no resource (discovery,
/// `/readyz`) are left out, and so is a last line the server is still writing.
pub fn parse(text: &str) -> Vec<Access> {
    let lines: Vec<&str> = text.lines().filter(|l| !l.trim().is_empty()).collect();
    let mut out = Vec::new();
    for (i, line) in lines.iter().enumerate() {
        match serde_json::from_str::<Value>(line) {
            Ok(event) => out.extend(access(&event)),
            Err(_) if i + 1 == lines.len() && !text.ends_with('\n') => {}
            Err(e) => panic!("an audit line that is not JSON ({e}): {line}"),
        }
    }
    out
}

fn access(event: &Value) -> Option<Access> {
    let object = event.get("objectRef")?;
    let resource = object.get("resource")?.as_str()?;
    let resource = match object.get("subresource").and_then(Value::as_str) {
        Some(sub) if !sub.is_empty() => format!("{resource}/{sub}"),
        _ => resource.to_owned(),
    };
    let text = |v: Option<&Value>| v.and_then(Value::as_str).map(str::to_owned);
    Some(Access {
        user: text(event.pointer("/user/username")).unwrap_or_default(),
        group: text(object.get("apiGroup")).unwrap_or_default(),
        resource,
        verb: text(event.get("verb")).unwrap_or_default(),
        namespace: text(object.get("namespace")),
        code: event
            .pointer("/responseStatus/code")
            .and_then(Value::as_u64)
            .and_then(|c| u16::try_from(c).ok())
            .unwrap_or(0),
    })
}

/// The audit log at `path` (empty while nothing was logged).
pub fn read(path: &Path) -> Vec<Access> {
    parse(&std::fs::read_to_string(path).unwrap_or_default())
}

/// The `(group, resource, verb)` permissions `user` exercised. A server-side apply that created
/// its object (201) was authorized as `create` as well as `patch`, so it counts for both.
pub fn used_by(accesses: &[Access], user: &str) -> BTreeSet<(String, String, String)> {
    let mut used = BTreeSet::new();
    for a in accesses.iter().filter(|a| a.user == user) {
        used.insert((a.group.clone(), a.resource.clone(), a.verb.clone()));
        if a.verb == "patch" && a.code == 201 {
            used.insert((a.group.clone(), a.resource.clone(), "create".to_owned()));
        }
    }
    used
}

/// What `user` was refused (403): the RBAC rules it lacks.
pub fn forbidden(accesses: &[Access], user: &str) -> Vec<Access> {
    accesses
        .iter()
        .filter(|a| a.user == user && a.code == 403)
        .cloned()
        .collect()
}

/// The user name Kubernetes gives ServiceAccount `name` of `namespace`.
pub fn service_account_user(namespace: &str, name: &str) -> String {
    format!("system:serviceaccount:{namespace}:{name}")
}

#[cfg(test)]
mod tests {
    use super::*;

    const LOG: &str = r#"{"kind":"Event","apiVersion":"audit.k8s.io/v1","level":"Metadata","auditID":"1","stage":"ResponseComplete","requestURI":"/apis/apps/v1/namespaces/video/statefulsets/x?fieldManager=screenlimit-operator&force=true","verb":"patch","user":{"username":"system:serviceaccount:ns:op","groups":["system:serviceaccounts"]},"objectRef":{"resource":"statefulsets","namespace":"video","name":"x","apiGroup":"apps","apiVersion":"v1"},"responseStatus":{"metadata":{},"code":201}}
{"kind":"Event","apiVersion":"audit.k8s.io/v1","level":"Metadata","auditID":"2","stage":"ResponseComplete","requestURI":"/api/v1/namespaces/video/pods/p:8080/proxy/metrics","verb":"get","user":{"username":"system:serviceaccount:ns:op"},"objectRef":{"resource":"pods","namespace":"video","name":"p:8080","apiVersion":"v1","subresource":"proxy"},"responseStatus":{"metadata":{},"code":403}}
{"kind":"Event","apiVersion":"audit.k8s.io/v1","level":"Metadata","auditID":"3","stage":"ResponseComplete","requestURI":"/apis","verb":"get","user":{"username":"system:serviceaccount:ns:op"},"responseStatus":{"metadata":{},"code":200}}
{"kind":"Event","apiVersion":"audit.k8s.io/v1","level":"Metadata","auditID":"4","stage":"ResponseStarted","requestURI":"/apis/screenlimit.io/v1alpha1/streamlimiters?watch=true","verb":"watch","user":{"username":"system:serviceaccount:ns:other"},"objectRef":{"resource":"streamlimiters","apiGroup":"screenlimit.io","apiVersion":"v1alpha1"},"responseStatus":{"metadata":{},"code":200}}

"#;

    #[test]
    fn the_log_gives_resource_requests_with_their_subresource_and_answer() {
        let accesses = parse(LOG);
        assert_eq!(
            accesses.len(),
            3,
            "the discovery request is left out: {accesses:?}"
        );
        assert_eq!(accesses[1].resource, "pods/proxy");
        assert_eq!(accesses[1].group, "");
        assert_eq!(accesses[1].code, 403);
        assert_eq!(accesses[0].namespace.as_deref(), Some("video"));
    }

    #[test]
    fn an_apply_that_created_counts_as_create_and_users_are_kept_apart() {
        let accesses = parse(LOG);
        let user = service_account_user("ns", "op");
        let used = used_by(&accesses, &user);
        let triple = |g: &str, r: &str, v: &str| (g.to_owned(), r.to_owned(), v.to_owned());
        assert!(used.contains(&triple("apps", "statefulsets", "patch")));
        assert!(used.contains(&triple("apps", "statefulsets", "create")));
        assert!(
            !used.iter().any(|(_, r, _)| r == "streamlimiters"),
            "{used:?}"
        );
        let refused = forbidden(&accesses, &user);
        assert_eq!(refused.len(), 1);
        assert_eq!(refused[0].resource, "pods/proxy");
    }

    #[test]
    fn a_line_still_being_written_is_left_for_later() {
        let first = LOG.lines().next().unwrap();
        let text = format!("{first}\n{}", &first[..40]);
        assert_eq!(parse(&text).len(), 1);
    }

    #[test]
    fn the_policy_is_yaml_that_logs_service_accounts_only() {
        let policy: Value = serde_yaml_ng::from_str(POLICY).unwrap();
        assert_eq!(policy["kind"], "Policy");
        assert_eq!(policy["rules"][0]["level"], "Metadata");
        assert_eq!(
            policy["rules"][0]["userGroups"][0],
            "system:serviceaccounts"
        );
        assert_eq!(policy["rules"][1]["level"], "None");
    }
}
