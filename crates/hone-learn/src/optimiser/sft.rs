//! `sft`: supervised fine-tuning of a LoRA adapter on the agent's own
//! successful episodes (reward at or above the pass threshold) from the
//! cycle's target dataset.

use super::training::{propose_adapter, Method};
use super::{Optimiser, Proposal, ProposeContext};
use futures::future::BoxFuture;
use hone_config::TrainingSpec;

pub struct Sft {
    pub spec: TrainingSpec,
}

impl Optimiser for Sft {
    fn name(&self) -> &'static str {
        "sft"
    }

    fn propose<'a>(&'a self, ctx: &'a ProposeContext<'a>) -> BoxFuture<'a, Result<Vec<Proposal>, String>> {
        Box::pin(async move {
            let threshold = ctx.agent.reward.pass_threshold;
            let items = ctx.store.dataset_items(&ctx.target.id).map_err(|e| e.to_string())?;
            let chosen = items
                .into_iter()
                .filter(|i| i.reward.is_some_and(|r| r >= threshold))
                .collect();
            propose_adapter(ctx, Method::Sft, &self.spec, chosen).await
        })
    }
}
