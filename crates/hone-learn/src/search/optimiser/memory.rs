//! `memory`: kNN-LM decoding. Builds a datastore from the
//! cycle's *train* half — its episodes with reward at least `min_reward`,
//! their recorded token ids keyed by the champion's model — publishes it,
//! and proposes the champion decoding with it, one candidate per `k` and
//! `λ`. The gate then measures them on the other half, which the datastore
//! never saw.

use super::training::local_base;
use super::{Optimiser, Proposal, ProposeContext};
use crate::error::LearnError;
use futures::future::BoxFuture;
use hone_config::MemorySpec;
use hone_types::{MemoryKind, MemoryPolicy};

pub struct Memory {
    pub spec: MemorySpec,
}

impl Optimiser for Memory {
    fn name(&self) -> &'static str {
        "memory"
    }

    fn propose<'a>(&'a self, ctx: &'a ProposeContext<'a>) -> BoxFuture<'a, Result<Vec<Proposal>, LearnError>> {
        Box::pin(async move {
            if let Err(why) = local_base(ctx) {
                (ctx.progress)(&format!("memory: {why}; nothing proposed"));
                return Ok(Vec::new());
            }
            let Some(route) = ctx.champion.routes.first() else {
                return Ok(Vec::new());
            };
            let min_reward = self.spec.min_reward.unwrap_or(ctx.agent.reward.pass_threshold);
            let items = ctx.store.dataset_items(&ctx.target.id)?;
            let episodes: Vec<_> = items
                .iter()
                .filter(|i| i.reward.is_some_and(|r| r >= min_reward))
                .filter_map(|i| i.episode_id.clone())
                .collect();
            if episodes.is_empty() {
                (ctx.progress)(&format!(
                    "memory: no train episode has reward ≥ {min_reward}; nothing proposed"
                ));
                return Ok(Vec::new());
            }
            // The champion's memory grows: its datastore is extended with
            // this cycle's train successes (rebuilt when its model differs).
            let extend = route.memory.as_ref().map(|m| m.datastore.as_str());
            let built = crate::data::memory::build(
                ctx.store.as_ref(),
                ctx.artefacts,
                &ctx.adapters_dir,
                route,
                &episodes,
                extend,
            )
            .await?;
            if built.keys == 0 || extend == Some(built.hash.as_str()) {
                (ctx.progress)(&format!(
                    "memory: {} successful train episodes but none with new recorded token ids; nothing proposed",
                    episodes.len()
                ));
                return Ok(Vec::new());
            }
            ctx.artefacts
                .publish_datastore(&built.hash)
                .await
                .map_err(LearnError::training(format!("publishing datastore {}", built.hash)))?;
            (ctx.progress)(&format!(
                "memory: datastore {} of {} keys{}: {} calls of {} train episodes added",
                &built.hash[..12],
                built.keys,
                if built.extended {
                    format!(
                        ", extending the champion's {}",
                        extend.and_then(|h| h.get(..12)).unwrap_or("")
                    )
                } else {
                    String::new()
                },
                built.calls,
                built.episodes
            ));
            let mut proposals = Vec::new();
            for k in &self.spec.ks {
                for lambda in &self.spec.lambdas {
                    let mut spec = ctx.champion.clone();
                    if let Some(first) = spec.routes.first_mut() {
                        first.memory = Some(MemoryPolicy {
                            kind: MemoryKind::KnnLm,
                            datastore: built.hash.clone(),
                            k: *k,
                            lambda: *lambda,
                            temperature: self.spec.temperature,
                            adaptive: self.spec.adaptive,
                        });
                    }
                    if spec != *ctx.champion {
                        proposals.push(Proposal::of(ctx.champion, spec));
                    }
                }
            }
            proposals.truncate(self.spec.max_candidates);
            Ok(proposals)
        })
    }
}
