//! `POST /v1/embeddings`: forwarded to an agent's embeddings provider, so a
//! client can use one base URL for chat and embeddings. `model` names the
//! agent (its `[agents.X.embeddings]` route), or `agent/upstream-model` for
//! another model on that provider (the champion's provider when the agent
//! has no embeddings route). Counted and priced in `/metrics`; embeddings
//! are not episodes, so nothing is recorded.

use super::call::upstream_error;
use super::{json_response, parse_json, read_body};
use crate::auth::Principal;
use crate::error::ApiError;
use crate::providers::AnyProvider;
use crate::state::AppState;
use axum::body::Body;
use axum::extract::State;
use axum::http::HeaderMap;
use axum::response::Response;
use hone_types::Route;
use serde::Deserialize;
use serde_json::{Map, Value};
use std::sync::atomic::Ordering;
use std::sync::Arc;

#[derive(Debug, Deserialize)]
struct EmbeddingsRequest {
    model: String,
    input: Value,
    #[serde(flatten)]
    extra: Map<String, Value>,
}

/// OpenAI's input forms: a string, strings, a token list, token lists; none empty.
fn check_input(input: &Value) -> Result<(), ApiError> {
    let token = |v: &Value| v.as_u64().is_some();
    let tokens = |v: &Value| v.as_array().is_some_and(|a| !a.is_empty() && a.iter().all(token));
    let ok = match input {
        Value::String(s) => !s.is_empty(),
        Value::Array(items) if !items.is_empty() => {
            items.iter().all(|i| i.as_str().is_some_and(|s| !s.is_empty()))
                || items.iter().all(token)
                || items.iter().all(tokens)
        }
        _ => false,
    };
    if ok {
        return Ok(());
    }
    Err(ApiError::invalid(
        "invalid_request",
        "`input` must be a non-empty string, a list of non-empty strings, a list of token ids or a list of such lists",
    )
    .with_param(Some("input".into())))
}

fn route_for(state: &AppState, principal: &Principal, model: &str) -> Result<(String, Route), ApiError> {
    let (agent_name, upstream) = match model.split_once('/') {
        Some((agent, upstream)) => (agent, Some(upstream)),
        None => (model, None),
    };
    // An agent outside the key's scope reads exactly as one not configured.
    let agent = state.config.agents.get(agent_name).filter(|_| principal.may_use_agent(agent_name)).ok_or_else(|| {
        ApiError::not_found(
            "model_not_found",
            format!("agent `{agent_name}` is not configured for this key; `model` names an agent, or `agent/upstream-model`"),
        )
        .with_param(Some("model".into()))
    })?;
    let provider = agent.embeddings.as_ref().map(|r| r.provider.clone()).or_else(|| {
        let champion = agent.versions.get(&agent.deployment.champion)?;
        champion.spec.routes.first().map(|r| r.provider.clone())
    });
    let route = match (upstream, &agent.embeddings, provider) {
        (None, Some(route), _) => route.clone(),
        (Some(model), _, Some(provider)) if !model.is_empty() => Route {
            provider,
            model: model.to_owned(),
            adapter: None,
            memory: None,
            adapter_sha256: None,
        },
        _ => {
            return Err(ApiError::invalid(
                "no_embeddings_route",
                format!("agent `{agent_name}` has no embeddings route: set `[agents.{agent_name}.embeddings]` or ask for `{agent_name}/<model>`"),
            )
            .with_param(Some("model".into())))
        }
    };
    Ok((agent.name.clone(), route))
}

pub async fn create(State(state): State<Arc<AppState>>, headers: HeaderMap, body: Body) -> Result<Response, ApiError> {
    let principal = state.auth.data_plane(&headers)?;
    let bytes = read_body(body, &headers, state.config.gateway.max_body_bytes).await?;
    let request: EmbeddingsRequest = parse_json(&bytes)?;
    check_input(&request.input)?;
    let (_, route) = route_for(&state, &principal, &request.model)?;
    let entry = state.providers.get(&route.provider).ok_or_else(|| {
        ApiError::invalid(
            "no_embeddings_route",
            format!("provider `{}` is not configured", route.provider),
        )
    })?;
    let AnyProvider::OpenAi(provider) = &entry.provider else {
        return Err(ApiError::invalid(
            "embeddings_unsupported",
            format!(
                "provider `{}` does not serve embeddings (only OpenAI-compatible providers do)",
                route.provider
            ),
        )
        .with_param(Some("model".into())));
    };
    let mut upstream = request.extra;
    upstream.insert("model".into(), Value::from(route.model.clone()));
    upstream.insert("input".into(), request.input);
    let body = Value::Object(upstream);
    let answer = crate::dispatch::with_retries(
        &entry.config,
        || provider.post_json("/embeddings", body.clone()),
        |_, _| {},
    )
    .await
    .map_err(|e| upstream_error(&e))?;
    let answer: Value = serde_json::from_slice(&answer).map_err(|e| {
        upstream_error(&crate::providers::ProviderError::Protocol(format!(
            "not an embeddings list: {e}"
        )))
    })?;
    let tokens = answer
        .pointer("/usage/prompt_tokens")
        .and_then(Value::as_u64)
        .unwrap_or(0);
    let metrics = &state.metrics;
    metrics.embedding_requests.fetch_add(1, Ordering::Relaxed);
    metrics.embedding_tokens.fetch_add(tokens, Ordering::Relaxed);
    if let Some(price) = entry.config.price(&route.model) {
        let usage = hone_types::openai::Usage {
            prompt_tokens: tokens,
            ..Default::default()
        };
        let nano = (price.cost_usd(&usage) * 1e9).round() as u64;
        metrics.embedding_cost_nanousd.fetch_add(nano, Ordering::Relaxed);
    }
    Ok(json_response(&answer))
}
