//! `/ui/episodes`: episodes newest first, filtered by agent and time, paged
//! by the store's cursor (a page reads only its own rows).

use super::html;
use crate::render::page;
use crate::{blocking, Ui, UiError, Viewer};
use axum::extract::{Query, State};
use axum::response::Response;
use axum::Extension;
use hone_types::time::parse_time;
use hone_types::EpisodeQuery;
use serde::{Deserialize, Serialize};
use std::sync::Arc;

const PAGE: u32 = 50;

#[derive(Debug, Default, Clone, Deserialize, Serialize)]
pub struct Filter {
    agent: Option<String>,
    since: Option<String>,
    until: Option<String>,
    version: Option<String>,
    flag: Option<String>,
    signal: Option<String>,
    min_reward: Option<String>,
    max_reward: Option<String>,
    /// `on` lists the cycles' evaluation episodes too.
    evaluations: Option<String>,
    cursor: Option<String>,
}

impl Filter {
    /// This filter's query string, at another cursor.
    fn href(&self, cursor: &str) -> String {
        let mut query = form_urlencoded::Serializer::new(String::new());
        let fields = [
            ("agent", &self.agent),
            ("since", &self.since),
            ("until", &self.until),
            ("version", &self.version),
            ("flag", &self.flag),
            ("signal", &self.signal),
            ("min_reward", &self.min_reward),
            ("max_reward", &self.max_reward),
            ("evaluations", &self.evaluations),
        ];
        for (key, value) in fields {
            if let Some(value) = value.as_deref().filter(|v| !v.is_empty()) {
                query.append_pair(key, value);
            }
        }
        query.append_pair("cursor", cursor);
        format!("/ui/episodes?{}", query.finish())
    }
}

fn given(value: &Option<String>) -> Option<&str> {
    value.as_deref().map(str::trim).filter(|v| !v.is_empty())
}

fn number(name: &str, value: &Option<String>) -> Result<Option<f64>, UiError> {
    given(value)
        .map(|v| {
            v.parse::<f64>()
                .ok()
                .filter(|x| x.is_finite())
                .ok_or_else(|| UiError::bad_request(format!("`{name}` must be a number, got `{v}`")))
        })
        .transpose()
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
    /// Under its agent's current reward spec, once scored.
    reward: Option<f64>,
    passed: Option<bool>,
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

fn render(ui: &Ui, viewer: &Viewer, filter: Filter) -> Result<String, UiError> {
    let agent = filter.agent.clone().filter(|a| !a.is_empty());
    if let Some(a) = &agent {
        super::agent_config(ui, viewer, a)?;
    }
    let cursor = match filter.cursor.as_deref().filter(|c| !c.is_empty()) {
        None => None,
        Some(c) => Some(
            c.parse::<i64>()
                .map_err(|_| UiError::bad_request("`cursor` is not one this page made"))?,
        ),
    };
    let version = given(&filter.version)
        .map(|v| {
            hone_types::VersionId::parse(v).ok_or_else(|| UiError::bad_request(format!("`{v}` is not a version id")))
        })
        .transpose()?;
    let flag = given(&filter.flag).map(str::to_owned);
    if let Some(f) = &flag {
        if !hone_types::call::BehaviourFlags::NAMES.contains(&f.as_str()) {
            return Err(UiError::bad_request(format!(
                "`{f}` is not a behaviour flag ({})",
                hone_types::call::BehaviourFlags::NAMES.join(", ")
            )));
        }
    }
    let (min, max) = (
        number("min_reward", &filter.min_reward)?,
        number("max_reward", &filter.max_reward)?,
    );
    let reward = match (min, max) {
        (None, None) => None,
        (min, max) => {
            let Some(a) = &agent else {
                return Err(UiError::bad_request(
                    "choose an agent to filter by reward: rewards are scored by each agent's own spec",
                ));
            };
            Some(hone_types::RewardRange {
                spec_version: super::agent_config(ui, viewer, a)?.reward.version(),
                min: min.unwrap_or(f64::NEG_INFINITY),
                max: max.unwrap_or(f64::INFINITY),
            })
        }
    };
    let query = EpisodeQuery {
        // Without a filter: the agents the config declares (hone's own
        // calls only when asked for by name).
        agents: Some(match (&agent, viewer.scope()) {
            (Some(a), _) => vec![a.clone()],
            (None, Some(scope)) => scope.to_vec(),
            (None, None) => ui.config.user_agents().map(|a| a.name.clone()).collect(),
        }),
        since: time("since", filter.since.as_deref())?,
        until: time("until", filter.until.as_deref())?,
        limit: PAGE,
        cursor,
        version,
        flag,
        signal: given(&filter.signal).map(str::to_owned),
        reward,
        production_only: given(&filter.evaluations) != Some("on"),
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
                    .map(|s| format!("{}={}", s.name, s.value.shown()))
                    .collect(),
                flags,
                reward: None,
                passed: None,
            }
        })
        .collect();
    let mut rows = rows;
    for row in &mut rows {
        let Some(agent) = ui.config.agents.get(&row.agent) else {
            continue;
        };
        let Ok(id) = hone_types::EpisodeId::parse(&row.id) else {
            continue;
        };
        if let Some(r) = ui.store.reward(&id, &agent.reward.version())? {
            row.reward = Some(r.value);
            row.passed = Some(r.passed);
        }
    }
    let agents: Vec<String> = ui.config.agents.keys().filter(|a| viewer.sees(a)).cloned().collect();
    page(
        viewer,
        "episodes.html",
        minijinja::context! {
            title => "Episodes",
            rows => minijinja::Value::from(minijinja::value::Serde(&rows)),
            agents,
            filter => minijinja::Value::from(minijinja::value::Serde(&filter)),
            next => found.next_cursor.as_deref().map(|c| filter.href(c)),
            flags => hone_types::call::BehaviourFlags::NAMES.to_vec(),
        },
    )
}

pub async fn list(
    State(ui): State<Arc<Ui>>,
    Extension(viewer): Extension<Viewer>,
    Query(filter): Query<Filter>,
) -> Response {
    html(blocking(&ui, viewer, move |ui, viewer| render(ui, viewer, filter)).await)
}
