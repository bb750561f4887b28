//! `grpo`: group-relative policy optimisation of a LoRA adapter on
//! on-policy groups: the champion answers every task of the target dataset
//! `group_size` times through the gateway (environment rollouts, recorded as
//! evaluation episodes), the reward spec scores each answer, and each task's
//! answers form one group.

use super::training::{local_base, propose_adapter, Method};
use super::{Optimiser, Proposal, ProposeContext};
use crate::dataset::instance_from_episode;
use crate::error::LearnError;
use crate::eval::EvalOptions;
use futures::future::BoxFuture;
use hone_config::TrainingSpec;

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
            let quiet = |_: crate::eval::Progress| {};
            let mut results = Vec::new();
            for attempt in 0..self.spec.group_size as u32 {
                let options = EvalOptions {
                    attempt,
                    ..EvalOptions::default()
                };
                (ctx.progress)(&format!(
                    "grpo: rollout {}/{} of the champion on {} tasks",
                    attempt + 1,
                    self.spec.group_size,
                    items.len()
                ));
                results = ctx
                    .evaluator
                    .run(ctx.target, ctx.champion_id, ctx.via, &options, &quiet)
                    .await?
                    .1;
            }
            let mut samples = Vec::new();
            for r in &results {
                if r.score.is_none() {
                    continue;
                }
                let Some(item) = find(&items, &r.instance_id) else {
                    continue;
                };
                let Some(episode) = ctx.store.episode(&r.episode_id)? else {
                    continue;
                };
                // The rollout's answer under the task's original prompt, so
                // the task's samples group together.
                let mut sample = instance_from_episode(&episode, None, r.score);
                sample.request.clone_from(&item.request);
                samples.push(sample);
            }
            propose_adapter(ctx, Method::Grpo, &self.spec, samples).await
        })
    }
}

fn find<'a>(items: &'a [hone_types::Instance], id: &str) -> Option<&'a hone_types::Instance> {
    items.iter().find(|i| i.id == id)
}
