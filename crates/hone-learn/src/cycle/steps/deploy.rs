//! deploy: under a manual policy, the front's candidates await `hone
//! approve`; under the auto rule, the candidate with the largest gain that
//! meets the rule's minimum gain and cost ratio becomes the canary. A
//! candidate the gate left to users (no offline run saw their signals) has
//! no offline gain to meet a minimum with: within the cost ratio it is
//! eligible, after any with a shown gain. One canary runs at a time; the
//! others wait on the front and are proposed afresh from the next champion.

use super::{Learner, Stepped};
use crate::error::Result;
use crate::release::deploy;
use hone_config::{AgentConfig, DeploymentPolicy};
use hone_types::time::now_ms;
use hone_types::{Candidate, CandidateScores, CandidateStatus, CycleDetail, CycleInfo, CycleState, HistoryEvent};

pub(super) async fn run(
    learner: &Learner,
    agent: &AgentConfig,
    cycle: &CycleInfo,
    mut detail: CycleDetail,
) -> Result<Stepped> {
    let name = agent.name.as_str();
    let champion = super::champion_scores(&detail)?.clone();
    let front: Vec<Candidate> = learner
        .store
        .candidates(name, Some(&cycle.id))?
        .into_iter()
        .filter(|c| c.status == CandidateStatus::OnFront)
        .collect();
    let now = now_ms();
    let mut events = Vec::new();
    let mut record = |c: &Candidate, line: String| {
        learner.say(name, &line);
        events.push(
            HistoryEvent::new(name, now, "deploy", line)
                .version(&c.version_id)
                .cycle(&cycle.id),
        );
    };
    let decision = match &agent.deployment.policy {
        DeploymentPolicy::Manual => {
            for c in &front {
                record(
                    c,
                    format!("{} awaits approval: hone approve {}", c.version_id, c.version_id),
                );
            }
            format!("manual: {} candidate(s) await approval", front.len())
        }
        DeploymentPolicy::Auto {
            min_gain,
            max_cost_ratio,
        } => {
            let mut eligible: Vec<(&Candidate, f64, f64)> = Vec::new();
            for c in &front {
                let scores = c.scores.clone().unwrap_or_default();
                let (gain, ratio) = gain_and_cost_ratio(&champion, &scores);
                if (scores.users_decide || gain + 1e-12 >= *min_gain) && ratio <= *max_cost_ratio {
                    // Shown gains first, largest first; users' candidates after them.
                    let rank = if scores.users_decide { f64::NEG_INFINITY } else { gain };
                    eligible.push((c, rank, ratio));
                } else {
                    record(
                        c,
                        format!(
                            "{} not auto-deployed: gain {gain:+.3} (min {min_gain}), cost ratio {ratio:.2} (max {max_cost_ratio})",
                            c.version_id
                        ),
                    );
                }
            }
            eligible.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.2.total_cmp(&b.2)));
            match eligible.first() {
                Some((c, rank, ratio)) => {
                    let rule = if rank.is_finite() {
                        format!("auto rule (gain {rank:+.3} ≥ {min_gain}, cost ratio {ratio:.2} ≤ {max_cost_ratio})")
                    } else {
                        format!("auto rule (users decide its gain online; cost ratio {ratio:.2} ≤ {max_cost_ratio})")
                    };
                    let change = deploy::start_canary(
                        &learner.config,
                        &learner.gateway,
                        learner.store.as_ref(),
                        agent,
                        c,
                        &rule,
                    )
                    .await?;
                    let line = change.line().to_owned();
                    learner.say(name, &line);
                    line
                }
                None => "auto: no candidate met the rule".to_owned(),
            }
        }
    };
    detail.decision = Some(decision);
    Ok(Stepped::to(CycleState::Done, detail).with_events(events))
}

/// A candidate's reward gain over the champion and its cost relative to the
/// champion's (infinite when the champion is free and it is not).
fn gain_and_cost_ratio(champion: &CandidateScores, candidate: &CandidateScores) -> (f64, f64) {
    let gain = candidate.target_mean.unwrap_or(f64::MIN) - champion.target_mean.unwrap_or(0.0);
    let ratio = if champion.mean_cost_usd > 0.0 {
        candidate.mean_cost_usd / champion.mean_cost_usd
    } else if candidate.mean_cost_usd > 0.0 {
        f64::INFINITY
    } else {
        1.0
    };
    (gain, ratio)
}
