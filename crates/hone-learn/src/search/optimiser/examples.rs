//! `examples`: episodic memory. Proposes versions that retrieve the k most
//! similar successful episodes as few-shot examples (one candidate per k);
//! the gateway's harness does the retrieval at request time.

use super::{Optimiser, Proposal, ProposeContext};
use crate::error::LearnError;
use futures::future::BoxFuture;
use hone_config::ExamplesSpec;
use hone_types::ExamplePolicy;

pub struct Examples {
    pub spec: ExamplesSpec,
}

impl Optimiser for Examples {
    fn name(&self) -> &'static str {
        "examples"
    }

    fn propose<'a>(&'a self, ctx: &'a ProposeContext<'a>) -> BoxFuture<'a, Result<Vec<Proposal>, LearnError>> {
        Box::pin(async move {
            let ExamplesSpec {
                ks,
                min_reward,
                embeddings,
                max_candidates,
            } = &self.spec;
            let min_reward = min_reward.unwrap_or(ctx.agent.reward.pass_threshold);
            let store = ctx.store.clone();
            let (agent, spec_version) = (ctx.agent.name.clone(), ctx.agent.reward.version());
            let pool =
                tokio::task::spawn_blocking(move || store.successes(&agent, &spec_version, min_reward, 2)).await??;
            if pool.len() < 2 {
                (ctx.progress)("examples: fewer than 2 successful episodes to retrieve from; nothing proposed");
                return Ok(Vec::new());
            }
            let mut proposals = Vec::new();
            for k in ks {
                let mut spec = ctx.champion.clone();
                spec.examples = Some(ExamplePolicy {
                    k: *k,
                    min_reward: Some(min_reward),
                    embeddings: embeddings.clone(),
                });
                if spec == *ctx.champion {
                    continue;
                }
                proposals.push(Proposal::of(ctx.champion, spec));
            }
            proposals.truncate(*max_candidates);
            Ok(proposals)
        })
    }
}
