//! `dpo`: direct preference optimisation of a LoRA adapter on preference
//! pairs from two sources:
//! - the cycle's train half: for one prompt, the best-rewarded answer over
//!   the worst, or a user's demonstration over a failed answer (re-rendered
//!   from the messages and marked `"source": "rendered"`; traffic datasets keep one episode per prompt, so in
//!   a cycle these are mostly demonstrations);
//! - on-policy pairs: each train task rolled out `group_size` times
//!   (`rollouts`), the best-rewarded episode over the worst, compared at the
//!   first call where they part — the same prompt tokens and the two
//!   completions exactly as the engine sampled them.
//!
//! The chosen episodes that passed are also **anchors**: their calls join
//! the replay buffer's rows (`replay.rs`, a `share` of every batch, as
//! supervised examples; a share of 0 turns them off with replay), so the
//! pairs' chosen answers stay likely while the margin grows — the
//! negative log-likelihood term RPO adds to DPO (TRL's `rpo_alpha`).
//! Without it the demo's first `dpo` candidates, trained when no earlier
//! success was there to replay, pushed the rejected answers down so far
//! that 21–38% of their episodes made invalid tool calls; with earlier
//! successes replayed, the same optimiser's later candidates did not.

use super::rollouts::{self, Rollout};
use super::training::{propose_adapter, push_row, rendered_rows, weight_base, Examples, Method};
use super::{Optimiser, Proposal, ProposeContext};
use crate::error::LearnError;
use futures::future::BoxFuture;
use hone_config::TrainingSpec;
use serde_json::json;

pub struct Dpo {
    pub spec: TrainingSpec,
}

impl Optimiser for Dpo {
    fn name(&self) -> &'static str {
        "dpo"
    }

    fn propose<'a>(&'a self, ctx: &'a ProposeContext<'a>) -> BoxFuture<'a, Result<Vec<Proposal>, LearnError>> {
        Box::pin(async move {
            let items = ctx.store.dataset_items(&ctx.target.id)?;
            let (mut rows, lines) = rendered_rows(&items, Method::Dpo)?;
            let mut on_policy = 0u64;
            let mut anchored = ctx.replay.clone();
            let mut anchors = 0u64;
            if weight_base(ctx).is_ok() {
                match rollouts::scored(ctx, "dpo", &items, self.spec.group_size).await? {
                    Ok(groups) => {
                        for (row, chosen) in groups.values().filter_map(|g| on_policy_pair(g)) {
                            push_row(&mut rows, &row)?;
                            on_policy += 1;
                            if let Some(calls) = anchor(chosen) {
                                anchored.calls.extend(calls);
                                anchors += 1;
                            }
                        }
                    }
                    Err(why) => (ctx.progress)(&why),
                }
            }
            (ctx.progress)(&format!(
                "dpo: {} preference pairs ({lines} from the train half, {on_policy} on-policy as sampled tokens); \
                 {anchors} chosen episodes that passed anchor them",
                lines + on_policy
            ));
            let ctx = ProposeContext {
                replay: &anchored,
                ..ctx.clone()
            };
            propose_adapter(&ctx, Method::Dpo, &self.spec, Examples::new(rows, lines + on_policy)).await
        })
    }
}

/// The calls of a chosen rollout that passed, as supervised rows; none
/// when it did not pass or a call carries no token ids.
fn anchor(chosen: &Rollout) -> Option<Vec<hone_types::SampledTokens>> {
    if !chosen.reward.passed {
        return None;
    }
    chosen.episode.calls.iter().map(|c| c.sampled_tokens()).collect()
}

/// The group's best-rewarded rollout over its worst, at the first call
/// where their completions differ from the same prompt tokens, and the
/// best rollout; none when the rewards tie, or the episodes part elsewhere
/// (a different tool result before any different completion) or carry no
/// token ids.
fn on_policy_pair(group: &[Rollout]) -> Option<(serde_json::Value, &Rollout)> {
    let value = |r: &&Rollout| r.reward.value;
    let best = group.iter().max_by(|a, b| value(a).total_cmp(&value(b)))?;
    let worst = group.iter().min_by(|a, b| value(a).total_cmp(&value(b)))?;
    if value(&best) <= value(&worst) {
        return None;
    }
    for (chosen, rejected) in best.episode.calls.iter().zip(&worst.episode.calls) {
        let (c, r) = (chosen.sampled_tokens()?, rejected.sampled_tokens()?);
        if c.prompt != r.prompt {
            return None;
        }
        if c.completion != r.completion {
            let row = json!({
                "prompt_tokens": c.prompt,
                "chosen_tokens": c.completion,
                "rejected_tokens": r.completion,
                "source": "recorded",
            });
            return Some((row, best));
        }
    }
    None
}
