//! `sft`: supervised fine-tuning of a LoRA adapter on the agent's chosen
//! episodes from the cycle's train set: the successful ones (reward at or
//! above the pass threshold) and those a user corrected with a
//! demonstration (trained on the demonstration).
//!
//! A successful episode trains on exactly what the engine sampled: each
//! call's recorded prompt and completion token ids. An episode whose calls
//! carry no token ids (a remote provider) and a demonstration are rendered
//! once with the base model's chat template instead, and every row says
//! which it is (`"source": "recorded" | "rendered"`), never mixed within an
//! episode.

use super::training::{propose_adapter, push_row, rendered_rows, Examples, Method};
use super::{Optimiser, Proposal, ProposeContext};
use crate::error::LearnError;
use futures::future::BoxFuture;
use hone_config::TrainingSpec;
use hone_store::CycleStore;
use hone_types::{Instance, SampledTokens};
use serde_json::json;

pub struct Sft {
    pub spec: TrainingSpec,
}

impl Optimiser for Sft {
    fn name(&self) -> &'static str {
        "sft"
    }

    fn propose<'a>(&'a self, ctx: &'a ProposeContext<'a>) -> BoxFuture<'a, Result<Vec<Proposal>, LearnError>> {
        Box::pin(async move {
            let threshold = ctx.agent.reward.pass_threshold;
            let items = ctx.store.dataset_items(&ctx.target.id)?;
            let chosen = items
                .into_iter()
                .filter(|i| i.reward.is_some_and(|r| r >= threshold) || demonstrated(i))
                .collect::<Vec<_>>();
            let mut rows = Vec::new();
            let (mut recorded, mut rendered) = (0u64, 0u64);
            for item in &chosen {
                match recorded_calls(ctx.store.as_ref(), ctx.agent, item)? {
                    Some(calls) => {
                        for t in calls {
                            let row = json!({
                                "prompt_tokens": t.prompt,
                                "completion_tokens": t.completion,
                                "source": "recorded",
                                "episode": item.episode_id,
                            });
                            push_row(&mut rows, &row)?;
                            recorded += 1;
                        }
                    }
                    None => {
                        let (more, n) = rendered_rows(std::slice::from_ref(item), Method::Sft)?;
                        rows.extend(more);
                        rendered += n;
                    }
                }
            }
            (ctx.progress)(&format!(
                "sft: {} chosen episodes: {recorded} calls with their recorded tokens, {rendered} examples rendered by \
                 the chat template (demonstrations, or episodes recorded without token ids)",
                chosen.len()
            ));
            propose_adapter(ctx, Method::Sft, &self.spec, Examples::new(rows, recorded + rendered)).await
        })
    }
}

/// A user corrected the episode with a demonstration (trained on instead of
/// what was recorded).
pub(super) fn demonstrated(item: &Instance) -> bool {
    item.reference.as_ref().is_some_and(|r| r.is_object() || r.is_string())
}

/// Every call of the item's episode with the tokens it sampled, in order;
/// `None` for a demonstration, or when some call carries none.
/// An episode `drop_from_training` leaves out yields no call.
fn recorded_calls(
    store: &dyn CycleStore,
    agent: &hone_config::AgentConfig,
    item: &Instance,
) -> Result<Option<Vec<SampledTokens>>, LearnError> {
    if demonstrated(item) {
        return Ok(None);
    }
    let Some(id) = &item.episode_id else {
        return Ok(None);
    };
    let Some(episode) = store.episode(id)? else {
        return Ok(None);
    };
    if super::dropped(agent, &episode) {
        return Ok(Some(Vec::new()));
    }
    if episode.calls.is_empty() {
        return Ok(None);
    }
    Ok(episode.calls.iter().map(|c| c.sampled_tokens()).collect())
}
