//! Cancelling a cycle (`hone learn cancel AGENT`): its open cycle moves to
//! `failed` with the reason, in one compare-and-swap like every other move,
//! so the learner running it finds the move made and stops there. A step
//! that runs long — a training job — asks `CycleStore::cycle_ended` as it
//! goes and stops its job; whatever it had not finished is dropped with the
//! cycle.

use crate::error::Result;
use hone_store::{CycleStore, Step};
use hone_types::time::now_ms;
use hone_types::{CycleInfo, CycleState, HistoryEvent};

/// What a cancelled cycle's error says.
pub const CANCELLED: &str = "cancelled by the operator";

/// Cancels `agent`'s open cycle, if it has one: the cycle as it was.
pub fn cancel(store: &dyn CycleStore, agent: &str) -> Result<Option<CycleInfo>> {
    // A learner may move the cycle on between the read and the swap: try
    // again from the step it moved to.
    for _ in 0..8 {
        let Some(cycle) = store.open_cycle(agent)? else {
            return Ok(None);
        };
        let now = now_ms();
        let line = format!("cycle {} cancelled at {} ({CANCELLED})", cycle.id, cycle.state.as_str());
        let event = HistoryEvent::new(agent, now, "cycle", line).cycle(&cycle.id);
        let step = Step {
            from: cycle.state,
            to: CycleState::Failed,
            detail: &cycle.detail,
            error: Some(CANCELLED),
        };
        if store.advance_cycle(&cycle.id, &step, &[event], now)? {
            return Ok(Some(cycle));
        }
    }
    Err(crate::error::LearnError::state(format!(
        "agent `{agent}`'s cycle kept moving on; try again"
    )))
}
