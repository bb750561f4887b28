//! evaluate: the champion and every proposed candidate replayed over the
//! target and regression sets (runs resume by id); the candidates' scores
//! are stored with them, the champion's in the cycle detail.

use super::{evaluate_on, Learner, Stepped};
use crate::error::Result;
use crate::eval::EvalSummary;
use crate::gate;
use hone_config::AgentConfig;
use hone_store::CandidateUpdate;
use hone_types::time::now_ms;
use hone_types::{CandidateScores, CandidateStatus, CycleDetail, CycleInfo, HistoryEvent};
use serde_json::json;

fn scores_of(s: &EvalSummary, regression: Option<&EvalSummary>) -> CandidateScores {
    CandidateScores {
        target_mean: s.mean_score,
        target_pass_rate: s.pass_rate,
        regression_pass_rate: regression.map_or(1.0, |r| r.pass_rate),
        mean_cost_usd: s.mean_cost_usd,
        mean_latency_ms: s.mean_latency_ms,
        errors: s.errors,
        rates: gate::rates(s),
        gate_gain: None,
    }
}

pub(super) async fn run(
    learner: &Learner,
    agent: &AgentConfig,
    cycle: &CycleInfo,
    mut detail: CycleDetail,
) -> Result<Stepped> {
    let name = agent.name.as_str();
    let bench = super::Bench::of(learner, agent, &detail)?;
    let (target, regression, champion) = (&bench.target, &bench.regression, &bench.champion);
    let (champ_target, _) = evaluate_on(learner, &bench, target, champion, "champion").await?;
    let champ_regression = match regression {
        Some(r) => Some(evaluate_on(learner, &bench, r, champion, "champion").await?.0),
        None => None,
    };
    detail.champion_scores = Some(scores_of(&champ_target, champ_regression.as_ref()));
    let now = now_ms();
    for c in learner.store.candidates(name, Some(&cycle.id))? {
        if c.status != CandidateStatus::Proposed {
            continue;
        }
        let (t, _) = evaluate_on(learner, &bench, target, &c.version_id, "candidate").await?;
        let r = match regression {
            Some(r) => Some(evaluate_on(learner, &bench, r, &c.version_id, "candidate").await?.0),
            None => None,
        };
        let scores = scores_of(&t, r.as_ref());
        let event = HistoryEvent::new(
            name,
            now,
            "evaluation",
            format!(
                "{} on {}: mean {} pass {:.0}%, regression pass {:.0}%, cost ${:.6}",
                c.version_id,
                target.id,
                t.mean_score.map_or("-".into(), |m| format!("{m:.3}")),
                t.pass_rate * 100.0,
                scores.regression_pass_rate * 100.0,
                t.mean_cost_usd
            ),
        )
        .version(&c.version_id)
        .cycle(&cycle.id)
        .evidence(json!({"target": t, "regression": r}));
        let update = CandidateUpdate {
            cycle_id: cycle.id.clone(),
            version_id: c.version_id.clone(),
            status: CandidateStatus::Evaluated,
            reason: None,
            scores: Some(scores),
        };
        learner.store.update_candidates(&[update], &[event], now)?;
    }
    Ok(Stepped::next(cycle, detail))
}
