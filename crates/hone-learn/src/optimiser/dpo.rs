//! `dpo`: direct preference optimisation of a LoRA adapter on preference
//! pairs from the agent's own episodes: for one prompt, the best-rewarded
//! answer over the worst, or a demonstration signal over a failed answer.

use super::training::{instance_rows, propose_adapter, Method};
use super::{Optimiser, Proposal, ProposeContext};
use crate::error::LearnError;
use futures::future::BoxFuture;
use hone_config::TrainingSpec;

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
            let (rows, lines) = instance_rows(&items, Method::Dpo)?;
            propose_adapter(ctx, Method::Dpo, &self.spec, rows, lines).await
        })
    }
}
