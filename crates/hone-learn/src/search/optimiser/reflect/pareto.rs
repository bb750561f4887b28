//! GEPA's per-instance Pareto pool, across cycles: the prompts proposed in
//! earlier cycles that were best on at least one instance of the set they
//! were gated on — kept even when the gate pruned them, since a prompt that
//! loses on average may hold the one rule another lacks. The `prompt`
//! optimiser draws parents from the pool (weighted by instances won) and
//! merges pool prompts with the champion's.

use crate::error::Result;
use crate::search::eval::{run_id, Target};
use hone_store::CycleStore;
use hone_types::{CycleState, VersionId};
use std::collections::BTreeMap;

/// A prompt of the pool.
#[derive(Debug, Clone, PartialEq)]
pub struct PoolEntry {
    pub version: VersionId,
    pub system: String,
    /// The prompt it was proposed from (its cycle's champion's).
    pub ancestor: String,
    /// Instances of its cycle's target set on which it was best and beat
    /// that cycle's champion.
    pub wins: usize,
    pub cycle: String,
}

/// The rows (candidates) that are best on at least one column (instance)
/// and not dominated by another row; `scores[row][column]`.
pub fn front(scores: &[Vec<f64>]) -> Vec<usize> {
    let columns = scores.iter().map(Vec::len).max().unwrap_or(0);
    let at = |r: usize, c: usize| scores[r].get(c).copied().unwrap_or(0.0);
    let mut best = vec![false; scores.len()];
    for c in 0..columns {
        let top = (0..scores.len()).map(|r| at(r, c)).fold(f64::NEG_INFINITY, f64::max);
        for (r, b) in best.iter_mut().enumerate() {
            *b |= at(r, c) == top;
        }
    }
    let dominates =
        |a: usize, b: usize| (0..columns).all(|c| at(a, c) >= at(b, c)) && (0..columns).any(|c| at(a, c) > at(b, c));
    (0..scores.len())
        .filter(|&r| best[r] && !(0..scores.len()).any(|o| o != r && dominates(o, r)))
        .collect()
}

/// The pool from the agent's last `cycles` finished cycles.
pub fn pool(store: &dyn CycleStore, agent: &str, via: &Target, cycles: usize) -> Result<Vec<PoolEntry>> {
    let mut out = Vec::new();
    for cycle in store.cycles(Some(agent), cycles)? {
        if cycle.state != CycleState::Done {
            continue;
        }
        let (Some(champion), Some(target)) = (&cycle.detail.champion, &cycle.detail.target) else {
            continue;
        };
        let prompts: Vec<_> = store
            .candidates(agent, Some(&cycle.id))?
            .into_iter()
            .filter(|c| c.optimiser == "prompt" && c.scores.is_some())
            .collect();
        if prompts.is_empty() {
            continue;
        }
        let Some(ancestor) = store.version(champion)? else {
            continue;
        };
        let mut rows = vec![champion.clone()];
        rows.extend(prompts.iter().map(|c| c.version_id.clone()));
        let mut instances: BTreeMap<String, usize> = BTreeMap::new();
        let mut per_row: Vec<BTreeMap<String, (f64, u32)>> = Vec::new();
        for version in &rows {
            let mut means: BTreeMap<String, (f64, u32)> = BTreeMap::new();
            for r in store.eval_results(&run_id(target, version, via))? {
                let e = means.entry(r.instance_id.clone()).or_default();
                e.0 += r.score.unwrap_or(0.0);
                e.1 += 1;
                let next = instances.len();
                instances.entry(r.instance_id).or_insert(next);
            }
            per_row.push(means);
        }
        let mut scores = vec![vec![0.0; instances.len()]; rows.len()];
        for (row, means) in per_row.iter().enumerate() {
            for (instance, (sum, n)) in means {
                scores[row][instances[instance]] = sum / f64::from((*n).max(1));
            }
        }
        for row in front(&scores) {
            if row == 0 {
                continue;
            }
            let wins = (0..instances.len())
                .filter(|&c| scores[row][c] > scores[0][c] && scores.iter().all(|o| o[c] <= scores[row][c]))
                .count();
            let Some(version) = store.version(&rows[row])? else {
                continue;
            };
            if wins == 0 {
                continue;
            }
            out.push(PoolEntry {
                version: rows[row].clone(),
                system: version.spec.system.unwrap_or_default(),
                ancestor: ancestor.spec.system.clone().unwrap_or_default(),
                wins,
                cycle: cycle.id.clone(),
            });
        }
    }
    out.sort_by(|a, b| {
        b.wins
            .cmp(&a.wins)
            .then_with(|| a.version.as_str().cmp(b.version.as_str()))
    });
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::front;

    #[test]
    fn the_front_keeps_every_prompt_best_somewhere_and_drops_the_dominated() {
        let scores = vec![
            vec![1.0, 0.0, 0.0, 1.0], // champion: best on 0 and 3
            vec![1.0, 1.0, 0.0, 0.0], // best on 1
            vec![0.0, 0.0, 1.0, 0.0], // best on 2 only: worse on average, still kept
            vec![1.0, 0.5, 0.0, 0.0], // best nowhere alone, dominated by row 1
            vec![1.0, 1.0, 0.0, 0.0], // ties row 1 everywhere: kept beside it
        ];
        assert_eq!(front(&scores), vec![0, 1, 2, 4]);
        assert_eq!(front(&[]), Vec::<usize>::new());
    }
}
