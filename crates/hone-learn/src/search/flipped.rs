//! Hard-example mining from recent gates: the instances on which a recent
//! cycle's champion and one of its candidates disagreed (one passing in most
//! of its samples, the other failing in most — `compare`'s flip, either
//! way). Those the champion failed and a candidate solved are *learnable*:
//! they join the next train set, where a group of samples on them has a
//! spread of rewards to learn from (an instance every version passes, or
//! every version fails, gives GRPO no advantage at all). Those the champion
//! passed and a candidate broke are *fragile*: they join the next regression
//! set, so the next gate checks them whether or not the traffic sample drew
//! them again. As the agent improves, easy cases stop flipping and these
//! are what is left: the datasets get harder with it.

use crate::search::compare::{flipped, sampled};
use crate::search::eval::{run_id, Target};
use hone_store::{CycleStore, StoreError};
use hone_types::{CycleState, Instance};
use std::collections::HashSet;

/// The flipped instances of the recent gates, most recent cycle first.
#[derive(Debug, Default)]
pub struct Flipped {
    /// The champion failed them, a candidate solved them.
    pub learnable: Vec<Instance>,
    /// The champion passed them, a candidate broke them.
    pub fragile: Vec<Instance>,
    /// The cycles they came from.
    pub cycles: Vec<String>,
}

impl Flipped {
    /// Every flipped instance's id.
    pub fn ids(&self) -> HashSet<String> {
        self.learnable
            .iter()
            .chain(&self.fragile)
            .map(|i| i.id.clone())
            .collect()
    }
}

/// Mines the last `cycles` finished cycles of `agent` before `current`
/// (their gate sets, as evaluated `via` with `samples` samples each), at
/// most `limit` instances of each kind.
pub fn recently_flipped(
    store: &dyn CycleStore,
    agent: &str,
    current: &str,
    (cycles, limit): (usize, usize),
    via: &Target,
    samples: u32,
) -> Result<Flipped, StoreError> {
    let mut out = Flipped::default();
    if cycles == 0 || limit == 0 {
        return Ok(out);
    }
    let mut seen = HashSet::new();
    let finished = store
        .cycles(Some(agent), cycles.saturating_mul(4).max(8))?
        .into_iter()
        .filter_map(|c| {
            let champion = c.detail.champion.clone()?;
            (c.id != current && c.state == CycleState::Done).then_some((c, champion))
        })
        .take(cycles);
    for (cycle, champion) in finished {
        let champion = &champion;
        let candidates = store.candidates(agent, Some(&cycle.id))?;
        let mut found = false;
        for set in [&cycle.detail.target, &cycle.detail.regression].into_iter().flatten() {
            let scores =
                |version| Ok::<_, StoreError>(sampled(&store.eval_results(&run_id(set, version, via))?, samples));
            let champion_scores = scores(champion)?;
            if champion_scores.is_empty() {
                continue;
            }
            let (mut learnable, mut fragile) = (HashSet::new(), HashSet::new());
            for candidate in &candidates {
                let candidate_scores = scores(&candidate.version_id)?;
                for (id, a) in &champion_scores {
                    match candidate_scores.get(id) {
                        Some(b) if flipped(b, a) => learnable.insert(id.clone()),
                        Some(b) if flipped(a, b) => fragile.insert(id.clone()),
                        _ => false,
                    };
                }
            }
            if learnable.is_empty() && fragile.is_empty() {
                continue;
            }
            for item in store.dataset_items(set)? {
                let kind = if learnable.contains(&item.id) {
                    &mut out.learnable
                } else if fragile.contains(&item.id) {
                    &mut out.fragile
                } else {
                    continue;
                };
                if kind.len() < limit && seen.insert(item.id.clone()) {
                    kind.push(item);
                    found = true;
                }
            }
        }
        if found {
            out.cycles.push(cycle.id.clone());
        }
    }
    Ok(out)
}
