//! What a real API server checks before it takes the CRD, checked here without one:
//!
//! - every string, list and map the CRD declares is bounded (the API server estimates each CEL
//!   rule's worst-case cost from those bounds, and refuses the whole CRD when a rule could cost
//!   too much);
//! - every rule parses with the `cel` crate, and a rule that iterates reads only bounded inputs:
//!   the collection it walks and whatever it reads of the elements (derived from the rule's
//!   parsed form);
//! - every rule has its row in `fixtures/cel-rules.yaml`: an object it refuses, with the
//!   message a user then sees, and one it admits, evaluated on both copies of the CRD.
//!
//! `tests/tests/apiserver_crd.rs` sends the same rows to a real API server where one is present.

mod common;

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};

use cel::common::ast::{Expr, IdedExpr};
use common::cel_rules::{RuleRow, rule_rows};
use common::walk;
use kube::core::cel::{ErrorKind, Validator};
use screenlimit_operator::crd::StreamLimiter;
use serde_json::Value;

/// Both copies of the CRD: the one `kubectl apply` takes and the one the chart installs.
const COPIES: [&str; 2] = [
    "crds/streamlimiter.yaml",
    "charts/screenlimit/crds/streamlimiter.yaml",
];

/// Nodes left unbounded on purpose: Kubernetes' own quantity type (int or string, checked by
/// the API server's quantity parser), which no rule reads; the maps holding them are bounded.
const UNBOUNDED_ALLOWED: [&str; 2] = [".resources.requests{}", ".resources.limits{}"];

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

fn fixtures() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures")
}

/// A copy's `openAPIV3Schema`, read from the file as a user's `kubectl` would send it.
fn schema_of(copy: &str) -> Value {
    let text = std::fs::read_to_string(root().join(copy)).unwrap();
    let crd: Value = serde_yaml_ng::from_str(&text).unwrap();
    crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"].clone()
}

/// Why a node is unbounded, or `None` when it is bounded (or holds no value of its own).
fn unbounded(node: &Value) -> Option<&'static str> {
    let has = |key: &str| node.get(key).is_some();
    let is_map = has("additionalProperties");
    match node.get("type").and_then(Value::as_str) {
        Some("string") if !has("maxLength") && !has("enum") => Some("a string without maxLength"),
        Some("array") if !has("maxItems") => Some("a list without maxItems"),
        Some("object") if is_map && !has("maxProperties") => Some("a map without maxProperties"),
        None if node.get("x-kubernetes-int-or-string") == Some(&Value::Bool(true))
            && !has("maxLength") =>
        {
            Some("an int-or-string without maxLength")
        }
        _ => None,
    }
}

#[test]
fn every_string_list_and_map_is_bounded_in_both_copies() {
    for copy in COPIES {
        let mut problems = Vec::new();
        walk("", &schema_of(copy), &mut |path, node| {
            if let Some(why) = unbounded(node)
                && !UNBOUNDED_ALLOWED
                    .iter()
                    .any(|allowed| path.ends_with(allowed))
            {
                problems.push(format!("{path}: {why}"));
            }
        });
        assert!(problems.is_empty(), "{copy}: {problems:#?}");
    }
}

#[test]
fn the_bound_check_sees_each_kind_of_unbounded_node() {
    use serde_json::json;
    assert!(unbounded(&json!({"type": "string"})).is_some());
    assert!(unbounded(&json!({"type": "string", "maxLength": 3})).is_none());
    assert!(unbounded(&json!({"type": "string", "enum": ["a"]})).is_none());
    assert!(unbounded(&json!({"type": "array", "items": {}})).is_some());
    assert!(unbounded(&json!({"type": "object", "additionalProperties": {}})).is_some());
    assert!(unbounded(&json!({"type": "object", "properties": {}})).is_none());
    assert!(unbounded(&json!({"x-kubernetes-int-or-string": true})).is_some());
}

/// Every rule of a schema: `(path, rule, message, the node it sits on)`.
fn rules_of(schema: &Value) -> Vec<(String, String, String, Value)> {
    let mut rules = Vec::new();
    walk("", schema, &mut |path, node| {
        for v in node
            .get("x-kubernetes-validations")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            let text = |key: &str| v[key].as_str().unwrap_or_default().to_owned();
            rules.push((path.to_owned(), text("rule"), text("message"), node.clone()));
        }
    });
    rules
}

#[test]
fn every_rule_has_one_row_and_every_row_a_rule() {
    let key = |path: &str, message: &str| format!("{path}: {message}");
    let mut in_crd: BTreeMap<String, usize> = BTreeMap::new();
    for (path, _, message, _) in rules_of(&schema_of(COPIES[0])) {
        assert!(!message.is_empty(), "{path}: a rule without a message");
        *in_crd.entry(key(&path, &message)).or_default() += 1;
    }
    let mut in_table: BTreeMap<String, usize> = BTreeMap::new();
    for row in rule_rows() {
        *in_table.entry(key(&row.path, &row.message)).or_default() += 1;
    }
    let missing: Vec<_> = in_crd
        .keys()
        .filter(|k| !in_table.contains_key(*k))
        .collect();
    let stale: Vec<_> = in_table
        .keys()
        .filter(|k| !in_crd.contains_key(*k))
        .collect();
    assert!(
        missing.is_empty() && stale.is_empty(),
        "rules without a row in fixtures/cel-rules.yaml: {missing:#?}\nrows for no rule: {stale:#?}"
    );
    assert_eq!(in_crd, in_table, "one row per rule");
    assert!(
        in_crd.len() >= 27,
        "expected the CRD's rules, found {}",
        in_crd.len()
    );
}

/// The object as the API server hands it to CEL: the row's JSON with the schema's defaults
/// filled in (the operator's types carry the same defaults, `crd_schema.rs` checks they agree).
fn defaulted(object: Value, row: &RuleRow) -> Value {
    let typed: StreamLimiter = serde_json::from_value(object)
        .unwrap_or_else(|e| panic!("{}: {}: not a StreamLimiter: {e}", row.path, row.message));
    serde_json::to_value(typed).unwrap()
}

#[test]
fn each_row_is_refused_with_its_message_and_admitted_without() {
    let validator = Validator::new();
    for copy in COPIES {
        let schema = schema_of(copy);
        for row in rule_rows() {
            let name = format!("{copy}: {}: {}", row.path, row.message);
            let refused = defaulted(row.object(&fixtures(), true), &row);
            let errors = match validator.validate(&schema, &refused, None) {
                Ok(()) => panic!("{name}: the refused object was admitted"),
                Err(errors) => errors,
            };
            let mut seen: Vec<_> = errors
                .iter()
                .map(|e| (e.kind.clone(), e.message.clone()))
                .collect();
            let mut expected: Vec<_> = std::iter::once(&row.message)
                .chain(&row.also)
                .map(|m| (ErrorKind::ValidationFailure, m.clone()))
                .collect();
            seen.sort_by(|a, b| a.1.cmp(&b.1));
            expected.sort_by(|a, b| a.1.cmp(&b.1));
            assert_eq!(
                seen, expected,
                "{name}: the refused object must break this rule and no other (but those in `also`)"
            );
            let admitted = defaulted(row.object(&fixtures(), false), &row);
            if let Err(errors) = validator.validate(&schema, &admitted, None) {
                panic!("{name}: the admitted object was refused: {errors:?}");
            }
        }
    }
}

/// A schema without its defaults and rules: what a rule of the root judges alone, with nothing
/// filled in before it.
fn strip(node: &mut Value) {
    match node {
        Value::Object(map) => {
            map.remove("default");
            map.remove("x-kubernetes-validations");
            map.values_mut().for_each(strip);
        }
        Value::Array(items) => items.iter_mut().for_each(strip),
        _ => {}
    }
}

/// The renewal window's rule reads the lease timing and the window from two parts of the spec;
/// where one is absent it counts the part's default, as the limiter would. The API server fills
/// the defaults in before a rule runs, so this holds the rule to the operator's defaults on the
/// spec's schema stripped of them (and of every other rule).
#[test]
fn the_renewal_window_rule_counts_what_is_absent_at_its_default() {
    use screenlimit_operator::crd::{LeaseSpec, LimiterSpec};
    use serde_json::json;

    let message = "limiter.renewalWindowMillis must be at most a quarter of lease.ttlSeconds - lease.heartbeatIntervalSeconds (in milliseconds), so no lease ends while its renewal waits";
    let validator = Validator::new();
    for copy in COPIES {
        let mut spec = schema_of(copy)["properties"]["spec"].clone();
        let rule = spec["x-kubernetes-validations"]
            .as_array()
            .unwrap()
            .iter()
            .find(|v| v["message"] == message)
            .unwrap_or_else(|| panic!("{copy}: no rule says {message:?}"))
            .clone();
        strip(&mut spec);
        spec["x-kubernetes-validations"] = json!([rule]);
        let judge = |object: &Value| -> Result<(), Vec<(ErrorKind, String)>> {
            validator.validate(&spec, object, None).map_err(|errors| {
                errors
                    .iter()
                    .map(|e| (e.kind.clone(), e.message.clone()))
                    .collect()
            })
        };
        let check = |object: Value, admitted: bool| {
            let judged = judge(&object);
            if admitted {
                assert_eq!(judged, Ok(()), "{copy}: {object}");
            } else {
                assert_eq!(
                    judged,
                    Err(vec![(ErrorKind::ValidationFailure, message.to_owned())]),
                    "{copy}: {object}"
                );
            }
        };

        let window = i64::from(LimiterSpec::default().renewal_window_millis);
        let lease = LeaseSpec::default();
        let (heartbeat, ttl) = (lease.heartbeat_interval_seconds, lease.ttl_seconds);
        // The window absent: its default counts. With nothing to spare it is refused, where a
        // window of 0 is admitted.
        assert!(window > 0, "the default window is not 0");
        let nothing_to_spare = json!({"heartbeatIntervalSeconds": 1, "ttlSeconds": 1});
        check(json!({"lease": nothing_to_spare}), false);
        check(json!({"lease": nothing_to_spare, "limiter": {}}), false);
        check(
            json!({"lease": nothing_to_spare, "limiter": {"renewalWindowMillis": 0}}),
            true,
        );
        // One lease field absent: its default counts (1 s to spare either way here).
        for lease in [
            json!({"heartbeatIntervalSeconds": ttl - 1}),
            json!({"ttlSeconds": heartbeat + 1}),
        ] {
            for (w, admitted) in [(250, true), (251, false)] {
                check(
                    json!({"lease": lease, "limiter": {"renewalWindowMillis": w}}),
                    admitted,
                );
            }
        }
        // Both absent: the defaults leave more than the window's bound could use.
        check(json!({"limiter": {"renewalWindowMillis": 1_000}}), true);
        // With nothing given, the defaults fit.
        check(json!({}), true);
    }
}

/// The plan source rule of `regions.homeSources` counts an absent plan source (or kind) at its
/// default, `request`, as the operator and the limiter do; the other rules never needed one.
#[test]
fn the_plan_source_home_rule_counts_an_absent_kind_as_request() {
    use serde_json::json;

    let message = "regions.homeSources names planSource, which needs planSource.kind: postgres (the subscription query's second column names the home)";
    let validator = Validator::new();
    for copy in COPIES {
        let mut spec = schema_of(copy)["properties"]["spec"].clone();
        let rule = spec["x-kubernetes-validations"]
            .as_array()
            .unwrap()
            .iter()
            .find(|v| v["message"] == message)
            .unwrap_or_else(|| panic!("{copy}: no rule says {message:?}"))
            .clone();
        strip(&mut spec);
        spec["x-kubernetes-validations"] = json!([rule]);
        let admitted = |object: Value| match validator.validate(&spec, &object, None) {
            Ok(()) => true,
            Err(errors) => {
                let said: Vec<_> = errors
                    .iter()
                    .map(|e| (e.kind.clone(), &e.message))
                    .collect();
                assert_eq!(said, [(ErrorKind::ValidationFailure, &message.to_owned())]);
                false
            }
        };
        let regions = |sources: Value| {
            json!({"name": "eu", "tokenSecret": {"name": "t", "key": "k"}, "homeSources": sources,
                   "peers": [{"name": "us", "url": "https://u", "tokenSecret": {"name": "t", "key": "k"}}]})
        };
        let home = regions(json!(["planSource"]));
        assert!(
            !admitted(json!({"regions": home})),
            "{copy}: no plan source"
        );
        assert!(
            !admitted(json!({"regions": home, "planSource": {}})),
            "{copy}: no kind"
        );
        let postgres = json!({"kind": "postgres"});
        assert!(
            admitted(json!({"regions": home, "planSource": postgres})),
            "{copy}"
        );
        assert!(
            admitted(json!({"regions": regions(json!(["gatewayHeader"]))})),
            "{copy}"
        );
        assert!(admitted(json!({"regions": regions(json!([]))})), "{copy}");
        assert!(admitted(json!({})), "{copy}");
    }
}

/// What an expression of a rule stands for in the schema.
#[derive(Clone, Copy)]
enum Bound<'a> {
    /// A schema node.
    Node(&'a Value),
    /// A key of a map the rule iterates: a structural schema cannot declare its length, so the
    /// map's `maxProperties` is what bounds the walk.
    MapKey,
    /// Not a value of the object (a literal, a macro's accumulator, metadata).
    Other,
}

/// Finds what each rule iterates and reads, and reports what is unbounded.
struct CostGuard<'a> {
    rule: &'a str,
    problems: Vec<String>,
}

impl<'a> CostGuard<'a> {
    fn resolve(&self, expr: &IdedExpr, env: &HashMap<String, Bound<'a>>) -> Bound<'a> {
        match &expr.expr {
            Expr::Ident(name) => env.get(name).copied().unwrap_or(Bound::Other),
            Expr::Select(select) => match self.resolve(&select.operand, env) {
                Bound::Node(node) => node
                    .get("properties")
                    .and_then(|p| p.get(&select.field))
                    .map_or(Bound::Other, Bound::Node),
                _ => Bound::Other,
            },
            _ => Bound::Other,
        }
    }

    fn check(&mut self, expr: &IdedExpr, env: &HashMap<String, Bound<'a>>) {
        match &expr.expr {
            Expr::Ident(_) | Expr::Select(_) => {
                if let Bound::Node(node) = self.resolve(expr, env)
                    && node.get("type") == Some(&Value::from("string"))
                    && unbounded(node).is_some()
                {
                    self.problems
                        .push(format!("{}: reads a string without maxLength", self.rule));
                }
                if let Expr::Select(select) = &expr.expr {
                    self.check(&select.operand, env);
                }
            }
            Expr::Call(call) => {
                call.target.iter().for_each(|t| self.check(t, env));
                call.args.iter().for_each(|a| self.check(a, env));
            }
            Expr::List(list) => list.elements.iter().for_each(|e| self.check(e, env)),
            Expr::Comprehension(c) => {
                self.check(&c.iter_range, env);
                let element = self.element_of(&c.iter_range, env);
                let mut inner = env.clone();
                inner.insert(c.iter_var.clone(), element);
                inner.insert(c.accu_var.clone(), Bound::Other);
                for part in [&c.accu_init, &c.loop_cond, &c.loop_step, &c.result] {
                    self.check(part, &inner);
                }
            }
            _ => {}
        }
    }

    /// What the elements of an iterated collection are, after checking the collection is bounded.
    fn element_of(&mut self, range: &IdedExpr, env: &HashMap<String, Bound<'a>>) -> Bound<'a> {
        if matches!(range.expr, Expr::List(_)) {
            return Bound::Other; // a literal list: as long as the rule is
        }
        let Bound::Node(node) = self.resolve(range, env) else {
            self.problems.push(format!(
                "{}: iterates something the schema does not declare",
                self.rule
            ));
            return Bound::Other;
        };
        if let Some(items) = node.get("items") {
            if node.get("maxItems").is_none() {
                self.problems
                    .push(format!("{}: iterates a list without maxItems", self.rule));
            }
            return Bound::Node(items);
        }
        if node.get("additionalProperties").is_some() {
            if node.get("maxProperties").is_none() {
                self.problems.push(format!(
                    "{}: iterates a map without maxProperties",
                    self.rule
                ));
            }
            return Bound::MapKey;
        }
        self.problems.push(format!(
            "{}: iterates something that is neither a list nor a map",
            self.rule
        ));
        Bound::Other
    }
}

/// The guard's findings for one rule sitting on `node`.
fn cost_problems(rule: &str, node: &Value) -> Vec<String> {
    let parsed = cel::parser::Parser::new()
        .parse(rule)
        .unwrap_or_else(|e| panic!("{rule}: the CEL parser refuses it: {e:?}"));
    let mut guard = CostGuard {
        rule,
        problems: Vec::new(),
    };
    let env = HashMap::from([("self".to_owned(), Bound::Node(node))]);
    guard.check(&parsed, &env);
    guard.problems.dedup();
    guard.problems
}

#[test]
fn every_rule_parses_and_iterates_only_what_is_bounded() {
    for copy in COPIES {
        let rules = rules_of(&schema_of(copy));
        let mut problems = Vec::new();
        let mut iterating = 0;
        for (path, rule, _, node) in &rules {
            if rule.contains("all(") || rule.contains("exists") || rule.contains("filter(") {
                iterating += 1;
            }
            problems.extend(
                cost_problems(rule, node)
                    .into_iter()
                    .map(|p| format!("{path}: {p}")),
            );
        }
        assert!(problems.is_empty(), "{copy}: {problems:#?}");
        assert!(
            iterating >= 8,
            "{copy}: expected the iterating rules, found {iterating}"
        );
    }
}

#[test]
fn the_cost_guard_finds_an_unbounded_collection_and_an_unbounded_element() {
    use serde_json::json;
    let strings =
        |list: Value, item: Value| json!({"type": "array", "items": item, "maxItems": list});
    let rule = "self.all(o, o.startsWith('https://'))";
    // The refused CRD's own case: a bounded list of strings with no maxLength.
    let unbounded_items = strings(json!(64), json!({"type": "string"}));
    assert_eq!(
        cost_problems(rule, &unbounded_items).len(),
        1,
        "an element without maxLength"
    );
    let bounded = strings(json!(64), json!({"type": "string", "maxLength": 512}));
    assert!(cost_problems(rule, &bounded).is_empty());
    let mut no_max_items = bounded.clone();
    no_max_items.as_object_mut().unwrap().remove("maxItems");
    assert_eq!(
        cost_problems(rule, &no_max_items).len(),
        1,
        "a list without maxItems"
    );
    let map = json!({"type": "object", "additionalProperties": {"type": "string"}});
    assert_eq!(
        cost_problems("self.all(k, k != 'x')", &map).len(),
        1,
        "a map without maxProperties"
    );
    // Objects in a list: what the rule reads of each element counts, what it does not read does not.
    let plans = json!({"type": "array", "maxItems": 8, "items": {"type": "object", "properties": {
        "name": {"type": "string"}, "note": {"type": "string"}}}});
    let unique = "self.all(p, self.filter(q, q.name == p.name).size() == 1)";
    assert!(
        !cost_problems(unique, &plans).is_empty(),
        "name has no maxLength"
    );
    let mut named = plans.clone();
    named["items"]["properties"]["name"]["maxLength"] = json!(64);
    assert!(
        cost_problems(unique, &named).is_empty(),
        "note is never read"
    );
}
