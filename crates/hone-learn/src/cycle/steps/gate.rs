//! gate: each evaluated candidate compared pairwise with the champion on
//! the target and regression sets (with re-runs of disagreeing instances),
//! its gain judged over both; it passes only when the gate's rules hold,
//! or is pruned with the reasons. What the gate can see of the reward
//! offline ([`gate::Sight`]) is read off the champion's runs.

use super::{evaluate_on, stored_results, Learner, Stepped};
use crate::error::Result;
use crate::search::compare::{compare, Comparison};
use crate::search::gate::{self, GateInput};
use hone_config::{AgentConfig, PromotionRule};
use hone_store::CandidateUpdate;
use hone_types::time::now_ms;
use hone_types::{CandidateScores, CandidateStatus, CycleDetail, CycleInfo, HistoryEvent, InstanceResult};
use serde_json::json;

pub(super) async fn run(
    learner: &Learner,
    agent: &AgentConfig,
    cycle: &CycleInfo,
    detail: CycleDetail,
) -> Result<Stepped> {
    let name = agent.name.as_str();
    let bench = super::Bench::of(learner, agent, &detail)?;
    let (evaluator, via, target, champion) = (&bench.evaluator, &bench.via, &bench.target, &bench.champion);
    let spec = &agent.learn.gate;
    let (champ_summary, champ_results) = evaluate_on(learner, &bench, target, champion, "champion").await?;
    let sight = sight(learner, agent, &bench, &champ_results)?;
    if sight == gate::Sight::UsersPredicted {
        learner.say(
            name,
            "no offline run carries a user's signal: the reward model learned from users' signals predicts them",
        );
    }
    if let gate::Sight::WithoutUsers { online_test } = sight {
        learner.say(
            name,
            &format!(
                "no offline run carries a user's signal: the gate sees critics, the judge and penalties only{}",
                if online_test {
                    "; users decide each candidate's gain online (promotion = \"sequential\")"
                } else {
                    ", and no online test is configured to decide the rest (promotion = \"sequential\")"
                }
            ),
        );
    }
    // The regression set's stored runs, the champion's read once.
    let champ_regression = match &bench.regression {
        Some(r) => stored_results(learner, &bench, r, champion)?.1,
        None => Vec::new(),
    };
    for c in learner.store.candidates(name, Some(&cycle.id))? {
        if c.status != CandidateStatus::Evaluated {
            continue;
        }
        let noop = |_: &str, _| {};
        let options = &bench.options;
        let pair = (champion, &c.version_id);
        let mut comparisons: Vec<Comparison> = vec![
            compare(
                evaluator,
                target,
                pair,
                via,
                options,
                (spec.reruns, spec.confidence),
                &noop,
            )
            .await?,
        ];
        if let Some(r) = &bench.regression {
            comparisons.push(compare(evaluator, r, pair, via, options, (spec.reruns, spec.confidence), &noop).await?);
        }
        let (cand_summary, cand_results) = stored_results(learner, &bench, target, &c.version_id)?;
        let cand_regression = match &bench.regression {
            Some(r) => stored_results(learner, &bench, r, &c.version_id)?.1,
            None => Vec::new(),
        };
        let diffs = gate::paired_diffs(
            &[(&champ_results, &cand_results), (&champ_regression, &cand_regression)],
            options.samples,
        );
        let refs: Vec<&Comparison> = comparisons.iter().collect();
        let decision = gate::decide(&GateInput {
            spec,
            objective: &agent.learn.objective,
            champion: &champ_summary,
            candidate: &cand_summary,
            diffs: &diffs,
            comparisons: &refs,
            sight,
        });
        let (status, reason) = if decision.passed {
            (
                CandidateStatus::Gated,
                format!("passed the gate: {}", decision.evidence),
            )
        } else {
            (
                CandidateStatus::Pruned,
                format!("{}{}", crate::search::gate::PRUNED, decision.reasons.join("; ")),
            )
        };
        learner.say(name, &format!("{}: {reason}", c.version_id));
        let verdicts: Vec<_> = comparisons
            .iter()
            .map(|c| {
                let confirmed: Vec<_> = c
                    .regressions
                    .iter()
                    .filter(|f| f.confirmed)
                    .map(|f| &f.instance_id)
                    .collect();
                json!({"dataset": c.dataset, "verdict": c.verdict, "regressions": confirmed})
            })
            .collect();
        let now = now_ms();
        let event = HistoryEvent::new(name, now, "gate", format!("{}: {reason}", c.version_id))
            .version(&c.version_id)
            .cycle(&cycle.id)
            .evidence(json!({"evidence": decision.evidence, "reasons": decision.reasons, "verdicts": verdicts}));
        let update = CandidateUpdate {
            cycle_id: cycle.id.clone(),
            version_id: c.version_id.clone(),
            status,
            reason: Some(reason),
            // The gain the gate judged, typed, beside the evaluation's scores.
            scores: c.scores.clone().map(|s| CandidateScores {
                gate_gain: decision.gain,
                users_decide: decision.users_decide,
                offline_blind: matches!(sight, gate::Sight::WithoutUsers { .. }),
                ..s
            }),
        };
        learner.store.update_candidates(&[update], &[event], now)?;
    }
    Ok(Stepped::next(cycle, detail))
}

/// What the offline runs show of the reward: all of it, unless the spec
/// weighs users' signals and none of the champion's runs got one — then
/// the reward model's predictions where one stands in, else what remains.
fn sight(learner: &Learner, agent: &AgentConfig, bench: &super::Bench, runs: &[InstanceResult]) -> Result<gate::Sight> {
    if agent.reward.signals.is_empty() {
        return Ok(gate::Sight::Whole);
    }
    for run in runs {
        if learner
            .store
            .episode(&run.episode_id)?
            .is_some_and(|e| !e.signals.is_empty())
        {
            return Ok(gate::Sight::Whole);
        }
    }
    if bench.evaluator.rewarder.stand_in.is_some() {
        return Ok(gate::Sight::UsersPredicted);
    }
    Ok(gate::Sight::WithoutUsers {
        online_test: matches!(agent.deployment.promotion, PromotionRule::Sequential { .. }),
    })
}
