//! The account page: search, plan and limit (and a temporary override), the live device table,
//! the account's recent history, force-stop, granting and removing a temporary limit. One file per job; this one routes.

use axum::Router;
use axum::routing::get;

use super::state::AppState;

mod force_stop;
mod limits_form;
mod overrides;
mod page;
mod reason;
mod recent;
#[cfg(test)]
mod tests;
mod views;

use force_stop::{confirm_force_stop, force_stop};
use overrides::{back_to_account, grant_override, remove_override};
use page::{account, devices, search};

pub fn router() -> Router<AppState> {
    Router::new()
        .route("/accounts", get(search))
        .route("/accounts/{account_id}", get(account))
        .route("/accounts/{account_id}/devices", get(devices))
        .route(
            "/accounts/{account_id}/streams/{stream_id}/force-stop",
            get(confirm_force_stop).post(force_stop),
        )
        .route(
            "/accounts/{account_id}/limit-override",
            get(back_to_account).post(grant_override),
        )
        .route(
            "/accounts/{account_id}/limit-override/remove",
            get(back_to_account).post(remove_override),
        )
}
