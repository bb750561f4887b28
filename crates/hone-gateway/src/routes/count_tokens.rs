//! `POST /v1/messages/count_tokens`, as Anthropic's: the input tokens a
//! Messages request would send, counted for what the agent's version really
//! sends (its system prompt, playbook and tools applied) by whoever serves
//! it — Anthropic's own counting endpoint, or the embedded engine's
//! tokenizer and chat template. An OpenAI-compatible upstream has no such
//! endpoint; the answer says so rather than guess. Errors are in the
//! Messages door's format; nothing is recorded (nothing was answered).

use super::call::{agent_for, version_for};
use super::read_body;
use crate::doors::{Door, MessagesDoor};
use crate::error::{ApiError, ErrorKind};
use crate::providers::AnyProvider;
use crate::state::AppState;
use axum::body::Body;
use axum::extract::State;
use axum::http::HeaderMap;
use axum::response::Response;
use serde_json::Value;
use std::sync::Arc;

pub async fn count(State(state): State<Arc<AppState>>, headers: HeaderMap, body: Body) -> Response {
    match count_tokens(&state, &headers, body).await {
        Ok(tokens) => super::json_response(&serde_json::json!({ "input_tokens": tokens })),
        Err(error) => MessagesDoor.error(error),
    }
}

async fn count_tokens(state: &AppState, headers: &HeaderMap, body: Body) -> Result<u64, ApiError> {
    let principal = state.auth.data_plane(headers)?;
    let bytes = read_body(body, headers, state.config.gateway.max_body_bytes).await?;
    // The body of a Messages request without `max_tokens`: read by the door
    // itself, with a limit put in for the reading.
    let mut request: Value = super::parse_json(&bytes)?;
    if let Some(fields) = request.as_object_mut() {
        fields.entry("max_tokens").or_insert(Value::from(1));
    }
    let body = serde_json::to_vec(&request).map_err(|e| ApiError::invalid("invalid_request", e.to_string()))?;
    let request = MessagesDoor.parse(state, &body).await?.request;
    let agent = agent_for(state, &principal, &request.model)?;
    // The version a call in a new episode would get (or the pinned one).
    let (_, version) = version_for(state, agent, headers, &hone_types::EpisodeId::new_v7())?;
    let route = version
        .routes
        .first()
        .ok_or_else(|| ApiError::new(ErrorKind::Internal, "version_missing", "the version has no route"))?;
    let upstream = crate::harness::apply(&request, &version, route, &[]);
    let entry = state.providers.get(&route.provider).ok_or_else(|| {
        ApiError::new(
            ErrorKind::Internal,
            "provider_missing",
            format!("provider `{}` is not configured", route.provider),
        )
    })?;
    let counted = match &entry.provider {
        AnyProvider::Anthropic(provider) => provider.count_tokens(&upstream).await,
        AnyProvider::Local(provider) => provider.count_tokens(&upstream, route),
        AnyProvider::OpenAi(_) => {
            return Err(ApiError::not_found(
                "count_tokens_unsupported",
                format!(
                    "agent `{}` is served by `{}`, an OpenAI-compatible upstream, which has no token-counting endpoint; counting works for agents served by an Anthropic provider or the embedded engine",
                    agent.name, route.provider
                ),
            ))
        }
    };
    counted.map_err(|e| super::call::upstream_error(&e))
}
