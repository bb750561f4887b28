//! `sft`: supervised fine-tuning of a LoRA adapter on the agent's chosen
//! episodes from the cycle's target dataset: the successful ones (reward at
//! or above the pass threshold) and those a user corrected with a
//! demonstration (trained on the demonstration).

use super::training::{instance_rows, propose_adapter, Method};
use super::{Optimiser, Proposal, ProposeContext};
use crate::error::LearnError;
use futures::future::BoxFuture;
use hone_config::TrainingSpec;

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
                .filter(|i| {
                    i.reward.is_some_and(|r| r >= threshold)
                        || i.reference.as_ref().is_some_and(|r| r.is_object() || r.is_string())
                })
                .collect::<Vec<_>>();
            let (rows, lines) = instance_rows(&chosen, Method::Sft)?;
            propose_adapter(ctx, Method::Sft, &self.spec, rows, lines).await
        })
    }
}
