//! `grpo`: group-relative policy optimisation of a LoRA adapter on
//! on-policy groups: the champion runs every task of the target dataset
//! `group_size` times through the gateway (through the agent endpoint when
//! the agent has one, so multi-step episodes roll out whole; recorded as
//! evaluation episodes), the reward spec scores each episode, and each
//! task's episodes form one group.
//!
//! The trainer gets what the engine really sampled: every call's prompt and
//! completion token ids with the sampler's logprobs (so the importance
//! ratio and its clipping mean something), each call credited with the
//! reward spec's per-call credit (its own penalties where it showed the
//! behaviour, else its episode's reward) and tagged with its episode, so an
//! episode counts once in its group however many calls it made.
//!
//! An optimiser that cannot tell good samples from bad proposes nothing and
//! says why: when no rollout carries anything the reward spec reads (a spec
//! of user signals only, and no user reacting to rollouts), every reward
//! would be the default.

use super::training::{local_base, propose_adapter, Method};
use super::{Optimiser, Proposal, ProposeContext};
use crate::error::LearnError;
use crate::eval::EvalOptions;
use futures::future::BoxFuture;
use hone_config::TrainingSpec;
use hone_types::time::now_ms;
use hone_types::{EpisodeDetail, Instance, InstanceResult};
use serde_json::json;
use std::collections::BTreeMap;

pub struct Grpo {
    pub spec: TrainingSpec,
}

impl Optimiser for Grpo {
    fn name(&self) -> &'static str {
        "grpo"
    }

    fn propose<'a>(&'a self, ctx: &'a ProposeContext<'a>) -> BoxFuture<'a, Result<Vec<Proposal>, LearnError>> {
        Box::pin(async move {
            if let Err(why) = local_base(ctx) {
                (ctx.progress)(&format!("grpo: {why}; nothing proposed"));
                return Ok(Vec::new());
            }
            let items = ctx.store.dataset_items(&ctx.target.id)?;
            let results = self.roll_out(ctx, items.len()).await?;
            let mut by_item: BTreeMap<&str, Vec<(&InstanceResult, EpisodeDetail)>> = BTreeMap::new();
            for r in &results {
                if r.score.is_none() {
                    continue;
                }
                if let Some(episode) = ctx.store.episode(&r.episode_id)? {
                    by_item.entry(r.instance_id.as_str()).or_default().push((r, episode));
                }
            }
            let spec = &ctx.agent.reward;
            let reads_rollouts = !spec.critics.is_empty()
                || spec.judge.is_some()
                || by_item.values().flatten().any(|(_, e)| !e.signals.is_empty());
            if !reads_rollouts {
                (ctx.progress)(
                    "grpo: no reward source for rollouts (the reward spec reads only user signals and no rollout got one; \
                     give the agent an endpoint whose users react, a critic or a judge); nothing proposed",
                );
                return Ok(Vec::new());
            }
            let mut rows = Vec::new();
            let (mut groups, mut missing_tokens) = (0u64, 0u64);
            for item in &items {
                let Some(rollouts) = by_item.get(item.id.as_str()) else {
                    continue;
                };
                let completions = self.completions(ctx, item, rollouts, &mut missing_tokens).await;
                if completions.is_empty() {
                    continue;
                }
                let row = json!({"agent": ctx.agent.name, "completions": completions});
                serde_json::to_writer(&mut rows, &row).map_err(|e| LearnError::training(e.to_string()))?;
                rows.push(b'\n');
                groups += 1;
            }
            if missing_tokens > 0 {
                (ctx.progress)(&format!(
                    "grpo: {missing_tokens} calls carried no token ids (not served by the embedded engine); left out"
                ));
            }
            propose_adapter(ctx, Method::Grpo, &self.spec, rows, groups).await
        })
    }
}

impl Grpo {
    /// `group_size` rollouts of the champion on every target instance, all
    /// in one concurrent run (attempts `0..group_size`, so the engine
    /// batches across groups); a resumed cycle reuses finished ones.
    async fn roll_out(&self, ctx: &ProposeContext<'_>, tasks: usize) -> Result<Vec<InstanceResult>, LearnError> {
        let quiet = |_: crate::eval::Progress| {};
        (ctx.progress)(&format!(
            "grpo: rolling out the champion {} times on {tasks} tasks",
            self.spec.group_size
        ));
        let options = EvalOptions {
            samples: self.spec.group_size as u32,
            ..EvalOptions::with_concurrency(ctx.agent.learn.concurrency)
        };
        let (_, all) = ctx
            .evaluator
            .run(ctx.target, ctx.champion_id, ctx.via, &options, &quiet)
            .await?;
        Ok(all)
    }

    /// One completion per call of every rollout of `item`, with its exact
    /// tokens, the sampler's logprobs, its credit and its episode.
    async fn completions(
        &self,
        ctx: &ProposeContext<'_>,
        item: &Instance,
        rollouts: &[(&InstanceResult, EpisodeDetail)],
        missing_tokens: &mut u64,
    ) -> Vec<serde_json::Value> {
        let rewarder = &ctx.evaluator.rewarder;
        let mut completions = Vec::new();
        for (_, episode) in rollouts {
            let verdicts = if rewarder.has_judge() {
                rewarder.judge(std::slice::from_ref(episode)).await
            } else {
                Default::default()
            };
            let reward = rewarder.score(
                episode,
                item.reference.as_ref(),
                verdicts.get(&episode.summary.id),
                now_ms(),
            );
            for call in &episode.calls {
                let Some(tokens) = call.sampled_tokens() else {
                    *missing_tokens += 1;
                    continue;
                };
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
                    "episode": episode.summary.id.to_string(),
                }));
            }
        }
        completions
    }
}
