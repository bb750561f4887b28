//! `GET /v1/episodes` and `GET /v1/episodes/{id}`: episodes with their calls
//! and signals, newest first, paged by an opaque cursor. A data-plane key
//! sees only its own agents' episodes.

use super::json_response;
use crate::auth::Principal;
use crate::error::ApiError;
use crate::state::AppState;
use axum::extract::{Path, Query, State};
use axum::http::HeaderMap;
use axum::response::Response;
use hone_store::Store;
use hone_types::time::parse_time;
use hone_types::{EpisodeId, EpisodeQuery};
use serde::Deserialize;
use std::sync::Arc;

const DEFAULT_LIMIT: u32 = 20;
const MAX_LIMIT: u32 = 100;

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ListParams {
    agent: Option<String>,
    since: Option<String>,
    until: Option<String>,
    limit: Option<String>,
    cursor: Option<String>,
}

fn time_param(name: &str, raw: Option<&str>) -> Result<Option<i64>, ApiError> {
    raw.map(|raw| {
        parse_time(raw).ok_or_else(|| {
            ApiError::invalid(
                "invalid_time",
                format!("`{name}` must be unix milliseconds or an RFC 3339 time, got `{raw}`"),
            )
            .with_param(Some(name.into()))
        })
    })
    .transpose()
}

pub async fn list(
    State(state): State<Arc<AppState>>,
    headers: HeaderMap,
    params: Result<Query<ListParams>, axum::extract::rejection::QueryRejection>,
) -> Result<Response, ApiError> {
    let principal = state.auth.data_plane(&headers)?;
    let params = super::query_params(params)?;
    let limit = match params.limit.as_deref() {
        None => DEFAULT_LIMIT,
        Some(raw) => match raw.parse::<u32>() {
            Ok(n) if (1..=MAX_LIMIT).contains(&n) => n,
            _ => {
                return Err(ApiError::invalid(
                    "invalid_limit",
                    format!("`limit` must be an integer from 1 to {MAX_LIMIT}, got `{raw}`"),
                )
                .with_param(Some("limit".into())))
            }
        },
    };
    let cursor = params
        .cursor
        .as_deref()
        .map(|raw| {
            raw.parse::<i64>().map_err(|_| {
                ApiError::invalid(
                    "invalid_cursor",
                    "`cursor` must be a `next_cursor` returned by this endpoint",
                )
                .with_param(Some("cursor".into()))
            })
        })
        .transpose()?;
    let requested: Option<Vec<String>> = params.agent.as_deref().map(|a| {
        a.split(',')
            .map(|s| s.trim().to_owned())
            .filter(|s| !s.is_empty())
            .collect()
    });
    // An explicit list must be within the caller's scope; no list means the whole scope.
    let agents = match requested {
        Some(list) => {
            for agent in &list {
                principal.check_agent(agent)?;
            }
            Some(list)
        }
        None => principal.agent_scope().map(<[String]>::to_vec),
    };
    let query = EpisodeQuery {
        agents,
        since: time_param("since", params.since.as_deref())?,
        until: time_param("until", params.until.as_deref())?,
        limit,
        cursor,
        ..Default::default()
    };
    state.caught_up(false).await?;
    let store = state.store.clone();
    let page = tokio::task::spawn_blocking(move || store.episodes(&query))
        .await
        .map_err(|e| ApiError::new(crate::error::ErrorKind::Internal, "episodes_task_failed", e.to_string()))??;
    Ok(json_response(&serde_json::json!({
        "object": "list",
        "data": page.episodes,
        "next_cursor": page.next_cursor,
    })))
}

/// `?agent=`: whose episode of that id, when the key may use several agents
/// that have one.
#[derive(Debug, serde::Deserialize)]
pub struct Whose {
    agent: Option<String>,
}

pub async fn show(
    State(state): State<Arc<AppState>>,
    headers: HeaderMap,
    id: Result<Path<String>, axum::extract::rejection::PathRejection>,
    whose: Result<Query<Whose>, axum::extract::rejection::QueryRejection>,
) -> Result<Response, ApiError> {
    let principal = state.auth.data_plane(&headers)?;
    let id = super::path_param(id)?;
    let whose = super::query_params(whose)?;
    let episode_id = parse_episode_id(&id)?;
    state.caught_up(false).await?;
    let store = state.cycles.clone();
    let candidates = agents_in_scope(&state, &principal, whose.agent.as_deref());
    // Its reward under its agent's current spec, once the learner scored it.
    let specs: std::collections::BTreeMap<String, String> = state
        .config
        .agents
        .values()
        .map(|a| (a.name.clone(), a.reward.version()))
        .collect();
    let (episode, reward) = tokio::task::spawn_blocking(move || {
        let found = resolve(store.as_ref(), &candidates, &episode_id)?;
        let Some(episode) = store.episode(&found)? else {
            return Ok::<_, ApiError>(None);
        };
        let reward = match specs.get(&episode.summary.agent) {
            Some(spec) => store.reward(&found, spec)?,
            None => None,
        };
        Ok(Some((episode, reward)))
    })
    .await
    .map_err(|e| ApiError::new(crate::error::ErrorKind::Internal, "episodes_task_failed", e.to_string()))??
    .ok_or_else(|| ApiError::not_found("episode_not_found", format!("no episode with id `{id}`")))?;
    let mut body = serde_json::to_value(&episode).map_err(|e| {
        ApiError::new(
            crate::error::ErrorKind::Internal,
            "episode_not_serialised",
            e.to_string(),
        )
    })?;
    body["reward"] = match reward {
        Some(r) => serde_json::json!({"value": r.value, "passed": r.passed, "spec_version": r.spec_version}),
        None => serde_json::Value::Null,
    };
    Ok(json_response(&body))
}

/// An episode id from a client: its own id, or the stored form `id@agent`
/// that listings show.
pub(crate) fn parse_episode_id(raw: &str) -> Result<EpisodeId, ApiError> {
    EpisodeId::parse_stored(raw).map_err(|e| {
        ApiError::invalid("invalid_episode_id", format!("episode id {e}")).with_param(Some("episode_id".into()))
    })
}

/// The configured agents `principal` may use — only `agent` when given.
pub(crate) fn agents_in_scope(state: &AppState, principal: &Principal, agent: Option<&str>) -> Vec<String> {
    let mut agents: Vec<String> = state
        .agents
        .keys()
        .filter(|a| principal.may_use_agent(a) && agent.is_none_or(|wanted| wanted == a.as_str()))
        .cloned()
        .collect();
    agents.sort();
    agents
}

/// The stored episode a client names `id` among `agents`' episodes (each
/// agent's are its own: see `Store::find_episode`). None of them: 404, as
/// for an id that exists nowhere, so no key learns of other agents'
/// episodes; several: 409 naming them, all within the key's scope.
pub(crate) fn resolve(store: &dyn Store, agents: &[String], id: &EpisodeId) -> Result<EpisodeId, ApiError> {
    let mut found = Vec::new();
    for agent in agents {
        if let Some(stored) = store.find_episode(agent, id)? {
            found.push((agent.as_str(), stored));
        }
    }
    match found.len() {
        0 => Err(
            ApiError::not_found("episode_not_found", format!("no episode with id `{id}`"))
                .with_param(Some("episode_id".into())),
        ),
        1 => Ok(found.remove(0).1),
        _ => {
            let names: Vec<String> = found.iter().map(|(agent, _)| format!("`{agent}`")).collect();
            Err(ApiError::new(
                crate::error::ErrorKind::Conflict,
                "episode_ambiguous",
                format!(
                    "agents {} each have an episode `{id}`; say whose with `agent`",
                    names.join(" and ")
                ),
            )
            .with_param(Some("agent".into())))
        }
    }
}
