//! LoRA adapters of the local engines (admin token): list, load, unload —
//! at run time, without a restart; requests already running keep the
//! adapter they started with. Loading into an OpenAI-compatible upstream
//! (vLLM's runtime LoRA loading) goes through here too, so the learner
//! reaches model servers only through the gateway.
//!
//! - `GET /admin/adapters`
//! - `POST /admin/adapters` `{"name", "path", "provider"?, "model"?}`
//! - `DELETE /admin/adapters/{name}?provider=&model=`
//!
//! `provider` and `model` may be left out when only one local provider
//! (or one loaded model) could be meant. `path` must lie inside the
//! provider's adapter directory or the data directory (a relative path is
//! taken inside the adapter directory), also after following symlinks; any
//! other path is refused with one message, whether or not it exists.
//! For an OpenAI-compatible `provider` the path is the upstream's to read
//! (it may run elsewhere): it must lie lexically inside that provider's
//! adapter directory, and the upstream's refusal is answered as a 400.
//!
//! With a shared artefact store (`[artefacts] url`), a path that names
//! `<adapter directory>/<name>` where nothing is yet is first filled with
//! the adapter published as `name` — so a vLLM reading the same directory
//! loads what a learner on another machine trained.

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
    let mut found = state.local_providers();
    found.retain(|local| name.is_none_or(|n| local.name() == n));
    if found.is_empty() {
        return Err(match name {
            Some(n) => ApiError::not_found("provider_not_found", format!("no local provider named `{n}`")),
            None => ApiError::not_found("no_local_provider", "no local provider is configured"),
        });
    }
    Ok(found)
}

/// The files an adapter directory holds; each must resolve inside the roots too.
const ADAPTER_FILES: [&str; 2] = ["adapter_config.json", "adapter_model.safetensors"];

/// The adapter directory `raw` names, if it lies inside one of `roots`.
fn confine(raw: &str, roots: &[&std::path::Path]) -> Result<std::path::PathBuf, ApiError> {
    let listed: Vec<String> = roots.iter().map(|r| format!("`{}`", r.display())).collect();
    let outside = || {
        ApiError::invalid(
            "adapter_path_not_allowed",
            format!(
                "`path` must name a directory inside the adapter directories ({})",
                listed.join(", ")
            ),
        )
        .with_param(Some("path".into()))
    };
    let path = std::path::Path::new(raw);
    if path.components().any(|c| matches!(c, std::path::Component::ParentDir)) {
        return Err(outside());
    }
    let candidate = match roots.first() {
        Some(root) if path.is_relative() => root.join(path),
        _ => path.to_owned(),
    };
    let canonical_roots: Vec<_> = roots.iter().filter_map(|r| r.canonicalize().ok()).collect();
    let inside = |p: &std::path::Path| {
        p.canonicalize()
            .ok()
            .filter(|c| canonical_roots.iter().any(|root| c.starts_with(root)))
    };
    if !roots.iter().any(|root| candidate.starts_with(root)) && inside(&candidate).is_none() {
        return Err(outside());
    }
    let Some(dir) = inside(&candidate) else {
        // Lexically inside a root: saying it is missing reveals nothing outside.
        return Err(if candidate.exists() {
            outside()
        } else {
            ApiError::invalid("adapter_not_found", format!("no adapter directory at `{raw}`"))
                .with_param(Some("path".into()))
        });
    };
    for file in ADAPTER_FILES {
        let file = dir.join(file);
        if file.exists() && inside(&file).is_none() {
            return Err(outside());
        }
    }
    Ok(dir)
}

/// Fetches the adapter published as `<name>` into `path` when `path` is
/// `<root>/<name>`, holds no adapter, and a shared artefact store is
/// configured. Nothing published there is not an error here: loading then
/// says the directory is missing.
async fn fetch_published(state: &AppState, path: &std::path::Path, root: &std::path::Path) -> Result<(), ApiError> {
    if state.artefacts.shared_url().is_none() || path.join("adapter_config.json").exists() {
        return Ok(());
    }
    let root = std::path::absolute(root).unwrap_or_else(|_| root.to_owned());
    let Some(name) = path
        .strip_prefix(&root)
        .ok()
        .and_then(|relative| relative.to_str())
        .filter(|name| hone_config::is_adapter_name(name))
    else {
        return Ok(());
    };
    match state.artefacts.adapter(name, &root).await {
        Ok(_) | Err(hone_artefacts::ArtefactError::NotFound(_)) => Ok(()),
        Err(e) => Err(ApiError::new(
            ErrorKind::Upstream,
            "adapter_fetch_failed",
            e.to_string(),
        )),
    }
}

/// `raw` (relative to `root`, or absolute) as an absolute path that stays
/// inside `root` without reading the file system: for a path an upstream
/// on another machine reads.
fn confine_lexically(raw: &str, root: &std::path::Path) -> Result<std::path::PathBuf, ApiError> {
    let path = std::path::Path::new(raw);
    let joined = if path.is_relative() {
        root.join(path)
    } else {
        path.to_owned()
    };
    let absolute = |p: &std::path::Path| std::path::absolute(p).unwrap_or_else(|_| p.to_owned());
    let (joined, root) = (absolute(&joined), absolute(root));
    let escapes = path.components().any(|c| matches!(c, std::path::Component::ParentDir));
    if escapes || !joined.starts_with(&root) {
        return Err(ApiError::invalid(
            "adapter_path_not_allowed",
            format!(
                "`path` must name a directory inside the adapter directory (`{}`)",
                root.display()
            ),
        )
        .with_param(Some("path".into())));
    }
    Ok(joined)
}

/// The engine one request means, with its provider.
fn engine_for<'a>(
    state: &'a AppState,
    provider: Option<&str>,
    model: Option<&str>,
) -> Result<(&'a LocalProvider, Arc<Engine>), ApiError> {
    let providers = local_providers(state, provider)?;
    let [local] = providers.as_slice() else {
        return Err(ApiError::invalid(
            "ambiguous_provider",
            "several local providers are configured; name one with `provider`",
        ));
    };
    let local = *local;
    let engine = match model {
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
    }?;
    Ok((local, engine))
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
    let entry = request
        .provider
        .as_deref()
        .and_then(|name| state.providers.get(name))
        .cloned();
    if let (Some(provider), Some(AnyProvider::OpenAi(openai))) =
        (&request.provider, entry.as_ref().map(|e| &e.provider))
    {
        let root = state.config.adapters_dir(provider);
        let path = confine_lexically(&request.path, &root)?;
        fetch_published(&state, &path, &root).await?;
        openai
            .load_lora_adapter(&request.name, &path.display().to_string())
            .await
            .map_err(|e| ApiError::invalid("adapter_unloadable", e.to_string()))?;
        return Ok(json_response(
            &json!({"name": request.name, "provider": provider, "path": path.display().to_string(), "loaded": true}),
        ));
    }
    if let Ok([local]) = local_providers(&state, request.provider.as_deref()).as_deref() {
        let root = local.adapters_dir().to_path_buf();
        if let Ok(path) = confine_lexically(&request.path, &root) {
            fetch_published(&state, &path, &root).await?;
        }
    }
    let task_state = state.clone();
    // Loading reads files (and may load the model): off the event loop.
    let loaded = tokio::task::spawn_blocking(move || {
        let (local, engine) = engine_for(&task_state, request.provider.as_deref(), request.model.as_deref())?;
        let dir = confine(
            &request.path,
            &[local.adapters_dir(), task_state.config.gateway.data_dir.as_path()],
        )?;
        engine
            .load_adapter(&request.name, &dir)
            .map_err(|e| ApiError::invalid("adapter_unloadable", e.to_string()))
    })
    .await
    .map_err(|e| ApiError::new(ErrorKind::Internal, "admin_task_failed", e.to_string()))??;
    Ok(json_response(&loaded))
}

pub async fn unload(
    State(state): State<Arc<AppState>>,
    headers: HeaderMap,
    name: Result<Path<String>, axum::extract::rejection::PathRejection>,
    scope: Result<Query<Scope>, axum::extract::rejection::QueryRejection>,
) -> Result<Response, ApiError> {
    state.auth.admin(&headers)?;
    let name = super::path_param(name)?;
    let scope = super::query_params(scope)?;
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
