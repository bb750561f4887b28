//! Control endpoints (admin token): versions, including ones no longer in
//! the config, and each agent's current traffic split.

use super::json_response;
use crate::error::{ApiError, ErrorKind};
use crate::state::AppState;
use axum::extract::{Path, Query, State};
use axum::http::HeaderMap;
use axum::response::Response;
use hone_types::VersionId;
use serde::Deserialize;
use std::sync::Arc;

#[derive(Debug, Deserialize)]
pub struct VersionParams {
    agent: Option<String>,
}

fn task_failed(e: tokio::task::JoinError) -> ApiError {
    ApiError::new(ErrorKind::Internal, "admin_task_failed", e.to_string())
}

pub async fn versions(
    State(state): State<Arc<AppState>>,
    headers: HeaderMap,
    Query(params): Query<VersionParams>,
) -> Result<Response, ApiError> {
    state.auth.admin(&headers)?;
    let store = state.store.clone();
    let list = tokio::task::spawn_blocking(move || store.versions(params.agent.as_deref()))
        .await
        .map_err(task_failed)??;
    Ok(json_response(&serde_json::json!({"object": "list", "data": list})))
}

pub async fn version(
    State(state): State<Arc<AppState>>,
    headers: HeaderMap,
    id: Result<Path<String>, axum::extract::rejection::PathRejection>,
) -> Result<Response, ApiError> {
    state.auth.admin(&headers)?;
    let id = super::path_param(id)?;
    let version_id = VersionId::parse(&id).ok_or_else(|| {
        ApiError::invalid(
            "invalid_version_id",
            format!("`{id}` is not a version id (16 lowercase hex digits)"),
        )
    })?;
    let store = state.store.clone();
    let lookup = version_id.clone();
    let record = tokio::task::spawn_blocking(move || store.version(&lookup))
        .await
        .map_err(task_failed)??
        .ok_or_else(|| ApiError::not_found("version_not_found", format!("no version with id `{version_id}`")))?;
    Ok(json_response(&record))
}

pub async fn deployments(State(state): State<Arc<AppState>>, headers: HeaderMap) -> Result<Response, ApiError> {
    state.auth.admin(&headers)?;
    let mut data: Vec<_> = state
        .agents
        .values()
        .map(|agent| {
            let current = agent.split();
            let canary_total: f64 = current.canaries.iter().map(|(_, s)| s).sum();
            let mut split =
                vec![serde_json::json!({"version": current.champion, "role": "champion", "share": 1.0 - canary_total})];
            split.extend(
                current
                    .canaries
                    .iter()
                    .map(|(v, s)| serde_json::json!({"version": v, "role": "canary", "share": s})),
            );
            serde_json::json!({"agent": agent.name, "split": split})
        })
        .collect();
    data.sort_by(|a, b| a["agent"].as_str().cmp(&b["agent"].as_str()));
    Ok(json_response(&serde_json::json!({"object": "list", "data": data})))
}
