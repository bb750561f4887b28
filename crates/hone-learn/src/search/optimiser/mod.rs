//! Optimisers propose candidate versions of an agent (docs/ARCHITECTURE.md,
//! "Concepts"). One trait, one file per optimiser; [`from_spec`] builds the
//! ones an agent enables in `[agents.NAME.learn]`.
//!
//! Proposals must be deterministic for the same cycle (same inputs, same
//! version ids), so a cycle resumed after a crash proposes the same
//! candidates again and storing them is idempotent.

mod dpo;
mod examples;
pub mod fine_tune;
mod grpo;
pub use grpo::group_row;
mod live;
mod memory;
mod model;
mod playbook;
mod prompt;
pub mod reflect;
pub mod replay;
mod rollouts;
pub use rollouts::Rollout;
mod sft;
mod tools;
pub mod training;
mod trl;

use crate::error::LearnError;
use crate::search::eval::Evaluator;
use futures::future::BoxFuture;
use hone_config::{AgentConfig, Config, OptimiserSpec};
use hone_store::CycleStore;
use hone_types::{DatasetInfo, VersionId, VersionSpec};
use std::path::PathBuf;
use std::sync::Arc;

/// A proposed version and what changed from its parent, for humans.
#[derive(Debug, Clone, PartialEq)]
pub struct Proposal {
    pub spec: VersionSpec,
    pub diff: String,
    /// How a weight candidate's adapter was trained.
    pub training: Option<hone_types::TrainingSummary>,
    /// What calling models to propose it cost (reflective optimisers).
    pub spend: Option<hone_types::Spend>,
}

impl Proposal {
    /// A proposal of `spec`, described by its difference from `parent`.
    pub fn of(parent: &VersionSpec, spec: VersionSpec) -> Self {
        Self {
            diff: describe_diff(parent, &spec),
            spec,
            training: None,
            spend: None,
        }
    }
}

/// What an optimiser may look at.
#[derive(Clone)]
pub struct ProposeContext<'a> {
    pub config: &'a Config,
    pub agent: &'a AgentConfig,
    pub cycle: &'a hone_types::CycleInfo,
    pub champion_id: &'a VersionId,
    pub champion: &'a VersionSpec,
    /// What to learn from: the cycle's train set (half of a stratified
    /// sample of recent traffic; candidates are gated on the other half).
    pub target: &'a DatasetInfo,
    pub store: Arc<dyn CycleStore>,
    pub evaluator: &'a Evaluator,
    /// How the champion's rollouts run: the agent endpoint, or replay.
    pub via: &'a crate::search::eval::Target,
    /// Where trained adapters go (`<adapters_dir>/<name>`).
    pub adapters_dir: PathBuf,
    /// Where they are published, and base checkpoints and parent adapters
    /// fetched from.
    pub artefacts: &'a hone_artefacts::Artefacts,
    /// Earlier successes the weight optimisers replay (`replay.rs`).
    pub replay: &'a replay::Replay,
    /// What this optimiser may still spend calling models (its budget and
    /// the cycle's); optimisers that call none never touch it.
    pub meter: &'a crate::ask::Meter,
    /// The train set as reflectors read it, gathered on first use
    /// (`reflect::evidence::of`) and shared by the optimisers of the step.
    pub evidence: &'a std::sync::OnceLock<Vec<crate::search::optimiser::reflect::evidence::Evidence>>,
    pub progress: &'a (dyn Fn(&str) + Sync),
}

pub trait Optimiser: Send + Sync {
    fn name(&self) -> &'static str;

    /// Candidates for this cycle; an empty list (with a logged reason) when
    /// there is nothing worth trying.
    fn propose<'a>(&'a self, ctx: &'a ProposeContext<'a>) -> BoxFuture<'a, Result<Vec<Proposal>, LearnError>>;
}

/// Whether the agent's config leaves `episode` out of training data (it
/// shows a behaviour in `[learn] drop_from_training`).
pub fn dropped(agent: &AgentConfig, episode: &hone_types::EpisodeDetail) -> bool {
    let drop = &agent.learn.drop_from_training;
    !drop.is_empty() && episode.calls.iter().any(|c| drop.iter().any(|f| c.flags.named(f)))
}

pub fn from_spec(spec: &OptimiserSpec) -> Box<dyn Optimiser> {
    match spec {
        OptimiserSpec::Examples(e) => Box::new(examples::Examples { spec: e.clone() }),
        OptimiserSpec::Memory(m) => Box::new(memory::Memory { spec: m.clone() }),
        OptimiserSpec::Model(m) => Box::new(model::ModelSwap { spec: m.clone() }),
        OptimiserSpec::Grpo(t) => Box::new(grpo::Grpo { spec: t.clone() }),
        OptimiserSpec::Dpo(t) => Box::new(dpo::Dpo { spec: t.clone() }),
        OptimiserSpec::Sft(t) => Box::new(sft::Sft { spec: t.clone() }),
        OptimiserSpec::Prompt(p) => Box::new(prompt::PromptOptimiser { spec: p.clone() }),
        OptimiserSpec::Playbook(p) => Box::new(playbook::PlaybookOptimiser { spec: p.clone() }),
        OptimiserSpec::Tools(t) => Box::new(tools::ToolsOptimiser { spec: t.clone() }),
        OptimiserSpec::FineTune(f) => Box::new(fine_tune::FineTune { spec: f.clone() }),
    }
}

fn show<T: std::fmt::Debug>(v: &Option<T>) -> String {
    match v {
        Some(v) => format!("{v:?}").trim_matches('"').to_owned(),
        None => "unset".to_owned(),
    }
}

/// One line per changed field (`model: up/bad → up/good`), joined by `; `;
/// then, for a changed system prompt or tool set, a unified diff of it.
pub fn describe_diff(parent: &VersionSpec, child: &VersionSpec) -> String {
    let mut lines = Vec::new();
    let mut blocks = Vec::new();
    let route = |s: &VersionSpec| {
        s.routes
            .first()
            .map(|r| match &r.adapter {
                Some(a) => format!("{}/{} + adapter {a}", r.provider, r.model),
                None => format!("{}/{}", r.provider, r.model),
            })
            .unwrap_or_else(|| "none".into())
    };
    if route(parent) != route(child) {
        lines.push(format!("model: {} → {}", route(parent), route(child)));
    }
    let memory = |s: &VersionSpec| match s.routes.first().and_then(|r| r.memory.as_ref()) {
        Some(m) => format!(
            "knn-lm datastore {} k={} λ={}{} T={}",
            m.datastore.get(..12).unwrap_or(&m.datastore),
            m.k,
            m.lambda,
            if m.adaptive { " (adaptive)" } else { "" },
            m.temperature
        ),
        None => "none".into(),
    };
    if memory(parent) != memory(child) {
        lines.push(format!("memory: {} → {}", memory(parent), memory(child)));
    }
    if parent.routes.get(1..) != child.routes.get(1..) {
        lines.push(format!(
            "fallbacks: {} → {}",
            parent.routes.len().saturating_sub(1),
            child.routes.len().saturating_sub(1)
        ));
    }
    if parent.system != child.system {
        lines.push(format!(
            "system prompt: {} chars → {} chars",
            parent.system.as_deref().map_or(0, str::len),
            child.system.as_deref().map_or(0, str::len)
        ));
        blocks.push(unified(
            parent.system.as_deref().unwrap_or(""),
            child.system.as_deref().unwrap_or(""),
        ));
    }
    if parent.playbook != child.playbook {
        let held = |s: &VersionSpec| s.playbook.iter().map(|l| l.id.clone()).collect::<Vec<_>>();
        let (before, after) = (held(parent), held(child));
        let added: Vec<&String> = after.iter().filter(|id| !before.contains(id)).collect();
        let gone: Vec<&String> = before.iter().filter(|id| !after.contains(id)).collect();
        let list = |ids: &[&String]| ids.iter().map(|s| s.as_str()).collect::<Vec<_>>().join(" ");
        lines.push(format!(
            "playbook: {} → {} lessons (+{} −{})",
            before.len(),
            after.len(),
            if added.is_empty() { "none".into() } else { list(&added) },
            if gone.is_empty() { "none".into() } else { list(&gone) },
        ));
    }
    if parent.tools != child.tools {
        let pretty = |s: &VersionSpec| serde_json::to_string_pretty(&s.tools).unwrap_or_default();
        lines.push(format!("tools: {} → {} owned", parent.tools.len(), child.tools.len()));
        blocks.push(unified(&pretty(parent), &pretty(child)));
    }
    for (name, a, b) in [
        ("temperature", show(&parent.temperature), show(&child.temperature)),
        ("top_p", show(&parent.top_p), show(&child.top_p)),
        ("max_tokens", show(&parent.max_tokens), show(&child.max_tokens)),
        (
            "reasoning_effort",
            show(&parent.reasoning_effort),
            show(&child.reasoning_effort),
        ),
    ] {
        if a != b {
            lines.push(format!("{name}: {a} → {b}"));
        }
    }
    if parent.enforce != child.enforce {
        let e = |s: &VersionSpec| {
            let names: Vec<&str> = s.enforce.iter().map(|s| s.name()).collect();
            if names.is_empty() {
                "none".to_owned()
            } else {
                names.join(", ")
            }
        };
        lines.push(format!("enforced: {} → {}", e(parent), e(child)));
    }
    if parent.examples != child.examples {
        let e = |s: &VersionSpec| match &s.examples {
            None => "none".to_owned(),
            Some(p) => format!(
                "k={} min_reward={} by {}",
                p.k,
                p.min_reward.map_or("any".into(), |m| m.to_string()),
                p.embeddings
                    .as_ref()
                    .map_or("bm25".into(), |r| format!("embeddings {}/{}", r.provider, r.model))
            ),
        };
        lines.push(format!("examples: {} → {}", e(parent), e(child)));
    }
    if lines.is_empty() {
        return "no change".to_owned();
    }
    let mut text = lines.join("; ");
    for block in blocks {
        text.push('\n');
        text.push_str(&block);
    }
    text
}

/// A unified diff of two texts, as `diff -u` prints it (`--- champion`,
/// `+++ candidate`).
pub fn unified(old: &str, new: &str) -> String {
    let with_newline = |s: &str| {
        if s.ends_with('\n') {
            s.to_owned()
        } else {
            format!("{s}\n")
        }
    };
    let (old, new) = (with_newline(old), with_newline(new));
    let patch = diffy::create_patch(&old, &new).to_string();
    patch
        .replacen("--- original", "--- champion", 1)
        .replacen("+++ modified", "+++ candidate", 1)
        .trim_end()
        .to_owned()
}

#[cfg(test)]
mod tests {
    use super::*;
    use hone_types::{ExamplePolicy, Route};

    #[test]
    fn the_diff_names_every_changed_field() {
        let parent = VersionSpec {
            agent: "a".into(),
            routes: vec![Route {
                provider: "up".into(),
                model: "bad".into(),
                adapter: None,
                memory: None,
                adapter_sha256: None,
            }],
            temperature: Some(0.7),
            ..Default::default()
        };
        let mut child = parent.clone();
        assert_eq!(describe_diff(&parent, &child), "no change");
        child.routes[0].model = "good".into();
        child.temperature = None;
        child.examples = Some(ExamplePolicy {
            k: 4,
            min_reward: Some(0.5),
            embeddings: None,
        });
        assert_eq!(
            describe_diff(&parent, &child),
            "model: up/bad → up/good; temperature: 0.7 → unset; examples: none → k=4 min_reward=0.5 by bm25"
        );
    }
}
