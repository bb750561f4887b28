//! The weight optimisers' replay buffer (`[agents.X.learn.replay]`): the
//! agent's most recent passing production episodes from before the cycle's
//! window, each call as its recorded prompt and completion tokens, mixed
//! into every training batch so a candidate keeps doing what earned its
//! champion those rewards. An episode the cycle gates on (its target or
//! regression set) is never replayed: the gate would see what was trained.

use crate::error::LearnError;
use hone_store::{CycleStore, EpisodeFilter};
use hone_types::{EpisodeId, SampledTokens};
use std::collections::HashSet;

/// Earlier successes, one entry per call, and how many episodes they span.
#[derive(Debug, Default, Clone)]
pub struct Replay {
    pub calls: Vec<SampledTokens>,
    pub episodes: u64,
    /// Passing episodes left out because a call carried no token ids.
    pub without_tokens: u64,
}

/// The last `size` passing episodes of `agent` started before `before`,
/// none of `exclude`.
pub fn buffer(
    store: &dyn CycleStore,
    agent: &str,
    spec_version: &str,
    before: Option<i64>,
    exclude: &HashSet<EpisodeId>,
    size: usize,
) -> Result<Replay, LearnError> {
    let mut replay = Replay::default();
    if size == 0 {
        return Ok(replay);
    }
    let filter = EpisodeFilter {
        agent: agent.to_owned(),
        until: before,
        spec_version: Some(spec_version.to_owned()),
        ..EpisodeFilter::default()
    };
    let passed = |f: &hone_store::EpisodeFacts| f.reward.is_some_and(|(_, passed)| passed) && !exclude.contains(&f.id);
    for facts in store.last_episodes(&filter, size, &passed)? {
        let Some(episode) = store.episode(&facts.id)? else {
            continue;
        };
        let calls: Option<Vec<SampledTokens>> = episode.calls.iter().map(|c| c.sampled_tokens()).collect();
        match calls {
            Some(calls) if !calls.is_empty() => {
                replay.calls.extend(calls);
                replay.episodes += 1;
            }
            _ => replay.without_tokens += 1,
        }
    }
    Ok(replay)
}
