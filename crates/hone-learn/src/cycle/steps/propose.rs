//! propose: every configured optimiser proposes versions from the champion
//! and the cycle's train set; each new version is stored as a candidate of this
//! cycle (content-addressed, so a resumed step stores nothing twice). An
//! optimiser that fails is recorded and skipped; with no candidate at all
//! the cycle ends.

use super::{Learner, Stepped};
use crate::error::{LearnError, Result};
use crate::optimiser::{self, ProposeContext};
use hone_config::AgentConfig;
use hone_types::time::now_ms;
use hone_types::{Candidate, CandidateStatus, CycleDetail, CycleInfo, CycleState, HistoryEvent, VersionRecord};

pub(super) async fn run(
    learner: &Learner,
    agent: &AgentConfig,
    cycle: &CycleInfo,
    mut detail: CycleDetail,
) -> Result<Stepped> {
    let name = agent.name.as_str();
    let champion_id = super::champion(&detail)?.clone();
    let champion = learner
        .store
        .version(&champion_id)?
        .ok_or_else(|| LearnError::state(format!("champion {champion_id} is not stored")))?;
    let train = super::train(learner, &detail)?;
    let evaluator = learner.evaluator(agent)?;
    let progress = |m: &str| learner.say(name, m);
    let via = crate::eval::Target::of(agent);
    // A champion with no routes names no provider: "" gets `<data_dir>/adapters`.
    let adapters_dir = learner
        .config
        .adapters_dir(champion.spec.routes.first().map_or("", |r| r.provider.as_str()));
    let ctx = ProposeContext {
        config: &learner.config,
        agent,
        cycle_id: &cycle.id,
        champion_id: &champion_id,
        champion: &champion.spec,
        target: &train,
        store: learner.store.clone(),
        evaluator: &evaluator,
        via: &via,
        adapters_dir,
        progress: &progress,
    };
    let now = now_ms();
    let (mut versions, mut candidates, mut events) = (Vec::new(), Vec::new(), Vec::new());
    for spec in &agent.learn.optimisers {
        let optimiser = optimiser::from_spec(spec);
        let proposals = match optimiser.propose(&ctx).await {
            Ok(p) => p,
            Err(e) => {
                learner.say(name, &format!("optimiser {} failed: {e}", optimiser.name()));
                events.push(
                    HistoryEvent::new(name, now, "optimiser", format!("{} failed: {e}", optimiser.name()))
                        .cycle(&cycle.id),
                );
                continue;
            }
        };
        for p in proposals {
            let id = p.spec.id();
            if id == champion_id || candidates.iter().any(|c: &Candidate| c.version_id == id) {
                continue;
            }
            let line = format!("{} proposed {id}: {}", optimiser.name(), p.diff);
            learner.say(name, &format!("{} proposes {id}: {}", optimiser.name(), p.diff));
            versions.push(VersionRecord {
                id: id.clone(),
                agent: name.to_owned(),
                label: None,
                spec: p.spec,
                parent: Some(champion_id.clone()),
                created_by: optimiser.name().to_owned(),
                created_at: now,
            });
            events.push(
                HistoryEvent::new(name, now, "candidate", line)
                    .version(&id)
                    .cycle(&cycle.id),
            );
            candidates.push(Candidate {
                cycle_id: cycle.id.clone(),
                agent: name.to_owned(),
                version_id: id,
                parent: champion_id.clone(),
                optimiser: optimiser.name().to_owned(),
                diff: p.diff,
                status: CandidateStatus::Proposed,
                reason: None,
                scores: None,
                created_at: now,
                updated_at: now,
            });
        }
    }
    // Stored before the cycle moves on; a resumed propose stores the same
    // ids again, which keeps what exists.
    learner.store.add_candidates(&versions, &candidates, &events)?;
    let stored = learner.store.candidates(name, Some(&cycle.id))?;
    detail.candidates = Some(stored.len() as u64);
    if stored.is_empty() {
        detail.note = Some("no optimiser proposed a candidate".into());
        return Ok(Stepped::to(CycleState::Done, detail));
    }
    Ok(Stepped::next(cycle, detail))
}
