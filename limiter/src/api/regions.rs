//! The routes other regions call (`POST /v1/regions/<op>`, the region token only): an operation
//! on an account homed here, taken to this region's own store whatever this region's map says (a
//! call that arrives is never sent on, so two regions that disagree about a home cannot loop).
//! Each body is checked by the id rules first (`regions/wire.rs`); the answer is the store's
//! answer or its error, which the caller's failure policy reads as its own store's.

use axum::Json;
use axum::extract::State;
use axum::response::{IntoResponse, Response};
use serde::Serialize;

use super::error::ApiError;
use super::extract::ApiJson;
use super::streams::AppState;
use crate::model::{AcquireCmd, ForceStopCmd, OverrideCmd};
use crate::regions::wire::{AccountQuery, AccountStream, AuditQuery, Checked, Heartbeats};
use crate::store::{LeaseStore, StoreError};

fn checked<Q: Checked>(request: Q) -> Result<Q, ApiError> {
    request
        .check()
        .map_err(|(field, problem)| ApiError::invalid_field(field, &problem))?;
    Ok(request)
}

fn answer<A: Serialize>(result: Result<A, StoreError>) -> Response {
    Json(result).into_response()
}

pub async fn acquire(
    State(service): State<AppState>,
    ApiJson(cmd): ApiJson<AcquireCmd>,
) -> Result<Response, ApiError> {
    let cmd = checked(cmd)?;
    Ok(answer(service.home_store().acquire(&cmd).await))
}

/// A window's renewals from one region: each its own store call (the store batches them per
/// shard), each its own answer, in the order asked.
pub async fn heartbeats(
    State(service): State<AppState>,
    ApiJson(batch): ApiJson<Heartbeats>,
) -> Result<Response, ApiError> {
    let batch = checked(batch)?;
    let store = service.routed_store();
    let renewals = batch
        .renewals
        .iter()
        .map(|r| store.heartbeat_here(&r.account_id, &r.stream, r.learning));
    let answers = futures::future::join_all(renewals).await;
    Ok(answer(Ok::<_, StoreError>(answers)))
}

/// The streams another region let play while this one did not answer, oldest first: each
/// renewed, or taken back while its account has room, in that order (so the newest are the ones
/// left out).
pub async fn report(
    State(service): State<AppState>,
    ApiJson(batch): ApiJson<Heartbeats>,
) -> Result<Response, ApiError> {
    let batch = checked(batch)?;
    let store = service.home_store();
    let mut answers = Vec::with_capacity(batch.renewals.len());
    for renewal in &batch.renewals {
        answers.push(store.heartbeat(&renewal.account_id, &renewal.stream).await);
    }
    Ok(answer(Ok::<_, StoreError>(answers)))
}

/// Answers a probe: this region takes calls.
pub async fn ping() -> Response {
    answer(Ok::<_, StoreError>(()))
}

pub async fn release(
    State(service): State<AppState>,
    ApiJson(body): ApiJson<AccountStream>,
) -> Result<Response, ApiError> {
    let body = checked(body)?;
    let store = service.home_store();
    Ok(answer(store.release(&body.account_id, &body.stream).await))
}

pub async fn force_stop(
    State(service): State<AppState>,
    ApiJson(cmd): ApiJson<ForceStopCmd>,
) -> Result<Response, ApiError> {
    let cmd = checked(cmd)?;
    Ok(answer(service.home_store().force_stop(&cmd).await))
}

pub async fn list(
    State(service): State<AppState>,
    ApiJson(query): ApiJson<AccountQuery>,
) -> Result<Response, ApiError> {
    let query = checked(query)?;
    Ok(answer(service.home_store().list(&query.account_id).await))
}

pub async fn history(
    State(service): State<AppState>,
    ApiJson(query): ApiJson<AccountQuery>,
) -> Result<Response, ApiError> {
    let query = checked(query)?;
    let store = service.home_store();
    Ok(answer(store.history(&query.account_id, query.limit).await))
}

pub async fn set_override(
    State(service): State<AppState>,
    ApiJson(cmd): ApiJson<OverrideCmd>,
) -> Result<Response, ApiError> {
    let cmd = checked(cmd)?;
    Ok(answer(service.home_store().set_override(&cmd).await))
}

pub async fn audit(
    State(service): State<AppState>,
    ApiJson(query): ApiJson<AuditQuery>,
) -> Result<Response, ApiError> {
    let query = checked(query)?;
    let store = service.home_store();
    let entries = store.audit(Some(&query.account_id), query.kind, query.limit);
    Ok(answer(entries.await))
}
