//! The CEL rule table, `fixtures/cel-rules.yaml`: per rule of the CRD, an object it refuses and
//! one it admits. Shared by the operator's client-side checks (`crd_rules.rs`) and the suite that
//! sends the same rows to a real API server (`tests/tests/apiserver_crd.rs`, which includes this
//! file by path), so both hold the rules to one table.
#![allow(dead_code)]

use std::path::Path;

use serde_json::Value;

/// One row of the table.
#[derive(Debug, Clone)]
pub struct RuleRow {
    /// Where the rule sits in the CRD's schema: `""` for the root, `.spec.redis`, `.spec.plans[]`.
    pub path: String,
    /// The message the rule gives a user, which names it within its path.
    pub message: String,
    /// The operator fixture the objects start from.
    pub base: String,
    /// The merge patch that makes the base break the rule.
    pub refuse: Value,
    /// The merge patch that keeps the base within the rule, close to the refused one.
    pub admit: Value,
    /// Messages of other rules the refused object cannot help breaking too (a rule that gives a
    /// clearer message for a case another rule also covers).
    pub also: Vec<String>,
}

/// Every row, in the table's order.
pub fn rule_rows() -> Vec<RuleRow> {
    let rows: Value = serde_yaml_ng::from_str(include_str!("../fixtures/cel-rules.yaml"))
        .expect("fixtures/cel-rules.yaml is YAML");
    let field = |row: &Value, key: &str| -> Value {
        row.get(key)
            .cloned()
            .unwrap_or_else(|| panic!("cel-rules.yaml: a row without {key}: {row}"))
    };
    let text = |row: &Value, key: &str| -> String {
        field(row, key)
            .as_str()
            .unwrap_or_else(|| panic!("cel-rules.yaml: {key} is not a string: {row}"))
            .to_owned()
    };
    rows.as_array()
        .expect("cel-rules.yaml is a list of rows")
        .iter()
        .map(|row| RuleRow {
            path: text(row, "path"),
            message: text(row, "message"),
            base: text(row, "base"),
            refuse: field(row, "refuse"),
            admit: field(row, "admit"),
            also: row
                .get("also")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
                .map(|m| m.as_str().expect("also: a list of messages").to_owned())
                .collect(),
        })
        .collect()
}

impl RuleRow {
    /// The refused (`refused`) or admitted object, as JSON, built on the base fixture read from
    /// `fixtures` (the operator's `tests/fixtures` folder).
    pub fn object(&self, fixtures: &Path, refused: bool) -> Value {
        let path = fixtures.join(&self.base);
        let text =
            std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        let mut object: Value =
            serde_yaml_ng::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        merge_patch(
            &mut object,
            if refused { &self.refuse } else { &self.admit },
        );
        object
    }
}

/// RFC 7386 JSON merge patch: objects merge key by key, `null` removes a key, anything else
/// (lists included) replaces the target whole.
pub fn merge_patch(target: &mut Value, patch: &Value) {
    let Value::Object(patch) = patch else {
        *target = patch.clone();
        return;
    };
    if !target.is_object() {
        *target = Value::Object(Default::default());
    }
    let target = target.as_object_mut().expect("made an object above");
    for (key, value) in patch {
        if value.is_null() {
            target.remove(key);
        } else {
            merge_patch(target.entry(key.clone()).or_insert(Value::Null), value);
        }
    }
}
