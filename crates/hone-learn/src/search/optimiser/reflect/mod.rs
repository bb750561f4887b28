//! Learning without weights: what the reflective optimisers (`prompt`,
//! `playbook`, `tools`, beside it in [`crate::search::optimiser`]) share. A [`Reflector`] asks
//! the configured reflection model through the gateway (recorded as the
//! `hone-reflector` agent's episodes, metered against the budgets);
//! [`evidence`] is what it is shown; [`pareto`] keeps GEPA's pool of
//! prompts across cycles; [`curator`] applies a playbook's delta operations.

pub mod curator;
pub mod evidence;
pub mod pareto;

use crate::ask::{AskFailure, Asked, Meter};
use crate::client::ChatClient;
use hone_config::REFLECTOR_AGENT;

const SYSTEM: &str = "You improve an AI assistant from evidence: episodes of its real conversations with their \
rewards, critics' findings and users' feedback. Diagnose why failures failed, generalise to rules that would have \
prevented them without breaking what passed, and answer with a single JSON object and nothing else.";

/// The reflection model of one optimiser of one agent, in one cycle.
pub struct Reflector<'a> {
    pub client: &'a dyn ChatClient,
    /// `AGENT.OPTIMISER`: the `hone-reflector` version to ask.
    pub label: String,
    pub cycle: &'a str,
    pub meter: &'a Meter,
}

impl<'a> Reflector<'a> {
    /// The reflection model `optimiser` asks in the cycle of `ctx`.
    pub fn of(ctx: &'a crate::search::optimiser::ProposeContext<'a>, optimiser: &str) -> Self {
        Self {
            client: &ctx.evaluator.gateway,
            label: hone_config::reflect::reflector_label(&ctx.agent.name, optimiser),
            cycle: &ctx.cycle.id,
            meter: ctx.meter,
        }
    }

    /// Asks for a JSON answer `parse` accepts (asking again, up to twice,
    /// when it does not parse); refused once the budget is spent.
    pub async fn ask<T>(&self, prompt: &str, parse: impl Fn(&str) -> Result<T, String>) -> Result<T, AskFailure> {
        let asked = Asked {
            client: self.client,
            model: REFLECTOR_AGENT,
            version: &self.label,
            episode: format!("reflect.{}.{}", self.cycle, hone_types::EpisodeId::new_v7()),
            system: SYSTEM,
            retries: 2,
        };
        asked.json(prompt, Some(self.meter), parse).await
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_unified_diff_shows_the_changed_lines_with_context() {
        let diff = crate::search::optimiser::unified(
            "You are a calculator.\nAnswer briefly.",
            "You are a calculator.\nA-B means subtract B from A.\nAnswer briefly.",
        );
        assert_eq!(
            diff,
            "--- champion\n+++ candidate\n@@ -1,2 +1,3 @@\n You are a calculator.\n+A-B means subtract B from A.\n Answer briefly."
        );
    }
}
