//! `/ui/episodes`: episodes newest first, filtered by agent and time, paged
//! by the store's cursor (a page reads only its own rows).

use super::html;
use crate::render::page;
use crate::{blocking, Ui, UiError};
use axum::extract::{Query, State};
use axum::response::Response;
use hone_types::time::parse_time;
use hone_types::EpisodeQuery;
use serde::{Deserialize, Serialize};
use std::sync::Arc;

const PAGE: u32 = 50;

#[derive(Debug, Default, Deserialize, Serialize)]
pub struct Filter {
    agent: Option<String>,
    since: Option<String>,
    until: Option<String>,
    cursor: Option<String>,
}

#[derive(Serialize)]
struct Row {
    id: String,
    agent: String,
    started_at: i64,
    calls: u64,
    versions: Vec<String>,
    task: String,
    signals: Vec<String>,
    flags: Vec<&'static str>,
}

fn time(name: &str, raw: Option<&str>) -> Result<Option<i64>, UiError> {
    match raw.filter(|r| !r.is_empty()) {
        None => Ok(None),
        Some(raw) => parse_time(raw).map(Some).ok_or_else(|| {
            UiError::bad_request(format!(
                "`{name}` must be an RFC 3339 time or unix milliseconds, got `{raw}`"
            ))
        }),
    }
}

fn render(ui: &Ui, filter: Filter) -> Result<String, UiError> {
    let agent = filter.agent.clone().filter(|a| !a.is_empty());
    if let Some(a) = &agent {
        super::agent_config(ui, a)?;
    }
    let cursor = match filter.cursor.as_deref().filter(|c| !c.is_empty()) {
        None => None,
        Some(c) => Some(
            c.parse::<i64>()
                .map_err(|_| UiError::bad_request("`cursor` is not one this page made"))?,
        ),
    };
    let query = EpisodeQuery {
        agents: agent.clone().map(|a| vec![a]),
        since: time("since", filter.since.as_deref())?,
        until: time("until", filter.until.as_deref())?,
        limit: PAGE,
        cursor,
    };
    let found = ui.store.episodes(&query)?;
    let rows: Vec<Row> = found
        .episodes
        .iter()
        .map(|e| {
            let mut versions: Vec<String> = e.calls.iter().map(|c| super::short(c.version_id.as_str())).collect();
            versions.dedup();
            let mut flags = Vec::new();
            for call in &e.calls {
                for name in hone_types::call::BehaviourFlags::NAMES {
                    if call.flags.named(name) && !flags.contains(&name) {
                        flags.push(name);
                    }
                }
            }
            Row {
                id: e.summary.id.to_string(),
                agent: e.summary.agent.clone(),
                started_at: e.summary.started_at,
                calls: e.summary.call_count,
                versions,
                task: e
                    .calls
                    .first()
                    .map(|c| hone_types::openai::task_of(&c.request.messages))
                    .unwrap_or_default()
                    .chars()
                    .take(120)
                    .collect(),
                signals: e
                    .signals
                    .iter()
                    .map(|s| format!("{}={}", s.name, serde_json::to_string(&s.value).unwrap_or_default()))
                    .collect(),
                flags,
            }
        })
        .collect();
    let agents: Vec<String> = ui.config.agents.keys().cloned().collect();
    page(
        "episodes.html",
        minijinja::context! {
            title => "Episodes",
            rows => minijinja::Value::from(minijinja::value::Serde(&rows)),
            agents,
            filter => minijinja::Value::from(minijinja::value::Serde(&filter)),
            next_cursor => found.next_cursor,
        },
    )
}

pub async fn list(State(ui): State<Arc<Ui>>, Query(filter): Query<Filter>) -> Response {
    html(blocking(&ui, move |ui| render(ui, filter)).await)
}
