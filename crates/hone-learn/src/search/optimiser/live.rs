//! GRPO's groups from live traffic, no rollout run:
//! - `groups = "production"`: the train half's production episodes
//!   themselves, one answer each, with the rewards the users' own (possibly
//!   late) signals gave them, trained against a running per-agent baseline;
//! - `groups = "shadow"`: each of their calls that has shadow samples, as
//!   one group: the served answer and the samples, scored alike by the
//!   reward spec's critics and judge (`Rewarder::shadow_scores`).
//!
//! Each call trains on its recorded prompt and completion tokens with the
//! sampler's logprobs. An episode served by a version with other weights
//! than the champion's (an earlier champion, a canary) is marked
//! `off_policy`: the trainer corrects it against the champion with
//! truncated importance weights. Episodes served more than `max_staleness`
//! promotions back are dropped, as are episodes without token ids (a remote
//! provider) or without a reward.

use super::training::token_completion;
use super::ProposeContext;
use crate::error::LearnError;
use hone_store::{CycleStore, EpisodeFilter};
use hone_types::{EpisodeDetail, Instance, RewardRecord, Route, VersionId};
use serde_json::{json, Value};
use std::collections::HashMap;

/// Which live groups to make.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Live {
    Production,
    Shadow,
}

/// Groups from live traffic, ready for the trainer, and what was left out.
#[derive(Debug, Default)]
pub struct LiveGroups {
    pub rows: Vec<Value>,
    /// Of those, groups served by other weights than the champion's.
    pub off_policy: u64,
    pub stale: u64,
    /// Episodes with no token ids (production) or no shadow samples (shadow).
    pub without_tokens: u64,
    pub without_reward: u64,
    /// Production episodes whose users have not reacted (and whose wait is
    /// not over, or whose silence the spec skips).
    pub unheard: u64,
    /// Left out by `drop_from_training`.
    pub dropped: u64,
    /// Production groups: the agent's mean reward over its recent
    /// production episodes, where the running baseline starts.
    pub baseline: Option<f64>,
}

impl LiveGroups {
    /// What was found and what was left out, for the cycle's log.
    pub fn summary(&self, live: Live) -> String {
        let left_out = format!(
            "{} stale, {} without {}, {} without a reward, {} its users have not reacted to, {} by drop_from_training",
            self.stale,
            self.without_tokens,
            match live {
                Live::Production => "token ids",
                Live::Shadow => "scored shadow samples",
            },
            self.without_reward,
            self.unheard,
            self.dropped
        );
        match live {
            Live::Production => format!(
                "{} production episodes as single-answer groups ({} served by other weights, corrected; \
                 left out: {left_out}); baseline {}",
                self.rows.len(),
                self.off_policy,
                self.baseline
                    .map_or("from the first reward".to_owned(), |b| format!("{b:.3}")),
            ),
            Live::Shadow => format!(
                "{} shadow groups ({} served by other weights, corrected; left out: {left_out})",
                self.rows.len(),
                self.off_policy,
            ),
        }
    }
}

/// Recent rewarded production episodes the starting baseline averages.
const BASELINE_WINDOW: usize = 200;

pub fn groups(
    ctx: &ProposeContext<'_>,
    items: &[Instance],
    live: Live,
    max_staleness: u32,
) -> Result<LiveGroups, LearnError> {
    let store = ctx.store.as_ref();
    let spec_version = &ctx.evaluator.rewarder.spec_version;
    let mut lineage = Lineage::new(ctx)?;
    let mut out = LiveGroups {
        baseline: match live {
            Live::Production => recent_mean_reward(store, &ctx.agent.name, spec_version)?,
            Live::Shadow => None,
        },
        ..LiveGroups::default()
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
        // Users who have not reacted yet have not said it was worth 0.
        let now = hone_types::time::now_ms();
        if live == Live::Production
            && !matches!(
                crate::scoring::settled::settled_episode(&ctx.agent.reward, &episode, Some(reward.value), now),
                crate::scoring::settled::Settled::Counted(_)
            )
        {
            out.unheard += 1;
            continue;
        }
        if super::dropped(ctx.agent, &episode) {
            out.dropped += 1;
            continue;
        }
        if lineage.staleness(store, &served)? > max_staleness {
            out.stale += 1;
            continue;
        }
        let rows = match live {
            Live::Production => production_row(ctx, &episode, &reward, &mut lineage)?
                .into_iter()
                .collect(),
            Live::Shadow => shadow_rows(ctx, &episode, &reward, &mut lineage)?,
        };
        if rows.is_empty() {
            out.without_tokens += 1;
            continue;
        }
        for row in rows {
            let completions = row["completions"].as_array();
            if completions.is_some_and(|c| c.iter().any(|c| c["off_policy"] == true)) {
                out.off_policy += 1;
            }
            out.rows.push(row);
        }
    }
    Ok(out)
}

/// The episode as one group of its calls, each with its credit; `None`
/// when a call carries no token ids.
fn production_row(
    ctx: &ProposeContext<'_>,
    episode: &EpisodeDetail,
    reward: &RewardRecord,
    lineage: &mut Lineage,
) -> Result<Option<Value>, LearnError> {
    let store = ctx.store.as_ref();
    let mut completions = Vec::new();
    for call in &episode.calls {
        let Some(tokens) = call.sampled_tokens() else {
            return Ok(None);
        };
        let mut completion = token_completion(&tokens, reward.credit(call.id));
        completion["episode"] = json!(episode.summary.id.to_string());
        completion["off_policy"] = json!(lineage.other_weights(store, &call.version_id)?);
        completions.push(completion);
    }
    Ok((!completions.is_empty()).then(|| json!({"agent": ctx.agent.name, "completions": completions})))
}

/// One group per call with scored shadow samples: the served answer and
/// the samples, each with its score.
fn shadow_rows(
    ctx: &ProposeContext<'_>,
    episode: &EpisodeDetail,
    reward: &RewardRecord,
    lineage: &mut Lineage,
) -> Result<Vec<Value>, LearnError> {
    let store = ctx.store.as_ref();
    let mut rows = Vec::new();
    for scores in &reward.shadows {
        let Some(call) = episode.calls.iter().find(|c| c.id == scores.call_id) else {
            continue;
        };
        let Some(served) = call.response.as_ref().and_then(|r| r.choices.first()) else {
            continue;
        };
        let off_policy = lineage.other_weights(store, &call.version_id)?;
        let completions: Vec<Value> = std::iter::once(served)
            .chain(&call.shadow)
            .zip(&scores.values)
            .filter_map(|(choice, value)| {
                let mut completion = token_completion(&call.choice_tokens(choice)?, *value);
                completion["off_policy"] = json!(off_policy);
                Some(completion)
            })
            .collect();
        if completions.len() >= 2 {
            rows.push(json!({"agent": ctx.agent.name, "completions": completions}));
        }
    }
    Ok(rows)
}

/// The mean reward of the agent's last [`BASELINE_WINDOW`] rewarded
/// production episodes.
fn recent_mean_reward(store: &dyn CycleStore, agent: &str, spec_version: &str) -> Result<Option<f64>, LearnError> {
    let filter = EpisodeFilter {
        agent: agent.to_owned(),
        spec_version: Some(spec_version.to_owned()),
        ..EpisodeFilter::default()
    };
    let rewards: Vec<f64> = store
        .last_episodes(&filter, BASELINE_WINDOW, &|f| f.reward.is_some())?
        .into_iter()
        .filter_map(|f| f.reward.map(|(value, _)| value))
        .collect();
    Ok(crate::stats::mean(&rewards))
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
        let (deployment, _) = crate::release::deploy::current(ctx.store.as_ref(), ctx.agent)?;
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
