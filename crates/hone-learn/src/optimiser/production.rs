//! GRPO's production groups (`groups = "production"`): the train half's
//! production episodes themselves, one answer each, with the rewards the
//! users' own (possibly late) signals gave them, trained against a running
//! per-agent baseline. No rollout is run: live traffic is the data.
//!
//! Each call trains on its recorded prompt and completion tokens with the
//! sampler's logprobs and its per-call credit. An episode served by a
//! version with other weights than the champion's (an earlier champion, a
//! canary) is marked `off_policy`: the trainer corrects it against the
//! champion with truncated importance weights. Episodes served more than
//! `max_staleness` promotions back are dropped, as are episodes without
//! token ids (a remote provider) or without a reward.

use super::ProposeContext;
use crate::error::LearnError;
use hone_store::{CycleStore, EpisodeFilter};
use hone_types::{Instance, Route, VersionId};
use serde_json::{json, Value};
use std::collections::HashMap;

/// Production groups, ready for the trainer, and what was left out.
#[derive(Debug, Default)]
pub struct ProductionGroups {
    pub rows: Vec<Value>,
    /// Of those, groups served by other weights than the champion's.
    pub off_policy: u64,
    pub stale: u64,
    pub without_tokens: u64,
    pub without_reward: u64,
    /// The agent's mean reward over its recent production episodes: where
    /// the running baseline starts.
    pub baseline: Option<f64>,
}

/// Recent rewarded production episodes the starting baseline averages.
const BASELINE_WINDOW: usize = 200;

pub fn groups(
    ctx: &ProposeContext<'_>,
    items: &[Instance],
    max_staleness: u32,
) -> Result<ProductionGroups, LearnError> {
    let store = ctx.store.as_ref();
    let spec_version = &ctx.evaluator.rewarder.spec_version;
    let mut lineage = Lineage::new(ctx)?;
    let mut out = ProductionGroups {
        baseline: recent_mean_reward(store, &ctx.agent.name, spec_version)?,
        ..ProductionGroups::default()
    };
    for item in items {
        let Some(id) = &item.episode_id else { continue };
        let (Some(episode), Some(reward)) = (store.episode(id)?, store.reward(id, spec_version)?) else {
            out.without_reward += 1;
            continue;
        };
        let Some(served) = episode.calls.first().map(|c| c.version_id.clone()) else {
            continue;
        };
        if lineage.staleness(store, &served)? > max_staleness {
            out.stale += 1;
            continue;
        }
        let mut completions = Vec::new();
        for call in &episode.calls {
            let Some(tokens) = call.sampled_tokens() else { break };
            let credit = reward
                .calls
                .iter()
                .find(|c| c.call_id == call.id)
                .map_or(reward.value, |c| c.value);
            completions.push(json!({
                "prompt_tokens": tokens.prompt,
                "tokens": tokens.completion,
                "logprobs": tokens.logprobs,
                "reward": credit,
                "episode": id.to_string(),
                "off_policy": lineage.other_weights(store, &call.version_id)?,
            }));
        }
        if completions.len() != episode.calls.len() {
            out.without_tokens += 1;
            continue;
        }
        if completions.iter().any(|c| c["off_policy"] == true) {
            out.off_policy += 1;
        }
        out.rows
            .push(json!({"agent": ctx.agent.name, "completions": completions}));
    }
    Ok(out)
}

/// The mean reward of the agent's last [`BASELINE_WINDOW`] rewarded
/// production episodes.
fn recent_mean_reward(store: &dyn CycleStore, agent: &str, spec_version: &str) -> Result<Option<f64>, LearnError> {
    let mut rewards = std::collections::VecDeque::with_capacity(BASELINE_WINDOW);
    store.scan_episodes(
        &EpisodeFilter {
            agent: agent.to_owned(),
            spec_version: Some(spec_version.to_owned()),
            ..EpisodeFilter::default()
        },
        &mut |facts| {
            if let Some((value, _)) = facts.reward {
                if rewards.len() == BASELINE_WINDOW {
                    rewards.pop_front();
                }
                rewards.push_back(value);
            }
            Ok(())
        },
    )?;
    Ok((!rewards.is_empty()).then(|| rewards.iter().sum::<f64>() / rewards.len() as f64))
}

/// How far a serving version is from the champion being trained on.
struct Lineage {
    champion: VersionId,
    champion_weights: Option<Weights>,
    /// Earlier champions, most recent first.
    previous: Vec<VersionId>,
    weights: HashMap<VersionId, Option<Weights>>,
}

/// What a version's answers come from: its provider and model, its adapter.
type Weights = (String, Option<String>);

impl Lineage {
    fn new(ctx: &ProposeContext<'_>) -> Result<Self, LearnError> {
        let (deployment, _) = crate::deploy::current(ctx.store.as_ref(), ctx.agent)?;
        Ok(Self {
            champion: ctx.champion_id.clone(),
            champion_weights: ctx.champion.routes.first().map(weights_of),
            previous: deployment.previous.into_iter().rev().collect(),
            weights: Default::default(),
        })
    }

    /// Promotions back: 0 for the champion, `k` for the champion `k`
    /// promotions ago; any other version (a canary) one more than the
    /// version it was made from.
    fn staleness(&self, store: &dyn CycleStore, version: &VersionId) -> Result<u32, LearnError> {
        let mut at = version.clone();
        for extra in 0..8u32 {
            if at == self.champion {
                return Ok(extra);
            }
            if let Some(k) = self.previous.iter().position(|v| *v == at) {
                return Ok(extra + k as u32 + 1);
            }
            match store.version(&at)?.and_then(|r| r.parent) {
                Some(parent) => at = parent,
                None => break,
            }
        }
        Ok(u32::MAX)
    }

    /// The version ran on other weights (model or adapter) than the champion.
    fn other_weights(&mut self, store: &dyn CycleStore, version: &VersionId) -> Result<bool, LearnError> {
        if *version == self.champion {
            return Ok(false);
        }
        if !self.weights.contains_key(version) {
            let w = store
                .version(version)?
                .and_then(|r| r.spec.routes.first().map(weights_of));
            self.weights.insert(version.clone(), w);
        }
        Ok(self.weights.get(version) != Some(&self.champion_weights))
    }
}

fn weights_of(route: &Route) -> Weights {
    (format!("{}/{}", route.provider, route.model), route.adapter.clone())
}
