//! The loop of one cycle: open (or resume) it, run the step it is in, and
//! persist the move to the next step with the step's history in one
//! transaction — or the failure, keeping the detail as it was. A move that
//! another learner made first is noticed and not repeated.

use super::steps::{self, Stepped};
use super::Learner;
use crate::error::{LearnError, Result};
use hone_store::Step;
use hone_types::time::now_ms;
use hone_types::{CycleInfo, CycleState, HistoryEvent};

pub(super) async fn run_cycle(learner: &Learner, agent: &str, trigger: &str) -> Result<CycleInfo> {
    let agent_config = learner.agent(agent)?;
    let resuming = learner.store.open_cycle(agent)?.is_some();
    let mut cycle = learner.store.start_cycle(agent, trigger, now_ms())?;
    if resuming {
        learner.say(
            agent,
            &format!("resuming cycle {} at {}", cycle.id, cycle.state.as_str()),
        );
    } else {
        learner.say(agent, &format!("cycle {} started ({trigger})", cycle.id));
    }
    while !cycle.state.is_finished() {
        if learner.pause_at == Some(cycle.state) {
            learner.say(
                agent,
                &format!("paused at {} (HONE_LEARN_PAUSE_AT)", cycle.state.as_str()),
            );
            tokio::time::sleep(std::time::Duration::from_secs(3600)).await;
        }
        let from = cycle.state;
        learner.say(agent, &format!("[{}] {}", cycle.id, from.as_str()));
        let result = steps::run(learner, agent_config, &cycle).await;
        let advanced = persist(learner, &cycle, from, result)?;
        cycle = learner
            .store
            .cycle(&cycle.id)?
            .ok_or_else(|| LearnError::state(format!("cycle {} vanished", cycle.id)))?;
        if !advanced {
            let by = if cycle.error.as_deref() == Some(super::cancel::CANCELLED) {
                "cancelled"
            } else {
                "moved on by another learner"
            };
            learner.say(agent, &format!("cycle {} was {by}", cycle.id));
        }
    }
    learner.say(agent, &format!("cycle {} {}", cycle.id, cycle.state.as_str()));
    Ok(cycle)
}

/// Stores what the step decided (or how it failed); false when another
/// learner moved the cycle first.
fn persist(learner: &Learner, cycle: &CycleInfo, from: CycleState, result: Result<Stepped>) -> Result<bool> {
    let agent = cycle.agent.as_str();
    let now = now_ms();
    let advanced = match result {
        Ok(s) => {
            let mut events = s.events;
            if s.to == CycleState::Done {
                events.push(
                    HistoryEvent::new(agent, now, "cycle", format!("cycle {} done", cycle.id))
                        .cycle(&cycle.id)
                        .evidence(serde_json::to_value(&s.detail).unwrap_or_default()),
                );
            }
            let step = Step {
                from,
                to: s.to,
                detail: &s.detail,
                error: None,
            };
            learner.store.advance_cycle(&cycle.id, &step, &events, now)?
        }
        Err(error) => {
            let line = format!("cycle {} failed at {}: {}", cycle.id, from.as_str(), error.report());
            learner.say(agent, &line);
            let event = HistoryEvent::new(agent, now, "cycle", line).cycle(&cycle.id);
            let error = error.report();
            let step = Step {
                from,
                to: CycleState::Failed,
                detail: &cycle.detail,
                error: Some(&error),
            };
            learner.store.advance_cycle(&cycle.id, &step, &[event], now)?
        }
    };
    Ok(advanced)
}
