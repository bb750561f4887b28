//! `model`: the same harness on another model (a cheaper one), with another
//! temperature, or a lower reasoning effort — the cost side of the front.
//! A candidate enforces the setting it changes: it is proven, and then
//! served, with that value whatever its clients ask.

use super::{Optimiser, Proposal, ProposeContext};
use crate::error::LearnError;
use futures::future::BoxFuture;
use hone_config::ModelSpec;
use hone_types::Setting;

pub struct ModelSwap {
    pub spec: ModelSpec,
}

impl Optimiser for ModelSwap {
    fn name(&self) -> &'static str {
        "model"
    }

    fn propose<'a>(&'a self, ctx: &'a ProposeContext<'a>) -> BoxFuture<'a, Result<Vec<Proposal>, LearnError>> {
        Box::pin(async move {
            let ModelSpec {
                models,
                temperatures,
                reasoning_efforts,
                max_candidates,
            } = &self.spec;
            let parent = ctx.champion;
            let mut specs = Vec::new();
            for route in models {
                let mut spec = parent.clone();
                match spec.routes.first_mut() {
                    Some(first) => *first = route.clone(),
                    None => spec.routes.push(route.clone()),
                }
                specs.push(spec);
            }
            for t in temperatures {
                let mut spec = parent.clone();
                spec.temperature = Some(*t);
                spec.enforce(Setting::Temperature);
                specs.push(spec);
            }
            for effort in reasoning_efforts {
                let mut spec = parent.clone();
                spec.reasoning_effort = Some(effort.clone());
                spec.enforce(Setting::ReasoningEffort);
                specs.push(spec);
            }
            let mut proposals: Vec<Proposal> = Vec::new();
            for spec in specs {
                if spec == *parent || proposals.iter().any(|p| p.spec == spec) {
                    continue;
                }
                proposals.push(Proposal::of(parent, spec));
            }
            proposals.truncate(*max_candidates);
            Ok(proposals)
        })
    }
}
