//! The reflective optimisers' tables — `[agents.NAME.learn.prompt]`,
//! `[agents.NAME.learn.playbook]`, `[agents.NAME.learn.tools]` — and the
//! per-cycle budgets that cap what they spend calling models. Raw form,
//! validation and typed form together.
//!
//! ```toml
//! [agents.support.learn]
//! optimisers = ["prompt", "playbook", "tools"]
//! budget = { calls = 60, tokens = 500000, usd = 1.0 }   # the cycle's, all optimisers together
//! [agents.support.learn.prompt]
//! reflector = { provider = "openai", model = "gpt-4o" }  # any declared provider
//! candidates = 2        # reflective rewrites per cycle
//! minibatch = 8         # episodes shown per reflection
//! merge = true          # also merge the champion with complementary pool prompts
//! budget = { calls = 20 }
//! [agents.support.learn.playbook]
//! max_lessons = 30
//! max_chars = 4000
//! max_ops = 5           # delta operations applied per cycle
//! retire_margin = 2     # retire a lesson once harmful ≥ helpful + this
//! [agents.support.learn.tools]
//! min_failures = 3      # invalid or failed calls of a tool before it is worth rewriting
//! ```
//!
//! A table without `reflector` borrows the first one given in another.

use crate::error::ConfigError;
use crate::learn::RawRouteRef;
use hone_types::Route;
use serde::Deserialize;

/// The name of the agent the reflection models' own calls are recorded under.
pub const REFLECTOR_AGENT: &str = "hone-reflector";

/// The `hone-reflector` version an optimiser of an agent asks: `AGENT.OPTIMISER`.
pub fn reflector_label(agent: &str, optimiser: &str) -> String {
    format!("{agent}.{optimiser}")
}

#[derive(Debug, Clone, Copy, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawBudget {
    pub calls: Option<u64>,
    pub tokens: Option<u64>,
    pub usd: Option<f64>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawPrompt {
    pub reflector: Option<RawRouteRef>,
    pub candidates: Option<usize>,
    pub minibatch: Option<usize>,
    pub merge: Option<bool>,
    pub budget: Option<RawBudget>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawPlaybook {
    pub reflector: Option<RawRouteRef>,
    pub minibatch: Option<usize>,
    pub max_lessons: Option<usize>,
    pub max_chars: Option<usize>,
    pub max_ops: Option<usize>,
    pub retire_margin: Option<u32>,
    pub budget: Option<RawBudget>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawTools {
    pub reflector: Option<RawRouteRef>,
    pub min_failures: Option<usize>,
    pub max_candidates: Option<usize>,
    pub minibatch: Option<usize>,
    pub budget: Option<RawBudget>,
}

/// Most an optimiser (or a whole cycle) may spend calling models.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Budget {
    pub calls: u64,
    pub tokens: u64,
    pub usd: f64,
}

impl Budget {
    /// A cycle's default: all its optimisers together.
    pub const CYCLE: Budget = Budget {
        calls: 100,
        tokens: 1_000_000,
        usd: 1.0,
    };
    /// One optimiser's default in a cycle.
    pub const OPTIMISER: Budget = Budget {
        calls: 30,
        tokens: 300_000,
        usd: 0.5,
    };

    pub fn from_raw(field: &str, raw: Option<RawBudget>, default: Budget) -> Result<Self, ConfigError> {
        let raw = raw.unwrap_or_default();
        let budget = Budget {
            calls: raw.calls.unwrap_or(default.calls),
            tokens: raw.tokens.unwrap_or(default.tokens),
            usd: raw.usd.unwrap_or(default.usd),
        };
        if !(budget.usd.is_finite() && budget.usd >= 0.0) {
            return Err(ConfigError::at(format!("{field}.usd"), "must be a number ≥ 0"));
        }
        Ok(budget)
    }
}

/// `prompt`: GEPA-style reflective rewrites of the system prompt.
#[derive(Debug, Clone, PartialEq)]
pub struct PromptSpec {
    pub reflector: Route,
    /// Reflective rewrites proposed per cycle.
    pub candidates: usize,
    /// Episodes shown to the reflector per rewrite (failures first).
    pub minibatch: usize,
    /// Also propose a merge of the champion's prompt with a complementary
    /// prompt from the Pareto pool (no model call).
    pub merge: bool,
    pub budget: Budget,
}

/// `playbook`: lessons curated by delta operations.
#[derive(Debug, Clone, PartialEq)]
pub struct PlaybookSpec {
    pub reflector: Route,
    pub minibatch: usize,
    pub max_lessons: usize,
    pub max_chars: usize,
    pub max_ops: usize,
    pub retire_margin: u32,
    pub budget: Budget,
}

/// `tools`: clearer descriptions and schemas where tool calls go wrong.
#[derive(Debug, Clone, PartialEq)]
pub struct ToolsSpec {
    pub reflector: Route,
    pub min_failures: usize,
    pub max_candidates: usize,
    pub minibatch: usize,
    pub budget: Budget,
}

/// The reflective tables as written, each taken when `optimisers` names it.
#[derive(Default)]
pub(crate) struct ReflectTables {
    pub prompt: Option<RawPrompt>,
    pub playbook: Option<RawPlaybook>,
    pub tools: Option<RawTools>,
}

impl ReflectTables {
    /// The first `reflector` any of the tables gives.
    pub fn any_reflector(&self) -> Option<RawRouteRef> {
        let prompt = self.prompt.as_ref().and_then(|t| t.reflector.clone());
        let playbook = self.playbook.as_ref().and_then(|t| t.reflector.clone());
        let tools = self.tools.as_ref().and_then(|t| t.reflector.clone());
        prompt.or(playbook).or(tools)
    }
}

fn reflector(
    ofield: &str,
    own: Option<RawRouteRef>,
    shared: Option<RawRouteRef>,
    providers: &[&str],
) -> Result<Route, ConfigError> {
    let raw = own.or(shared).ok_or_else(|| {
        ConfigError::at(
            format!("{ofield}.reflector"),
            "a reflective optimiser needs a reflection model: reflector = { provider = \"…\", model = \"…\" }",
        )
    })?;
    crate::learn::route(&format!("{ofield}.reflector"), raw, providers)
}

fn at_least_one(field: String, value: usize) -> Result<usize, ConfigError> {
    if value == 0 {
        return Err(ConfigError::at(field, "must be at least 1"));
    }
    Ok(value)
}

pub(crate) fn prompt(
    ofield: &str,
    raw: RawPrompt,
    shared: Option<RawRouteRef>,
    providers: &[&str],
) -> Result<PromptSpec, ConfigError> {
    Ok(PromptSpec {
        reflector: reflector(ofield, raw.reflector, shared, providers)?,
        candidates: at_least_one(format!("{ofield}.candidates"), raw.candidates.unwrap_or(2))?,
        minibatch: at_least_one(format!("{ofield}.minibatch"), raw.minibatch.unwrap_or(8))?,
        merge: raw.merge.unwrap_or(true),
        budget: Budget::from_raw(&format!("{ofield}.budget"), raw.budget, Budget::OPTIMISER)?,
    })
}

pub(crate) fn playbook(
    ofield: &str,
    raw: RawPlaybook,
    shared: Option<RawRouteRef>,
    providers: &[&str],
) -> Result<PlaybookSpec, ConfigError> {
    Ok(PlaybookSpec {
        reflector: reflector(ofield, raw.reflector, shared, providers)?,
        minibatch: at_least_one(format!("{ofield}.minibatch"), raw.minibatch.unwrap_or(8))?,
        max_lessons: at_least_one(format!("{ofield}.max_lessons"), raw.max_lessons.unwrap_or(30))?,
        max_chars: at_least_one(format!("{ofield}.max_chars"), raw.max_chars.unwrap_or(4000))?,
        max_ops: at_least_one(format!("{ofield}.max_ops"), raw.max_ops.unwrap_or(5))?,
        retire_margin: raw.retire_margin.unwrap_or(2),
        budget: Budget::from_raw(&format!("{ofield}.budget"), raw.budget, Budget::OPTIMISER)?,
    })
}

pub(crate) fn tools(
    ofield: &str,
    raw: RawTools,
    shared: Option<RawRouteRef>,
    providers: &[&str],
) -> Result<ToolsSpec, ConfigError> {
    Ok(ToolsSpec {
        reflector: reflector(ofield, raw.reflector, shared, providers)?,
        min_failures: at_least_one(format!("{ofield}.min_failures"), raw.min_failures.unwrap_or(3))?,
        max_candidates: at_least_one(format!("{ofield}.max_candidates"), raw.max_candidates.unwrap_or(2))?,
        minibatch: at_least_one(format!("{ofield}.minibatch"), raw.minibatch.unwrap_or(6))?,
        budget: Budget::from_raw(&format!("{ofield}.budget"), raw.budget, Budget::OPTIMISER)?,
    })
}

#[cfg(test)]
mod tests {
    use crate::{load_str, OptimiserSpec, REFLECTOR_AGENT};
    use std::path::Path;

    const BASE: &str = r#"
[providers.up]
type = "openai"
base_url = "http://127.0.0.1:9/v1"
[agents.a.versions.v1]
provider = "up"
model = "m"
playbook = ["Dates are YYYY-MM-DD."]
tools = [{ type = "function", function = { name = "convert", parameters = { type = "object" } } }]
[agents.a.learn]
"#;

    fn load(extra: &str) -> Result<crate::Config, crate::ConfigError> {
        load_str(&format!("{BASE}{extra}"), Path::new("."), &|_| None)
    }

    #[test]
    fn reflective_optimisers_share_a_reflector_and_record_under_their_own_agent() {
        let c = load(
            "optimisers = [\"prompt\", \"playbook\", \"tools\"]\nbudget = { usd = 0.25 }\n\
             [agents.a.learn.prompt]\nreflector = { provider = \"up\", model = \"big\" }\nbudget = { calls = 3 }\n",
        )
        .unwrap();
        let learn = &c.agents["a"].learn;
        assert_eq!(learn.budget.usd, 0.25);
        assert_eq!(learn.budget.calls, super::Budget::CYCLE.calls);
        let OptimiserSpec::Playbook(p) = &learn.optimisers[1] else {
            panic!("{:?}", learn.optimisers)
        };
        assert_eq!(p.reflector.model, "big", "borrowed from the prompt table");
        let (_, budget) = learn.optimisers[0].reflector().unwrap();
        assert_eq!(budget.calls, 3);
        let reflector = &c.agents[REFLECTOR_AGENT];
        let labels: Vec<&str> = reflector.versions.keys().map(String::as_str).collect();
        assert_eq!(labels, ["a.playbook", "a.prompt", "a.tools"]);
        let v1 = &c.agents["a"].versions["v1"].spec;
        assert_eq!(v1.playbook[0].id, "L1");
        assert_eq!(v1.tools[0].function.name, "convert");
    }

    #[test]
    fn a_reflective_optimiser_without_a_reflector_or_with_a_bad_budget_is_refused() {
        let e = load("optimisers = [\"playbook\"]\n").unwrap_err();
        assert_eq!(e.field.as_deref(), Some("agents.a.learn.playbook.reflector"));
        let e = load(
            "optimisers = [\"tools\"]\n[agents.a.learn.tools]\nreflector = { provider = \"nope\", model = \"m\" }\n",
        )
        .unwrap_err();
        assert_eq!(e.field.as_deref(), Some("agents.a.learn.tools.reflector.provider"));
        let e = load("budget = { usd = -1 }\n").unwrap_err();
        assert_eq!(e.field.as_deref(), Some("agents.a.learn.budget.usd"));
        let e = load("[agents.a.learn.prompt]\nreflector = { provider = \"up\", model = \"m\" }\n").unwrap_err();
        assert!(e.message.contains("not in `optimisers`"), "{e}");
        let twice = BASE.replace(
            "tools = [{",
            "tools = [{ type = \"function\", function = { name = \"convert\" } }, {",
        );
        let e = load_str(&twice, Path::new("."), &|_| None).unwrap_err();
        assert!(e.message.contains("`convert` is listed twice"), "{e}");
    }
}
