//! `GET /v1/responses/{id}`: a response made through `POST /v1/responses`,
//! read back from its recorded call. A key sees only its own agents'.

use super::json_response;
use crate::doors::{response_object, stored_response};
use crate::error::ApiError;
use crate::state::AppState;
use axum::extract::{Path, State};
use axum::http::HeaderMap;
use axum::response::Response;
use std::sync::Arc;

pub async fn show(
    State(state): State<Arc<AppState>>,
    headers: HeaderMap,
    id: Result<Path<String>, axum::extract::rejection::PathRejection>,
) -> Result<Response, ApiError> {
    let principal = state.auth.data_plane(&headers)?;
    let id = super::path_param(id)?;
    let call = stored_response(&state, &id)
        .await?
        .filter(|call| principal.may_use_agent(&call.agent))
        .ok_or_else(|| ApiError::not_found("response_not_found", format!("no response with id `{id}`")))?;
    Ok(json_response(&response_object(&call)))
}
