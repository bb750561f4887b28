//! On-policy rollouts the RL optimisers share (`grpo`, `dpo`): the champion
//! runs every task of the cycle's train half `group_size` times through the
//! gateway (through the agent endpoint when the agent has one, so
//! multi-step episodes roll out whole; recorded as evaluation episodes),
//! and the reward spec scores each episode, per call as well.
//!
//! When nothing the reward spec reads reached a rollout (a spec of user
//! signals only, no user reacting to rollouts, and no usable reward model
//! predicting them), every reward would be the default: [`scored`] says so
//! instead of returning rollouts.

use super::ProposeContext;
use crate::error::LearnError;
use crate::search::eval::EvalOptions;
use hone_types::time::now_ms;
use hone_types::{EpisodeDetail, Instance, RewardRecord};
use std::collections::BTreeMap;

/// One rollout: its episode and its reward.
pub struct Rollout {
    pub episode: EpisodeDetail,
    pub reward: RewardRecord,
}

/// The rollouts of every task, by instance id.
pub type Groups = BTreeMap<String, Vec<Rollout>>;

/// Rolls the champion out `group_size` times on each of `items` (one
/// concurrent run, attempts `0..group_size`, so the engine batches across
/// groups; a resumed cycle reuses finished ones) and scores every episode.
/// `Err(why)` when no rollout carries anything the reward spec reads.
pub async fn scored(
    ctx: &ProposeContext<'_>,
    optimiser: &str,
    items: &[Instance],
    group_size: usize,
) -> Result<Result<Groups, String>, LearnError> {
    (ctx.progress)(&format!(
        "{optimiser}: rolling out the champion {group_size} times on {} tasks",
        items.len()
    ));
    let options = EvalOptions {
        samples: group_size as u32,
        ..EvalOptions::with_concurrency(ctx.agent.learn.concurrency)
    };
    let quiet = |_: crate::search::eval::Progress| {};
    let (_, results) = ctx
        .evaluator
        .run(ctx.target, ctx.champion_id, ctx.via, &options, &quiet)
        .await?;
    // Rollouts that could not run (an agent endpoint down, a provider
    // refusing) say so, rather than passing for rollouts nothing rewards.
    let failed: Vec<_> = results.iter().filter(|r| r.score.is_none()).collect();
    let first_error = || {
        failed
            .iter()
            .find_map(|r| r.error.clone())
            .unwrap_or_else(|| "no reason recorded".to_owned())
    };
    if !results.is_empty() && failed.len() == results.len() {
        return Err(LearnError::gateway(format!(
            "{optimiser}: every rollout of the champion failed ({} runs): {}",
            results.len(),
            first_error()
        )));
    }
    if !failed.is_empty() {
        (ctx.progress)(&format!(
            "{optimiser}: {} of {} rollouts failed ({}); learning from the rest",
            failed.len(),
            results.len(),
            first_error()
        ));
    }
    let mut episodes: BTreeMap<&str, Vec<EpisodeDetail>> = BTreeMap::new();
    let mut dropped = 0u64;
    for r in results.iter().filter(|r| r.score.is_some()) {
        if let Some(episode) = ctx.store.episode(&r.episode_id)? {
            if super::dropped(ctx.agent, &episode) {
                dropped += 1;
                continue;
            }
            episodes.entry(r.instance_id.as_str()).or_default().push(episode);
        }
    }
    if dropped > 0 {
        (ctx.progress)(&format!(
            "{optimiser}: {dropped} rollouts left out of training (drop_from_training: {})",
            ctx.agent.learn.drop_from_training.join(", ")
        ));
    }
    let spec = &ctx.agent.reward;
    let reads_rollouts = !spec.critics.is_empty()
        || spec.judge.is_some()
        || ctx.evaluator.rewarder.stand_in.is_some()
        || episodes.values().flatten().any(|e| !e.signals.is_empty());
    if !reads_rollouts {
        return Ok(Err(format!(
            "{optimiser}: no reward source for rollouts (the reward spec reads only user signals and no rollout got one; \
             give the agent a critic, a judge or a reward model learned from users' signals, [agents.NAME.reward.model]); nothing proposed"
        )));
    }
    let rewarder = &ctx.evaluator.rewarder;
    let mut groups = Groups::new();
    for item in items {
        let Some(rollouts) = episodes.remove(item.id.as_str()) else {
            continue;
        };
        // One judge call over the task's whole group: a relative judge
        // ranks the rollouts against each other (RULER), an absolute one
        // scores each.
        let verdicts = rewarder.judge(&rollouts).await;
        let mut group = Vec::new();
        for episode in rollouts {
            let reward = rewarder.score(
                &episode,
                item.reference.as_ref(),
                verdicts.get(&episode.summary.id),
                now_ms(),
            );
            group.push(Rollout { episode, reward });
        }
        groups.insert(item.id.clone(), group);
    }
    Ok(Ok(groups))
}
