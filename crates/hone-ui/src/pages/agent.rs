//! `/ui/agents/{agent}`: the Pareto front as a chart (reward × cost, one
//! point per candidate, pruned ones grey and their reasons in the table),
//! online reward per version over time with deploy, promote and rollback
//! marked, the canary monitors' alerts, the history as a timeline, and the
//! **Approve** and **Roll back** buttons (`hone approve`, `hone rollback`).

use super::{agent_config, html, short, version_name};
use crate::charts::{self, FrontPoint, Marker, Series};
use crate::render::page;
use crate::{blocking, Ui, UiError};
use axum::extract::{Path, State};
use axum::response::{IntoResponse, Response};
use axum::Form;
use hone_learn::deploy::{self, Change};
use hone_types::{CandidateStatus, VersionId};
use serde::Serialize;
use std::sync::Arc;

/// Candidates shown, newest first.
const CANDIDATES_SHOWN: usize = 60;
/// Episodes per version in the reward chart, and the rolling window.
const EPISODES_CHARTED: usize = 500;
const ROLLING: usize = 20;

#[derive(Serialize)]
struct CandidateRow {
    n: usize,
    version: String,
    cycle: String,
    optimiser: String,
    status: String,
    reason: Option<String>,
    reward: Option<f64>,
    target_pass: Option<f64>,
    regression_pass: Option<f64>,
    cost_usd: Option<f64>,
    latency_ms: Option<f64>,
    kl_to_base: Option<f64>,
    diff: String,
    approvable: bool,
    live: bool,
}

#[derive(Serialize)]
struct EventRow {
    at: i64,
    kind: String,
    version: Option<String>,
    cycle: Option<String>,
    summary: String,
    evidence: String,
}

#[derive(Serialize)]
struct MonitorRow {
    metric: String,
    canary: f64,
    champion: f64,
    canary_episodes: u64,
    champion_episodes: u64,
    bound: String,
    p_value: f64,
    fires: bool,
}

#[derive(Serialize)]
struct AlertRow {
    at: i64,
    metric: String,
    version: String,
    canary_rate: f64,
    champion_rate: f64,
    canary_episodes: u64,
    champion_episodes: u64,
    p_value: f64,
    action: String,
}

const LIVE: [CandidateStatus; 4] = [
    CandidateStatus::OnFront,
    CandidateStatus::Approved,
    CandidateStatus::Canary,
    CandidateStatus::Champion,
];

fn rolling(points: &[(i64, f64)]) -> Vec<(i64, f64)> {
    (0..points.len())
        .map(|i| {
            let from = i.saturating_sub(ROLLING - 1);
            let window = &points[from..=i];
            (
                points[i].0,
                window.iter().map(|p| p.1).sum::<f64>() / window.len() as f64,
            )
        })
        .collect()
}

fn render(ui: &Ui, name: &str, notice: Option<String>) -> Result<String, UiError> {
    let agent = agent_config(ui, name)?;
    let store = ui.store.as_ref();
    let (deployment, _) = deploy::current(store, agent)?;
    let mut all = store.candidates(&agent.name, None)?;
    all.reverse();
    all.truncate(CANDIDATES_SHOWN);
    let candidates: Vec<CandidateRow> = all
        .iter()
        .enumerate()
        .map(|(i, c)| {
            let s = c.scores.as_ref();
            CandidateRow {
                n: i + 1,
                version: c.version_id.to_string(),
                cycle: c.cycle_id.clone(),
                optimiser: c.optimiser.clone(),
                status: c.status.as_str().to_owned(),
                reason: c.reason.clone(),
                reward: s.and_then(|s| s.target_mean),
                target_pass: s.map(|s| s.target_pass_rate),
                regression_pass: s.map(|s| s.regression_pass_rate),
                cost_usd: s.map(|s| s.mean_cost_usd),
                latency_ms: s.map(|s| s.mean_latency_ms),
                kl_to_base: c.training.as_ref().map(|t| t.kl_to_base),
                diff: c.diff.clone(),
                approvable: c.status == CandidateStatus::OnFront && deployment.canary.is_none(),
                live: LIVE.contains(&c.status),
            }
        })
        .collect();
    let points: Vec<FrontPoint> = candidates
        .iter()
        .filter_map(|c| {
            Some(FrontPoint {
                label: c.n.to_string(),
                cost_usd: c.cost_usd?,
                reward: c.reward?,
                pruned: !c.live,
                title: format!(
                    "#{} {} {}: {}",
                    c.n,
                    &c.version[..8.min(c.version.len())],
                    c.status,
                    c.reason.as_deref().unwrap_or("")
                ),
            })
        })
        .collect();

    let spec = agent.reward.version();
    let mut versions: Vec<VersionId> = vec![deployment.champion.clone()];
    versions.extend(deployment.canary.clone());
    versions.extend(deployment.previous.iter().rev().take(3).cloned());
    let mut series = Vec::new();
    for version in versions {
        let mut points: Vec<(i64, f64)> = store
            .version_rewards(&agent.name, &version, &spec, EPISODES_CHARTED)?
            .into_iter()
            .filter_map(|(at, reward)| Some((at, reward?)))
            .collect();
        points.sort_by_key(|p| p.0);
        if !points.is_empty() {
            series.push(Series {
                name: version_name(agent, &version),
                points: rolling(&points),
            });
        }
    }
    let history = store.history(&agent.name, 200)?;
    let markers: Vec<Marker> = history
        .iter()
        .filter(|e| matches!(e.kind.as_str(), "canary" | "promote" | "rollback"))
        .map(|e| Marker {
            at: e.at,
            label: format!(
                "{} {}",
                e.kind,
                e.version_id.as_ref().map(|v| short(v.as_str())).unwrap_or_default()
            ),
        })
        .collect();
    let timeline: Vec<EventRow> = history
        .iter()
        .rev()
        .map(|e| EventRow {
            at: e.at,
            kind: e.kind.clone(),
            version: e.version_id.as_ref().map(|v| v.to_string()),
            cycle: e.cycle_id.clone(),
            summary: e.summary.clone(),
            evidence: if e.evidence.is_null() {
                String::new()
            } else {
                serde_json::to_string_pretty(&e.evidence).unwrap_or_default()
            },
        })
        .collect();
    let alerts: Vec<AlertRow> = store
        .alerts(Some(&agent.name), 50)?
        .into_iter()
        .map(|a| AlertRow {
            at: a.at,
            metric: a.metric,
            version: short(a.version_id.as_str()),
            canary_rate: a.canary_rate,
            champion_rate: a.champion_rate,
            canary_episodes: a.canary_episodes,
            champion_episodes: a.champion_episodes,
            p_value: a.p_value,
            action: a.action,
        })
        .collect();
    // The canary's monitored measures against their bounds, over the
    // windows the canary watcher reads.
    let monitors: Vec<MonitorRow> = match (&deployment.canary, deployment.canary_since) {
        (Some(canary), Some(since)) => {
            let monitor = &agent.learn.monitor;
            let window = |v: &VersionId| store.version_window(&agent.name, v, since, &spec, monitor.window);
            let (c, h) = (window(canary)?, window(&deployment.champion)?);
            let expected = hone_learn::monitor::expected(store, &agent.name, canary)?;
            hone_learn::monitor::readings(monitor, &c, &h, expected)
                .into_iter()
                .map(|r| MonitorRow {
                    metric: r.metric,
                    canary: r.canary,
                    champion: r.champion,
                    canary_episodes: r.canary_episodes,
                    champion_episodes: r.champion_episodes,
                    bound: r.bound.to_string(),
                    p_value: r.p_value,
                    fires: r.fires,
                })
                .collect()
        }
        _ => Vec::new(),
    };
    let cycle = store.open_cycle(&agent.name)?.map(|c| c.state.as_str().to_owned());
    page(
        "agent.html",
        minijinja::context! {
            title => agent.name.clone(),
            agent => agent.name.clone(),
            description => agent.description.clone(),
            champion => version_name(agent, &deployment.champion),
            canary => deployment.canary.as_ref().map(|c| version_name(agent, c)),
            canary_share => deployment.canary_share,
            canary_since => deployment.canary_since,
            previous => deployment.previous.iter().map(|v| version_name(agent, v)).collect::<Vec<_>>(),
            cycle,
            candidates => minijinja::Value::from(minijinja::value::Serde(&candidates)),
            front_svg => minijinja::Value::from_safe_string(charts::front(&points)),
            front_points => points.len(),
            reward_svg => minijinja::Value::from_safe_string(charts::reward_over_time(&series, &markers)),
            alerts => minijinja::Value::from(minijinja::value::Serde(&alerts)),
            monitors => minijinja::Value::from(minijinja::value::Serde(&monitors)),
            timeline => minijinja::Value::from(minijinja::value::Serde(&timeline)),
            notice,
        },
    )
}

pub async fn show(State(ui): State<Arc<Ui>>, Path(agent): Path<String>) -> Response {
    html(blocking(&ui, move |ui| render(ui, &agent, None)).await)
}

#[derive(serde::Deserialize)]
pub struct Approve {
    candidate: String,
}

/// The outcome of an action, shown on the agent page it returns to.
async fn after(ui: Arc<Ui>, agent: String, change: Result<Change, UiError>) -> Response {
    let notice = match change {
        Ok(Change::Applied(s) | Change::AlreadyDone(s)) => s,
        Ok(Change::Refused(s)) => format!("refused: {s}"),
        Err(e) => return e.into_response(),
    };
    html(blocking(&ui, move |ui| render(ui, &agent, Some(notice))).await)
}

pub async fn approve(State(ui): State<Arc<Ui>>, Path(agent): Path<String>, Form(form): Form<Approve>) -> Response {
    let change = async {
        let config = agent_config(&ui, &agent)?;
        let candidate = ui
            .store
            .candidates(&agent, None)?
            .into_iter()
            .rev()
            .find(|c| c.version_id.as_str() == form.candidate)
            .ok_or_else(|| UiError::not_found(format!("agent `{agent}` has no candidate `{}`", form.candidate)))?;
        Ok(deploy::start_canary(
            &ui.config,
            &ui.gateway,
            ui.store.as_ref(),
            config,
            &candidate,
            "dashboard",
        )
        .await?)
    }
    .await;
    after(ui.clone(), agent, change).await
}

pub async fn rollback(State(ui): State<Arc<Ui>>, Path(agent): Path<String>) -> Response {
    let change = agent_config(&ui, &agent).and_then(|config| {
        Ok(deploy::rollback(
            ui.store.as_ref(),
            config,
            "rolled back from the dashboard",
            None,
        )?)
    });
    after(ui.clone(), agent, change).await
}
