//! `GET /v1/models`: the agents, as OpenAI lists models (clients pick one as `model`).

use super::json_response;
use crate::error::ApiError;
use crate::state::AppState;
use axum::extract::State;
use axum::http::HeaderMap;
use axum::response::Response;
use hone_types::openai::ModelEntry;
use std::sync::Arc;

pub async fn list(State(state): State<Arc<AppState>>, headers: HeaderMap) -> Result<Response, ApiError> {
    let principal = state.auth.data_plane(&headers)?;
    let mut data: Vec<ModelEntry> = state
        .agents
        .keys()
        .filter(|name| principal.may_use_agent(name))
        .map(|name| ModelEntry {
            id: name.clone(),
            object: "model".into(),
            created: state.started_at,
            owned_by: "hone".into(),
        })
        .collect();
    data.sort_by(|a, b| a.id.cmp(&b.id));
    Ok(json_response(&serde_json::json!({"object": "list", "data": data})))
}
