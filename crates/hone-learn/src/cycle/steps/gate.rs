//! gate: each evaluated candidate compared pairwise with the champion on
//! the target and regression sets (with re-runs of disagreeing instances),
//! its gain judged over both; it passes only when the gate's rules hold,
//! or is pruned with the reasons.

use super::{evaluate_on, stored_results, Learner, Stepped};
use crate::compare::{compare, Comparison};
use crate::error::Result;
use crate::gate::{self, GateInput};
use hone_config::AgentConfig;
use hone_store::CandidateUpdate;
use hone_types::time::now_ms;
use hone_types::{CandidateScores, CandidateStatus, CycleDetail, CycleInfo, HistoryEvent};
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
        });
        let (status, reason) = if decision.passed {
            (
                CandidateStatus::Gated,
                format!("passed the gate: {}", decision.evidence),
            )
        } else {
            (
                CandidateStatus::Pruned,
                format!("pruned by the gate: {}", decision.reasons.join("; ")),
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
                ..s
            }),
        };
        learner.store.update_candidates(&[update], &[event], now)?;
    }
    Ok(Stepped::next(cycle, detail))
}
