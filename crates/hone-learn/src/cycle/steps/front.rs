//! front: the gated candidates and the champion as points (reward, cost,
//! latency); a candidate dominated by another point under the agent's
//! objective is pruned with the point that beat it, the rest are on the
//! Pareto front. A candidate the gate left to users has no offline reward
//! to be dominated on: it is on the front, for users to judge.

use super::{Learner, Stepped};
use crate::error::Result;
use crate::search::front::{dominated_by, Point};
use hone_config::AgentConfig;
use hone_store::CandidateUpdate;
use hone_types::time::now_ms;
use hone_types::{Candidate, CandidateScores, CandidateStatus, CycleDetail, CycleInfo, HistoryEvent};

pub(super) fn run(learner: &Learner, agent: &AgentConfig, cycle: &CycleInfo, detail: CycleDetail) -> Result<Stepped> {
    let name = agent.name.as_str();
    let champion = super::champion_scores(&detail)?;
    let champion_id = super::champion(&detail)?;
    let gated: Vec<Candidate> = learner
        .store
        .candidates(name, Some(&cycle.id))?
        .into_iter()
        .filter(|c| c.status == CandidateStatus::Gated)
        .collect();
    let point = |s: &CandidateScores| Point {
        reward: s.target_mean.unwrap_or(f64::MIN),
        cost: s.mean_cost_usd,
        latency: s.mean_latency_ms,
    };
    let mut points = vec![point(champion)];
    let mut labels = vec![format!("champion {champion_id}")];
    for c in &gated {
        points.push(point(&c.scores.clone().unwrap_or_default()));
        labels.push(c.version_id.to_string());
    }
    let dominated = dominated_by(&agent.learn.objective, &points);
    let now = now_ms();
    let (mut updates, mut events) = (Vec::new(), Vec::new());
    for (i, c) in gated.iter().enumerate() {
        let users_decide = c.scores.as_ref().is_some_and(|s| s.users_decide);
        let (status, reason) = match dominated[i + 1] {
            _ if users_decide => (
                CandidateStatus::OnFront,
                "on the front: its reward is for users to judge online".to_owned(),
            ),
            Some(j) => (
                CandidateStatus::Pruned,
                format!(
                    "dominated by {} (reward {:.3} vs {:.3}, cost ${:.6} vs ${:.6})",
                    labels[j],
                    points[j].reward,
                    points[i + 1].reward,
                    points[j].cost,
                    points[i + 1].cost
                ),
            ),
            None => (CandidateStatus::OnFront, "on the Pareto front".to_owned()),
        };
        learner.say(name, &format!("{}: {reason}", c.version_id));
        events.push(
            HistoryEvent::new(name, now, "front", format!("{}: {reason}", c.version_id))
                .version(&c.version_id)
                .cycle(&cycle.id),
        );
        updates.push(CandidateUpdate {
            cycle_id: cycle.id.clone(),
            version_id: c.version_id.clone(),
            status,
            reason: Some(reason),
            scores: None,
        });
    }
    learner.store.update_candidates(&updates, &events, now)?;
    Ok(Stepped::next(cycle, detail))
}
