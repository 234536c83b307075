//! The configured plans by name, with the default plan: what `rules.rs` holds in force and the
//! plan sources and stores look plans up in.

use std::collections::BTreeMap;

use crate::config::Config;
use crate::model::Plan;

/// The configured plans by name.
#[derive(Debug, Clone)]
pub struct PlanBook {
    plans: BTreeMap<String, Plan>,
    pub default: Plan,
}

impl PlanBook {
    pub fn from_config(config: &Config) -> PlanBook {
        let plans: BTreeMap<String, Plan> = config
            .plans
            .iter()
            .map(|(name, rule)| (name.clone(), rule.to_plan(name)))
            .collect();
        let default = plans[&config.default_plan].clone();
        PlanBook { plans, default }
    }

    /// A book of `default` and `others` (a plan named twice keeps its last entry).
    pub fn new(default: Plan, others: impl IntoIterator<Item = Plan>) -> PlanBook {
        let mut plans: BTreeMap<String, Plan> =
            others.into_iter().map(|p| (p.name.clone(), p)).collect();
        plans.insert(default.name.clone(), default.clone());
        PlanBook { plans, default }
    }

    pub fn plans(&self) -> impl Iterator<Item = &Plan> {
        self.plans.values()
    }

    pub fn get(&self, name: &str) -> Option<&Plan> {
        self.plans.get(name)
    }

    /// The caps book the Redis acquire script reads when a play names no plan: per plan with
    /// device caps, its name's length, its name, its six caps (`caps_of` in `fast.lua`).
    pub fn caps_book(&self) -> Vec<u8> {
        let mut book = Vec::new();
        for plan in self.plans().filter(|p| p.device_caps.0 != [0; 6]) {
            let name = plan.name.as_bytes();
            book.push(u8::try_from(name.len()).expect("plan names are at most 64 bytes"));
            book.extend_from_slice(name);
            book.extend_from_slice(&plan.device_caps.0);
        }
        book
    }

    pub fn limits(&self) -> BTreeMap<String, u32> {
        self.plans
            .iter()
            .map(|(name, plan)| (name.clone(), plan.limit))
            .collect()
    }
}
