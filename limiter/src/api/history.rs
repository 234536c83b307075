//! An account's recent history for support: the refusals, take-overs, force-stops, revocations,
//! expired leases and temporary limits a customer calls about, newest first, as the store keeps
//! them (`history` in the config bounds how many and how long).

use axum::Json;
use axum::extract::State;
use serde::{Deserialize, Serialize};
use utoipa::{IntoParams, ToSchema};

use super::error::ApiError;
use super::extract::{ApiPath, ApiQuery};
use super::responses::{InvalidRequest, StoreUnavailable};
use super::schema;
use super::streams::AppState;
use super::types::{AccountPath, check_account_id, rfc3339};
use crate::config::MAX_HISTORY_EVENTS;
use crate::model::{
    DeviceType, HistoryDevice, HistoryEntry, HistoryEvent, HistoryKind, RefusalRule,
};

/// How many entries an answer holds unless the query asks: the store's default bound.
const DEFAULT_LIMIT: usize = 50;

/// The newest events of the account's history, newest first.
#[utoipa::path(
    get, path = "/v1/accounts/{account_id}/history", tag = "accounts",
    params(AccountPath, HistoryQuery),
    responses(
        (status = 200, description = "Newest first; empty when the account has none (or it expired)", body = HistoryResponse),
        (status = 422, response = InvalidRequest),
        (status = 503, response = StoreUnavailable),
    )
)]
pub async fn history(
    State(service): State<AppState>,
    ApiPath(AccountPath { account_id }): ApiPath<AccountPath>,
    ApiQuery(query): ApiQuery<HistoryQuery>,
) -> Result<Json<HistoryResponse>, ApiError> {
    check_account_id(&account_id)?;
    let limit = query.limit()?;
    let entries = service.history(&account_id, limit).await?;
    Ok(Json(HistoryResponse {
        account_id,
        entries: entries.into_iter().map(HistoryEntryInfo::from).collect(),
    }))
}

#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct HistoryQuery {
    /// How many entries, newest first (default 50).
    #[param(schema_with = schema::history_limit)]
    pub limit: Option<usize>,
}

impl HistoryQuery {
    /// 50 unless asked; 1 to the most any account can keep (`history.max_events` ≤ 1000).
    pub fn limit(&self) -> Result<usize, ApiError> {
        let most = MAX_HISTORY_EVENTS as usize;
        match self.limit {
            None => Ok(DEFAULT_LIMIT),
            Some(n) if (1..=most).contains(&n) => Ok(n),
            Some(_) => Err(ApiError::invalid_field(
                "limit",
                &format!("must be 1 to {most}"),
            )),
        }
    }
}

#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct HistoryResponse {
    pub account_id: String,
    pub entries: Vec<HistoryEntryInfo>,
}

/// A device as the history names it.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct HistoryDeviceInfo {
    #[schema(schema_with = schema::id)]
    pub device_id: String,
    /// Null when the entry does not record it (`revoked`).
    pub device_type: Option<DeviceType>,
    /// The display name the play carried; empty when it carried none.
    pub device_meta: String,
}

impl From<HistoryDevice> for HistoryDeviceInfo {
    fn from(d: HistoryDevice) -> Self {
        HistoryDeviceInfo {
            device_id: d.device_id,
            device_type: Some(d.device_type),
            device_meta: d.device_meta,
        }
    }
}

/// One event. Every kind has `at`, `kind` and the fields its kind lists; the others are null
/// (or empty, for `holders`).
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct HistoryEntryInfo {
    /// RFC 3339 UTC, on the store's clock.
    pub at: String,
    pub kind: HistoryKind,
    /// The device the event is about: refused, the one that took over, force-stopped, told it
    /// was revoked, gone silent. Null for temporary limits.
    pub device: Option<HistoryDeviceInfo>,
    /// `refused`: the rule that refused the play (`shadow_refused`: that would have refused it;
    /// the account was in shadow and the play was let through).
    pub rule: Option<RefusalRule>,
    /// `refused`, `shadow_refused`: the limit the rule allows (for `device_type_cap`, of the
    /// device's type); `limit_granted` / `limit_removed`: the temporary limit.
    pub limit: Option<u32>,
    /// `refused`, `shadow_refused`: the devices that held the slots at that moment.
    pub holders: Vec<HistoryDeviceInfo>,
    /// `take_over`: the device whose stream was stopped.
    pub replaced: Option<HistoryDeviceInfo>,
    /// `force_stop`, `limit_granted`, `limit_removed`: who did it.
    pub actor: Option<String>,
    /// `expired`: when the lease ended (RFC 3339 UTC).
    pub ended_at: Option<String>,
    /// `limit_granted`: when the limit ends; `limit_removed`: when it would have ended.
    pub until: Option<String>,
}

impl From<HistoryEntry> for HistoryEntryInfo {
    fn from(entry: HistoryEntry) -> Self {
        let mut info = HistoryEntryInfo {
            at: rfc3339(entry.at),
            kind: entry.event.kind(),
            device: None,
            rule: None,
            limit: None,
            holders: Vec::new(),
            replaced: None,
            actor: None,
            ended_at: None,
            until: None,
        };
        match entry.event {
            HistoryEvent::Refused {
                device,
                rule,
                limit,
                holders,
            }
            | HistoryEvent::ShadowRefused {
                device,
                rule,
                limit,
                holders,
            } => {
                info.device = Some(device.into());
                info.rule = Some(rule);
                info.limit = Some(limit);
                info.holders = holders.into_iter().map(Into::into).collect();
            }
            HistoryEvent::TakeOver { device, replaced } => {
                info.device = Some(device.into());
                info.replaced = Some(replaced.into());
            }
            HistoryEvent::ForceStop { device, actor } => {
                info.device = Some(device.into());
                info.actor = Some(actor);
            }
            HistoryEvent::Revoked { device_id } => {
                info.device = Some(HistoryDeviceInfo {
                    device_id,
                    device_type: None,
                    device_meta: String::new(),
                });
            }
            HistoryEvent::Expired { device, ended_at } => {
                info.device = Some(device.into());
                info.ended_at = Some(rfc3339(ended_at));
            }
            HistoryEvent::LimitGranted {
                limit,
                until,
                actor,
            }
            | HistoryEvent::LimitRemoved {
                limit,
                until,
                actor,
            } => {
                info.limit = Some(limit);
                info.until = Some(rfc3339(until));
                info.actor = Some(actor);
            }
        }
        info
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_limit_defaults_to_fifty_and_is_bounded_by_what_an_account_can_keep() {
        let query = |limit| HistoryQuery { limit };
        assert_eq!(query(None).limit().unwrap(), 50);
        assert_eq!(query(Some(1)).limit().unwrap(), 1);
        assert_eq!(query(Some(1000)).limit().unwrap(), 1000);
        assert!(query(Some(0)).limit().is_err());
        assert!(query(Some(1001)).limit().is_err());
    }

    #[test]
    fn a_refusal_carries_its_rule_limit_and_holders_and_nothing_else() {
        let device = |id: &str| HistoryDevice {
            device_id: id.into(),
            device_type: DeviceType::Tv,
            device_meta: format!("{id} name"),
        };
        let info = HistoryEntryInfo::from(HistoryEntry {
            at: 1_764_965_640_000,
            event: HistoryEvent::Refused {
                device: device("tablet"),
                rule: RefusalRule::PlanLimit,
                limit: 2,
                holders: vec![device("tv"), device("phone")],
            },
        });
        let json = serde_json::to_value(&info).unwrap();
        assert_eq!(json["kind"], "refused");
        assert_eq!(json["rule"], "plan_limit");
        assert_eq!(json["limit"], 2);
        assert_eq!(json["device"]["device_meta"], "tablet name");
        assert_eq!(json["holders"][1]["device_id"], "phone");
        assert_eq!(json["at"], "2025-12-05T20:14:00Z");
        assert!(json["actor"].is_null() && json["until"].is_null() && json["replaced"].is_null());
    }
}
