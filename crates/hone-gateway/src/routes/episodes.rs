//! `GET /v1/episodes` and `GET /v1/episodes/{id}`: episodes with their calls
//! and signals, newest first, paged by an opaque cursor. A data-plane key
//! sees only its own agents' episodes.

use super::json_response;
use crate::error::ApiError;
use crate::state::AppState;
use axum::extract::{Path, Query, State};
use axum::http::HeaderMap;
use axum::response::Response;
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

pub async fn show(
    State(state): State<Arc<AppState>>,
    headers: HeaderMap,
    id: Result<Path<String>, axum::extract::rejection::PathRejection>,
) -> Result<Response, ApiError> {
    let principal = state.auth.data_plane(&headers)?;
    let id = super::path_param(id)?;
    let episode_id =
        EpisodeId::parse(&id).map_err(|e| ApiError::invalid("invalid_episode_id", format!("episode id {e}")))?;
    state.caught_up(false).await?;
    let store = state.store.clone();
    let lookup = episode_id.clone();
    let episode = tokio::task::spawn_blocking(move || store.episode(&lookup))
        .await
        .map_err(|e| ApiError::new(crate::error::ErrorKind::Internal, "episodes_task_failed", e.to_string()))??
        // Another agent's episode answers exactly like one that does not exist.
        .filter(|episode| principal.may_use_agent(&episode.summary.agent))
        .ok_or_else(|| ApiError::not_found("episode_not_found", format!("no episode with id `{episode_id}`")))?;
    Ok(json_response(&episode))
}
