//! `prompt`: reflective prompt evolution (GEPA). Each cycle, a reflection
//! model reads a minibatch of the train set — failures first, with their
//! rewards, critics' findings and users' comments — and rewrites a parent
//! prompt: the champion's for the first rewrite, then prompts drawn from
//! the per-instance Pareto pool of earlier cycles (weighted by instances
//! won). Complementary pool prompts are also merged with the champion's by
//! a three-way merge of their lines against their common ancestor (no model
//! call). Every proposal's diff is a unified diff of the prompt text.

use super::{Optimiser, Proposal, ProposeContext};
use crate::error::LearnError;
use crate::search::optimiser::reflect::evidence::{self, Evidence};
use crate::search::optimiser::reflect::pareto::{self, PoolEntry};
use crate::search::optimiser::reflect::Reflector;
use futures::future::BoxFuture;
use hone_config::PromptSpec;
use sha2::{Digest, Sha256};

pub struct PromptOptimiser {
    pub spec: PromptSpec,
}

/// Cycles back the Pareto pool reaches.
const POOL_CYCLES: usize = 20;

impl Optimiser for PromptOptimiser {
    fn name(&self) -> &'static str {
        "prompt"
    }

    fn propose<'a>(&'a self, ctx: &'a ProposeContext<'a>) -> BoxFuture<'a, Result<Vec<Proposal>, LearnError>> {
        Box::pin(async move {
            let agent = &ctx.agent.name;
            let evidence = evidence::of(ctx)?;
            let pool = pareto::pool(ctx.store.as_ref(), agent, ctx.via, POOL_CYCLES)?;
            let champion_prompt = ctx.champion.system.clone().unwrap_or_default();
            let mut proposals: Vec<Proposal> = Vec::new();
            if self.spec.merge {
                proposals.extend(merges(ctx, &pool, &champion_prompt));
            }
            if evidence.iter().all(|e| e.passed) {
                (ctx.progress)("prompt: no failing episode in the train set to reflect on");
                return Ok(proposals);
            }
            let reflector = Reflector::of(ctx, self.name());
            for round in 0..self.spec.candidates {
                let parent = parent(&pool, &ctx.cycle.id, round);
                let parent_prompt = parent.map_or(champion_prompt.as_str(), |p| p.system.as_str());
                let batch = evidence::minibatch(evidence, self.spec.minibatch, round, &ctx.cycle.id);
                let before = ctx.meter.spent();
                let answer = reflector
                    .ask(&reflection_prompt(ctx, parent_prompt, &batch), parse)
                    .await;
                let (diagnosis, prompt) = match answer {
                    Ok(a) => a,
                    Err(f) if f.budget_spent => {
                        (ctx.progress)(&format!("prompt: {}; no more rewrites this cycle", f.last_error));
                        break;
                    }
                    Err(f) => {
                        (ctx.progress)(&format!(
                            "prompt: the reflector gave no usable rewrite ({}; episode {})",
                            f.last_error, f.episode
                        ));
                        continue;
                    }
                };
                let spend = ctx.meter.spent().since(before);
                if prompt == champion_prompt || proposals.iter().any(|p| p.spec.system.as_deref() == Some(&prompt)) {
                    continue;
                }
                let mut spec = ctx.champion.clone();
                spec.system = Some(prompt);
                let mut proposal = Proposal::of(ctx.champion, spec);
                let from = parent.map_or("the champion's prompt".to_owned(), |p| {
                    format!("pool prompt {} (best on {} instances)", p.version, p.wins)
                });
                proposal.diff = format!(
                    "{}\nreflected on {} episodes from {from}: {diagnosis}",
                    proposal.diff,
                    batch.len()
                );
                proposal.spend = Some(spend);
                proposals.push(proposal);
            }
            Ok(proposals)
        })
    }
}

/// The parent of rewrite `round`: the champion first, then pool prompts
/// drawn with probability proportional to the instances they won.
fn parent<'p>(pool: &'p [PoolEntry], cycle: &str, round: usize) -> Option<&'p PoolEntry> {
    if round == 0 || pool.is_empty() {
        return None;
    }
    let total: usize = pool.iter().map(|p| p.wins).sum();
    let digest = Sha256::digest(format!("{cycle}\n{round}").as_bytes());
    let mut ticket = (u64::from_le_bytes(digest[..8].try_into().unwrap_or_default()) % total.max(1) as u64) as usize;
    pool.iter().find(|p| {
        if ticket < p.wins {
            return true;
        }
        ticket -= p.wins;
        false
    })
}

/// Three-way merges of pool prompts into the champion's, against the
/// prompt each was proposed from: what the champion gained since and what
/// the pool prompt added both kept. Conflicting or empty merges are skipped.
fn merges(ctx: &ProposeContext<'_>, pool: &[PoolEntry], champion: &str) -> Vec<Proposal> {
    let lines = |s: &str| {
        if s.is_empty() || s.ends_with('\n') {
            s.to_owned()
        } else {
            format!("{s}\n")
        }
    };
    let mut out: Vec<Proposal> = Vec::new();
    for entry in pool.iter().take(2) {
        let (ancestor, ours, theirs) = (lines(&entry.ancestor), lines(champion), lines(&entry.system));
        let merged = match diffy::merge(&ancestor, &ours, &theirs) {
            Ok(m) => m.trim_end().to_owned(),
            Err(_) => {
                (ctx.progress)(&format!(
                    "prompt: merging pool prompt {} conflicts; skipped",
                    entry.version
                ));
                continue;
            }
        };
        if merged == champion
            || merged == entry.system.trim_end()
            || out.iter().any(|p| p.spec.system.as_deref() == Some(&merged))
        {
            continue;
        }
        let mut spec = ctx.champion.clone();
        spec.system = Some(merged);
        let mut proposal = Proposal::of(ctx.champion, spec);
        proposal.diff = format!(
            "{}\nmerges pool prompt {} (best on {} instances in cycle {}) with the champion's",
            proposal.diff, entry.version, entry.wins, entry.cycle
        );
        out.push(proposal);
    }
    out
}

fn reflection_prompt(ctx: &ProposeContext<'_>, parent: &str, batch: &[&Evidence]) -> String {
    let mut text = String::new();
    if let Some(d) = &ctx.agent.description {
        text.push_str(&format!("The assistant: {d}\n\n"));
    }
    text.push_str(&format!(
        "Its current system prompt:\n<current_prompt>\n{}\n</current_prompt>\n\nEpisodes it served, failures first:\n",
        if parent.is_empty() { "(none)" } else { parent }
    ));
    for (i, e) in batch.iter().enumerate() {
        text.push_str(&e.render(i + 1));
    }
    text.push_str(
        "\nDiagnose why the failed episodes failed. Then write an improved system prompt: keep what works, \
add the rules the failures show are missing — stated generally, not about one episode — and nothing that \
would change the answers that passed. Reply with JSON only: \
{\"diagnosis\": \"<what went wrong, briefly>\", \"prompt\": \"<the complete new system prompt>\"}",
    );
    text
}

fn parse(text: &str) -> Result<(String, String), String> {
    let object = crate::ask::json_object(text)?;
    let prompt = object
        .get("prompt")
        .and_then(|p| p.as_str())
        .map(str::trim)
        .filter(|p| !p.is_empty())
        .ok_or("`prompt` is missing or empty")?;
    let diagnosis = object.get("diagnosis").and_then(|d| d.as_str()).unwrap_or("").trim();
    Ok((crate::ask::clip(diagnosis, 300), prompt.to_owned()))
}
