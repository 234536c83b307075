//! Prometheus samples as the tests of the panel build them.

use crate::prometheus::Sample;

pub fn sample(labels: &[(&str, &str)], value: f64) -> Sample {
    Sample {
        labels: labels
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect(),
        value,
    }
}

pub fn refused(plan: &str, rule: &str, kind: &str, value: f64) -> Sample {
    sample(
        &[("plan", plan), ("rule", rule), ("device_type", kind)],
        value,
    )
}
