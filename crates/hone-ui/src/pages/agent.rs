//! `/ui/agents/{agent}`: the Pareto front as a chart (reward × cost, one
//! point per candidate, pruned ones grey and their reasons in the table),
//! online reward per version over time with deploy, promote and rollback
//! marked, the canary monitors' alerts and where the canary stands against
//! the promotion rule, the history as a timeline, and the **Approve** and
//! **Roll back** buttons (`hone approve`, `hone rollback`).

use super::{agent_config, html, short, version_name};
use crate::charts::{self, FrontPoint, Marker, Series};
use crate::render::page;
use crate::{blocking, Ui, UiError, Viewer};
use axum::extract::{Path, State};
use axum::response::{IntoResponse, Response};
use axum::Extension;
use axum::Form;
use hone_config::PromotionRule;
use hone_learn::release::deploy::{self, Change};
use hone_learn::watch::{Call, Online};
use hone_types::{AlertAction, CandidateStatus, Firing, VersionId};
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
    /// What it is now: the deployment names the one champion and canary.
    role: &'static str,
    reason: Option<String>,
    /// Offline reward; none where no user's signal reached an offline run.
    reward: Option<f64>,
    /// No user's signal reached its offline runs: users decide.
    offline_blind: bool,
    /// What users showed of it as a canary.
    online: Option<String>,
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

/// Where the running canary stands against the promotion rule: what the
/// watcher would decide on the episodes rewarded so far.
#[derive(Serialize)]
struct PromotionView {
    rule: String,
    needed: usize,
    canary_episodes: usize,
    champion_episodes: usize,
    canary_mean: Option<f64>,
    champion_mean: Option<f64>,
    p_champion_better: f64,
    p_within_margin: Option<f64>,
    /// Under a sequential rule: the always-valid test so far, in words.
    sequential: Option<String>,
    call: &'static str,
}

impl PromotionView {
    fn new(deployment: &hone_config::DeploymentConfig, online: &Online) -> Self {
        let rule = match deployment.promotion {
            PromotionRule::NotShownWorse => "promoted unless the champion is shown better online".to_owned(),
            PromotionRule::WithinMargin { margin, max_episodes } => format!(
                "promoted once shown within {margin} reward of the champion online; rolled back if not shown so by {max_episodes} episodes"
            ),
            PromotionRule::Sequential {
                max_episodes,
                least_gain,
                max_share,
            } => format!(
                "users decide: a test by betting, valid at every look, promotes once the canary is shown better and rolls back once it is shown worse{}, or at {max_episodes} episodes; its share grows with the evidence up to {:.0}%",
                if least_gain > 0.0 { format!(" or short of a {least_gain} gain") } else { String::new() },
                max_share * 100.0
            ),
        };
        let call = match online.call {
            Call::Wait if !online.enough => "collecting episodes",
            Call::Wait if online.sequential.is_some() => "collecting: neither shown better nor worse yet",
            Call::Wait => "collecting: not yet shown within the margin",
            Call::Promote => "promotes at the watcher's next look",
            Call::RollBack => "rolls back at the watcher's next look",
        };
        Self {
            rule,
            needed: deployment.canary_episodes,
            canary_episodes: online.canary_episodes,
            champion_episodes: online.champion_episodes,
            canary_mean: online.canary_mean,
            champion_mean: online.champion_mean,
            p_champion_better: online.p_champion_better,
            p_within_margin: online.p_within_margin,
            sequential: online.sequential.map(|t| t.to_string()),
            call,
        }
    }
}

#[derive(Serialize)]
struct AlertRow {
    at: i64,
    version: String,
    #[serde(flatten)]
    firing: Firing,
    action: AlertAction,
}

pub(super) fn rolling(points: &[(i64, f64)]) -> Vec<(i64, f64)> {
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

fn render(ui: &Ui, viewer: &Viewer, name: &str, notice: Option<String>) -> Result<String, UiError> {
    let agent = agent_config(ui, viewer, name)?;
    let store = ui.store.as_ref();
    let (deployment, _) = deploy::current(store, agent)?;
    let mut all = store.candidates(&agent.name, None)?;
    all.reverse();
    all.truncate(CANDIDATES_SHOWN);
    let history = store.history(&agent.name, 100_000)?;
    let candidates: Vec<CandidateRow> = all
        .iter()
        .enumerate()
        .map(|(i, c)| {
            let s = c.scores.as_ref();
            let blind = s.is_some_and(|s| s.offline_blind);
            CandidateRow {
                n: i + 1,
                version: c.version_id.to_string(),
                cycle: c.cycle_id.clone(),
                optimiser: c.optimiser.clone(),
                status: c.status.as_str().to_owned(),
                role: deploy::role(&deployment, c),
                reason: c.reason.clone(),
                reward: s.and_then(|s| s.target_mean).filter(|_| !blind),
                offline_blind: blind,
                online: deploy::online_evidence(&history, &c.version_id),
                target_pass: s.map(|s| s.target_pass_rate).filter(|_| !blind),
                regression_pass: s.and_then(|s| s.regression_pass_rate),
                cost_usd: s.map(|s| s.mean_cost_usd),
                latency_ms: s.map(|s| s.mean_latency_ms),
                kl_to_base: c.training.as_ref().map(|t| t.kl_to_base),
                diff: c.diff.clone(),
                approvable: c.status == CandidateStatus::OnFront && deployment.canary.is_none(),
                live: c.status.is_live(),
            }
        })
        .collect();
    let axis = charts::FrontAxis::of(
        &agent.learn.objective,
        candidates.iter().any(|c| c.cost_usd.is_some_and(|v| v > 0.0)),
    );
    let along = |cost: Option<f64>, latency: Option<f64>| match axis {
        charts::FrontAxis::Cost => cost,
        charts::FrontAxis::Latency => latency,
    };
    let points: Vec<FrontPoint> = candidates
        .iter()
        .filter_map(|c| {
            Some(FrontPoint {
                label: c.n.to_string(),
                x: along(c.cost_usd, c.latency_ms)?,
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

    // The champion as the latest cycle that ran it measured it, for reference.
    let champion_point = store.cycles(Some(&agent.name), 20)?.into_iter().find_map(|c| {
        let scores = c
            .detail
            .champion_scores
            .filter(|_| c.detail.champion.as_ref() == Some(&deployment.champion))?;
        Some(charts::Reference {
            label: format!("champion ({})", c.id),
            x: along(Some(scores.mean_cost_usd), Some(scores.mean_latency_ms))?,
            reward: scores.target_mean?,
        })
    });
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
            version: short(a.version_id.as_str()),
            firing: a.firing,
            action: a.action,
        })
        .collect();
    // The canary's monitored measures against their bounds, over the
    // windows the canary watcher reads.
    let reading = hone_learn::watch::read(store, agent, &deployment, &spec, hone_types::time::now_ms())?;
    let (monitors, promotion): (Vec<MonitorRow>, Option<PromotionView>) = match (&deployment.canary, reading) {
        (Some(canary), Some(reading)) => {
            let monitor = &agent.learn.monitor;
            let newest = |side: &[hone_store::WindowEpisode]| hone_learn::watch::Reading::newest(side, monitor.window);
            let (c, h) = (newest(&reading.canary), newest(&reading.champion));
            let expected = hone_learn::release::monitor::expected(store, &agent.name, canary)?;
            let online = Online::of_windows(
                &agent.deployment,
                monitor.confidence,
                &reading.context,
                &reading.canary,
                &reading.champion,
            );
            let rows = hone_learn::release::monitor::readings(monitor, &c, &h, expected)
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
                .collect();
            (rows, Some(PromotionView::new(&agent.deployment, &online)))
        }
        _ => (Vec::new(), None),
    };
    let cycle = store.open_cycle(&agent.name)?.map(|c| c.state.as_str().to_owned());
    page(
        viewer,
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
            front_svg => minijinja::Value::from_safe_string(charts::front(&points, champion_point.as_ref(), axis)),
            front_axis => match axis { charts::FrontAxis::Cost => "cost", charts::FrontAxis::Latency => "latency" },
            front_points => points.len(),
            offline_blind => candidates.iter().any(|c| c.offline_blind),
            reward_svg => minijinja::Value::from_safe_string(charts::reward_over_time(&series, &markers)),
            alerts => minijinja::Value::from(minijinja::value::Serde(&alerts)),
            monitors => minijinja::Value::from(minijinja::value::Serde(&monitors)),
            promotion => minijinja::Value::from(minijinja::value::Serde(&promotion)),
            timeline => minijinja::Value::from(minijinja::value::Serde(&timeline)),
            notice,
        },
    )
}

pub async fn show(
    State(ui): State<Arc<Ui>>,
    Extension(viewer): Extension<Viewer>,
    Path(agent): Path<String>,
) -> Response {
    html(blocking(&ui, viewer, move |ui, viewer| render(ui, viewer, &agent, None)).await)
}

#[derive(serde::Deserialize)]
pub struct Approve {
    candidate: String,
}

/// The outcome of an action, shown on the agent page it returns to.
async fn after(ui: Arc<Ui>, viewer: Viewer, agent: String, change: Result<Change, UiError>) -> Response {
    let notice = match change {
        Ok(Change::Applied(s) | Change::AlreadyDone(s)) => s,
        Ok(Change::Refused(s)) => format!("refused: {s}"),
        Err(e) => return e.into_response(),
    };
    html(blocking(&ui, viewer, move |ui, viewer| render(ui, viewer, &agent, Some(notice))).await)
}

pub async fn approve(
    State(ui): State<Arc<Ui>>,
    Extension(viewer): Extension<Viewer>,
    Path(agent): Path<String>,
    Form(form): Form<Approve>,
) -> Response {
    let change = async {
        let config = agent_config(&ui, &viewer, &agent)?;
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
    after(ui.clone(), viewer, agent, change).await
}

/// What a rollback would do, asked before it is done (a page, no script).
pub async fn confirm_rollback(
    State(ui): State<Arc<Ui>>,
    Extension(viewer): Extension<Viewer>,
    Path(agent): Path<String>,
) -> Response {
    html(
        blocking(&ui, viewer, move |ui, viewer| {
            let config = super::agent_config(ui, viewer, &agent)?;
            let (deployment, _) = deploy::current(ui.store.as_ref(), config)?;
            let question = match (&deployment.canary, deployment.previous.last()) {
                (Some(canary), _) => format!(
                    "Roll back the canary {} of `{agent}`? Every user then gets the champion {}.",
                    version_name(config, canary),
                    version_name(config, &deployment.champion)
                ),
                (None, Some(previous)) => format!(
                    "Restore the previous champion {} of `{agent}` in place of {}? Every user gets it at once.",
                    version_name(config, previous),
                    version_name(config, &deployment.champion)
                ),
                (None, None) => {
                    format!("`{agent}` has no canary and no previous champion: there is nothing to roll back.")
                }
            };
            let possible = deployment.canary.is_some() || !deployment.previous.is_empty();
            page(
                viewer,
                "confirm.html",
                minijinja::context! {
                    title => format!("Roll back {agent}?"),
                    question,
                    action => if possible { format!("/ui/agents/{agent}/rollback") } else { String::new() },
                    id => "rollback",
                    button => "Roll back",
                    back => format!("/ui/agents/{agent}"),
                },
            )
        })
        .await,
    )
}

pub async fn rollback(
    State(ui): State<Arc<Ui>>,
    Extension(viewer): Extension<Viewer>,
    Path(agent): Path<String>,
) -> Response {
    let change = agent_config(&ui, &viewer, &agent).and_then(|config| {
        Ok(deploy::rollback(
            ui.store.as_ref(),
            config,
            "rolled back from the dashboard",
            None,
        )?)
    });
    after(ui.clone(), viewer, agent, change).await
}

#[cfg(test)]
mod tests {
    use super::*;

    /// 0/1 rewards, `k` of `n` passing, spread evenly, one a millisecond.
    fn passes(k: usize, n: usize) -> Vec<(i64, f64)> {
        (0..n)
            .map(|i| (i as i64, if (i + 1) * k / n > i * k / n { 1.0 } else { 0.0 }))
            .collect()
    }

    #[test]
    fn the_promotion_view_says_which_rule_and_what_the_watcher_would_do() {
        let mut deployment = hone_config::DeploymentConfig::new("v1".into());
        deployment.canary_episodes = 24;
        let view = |d: &hone_config::DeploymentConfig, canary: &[(i64, f64)]| {
            PromotionView::new(
                d,
                &Online::of(
                    d,
                    0.95,
                    &hone_learn::watch::Context::first((0.0, 1.0)),
                    canary,
                    &passes(30, 60),
                ),
            )
        };
        // Default rule: too few, then promoted while not shown worse, and
        // rolled back when it is.
        assert_eq!(view(&deployment, &passes(9, 10)).call, "collecting episodes");
        assert_eq!(
            view(&deployment, &passes(17, 40)).call,
            "promotes at the watcher's next look"
        );
        assert_eq!(
            view(&deployment, &passes(5, 30)).call,
            "rolls back at the watcher's next look"
        );
        // With a margin, a slightly lower canary keeps collecting until the cap.
        deployment.promotion = PromotionRule::WithinMargin {
            margin: 0.05,
            max_episodes: 80,
        };
        let waiting = view(&deployment, &passes(17, 40));
        assert_eq!(waiting.call, "collecting: not yet shown within the margin");
        assert!(
            waiting.rule.contains("within 0.05 reward") && waiting.rule.contains("by 80 episodes"),
            "{}",
            waiting.rule
        );
        assert_eq!(
            (waiting.canary_episodes, waiting.needed, waiting.champion_episodes),
            (40, 24, 60)
        );
        assert!(waiting.p_within_margin.is_some_and(|p| p > 0.05));
        // Users decide: a canary level with the champion collects, one
        // clearly better is promoted, whatever canary_episodes says.
        deployment.promotion = PromotionRule::Sequential {
            max_episodes: 80,
            least_gain: 0.0,
            max_share: 0.5,
        };
        let level = view(&deployment, &passes(20, 40));
        assert_eq!(level.call, "collecting: neither shown better nor worse yet");
        assert!(level.rule.starts_with("users decide"), "{}", level.rule);
        assert!(level
            .sequential
            .as_deref()
            .is_some_and(|t| t.contains("evidence it is better")));
        assert_eq!(view(&deployment, &[]).call, "collecting episodes");
        assert_eq!(
            view(&deployment, &passes(20, 20)).call,
            "promotes at the watcher's next look"
        );
    }
}
