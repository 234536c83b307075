//! `spec.enforcement` and `spec.plans[].enforcement`: whether a play over a limit is refused
//! (`enforce`, for every account or a share of them) or let through and counted (`shadow`), so
//! a limit can be rolled out in steps.

use kube::KubeSchema;
use serde::{Deserialize, Serialize};

/// Whether the limits refuse plays.
#[derive(
    Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, Default, schemars::JsonSchema,
)]
#[serde(rename_all = "camelCase")]
pub enum EnforcementMode {
    /// A play over a limit is refused (for the share of accounts `enforcePercent` gives).
    #[default]
    Enforce,
    /// No play is refused: one the limits would refuse is let through as a normal lease,
    /// answered and counted (`screenlimit_plays_total{decision="shadow_refused"}`).
    Shadow,
}

/// Whether the limits refuse plays (the limiter's `enforcement`): for every account, for a
/// share of them, or for none while the plays they would refuse are counted (shadow).
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq, Eq, Default)]
#[x_kube(
    validation = Rule::new("!has(self.enforcePercent) || !has(self.mode) || self.mode == 'enforce'").message("enforcePercent applies to mode: enforce (mode: shadow enforces no account); remove enforcePercent or set mode: enforce").field_path(".enforcePercent").reason(Reason::FieldValueForbidden)
)]
#[serde(rename_all = "camelCase")]
pub struct EnforcementSpec {
    /// `enforce` (default): a play over a limit is refused. `shadow`: it is let through as a
    /// normal lease and counted as one the limits would have refused. Switching to `enforce`
    /// cuts no stream that plays.
    #[serde(default)]
    pub mode: EnforcementMode,
    /// With `mode: enforce` only: the share of accounts enforced (0 to 100; absent: 100), chosen
    /// by a stable hash of the account id, so an account stays on its side and raising the share
    /// only adds accounts. The other accounts are in shadow.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0, max = 100))]
    pub enforce_percent: Option<i32>,
}

impl EnforcementSpec {
    /// The limiter's own default: every account enforced.
    pub fn is_default(&self) -> bool {
        *self == EnforcementSpec::default()
    }
}
