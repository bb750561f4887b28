//! LoRA adapters of the local engines (admin token): list, load, unload —
//! at run time, without a restart; requests already running keep the
//! adapter they started with.
//!
//! - `GET /admin/adapters`
//! - `POST /admin/adapters` `{"name", "path", "provider"?, "model"?}`
//! - `DELETE /admin/adapters/{name}?provider=&model=`
//!
//! `provider` and `model` may be left out when only one local provider
//! (or one loaded model) could be meant.

use super::{json_response, parse_json, read_body};
use crate::error::{ApiError, ErrorKind};
use crate::providers::{AnyProvider, LocalProvider};
use crate::state::AppState;
use axum::body::Body;
use axum::extract::{Path, Query, State};
use axum::http::HeaderMap;
use axum::response::Response;
use hone_engine::Engine;
use serde::Deserialize;
use serde_json::json;
use std::sync::Arc;

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LoadAdapter {
    name: String,
    path: String,
    provider: Option<String>,
    model: Option<String>,
}

#[derive(Debug, Deserialize)]
pub struct Scope {
    provider: Option<String>,
    model: Option<String>,
}

/// The local providers, with their names, optionally only `name`.
fn local_providers<'a>(state: &'a AppState, name: Option<&str>) -> Result<Vec<&'a LocalProvider>, ApiError> {
    let mut found: Vec<&LocalProvider> = state
        .providers
        .values()
        .filter_map(|entry| match &entry.provider {
            AnyProvider::Local(local) => Some(local),
            _ => None,
        })
        .filter(|local| name.is_none_or(|n| local.name() == n))
        .collect();
    found.sort_by_key(|l| l.name().to_owned());
    if found.is_empty() {
        return Err(match name {
            Some(n) => ApiError::not_found("provider_not_found", format!("no local provider named `{n}`")),
            None => ApiError::not_found("no_local_provider", "no local provider is configured"),
        });
    }
    Ok(found)
}

/// The engine one request means.
fn engine_for(state: &AppState, provider: Option<&str>, model: Option<&str>) -> Result<Arc<Engine>, ApiError> {
    let providers = local_providers(state, provider)?;
    let [local] = providers.as_slice() else {
        return Err(ApiError::invalid(
            "ambiguous_provider",
            "several local providers are configured; name one with `provider`",
        ));
    };
    match model {
        Some(model) => local
            .engine(model)
            .map_err(|e| ApiError::invalid("model_unavailable", e).with_param(Some("model".into()))),
        None => {
            let engines = local.engines();
            match engines.as_slice() {
                [(_, engine)] => Ok(engine.clone()),
                [] => Err(ApiError::invalid(
                    "no_model_loaded",
                    format!("provider `{}` has no model loaded; name one with `model`", local.name()),
                )),
                _ => Err(ApiError::invalid(
                    "ambiguous_model",
                    format!(
                        "provider `{}` serves several models; name one with `model`",
                        local.name()
                    ),
                )),
            }
        }
    }
}

pub async fn list(State(state): State<Arc<AppState>>, headers: HeaderMap) -> Result<Response, ApiError> {
    state.auth.admin(&headers)?;
    let mut data = Vec::new();
    if let Ok(providers) = local_providers(&state, None) {
        for local in providers {
            for (model, engine) in local.engines() {
                for adapter in engine.adapters() {
                    let mut item = serde_json::to_value(&adapter).unwrap_or_default();
                    item["provider"] = json!(local.name());
                    item["model"] = json!(model);
                    data.push(item);
                }
            }
        }
    }
    Ok(json_response(&json!({"object": "list", "data": data})))
}

pub async fn load(State(state): State<Arc<AppState>>, headers: HeaderMap, body: Body) -> Result<Response, ApiError> {
    state.auth.admin(&headers)?;
    let bytes = read_body(body, &headers, state.config.gateway.max_body_bytes).await?;
    let request: LoadAdapter = parse_json(&bytes)?;
    let task_state = state.clone();
    // Loading reads files (and may load the model): off the event loop.
    let loaded = tokio::task::spawn_blocking(move || {
        let engine = engine_for(&task_state, request.provider.as_deref(), request.model.as_deref())?;
        engine
            .load_adapter(&request.name, std::path::Path::new(&request.path))
            .map_err(|e| ApiError::invalid("adapter_unloadable", e.to_string()))
    })
    .await
    .map_err(|e| ApiError::new(ErrorKind::Internal, "admin_task_failed", e.to_string()))??;
    Ok(json_response(&loaded))
}

pub async fn unload(
    State(state): State<Arc<AppState>>,
    headers: HeaderMap,
    Path(name): Path<String>,
    Query(scope): Query<Scope>,
) -> Result<Response, ApiError> {
    state.auth.admin(&headers)?;
    let mut removed = Vec::new();
    for local in local_providers(&state, scope.provider.as_deref())? {
        for (model, engine) in local.engines() {
            if scope.model.as_deref().is_some_and(|m| m != model) {
                continue;
            }
            if engine.unload_adapter(&name) {
                removed.push(json!({"provider": local.name(), "model": model}));
            }
        }
    }
    if removed.is_empty() {
        return Err(ApiError::not_found(
            "adapter_not_found",
            format!("adapter `{name}` is not loaded"),
        ));
    }
    Ok(json_response(&json!({"name": name, "unloaded": true, "from": removed})))
}
