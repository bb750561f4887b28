//! `/ui`: every agent the config declares with its champion, canary and
//! share, online reward and its trend, recent alerts, and the cycle step it
//! is in; each champion's online reward over time; below, links to the
//! calls hone makes itself (judge, reflector).

use super::{html, version_name};
use crate::render::page;
use crate::{blocking, Ui, UiError, Viewer};
use axum::extract::State;
use axum::response::Response;
use axum::Extension;
use serde::Serialize;
use std::sync::Arc;

#[derive(Serialize)]
struct AgentRow {
    name: String,
    champion: String,
    canary: Option<String>,
    canary_share: f64,
    rewarded: u64,
    reward: Option<f64>,
    /// Mean reward of the champion's newest 50 rewarded episodes and of the 50 before.
    recent: Option<f64>,
    before: Option<f64>,
    /// `up` or `down` when the change is shown (one-sided Welch test at
    /// 5%), else `flat`: noise gets no arrow.
    trend: &'static str,
    alerts: usize,
    last_alert: Option<i64>,
    cycle: Option<String>,
}

fn mean(values: &[f64]) -> Option<f64> {
    (!values.is_empty()).then(|| values.iter().sum::<f64>() / values.len() as f64)
}

/// Each agent's champion's online reward (rolling), one line an agent.
fn chart(ui: &Ui, viewer: &Viewer) -> Result<String, UiError> {
    let store = ui.store.as_ref();
    let mut series = Vec::new();
    for agent in ui.config.user_agents().filter(|a| viewer.sees(&a.name)) {
        let (deployment, _) = hone_learn::release::deploy::current(store, agent)?;
        let mut points: Vec<(i64, f64)> = store
            .version_rewards(&agent.name, &deployment.champion, &agent.reward.version(), 500)?
            .into_iter()
            .filter_map(|(at, reward)| Some((at, reward?)))
            .collect();
        points.sort_by_key(|p| p.0);
        if !points.is_empty() {
            series.push(crate::charts::Series {
                name: format!("{} ({})", agent.name, version_name(agent, &deployment.champion)),
                points: super::agent::rolling(&points),
            });
        }
    }
    Ok(if series.is_empty() {
        String::new()
    } else {
        crate::charts::reward_over_time(&series, &[])
    })
}

fn rows(ui: &Ui, viewer: &Viewer) -> Result<Vec<AgentRow>, UiError> {
    let store = ui.store.as_ref();
    let mut rows = Vec::new();
    for agent in ui.config.user_agents().filter(|a| viewer.sees(&a.name)) {
        let (deployment, _) = hone_learn::release::deploy::current(store, agent)?;
        let spec = agent.reward.version();
        let (rewarded, reward) = store.reward_summary(&agent.name, &spec)?;
        let window = store.version_rewards(&agent.name, &deployment.champion, &spec, 100)?;
        let rewards: Vec<f64> = window.iter().filter_map(|e| e.1).collect();
        let (recent, before) = rewards.split_at(rewards.len().min(50));
        let alerts = store.alerts(Some(&agent.name), 100)?;
        rows.push(AgentRow {
            name: agent.name.clone(),
            champion: version_name(agent, &deployment.champion),
            canary: deployment.canary.as_ref().map(|c| version_name(agent, c)),
            canary_share: deployment.canary_share,
            rewarded,
            reward,
            recent: mean(recent),
            before: mean(before),
            trend: if hone_learn::stats::mean_greater_p(before, recent) < 0.05 {
                "up"
            } else if hone_learn::stats::mean_greater_p(recent, before) < 0.05 {
                "down"
            } else {
                "flat"
            },
            alerts: alerts.len(),
            last_alert: alerts.first().map(|a| a.at),
            cycle: store.open_cycle(&agent.name)?.map(|c| c.state.as_str().to_owned()),
        });
    }
    Ok(rows)
}

pub async fn show(State(ui): State<Arc<Ui>>, Extension(viewer): Extension<Viewer>) -> Response {
    html(
        blocking(&ui, viewer, |ui, viewer| {
            let agents = rows(ui, viewer)?;
            let reward_svg = minijinja::Value::from_safe_string(chart(ui, viewer)?);
            // hone's own calls (the judge's, the reflector's), out of the
            // way but one click from their episodes.
            let own: Vec<String> = ui
                .config
                .agents
                .keys()
                .filter(|a| hone_config::is_internal_agent(a) && viewer.sees(a))
                .cloned()
                .collect();
            page(
                viewer,
                "overview.html",
                minijinja::context! {
                    title => "Agents",
                    agents => minijinja::Value::from(minijinja::value::Serde(&agents)),
                    own,
                    reward_svg,
                },
            )
        })
        .await,
    )
}
