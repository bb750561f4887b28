//! `/ui/cycles` and `/ui/cycles/{id}`: learning cycles, and one cycle's
//! steps (its history events, timed from the cycle's start), what each
//! step decided, and its candidates with their gate reasons.

use super::{html, short};
use crate::render::page;
use crate::{blocking, Ui, UiError, Viewer};
use axum::extract::{Path, Query, State};
use axum::response::Response;
use axum::Extension;
use serde::{Deserialize, Serialize};
use std::sync::Arc;

#[derive(Deserialize)]
pub struct Filter {
    agent: Option<String>,
}

#[derive(Serialize)]
struct CycleRow {
    id: String,
    agent: String,
    state: String,
    trigger: String,
    started_at: i64,
    updated_at: i64,
    seconds: f64,
    candidates: Option<u64>,
    decision: Option<String>,
    note: Option<String>,
    error: Option<String>,
}

fn row(c: &hone_types::CycleInfo) -> CycleRow {
    CycleRow {
        id: c.id.clone(),
        agent: c.agent.clone(),
        state: c.state.as_str().to_owned(),
        trigger: c.trigger.clone(),
        started_at: c.started_at,
        updated_at: c.updated_at,
        seconds: (c.updated_at - c.started_at) as f64 / 1000.0,
        candidates: c.detail.candidates,
        decision: c.detail.decision.clone(),
        note: c.detail.note.clone(),
        error: c.error.clone(),
    }
}

pub async fn list(
    State(ui): State<Arc<Ui>>,
    Extension(viewer): Extension<Viewer>,
    Query(filter): Query<Filter>,
) -> Response {
    html(
        blocking(&ui, viewer, move |ui, viewer| {
            let agent = filter.agent.filter(|a| !a.is_empty());
            if let Some(a) = &agent {
                super::agent_config(ui, viewer, a)?;
            }
            let rows: Vec<CycleRow> = ui
                .store
                .cycles(agent.as_deref(), 100)?
                .iter()
                .filter(|c| viewer.sees(&c.agent))
                .map(row)
                .collect();
            page(
                viewer,
                "cycles.html",
                minijinja::context! { title => "Cycles", rows => minijinja::Value::from(minijinja::value::Serde(&rows)) },
            )
        })
        .await,
    )
}

#[derive(Serialize)]
struct Step {
    at: i64,
    after_s: f64,
    kind: String,
    summary: String,
}

#[derive(Serialize)]
struct CandidateRow {
    version: String,
    optimiser: String,
    status: String,
    reason: Option<String>,
    diff: String,
    reward: Option<f64>,
    /// The gain over the champion the gate judged, with its interval.
    gain: Option<String>,
    regression_pass: Option<f64>,
    cost_usd: Option<f64>,
    /// What the reflective optimisers spent on it (calls, tokens, $).
    spend: Option<String>,
}

fn render(ui: &Ui, viewer: &Viewer, id: &str) -> Result<String, UiError> {
    let cycle = ui
        .store
        .cycle(id)?
        .ok_or_else(|| UiError::not_found(format!("no cycle `{id}`")))?;
    super::hidden(viewer, &cycle.agent, format!("no cycle `{id}`"))?;
    let steps: Vec<Step> = ui
        .store
        .history(&cycle.agent, 2000)?
        .into_iter()
        .filter(|e| e.cycle_id.as_deref() == Some(id))
        .map(|e| Step {
            at: e.at,
            after_s: (e.at - cycle.started_at) as f64 / 1000.0,
            kind: e.kind,
            summary: e.summary,
        })
        .collect();
    let candidates: Vec<CandidateRow> = ui
        .store
        .candidates(&cycle.agent, Some(id))?
        .into_iter()
        .map(|c| CandidateRow {
            version: short(c.version_id.as_str()),
            optimiser: c.optimiser,
            status: c.status.as_str().to_owned(),
            reason: c.reason,
            diff: c.diff,
            reward: c
                .scores
                .as_ref()
                .filter(|s| !s.offline_blind)
                .and_then(|s| s.target_mean),
            gain: c.scores.as_ref().filter(|s| !s.offline_blind).and_then(|s| {
                let g = s.gate_gain?;
                let users = if s.users_decide { "; users decide online" } else { "" };
                Some(format!(
                    "{g} ({:.0}%, {} instances{users})",
                    g.confidence * 100.0,
                    g.instances
                ))
            }),
            regression_pass: c.scores.as_ref().and_then(|s| s.regression_pass_rate),
            cost_usd: c.scores.as_ref().map(|s| s.mean_cost_usd),
            spend: c.spend.map(|s| s.to_string()),
        })
        .collect();
    let detail = serde_json::to_string_pretty(&cycle.detail).unwrap_or_default();
    page(
        viewer,
        "cycle.html",
        minijinja::context! {
            title => format!("Cycle {id}"),
            cycle => minijinja::Value::from(minijinja::value::Serde(&row(&cycle))),
            detail,
            d => minijinja::Value::from(minijinja::value::Serde(&cycle.detail)),
            champion => cycle.detail.champion.as_ref().map(|v| ui.config.agents.get(&cycle.agent).map_or_else(|| v.to_string(), |a| super::version_name(a, v))),
            target => cycle.detail.target.clone(),
            train => cycle.detail.train.clone(),
            regression => cycle.detail.regression.clone(),
            reward_model => cycle.detail.reward_model.map(|q| q.summary()),
            steps => minijinja::Value::from(minijinja::value::Serde(&steps)),
            candidates => minijinja::Value::from(minijinja::value::Serde(&candidates)),
        },
    )
}

pub async fn show(State(ui): State<Arc<Ui>>, Extension(viewer): Extension<Viewer>, Path(id): Path<String>) -> Response {
    html(blocking(&ui, viewer, move |ui, viewer| render(ui, viewer, &id)).await)
}
