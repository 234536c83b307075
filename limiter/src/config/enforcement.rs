//! `enforcement`: whether the limits refuse plays (`enforce`, the default), for every account or a
//! share of them, or only count the plays they would refuse (`shadow`); the same block per plan
//! (`plans.<name>.enforcement`) replaces it for that plan's accounts.

use serde::Deserialize;

use super::error::{ConfigError, invalid};
use crate::enforcement::Enforcement;

/// `enforce`: a play over a limit is refused. `shadow`: it is let through as a normal lease,
/// answered and counted as a play the limits would have refused.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum EnforcementMode {
    #[default]
    Enforce,
    Shadow,
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct EnforcementConfig {
    pub mode: EnforcementMode,
    /// With `mode: enforce`, the share of accounts enforced (0-100, default 100), chosen by a
    /// stable hash of the account id: an account stays on its side from play to play, and
    /// raising the share only adds accounts. The others are in shadow.
    pub enforce_percent: Option<u32>,
}

impl EnforcementConfig {
    /// Checks the block; `field` names it in the error (`enforcement`, or `plans` for a plan's).
    pub fn validate(&self, field: &'static str, whose: &str) -> Result<(), ConfigError> {
        match (self.mode, self.enforce_percent) {
            (_, Some(percent)) if percent > 100 => Err(invalid(
                field,
                format!(
                    "{whose}enforce_percent is {percent}; use 0 to 100 (the share of accounts enforced)"
                ),
            )),
            (EnforcementMode::Shadow, Some(_)) => Err(invalid(
                field,
                format!(
                    "{whose}enforce_percent applies to mode: enforce (mode: shadow enforces no account); \
                     remove it, or use mode: enforce with the share to enforce"
                ),
            )),
            _ => Ok(()),
        }
    }

    /// The block as the rules apply it (call after `validate`).
    pub fn enforcement(&self) -> Enforcement {
        match self.mode {
            EnforcementMode::Shadow => Enforcement::SHADOW,
            EnforcementMode::Enforce => Enforcement::percent(self.enforce_percent.unwrap_or(100)),
        }
    }
}
