//! evaluate: the champion and every proposed candidate replayed over the
//! target and regression sets, all at once (runs resume by id); the
//! candidates' scores are stored with them, the champion's in the cycle
//! detail.

use super::{evaluate_on, Learner, Stepped};
use crate::error::{LearnError, Result};
use crate::search::eval::EvalSummary;
use crate::search::gate;
use hone_config::AgentConfig;
use hone_store::CandidateUpdate;
use hone_types::time::now_ms;
use hone_types::{CandidateScores, CandidateStatus, CycleDetail, CycleInfo, HistoryEvent};
use serde_json::json;

fn scores_of(s: &EvalSummary, regression: Option<&EvalSummary>) -> CandidateScores {
    CandidateScores {
        target_mean: s.mean_score,
        target_pass_rate: s.pass_rate,
        regression_pass_rate: regression.map(|r| r.pass_rate),
        mean_cost_usd: s.mean_cost_usd,
        mean_latency_ms: s.mean_latency_ms,
        errors: s.errors,
        rates: gate::rates(s),
        gate_gain: None,
        users_decide: false,
        offline_blind: false,
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
    let candidates: Vec<_> = learner
        .store
        .candidates(name, Some(&cycle.id))?
        .into_iter()
        .filter(|c| c.status == CandidateStatus::Proposed)
        .collect();
    // Every version on both sets at once: the embedded engine decodes their
    // episodes in shared batches (rows grouped by adapter), which fills the
    // batches a single run leaves part empty between its episodes' turns.
    let versions =
        std::iter::once((&bench.champion, "champion")).chain(candidates.iter().map(|c| (&c.version_id, "candidate")));
    let runs = versions.map(|(version, label)| {
        let bench = &bench;
        let regression = async move {
            match &bench.regression {
                Some(r) => Ok(Some(evaluate_on(learner, bench, r, version, label).await?.0)),
                None => Ok::<_, LearnError>(None),
            }
        };
        async move {
            let (target, regression) =
                futures::try_join!(evaluate_on(learner, bench, &bench.target, version, label), regression)?;
            Ok::<_, LearnError>((target.0, regression))
        }
    });
    let mut evaluated = futures::future::try_join_all(runs).await?.into_iter();
    let (champ_target, champ_regression) = evaluated
        .next()
        .ok_or_else(|| LearnError::state("the champion was not evaluated"))?;
    detail.champion_scores = Some(scores_of(&champ_target, champ_regression.as_ref()));
    let target = &bench.target;
    let now = now_ms();
    for (c, (t, r)) in candidates.iter().zip(evaluated) {
        let scores = scores_of(&t, r.as_ref());
        let event = HistoryEvent::new(
            name,
            now,
            "evaluation",
            format!(
                "{} on {}: mean {} pass {:.0}%, regression pass {}, cost ${:.6}",
                c.version_id,
                target.id,
                t.mean_score.map_or("-".into(), |m| format!("{m:.3}")),
                t.pass_rate * 100.0,
                scores
                    .regression_pass_rate
                    .map_or("- (no regression set)".into(), |r| format!("{:.0}%", r * 100.0)),
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
