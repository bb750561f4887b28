//! propose: the configured optimisers, all of them or those whose turn it
//! is ([`hone_config::LearnSpec::turn`]), propose versions from the champion
//! and the cycle's train set; each new version is stored as a candidate of this
//! cycle (content-addressed, so a resumed step stores nothing twice). An
//! optimiser that fails is recorded and skipped; with no candidate at all
//! the cycle ends. Optimisers that call models are metered against their own
//! budget and the cycle's; once the cycle's is spent, no further optimiser
//! runs. What each spent is stored with the cycle and its candidates.

use super::{Learner, Stepped};
use crate::ask::{Meter, Tally};
use crate::error::{LearnError, Result};
use crate::search::optimiser::replay::{self, Replay};
use crate::search::optimiser::{self, ProposeContext};
use hone_config::{AgentConfig, OptimiserSpec};
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
    let via = crate::search::eval::Target::of(agent);
    // A champion with no routes names no provider: "" gets `<data_dir>/adapters`.
    let adapters_dir = learner
        .config
        .adapters_dir(champion.spec.routes.first().map_or("", |r| r.provider.as_str()));
    let artefacts =
        hone_artefacts::Artefacts::new(&learner.config.artefacts).map_err(|e| LearnError::config(e.to_string()))?;
    let replay = replay_buffer(learner, agent, &detail, &evaluator.rewarder.spec_version)?;
    let now = now_ms();
    let (mut versions, mut candidates, mut events) = (Vec::new(), Vec::new(), Vec::new());
    let cycle_budget = Tally::new("the cycle's budget", agent.learn.budget);
    let evidence = std::sync::OnceLock::new();
    let per_cycle = agent.learn.optimisers_per_cycle;
    let mut turn = agent.learn.turn(cycle.number()).peekable();
    if agent.learn.takes_turns() {
        if let Some(first) = turn.peek() {
            learner.say(
                name,
                &format!(
                    "optimisers take turns, {per_cycle} a cycle: this cycle from {}",
                    optimiser::from_spec(first).name()
                ),
            );
        }
    }
    let mut proposers = 0;
    for spec in turn {
        if proposers == per_cycle {
            break;
        }
        let optimiser = optimiser::from_spec(spec);
        let meter = match spec.metered() {
            None => Meter::unmetered(),
            Some((route, budget)) => {
                if let Some(spent) = cycle_budget.exhausted() {
                    let line = format!("{} not run: {spent}", optimiser.name());
                    learner.say(name, &line);
                    events.push(HistoryEvent::new(name, now, "budget", line).cycle(&cycle.id));
                    continue;
                }
                let price = route.and_then(|route| {
                    learner
                        .config
                        .providers
                        .get(&route.provider)
                        .and_then(|p| p.price(&route.model))
                        .copied()
                });
                let own = Tally::new(format!("the {} optimiser's budget", optimiser.name()), budget);
                Meter::new(own, cycle_budget.clone(), price)
            }
        };
        let ctx = ProposeContext {
            config: &learner.config,
            agent,
            cycle,
            champion_id: &champion_id,
            champion: &champion.spec,
            target: &train,
            store: learner.store.clone(),
            evaluator: &evaluator,
            via: &via,
            adapters_dir: adapters_dir.clone(),
            artefacts: &artefacts,
            replay: &replay,
            meter: &meter,
            evidence: &evidence,
            progress: &progress,
        };
        let proposed = optimiser.propose(&ctx).await;
        let spent = meter.spent();
        if !spent.is_zero() {
            let line = format!("{} spent {spent}", optimiser.name());
            learner.say(name, &line);
            events.push(HistoryEvent::new(name, now, "budget", line).cycle(&cycle.id));
            detail.spend.entry(optimiser.name().to_owned()).or_default().add(spent);
        }
        let proposals = match proposed {
            Ok(p) => p,
            Err(e) => {
                // The whole chain: a trainer's failure says why in its cause
                // (TRL's last lines of output).
                let e = e.report();
                learner.say(name, &format!("optimiser {} failed: {e}", optimiser.name()));
                events.push(
                    HistoryEvent::new(name, now, "optimiser", format!("{} failed: {e}", optimiser.name()))
                        .cycle(&cycle.id),
                );
                continue;
            }
        };
        let before = candidates.len();
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
                training: p.training,
                spend: p.spend,
                created_at: now,
                updated_at: now,
            });
        }
        if candidates.len() > before {
            proposers += 1;
        } else if agent.learn.takes_turns() {
            learner.say(
                name,
                &format!("{} proposed nothing new; its turn passes on", optimiser.name()),
            );
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

/// The replay buffer when a weight optimiser will train: earlier successes
/// from before the cycle's window, none the cycle gates on.
fn replay_buffer(learner: &Learner, agent: &AgentConfig, detail: &CycleDetail, spec_version: &str) -> Result<Replay> {
    let trains = agent.learn.optimisers.iter().any(|o| {
        matches!(
            o,
            OptimiserSpec::Grpo(_) | OptimiserSpec::Dpo(_) | OptimiserSpec::Sft(_)
        )
    });
    if !trains || agent.learn.replay.size == 0 || agent.learn.replay.share == 0.0 {
        return Ok(Replay::default());
    }
    let mut gated = std::collections::HashSet::new();
    for dataset in [&detail.target, &detail.regression].into_iter().flatten() {
        gated.extend(
            learner
                .store
                .dataset_items(dataset)?
                .into_iter()
                .filter_map(|i| i.episode_id),
        );
    }
    let replay = replay::buffer(
        learner.store.as_ref(),
        &agent.name,
        spec_version,
        detail.since,
        &gated,
        agent.learn.replay.size,
    )?;
    learner.say(
        &agent.name,
        &format!(
            "replay: {} earlier successful episodes ({} calls) for the weight optimisers{}",
            replay.episodes,
            replay.calls.len(),
            if replay.without_tokens > 0 {
                format!("; {} without token ids left out", replay.without_tokens)
            } else {
                String::new()
            }
        ),
    );
    Ok(replay)
}
