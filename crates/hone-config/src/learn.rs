//! The `[agents.NAME.learn]` table (when and how an agent's cycle runs, its
//! optimisers, gate, objective and monitors), the deployment policy in
//! `[agents.NAME.deployment]`, and the process-wide `[learn]` budget.
//! Raw form, validation and typed form live together here.
//!
//! ```toml
//! [learn]
//! max_concurrent_cycles = 2
//!
//! [agents.support.deployment]
//! champion = "v1"
//! policy = { type = "auto", min_gain = 0.02, max_cost_ratio = 1.0 }   # or "manual"
//! canary_share = 0.1
//! clear_gain = { above = 0.1, share = 0.5 }   # optional: a larger share for a candidate the gate found clearly better
//! canary_episodes = 50
//! promote_margin = 0.05           # optional: promote only a canary shown within 0.05 reward of the champion
//! canary_max_episodes = 200       # with promote_margin or a sequential test: roll back a canary still undecided here
//! # promotion = "sequential"      # instead: users decide — promoted once an always-valid test shows it better
//! # least_gain = 0.05             # with it: roll back a canary shown not to beat the champion by 0.05
//! # canary_max_share = 0.5        # with it: the share a canary grows to as the evidence for it grows
//!
//! [agents.support.learn]
//! every = { episodes = 500, minutes = 60 }
//! optimisers = ["examples", "model", "sft"]
//! optimisers_per_cycle = 1                  # optional: each cycle runs one of them, in turn (default: all)
//! objective = ["max reward", "min cost"]
//! dataset_size = 200
//! endpoint = "http://127.0.0.1:8000/run"   # multi-step agents: how rollouts and evaluations run
//! concurrency = 4                           # episodes evaluations and rollouts run at once
//! [agents.support.learn.model]
//! models = [{ provider = "openai", model = "gpt-4o-mini" }]
//! temperatures = [0.2]
//! [agents.support.learn.gate]
//! confidence = 0.95
//! tolerance = 0
//! samples = 1                               # runs per instance and version (more at temperature > 0)
//! bounds = { invalid_tool_call = 0.02 }
//! [agents.support.learn.monitor]
//! bounds = { invalid_tool_call = 0.02, clarifying_question = 0.05, latency = { relative = 1.0, absolute = 50.0 } }
//! webhook = "https://hooks.example.com/hone"
//! ```

use crate::error::ConfigError;
use hone_types::Route;
use serde::Deserialize;
use std::collections::BTreeMap;

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawLearnBudget {
    /// Cycles (of different agents) that may run at once.
    pub max_concurrent_cycles: Option<usize>,
    /// How often `hone learn` checks triggers and monitors, in seconds.
    pub poll_seconds: Option<u64>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawLearn {
    pub every: Option<RawEvery>,
    #[serde(default)]
    pub optimisers: Vec<String>,
    pub optimisers_per_cycle: Option<usize>,
    #[serde(default)]
    pub objective: Vec<String>,
    pub dataset_size: Option<usize>,
    pub endpoint: Option<String>,
    pub concurrency: Option<usize>,
    pub examples: Option<RawExamples>,
    pub memory: Option<RawMemoryOptimiser>,
    pub model: Option<RawModelOptimiser>,
    pub grpo: Option<RawTraining>,
    pub dpo: Option<RawTraining>,
    pub sft: Option<RawTraining>,
    pub prompt: Option<crate::reflect::RawPrompt>,
    pub playbook: Option<crate::reflect::RawPlaybook>,
    pub tools: Option<crate::reflect::RawTools>,
    /// What the cycle's optimisers may spend calling models, together.
    pub budget: Option<crate::reflect::RawBudget>,
    pub gate: Option<RawGate>,
    pub monitor: Option<RawMonitor>,
    pub replay: Option<RawReplay>,
    pub drift: Option<RawDrift>,
    pub shadow: Option<RawShadow>,
    /// How many recent cycles' gates are mined for flipped instances.
    pub flipped_cycles: Option<usize>,
    /// Behaviours (`invalid_tool_call`, …) whose episodes are left out of
    /// the weight optimisers' training data.
    #[serde(default)]
    pub drop_from_training: Vec<String>,
    /// What trains the weight optimisers' adapters.
    pub trainer: Option<crate::trainer::RawTrainer>,
    /// Episodes may be uploaded to a provider for hosted fine-tuning.
    pub allow_upload: Option<bool>,
    pub upload: Option<crate::fine_tune::RawUpload>,
    #[serde(rename = "openai-sft")]
    pub openai_sft: Option<crate::fine_tune::RawFineTune>,
    #[serde(rename = "openai-dpo")]
    pub openai_dpo: Option<crate::fine_tune::RawFineTune>,
    #[serde(rename = "openai-rft")]
    pub openai_rft: Option<crate::fine_tune::RawFineTune>,
}

/// `[agents.NAME.learn.shadow]`: extra answers sampled for a share of live
/// requests, which no user sees, for learning.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawShadow {
    /// Share of live one-answer requests (streamed or not) on the embedded
    /// engine sampled.
    pub share: Option<f64>,
    /// Extra answers per sampled request.
    pub n: Option<u32>,
}

/// `[agents.NAME.learn.drift]`: when the cycle's window of traffic counts
/// as moved away from the episodes before it.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawDrift {
    /// Least Jensen–Shannon divergence (bits) of the task word mixes.
    pub min_divergence: Option<f64>,
    /// Largest permutation-test p-value.
    pub alpha: Option<f64>,
    /// Fewest episodes in the window and before it (0: never checked).
    pub min_episodes: Option<usize>,
    /// Earlier episodes compared against (the most recent ones).
    pub reference: Option<usize>,
}

/// `[agents.NAME.learn.replay]`: earlier successes the weight optimisers
/// keep training on, so a candidate does not forget what its champion did.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawReplay {
    /// Most recent passing production episodes kept (0: off).
    pub size: Option<usize>,
    /// Share of each training batch drawn from them.
    pub share: Option<f64>,
    /// EWC strength anchoring the adapter where it started (0: off).
    pub ewc: Option<f64>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawEvery {
    pub episodes: Option<u64>,
    pub minutes: Option<u64>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawExamples {
    /// The k values to propose (one candidate each).
    pub k: Option<Vec<u32>>,
    pub min_reward: Option<f64>,
    pub embeddings: Option<RawRouteRef>,
    pub max_candidates: Option<usize>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawMemoryOptimiser {
    /// The k values to propose.
    pub k: Option<Vec<u32>>,
    /// The λ values to propose (one candidate per k and λ).
    pub lambda: Option<Vec<f64>>,
    pub temperature: Option<f64>,
    /// λ scaled by how near the nearest stored context is (default false).
    pub adaptive: Option<bool>,
    /// Train-set episodes with at least this reward go into the datastore
    /// (default: the reward spec's pass threshold).
    pub min_reward: Option<f64>,
    pub max_candidates: Option<usize>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawRouteRef {
    pub provider: String,
    pub model: String,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawModelOptimiser {
    #[serde(default)]
    pub models: Vec<RawRouteRef>,
    #[serde(default)]
    pub temperatures: Vec<f64>,
    #[serde(default)]
    pub reasoning_efforts: Vec<String>,
    pub max_candidates: Option<usize>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawTraining {
    pub steps: Option<usize>,
    pub lr: Option<f64>,
    pub rank: Option<usize>,
    /// Fewest training examples (pairs, groups) worth a run.
    pub min_examples: Option<usize>,
    /// GRPO and DPO: rollouts of the champion per task (a group).
    pub group_size: Option<usize>,
    /// GRPO: where its groups come from: `"rollouts"` (default),
    /// `"production"`, or a list of them.
    pub groups: Option<RawGroups>,
    /// GRPO on production episodes: the oldest serving version still
    /// trained on, in promotions back from the champion (default 2).
    pub max_staleness: Option<u32>,
}

/// `groups = "production"` or `groups = ["rollouts", "production"]`.
#[derive(Debug, Deserialize)]
#[serde(untagged)]
pub enum RawGroups {
    One(String),
    Many(Vec<String>),
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawGate {
    pub confidence: Option<f64>,
    pub tolerance: Option<usize>,
    pub reruns: Option<u32>,
    pub samples: Option<u32>,
    #[serde(default)]
    pub bounds: BTreeMap<String, RawBound>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawMonitor {
    pub window: Option<usize>,
    pub min_episodes: Option<usize>,
    pub confidence: Option<f64>,
    pub rollback: Option<bool>,
    pub webhook: Option<String>,
    #[serde(default)]
    pub bounds: BTreeMap<String, RawBound>,
}

/// `policy = "manual"` or `policy = { type = "auto", … }`.
#[derive(Debug, Deserialize)]
#[serde(untagged)]
pub enum RawPolicy {
    Name(String),
    Table(RawPolicyTable),
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawPolicyTable {
    #[serde(rename = "type")]
    pub kind: String,
    pub min_gain: Option<f64>,
    pub max_cost_ratio: Option<f64>,
}

/// What the cycle may spend at once.
#[derive(Debug, Clone, PartialEq)]
pub struct LearnBudget {
    pub max_concurrent_cycles: usize,
    pub poll_seconds: u64,
}

impl Default for LearnBudget {
    fn default() -> Self {
        Self {
            max_concurrent_cycles: 2,
            poll_seconds: 10,
        }
    }
}

impl LearnBudget {
    pub fn from_raw(raw: RawLearnBudget) -> Result<Self, ConfigError> {
        let d = Self::default();
        let max_concurrent_cycles = raw.max_concurrent_cycles.unwrap_or(d.max_concurrent_cycles);
        if max_concurrent_cycles == 0 {
            return Err(ConfigError::at("learn.max_concurrent_cycles", "must be at least 1"));
        }
        let poll_seconds = raw.poll_seconds.unwrap_or(d.poll_seconds);
        if poll_seconds == 0 {
            return Err(ConfigError::at("learn.poll_seconds", "must be at least 1"));
        }
        Ok(Self {
            max_concurrent_cycles,
            poll_seconds,
        })
    }
}

/// Who decides that a candidate on the front goes live.
#[derive(Debug, Clone, PartialEq)]
pub enum DeploymentPolicy {
    /// `hone approve CANDIDATE`.
    Manual,
    /// The best candidate on the front that gains at least `min_gain` mean
    /// reward over the champion at no more than `max_cost_ratio` × its cost.
    Auto { min_gain: f64, max_cost_ratio: f64 },
}

impl DeploymentPolicy {
    pub fn from_raw(field: &str, raw: Option<RawPolicy>) -> Result<Self, ConfigError> {
        let table = match raw {
            None => return Ok(Self::Manual),
            Some(RawPolicy::Name(name)) => RawPolicyTable {
                kind: name,
                min_gain: None,
                max_cost_ratio: None,
            },
            Some(RawPolicy::Table(t)) => t,
        };
        match table.kind.as_str() {
            "manual" if table.min_gain.is_none() && table.max_cost_ratio.is_none() => Ok(Self::Manual),
            "manual" => Err(ConfigError::at(field, "a manual policy takes no thresholds")),
            "auto" => {
                let min_gain = table.min_gain.unwrap_or(0.0);
                let max_cost_ratio = table.max_cost_ratio.unwrap_or(f64::INFINITY);
                if !min_gain.is_finite() || min_gain < 0.0 {
                    return Err(ConfigError::at(format!("{field}.min_gain"), "must be a number ≥ 0"));
                }
                if max_cost_ratio.is_nan() || max_cost_ratio <= 0.0 {
                    return Err(ConfigError::at(
                        format!("{field}.max_cost_ratio"),
                        "must be a number > 0",
                    ));
                }
                Ok(Self::Auto {
                    min_gain,
                    max_cost_ratio,
                })
            }
            other => Err(ConfigError::at(
                format!("{field}.type"),
                format!("unknown policy `{other}` (manual, auto)"),
            )),
        }
    }
}

/// The behaviour rates the gate and the monitors watch, by name.
pub const RATE_METRICS: [&str; 6] = [
    "invalid_tool_call",
    "clarifying_question",
    "refusal",
    "empty",
    "error",
    "tool_use",
];

/// Measures that are means, not rates: `mean_length` (relative change either
/// way), `reward` (absolute drop), `cost` and `latency` (relative rise).
pub const MEAN_METRICS: [&str; 4] = ["mean_length", "reward", "cost", "latency"];

/// A bound as written: a number (the metric's natural kind: relative for
/// `mean_length`, `cost` and `latency`, absolute otherwise) or both parts.
#[derive(Debug, Clone, Copy, Deserialize)]
#[serde(untagged)]
pub enum RawBound {
    Number(f64),
    Parts {
        relative: Option<f64>,
        absolute: Option<f64>,
    },
}

/// The least change of a metric that counts (a minimum effect size): it
/// must exceed every part given — `absolute` in the metric's own unit (a
/// rate's points, reward, $, ms, characters) and `relative` as a share of
/// the champion's value. A change smaller than either is noise, however
/// significant (a canary 2.5 ms slower over a few dozen episodes is).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Bound {
    pub relative: Option<f64>,
    pub absolute: Option<f64>,
}

impl Bound {
    pub const fn absolute(value: f64) -> Self {
        Self {
            relative: None,
            absolute: Some(value),
        }
    }

    pub const fn relative(value: f64) -> Self {
        Self {
            relative: Some(value),
            absolute: None,
        }
    }

    /// Whether moving from `champion` by `change` (towards worse, so
    /// positive) goes beyond the bound.
    pub fn exceeded_by(&self, champion: f64, change: f64) -> bool {
        change > 0.0
            && (self.relative.is_some() || self.absolute.is_some())
            && self.absolute.is_none_or(|a| change > a)
            && self.relative.is_none_or(|r| change > r * champion.abs())
    }
}

impl std::fmt::Display for Bound {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match (self.relative, self.absolute) {
            (Some(r), Some(a)) => write!(f, "{:.0}% and {a}", r * 100.0),
            (Some(r), None) => write!(f, "{:.0}%", r * 100.0),
            (None, Some(a)) => write!(f, "{a}"),
            (None, None) => f.write_str("none"),
        }
    }
}

/// Each metric's bound: for a rate, its largest allowed rise over the
/// champion's (`tool_use` either way); for the [`MEAN_METRICS`], as their
/// doc says.
pub type Bounds = BTreeMap<String, Bound>;

/// Metrics whose plain-number bound is relative.
const RELATIVE_METRICS: [&str; 3] = ["mean_length", "cost", "latency"];

fn default_bounds() -> Bounds {
    [
        ("invalid_tool_call", Bound::absolute(0.02)),
        ("clarifying_question", Bound::absolute(0.05)),
        ("refusal", Bound::absolute(0.02)),
        ("empty", Bound::absolute(0.02)),
        ("error", Bound::absolute(0.02)),
        // No `mean_length` and no `tool_use` by default: a longer answer is
        // not a worse one, and bounding it rolled back canaries that were
        // better on reward; and calling the tool more (or less)
        // is what an agent learning when to use its tools does — the demo's
        // first GRPO candidate that learned to call `calc` (tool use 0.47 →
        // 0.80) was pruned by a 0.2 bound. The harm either can do shows
        // as reward, invalid tool calls, cost and latency, which are
        // bounded. Both are always measured and reported; bound them by
        // naming them.
        ("reward", Bound::absolute(0.1)),
        ("cost", Bound::relative(0.5)),
        // Twice the latency evaluation predicted, and at least 50 ms more.
        (
            "latency",
            Bound {
                relative: Some(1.0),
                absolute: Some(50.0),
            },
        ),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_owned(), v))
    .collect()
}

fn bounds(field: &str, raw: BTreeMap<String, RawBound>) -> Result<Bounds, ConfigError> {
    let mut out = default_bounds();
    for (name, value) in raw {
        if !(RATE_METRICS.contains(&name.as_str()) || MEAN_METRICS.contains(&name.as_str())) {
            return Err(ConfigError::at(
                format!("{field}.{name}"),
                format!(
                    "unknown metric (known: {}, {})",
                    RATE_METRICS.join(", "),
                    MEAN_METRICS.join(", ")
                ),
            ));
        }
        let bound = match value {
            RawBound::Number(v) if RELATIVE_METRICS.contains(&name.as_str()) => Bound::relative(v),
            RawBound::Number(v) => Bound::absolute(v),
            RawBound::Parts { relative, absolute } => Bound { relative, absolute },
        };
        for part in [bound.relative, bound.absolute].into_iter().flatten() {
            if !(part.is_finite() && part >= 0.0) {
                return Err(ConfigError::at(format!("{field}.{name}"), "must be a number ≥ 0"));
            }
        }
        if bound.relative.is_none() && bound.absolute.is_none() {
            return Err(ConfigError::at(
                format!("{field}.{name}"),
                "give `relative`, `absolute` or both",
            ));
        }
        out.insert(name, bound);
    }
    Ok(out)
}

/// Metrics the gate weighs otherwise than by a bound: reward by its
/// confidence that the candidate beats the champion, cost by the approval
/// policy's `max_cost_ratio`, latency not at all (offline runs share the
/// machine with everything else). Their bounds are the monitors'.
const NOT_GATE_BOUNDS: [&str; 3] = ["reward", "cost", "latency"];

/// The gate's bounds: the rates and `mean_length`. A bound it would not
/// apply is refused, rather than accepted and ignored.
fn gate_bounds(field: &str, raw: BTreeMap<String, RawBound>) -> Result<Bounds, ConfigError> {
    if let Some(name) = raw.keys().find(|n| NOT_GATE_BOUNDS.contains(&n.as_str())) {
        return Err(ConfigError::at(
            format!("{field}.{name}"),
            format!(
                "the gate does not bound `{name}` (it weighs reward by its confidence, cost by the approval \
                 policy's max_cost_ratio, and not latency); bound it on the canary in `monitor.bounds`"
            ),
        ));
    }
    Ok(gate_only(bounds(field, raw)?))
}

/// `bounds` without those the gate does not apply.
fn gate_only(mut bounds: Bounds) -> Bounds {
    bounds.retain(|name, _| !NOT_GATE_BOUNDS.contains(&name.as_str()));
    bounds
}

#[derive(Debug, Clone, PartialEq)]
pub struct GateSpec {
    /// Confidence that the candidate beats the champion (bootstrap of paired differences).
    pub confidence: f64,
    /// Confirmed regressions allowed on the regression set (default 0).
    pub tolerance: usize,
    /// Re-runs of each flipped instance to tell noise from regression.
    pub reruns: u32,
    /// Runs of every instance by every version evaluated: when sampling is
    /// random the gate compares per-instance means and pass rates over
    /// these, so one lucky pass is not a regression (default 1).
    pub samples: u32,
    pub bounds: Bounds,
}

#[derive(Debug, Clone, PartialEq)]
pub struct MonitorSpec {
    /// Most recent episodes per version looked at.
    pub window: usize,
    /// Fewest canary episodes before a monitor may fire.
    pub min_episodes: usize,
    pub confidence: f64,
    /// Roll the canary back when a monitor fires (default true).
    pub rollback: bool,
    pub webhook: Option<String>,
    pub bounds: Bounds,
}

#[derive(Debug, Clone, PartialEq)]
pub struct TrainingSpec {
    pub steps: usize,
    pub lr: f64,
    pub rank: usize,
    pub min_examples: usize,
    pub group_size: usize,
    /// GRPO only: its sources of groups, each once.
    pub groups: Vec<GroupSource>,
    /// GRPO on production episodes: promotions back a serving version may be.
    pub max_staleness: u32,
}

impl TrainingSpec {
    /// The LoRA scale its adapters train with: alpha = 2 × rank.
    pub fn lora_alpha(&self) -> f64 {
        2.0 * self.rank as f64
    }
}

/// Where GRPO's groups come from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GroupSource {
    /// The champion rolled out `group_size` times per train task.
    Rollouts,
    /// The train half's production episodes, one answer each, with the
    /// users' own (possibly late) rewards, against a running baseline.
    Production,
    /// The train half's shadow samples: each sampled call's served answer
    /// and its shadow samples, scored alike, one group.
    Shadow,
}

impl GroupSource {
    pub const NAMES: &'static str = "rollouts, production, shadow";

    pub fn parse(name: &str) -> Option<Self> {
        match name {
            "rollouts" => Some(Self::Rollouts),
            "production" => Some(Self::Production),
            "shadow" => Some(Self::Shadow),
            _ => None,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Self::Rollouts => "rollouts",
            Self::Production => "production",
            Self::Shadow => "shadow",
        }
    }
}

/// `examples`: few-shot retrieval policies to try, one candidate per `k`.
#[derive(Debug, Clone, PartialEq)]
pub struct ExamplesSpec {
    pub ks: Vec<u32>,
    pub min_reward: Option<f64>,
    pub embeddings: Option<Route>,
    pub max_candidates: usize,
}

/// `memory`: kNN-LM decoding over a datastore of the train set's
/// successful episodes, one candidate per `k` and `λ`.
#[derive(Debug, Clone, PartialEq)]
pub struct MemorySpec {
    pub ks: Vec<u32>,
    pub lambdas: Vec<f64>,
    pub temperature: f64,
    pub adaptive: bool,
    pub min_reward: Option<f64>,
    pub max_candidates: usize,
}

/// `model`: other models, temperatures or reasoning efforts to try.
#[derive(Debug, Clone, PartialEq)]
pub struct ModelSpec {
    pub models: Vec<Route>,
    pub temperatures: Vec<f64>,
    pub reasoning_efforts: Vec<String>,
    pub max_candidates: usize,
}

/// One enabled optimiser with its settings; each optimiser gets only its own.
#[derive(Debug, Clone, PartialEq)]
pub enum OptimiserSpec {
    Examples(ExamplesSpec),
    Memory(MemorySpec),
    Model(ModelSpec),
    Grpo(TrainingSpec),
    Dpo(TrainingSpec),
    Sft(TrainingSpec),
    Prompt(crate::reflect::PromptSpec),
    Playbook(crate::reflect::PlaybookSpec),
    Tools(crate::reflect::ToolsSpec),
    /// `openai-sft`, `openai-dpo`, `openai-rft`: a hosted model fine-tuned by its provider.
    FineTune(crate::fine_tune::FineTuneSpec),
}

impl OptimiserSpec {
    pub const NAMES: [&'static str; 12] = [
        "examples",
        "memory",
        "model",
        "grpo",
        "dpo",
        "sft",
        "prompt",
        "playbook",
        "tools",
        "openai-sft",
        "openai-dpo",
        "openai-rft",
    ];

    pub fn name(&self) -> &'static str {
        match self {
            OptimiserSpec::Examples(_) => "examples",
            OptimiserSpec::Memory(_) => "memory",
            OptimiserSpec::Model(_) => "model",
            OptimiserSpec::Grpo(_) => "grpo",
            OptimiserSpec::Dpo(_) => "dpo",
            OptimiserSpec::Sft(_) => "sft",
            OptimiserSpec::Prompt(_) => "prompt",
            OptimiserSpec::Playbook(_) => "playbook",
            OptimiserSpec::Tools(_) => "tools",
            OptimiserSpec::FineTune(f) => f.method.name(),
        }
    }

    /// What an optimiser may spend, when it spends: the reflection model a
    /// reflective optimiser calls (priced by its provider) and its budget,
    /// or a hosted fine-tuning optimiser's budget (priced by itself).
    pub fn metered(&self) -> Option<(Option<&Route>, crate::reflect::Budget)> {
        match self {
            OptimiserSpec::FineTune(f) => Some((None, f.budget)),
            _ => self.reflector().map(|(route, budget)| (Some(route), budget)),
        }
    }

    /// The reflection model a reflective optimiser calls, and its own budget.
    pub fn reflector(&self) -> Option<(&Route, crate::reflect::Budget)> {
        match self {
            OptimiserSpec::Prompt(p) => Some((&p.reflector, p.budget)),
            OptimiserSpec::Playbook(p) => Some((&p.reflector, p.budget)),
            OptimiserSpec::Tools(t) => Some((&t.reflector, t.budget)),
            _ => None,
        }
    }
}

/// An objective: which measure, and which way is better.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Objective {
    MaxReward,
    MinCost,
    MinLatency,
}

impl Objective {
    pub fn parse(s: &str) -> Option<Self> {
        match s.split_whitespace().collect::<Vec<_>>().as_slice() {
            ["max", "reward"] => Some(Self::MaxReward),
            ["min", "cost"] => Some(Self::MinCost),
            ["min", "latency"] => Some(Self::MinLatency),
            _ => None,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Objective::MaxReward => "max reward",
            Objective::MinCost => "min cost",
            Objective::MinLatency => "min latency",
        }
    }
}

#[derive(Debug, Clone, PartialEq)]
pub struct LearnSpec {
    pub every_episodes: Option<u64>,
    pub every_minutes: Option<u64>,
    pub optimisers: Vec<OptimiserSpec>,
    /// How many of `optimisers` propose in one cycle, taking turns across
    /// cycles ([`LearnSpec::turn`]); all of them by default.
    pub optimisers_per_cycle: usize,
    pub objective: Vec<Objective>,
    /// Instances of the target (`traffic`) and `regression` datasets.
    pub dataset_size: usize,
    /// The agent endpoint (`POST URL {"input": …}`) that runs a task as the
    /// agent would, for evaluations and rollouts of multi-step agents;
    /// without one, the recorded first request is replayed (single-call agents).
    pub endpoint: Option<String>,
    /// Episodes the cycle's evaluations and rollouts run at once (the
    /// embedded engine decodes concurrent requests in one batch).
    pub concurrency: usize,
    pub gate: GateSpec,
    pub monitor: MonitorSpec,
    pub replay: ReplaySpec,
    pub drift: DriftSpec,
    /// Shadow sampling in the gateway; `None`: off.
    pub shadow: Option<ShadowSpec>,
    /// Hard-example mining: the instances of the last this many finished
    /// cycles' gates on which the champion and a candidate disagreed join
    /// the next train set (the champion failed them) or regression set (it
    /// passed them); 0: off.
    pub flipped_cycles: usize,
    /// What the cycle's optimisers may spend calling models, together.
    pub budget: crate::reflect::Budget,
    /// Behaviour flags whose episodes the weight optimisers never train on.
    /// A footgun, not a feature: Cursor's real-time RL discarded broken tool
    /// calls this way and its model learned to break them on hard tasks;
    /// `hone demo --reward naive` sets it to show what the gate and the
    /// monitors then catch.
    pub drop_from_training: Vec<String>,
    /// What trains the weight optimisers' adapters (`sft`, `dpo`, `grpo`).
    pub trainer: crate::trainer::TrainerSpec,
    /// What may leave the machine for hosted fine-tuning.
    pub upload: crate::fine_tune::UploadSpec,
}

/// For a `share` of live requests to a version whose routes all run on the
/// embedded engine, the gateway samples `n` more answers from the same
/// prompt (one request, the prompt's KV cache shared) and records them with
/// the call as shadow samples; the client gets the first answer only.
#[derive(Debug, Clone, PartialEq)]
pub struct ShadowSpec {
    pub share: f64,
    pub n: u32,
}

impl ShadowSpec {
    fn from_raw(field: &str, raw: RawShadow) -> Result<Self, ConfigError> {
        let spec = Self {
            share: raw.share.unwrap_or(0.1),
            n: raw.n.unwrap_or(4),
        };
        if !(spec.share > 0.0 && spec.share <= 1.0) {
            return Err(ConfigError::at(format!("{field}.shadow.share"), "must be in (0, 1]"));
        }
        if !(1..=16).contains(&spec.n) {
            return Err(ConfigError::at(format!("{field}.shadow.n"), "must be between 1 and 16"));
        }
        Ok(spec)
    }
}

/// When traffic counts as drifted (`hone_learn::data::drift`).
#[derive(Debug, Clone, PartialEq)]
pub struct DriftSpec {
    pub min_divergence: f64,
    pub alpha: f64,
    /// 0 turns the check off.
    pub min_episodes: usize,
    pub reference: usize,
}

impl Default for DriftSpec {
    fn default() -> Self {
        Self {
            min_divergence: 0.05,
            alpha: 0.01,
            min_episodes: 20,
            reference: 500,
        }
    }
}

impl DriftSpec {
    fn from_raw(field: &str, raw: RawDrift) -> Result<Self, ConfigError> {
        let d = Self::default();
        let spec = Self {
            min_divergence: raw.min_divergence.unwrap_or(d.min_divergence),
            alpha: raw.alpha.unwrap_or(d.alpha),
            min_episodes: raw.min_episodes.unwrap_or(d.min_episodes),
            reference: raw.reference.unwrap_or(d.reference),
        };
        if !(0.0..=1.0).contains(&spec.min_divergence) {
            return Err(ConfigError::at(
                format!("{field}.drift.min_divergence"),
                "must be in [0, 1] (bits)",
            ));
        }
        if !(spec.alpha > 0.0 && spec.alpha < 1.0) {
            return Err(ConfigError::at(
                format!("{field}.drift.alpha"),
                "must be between 0 and 1",
            ));
        }
        if spec.reference == 0 {
            return Err(ConfigError::at(
                format!("{field}.drift.reference"),
                "must be at least 1",
            ));
        }
        Ok(spec)
    }
}

/// The weight optimisers' replay buffer: the agent's most recent `size`
/// passing production episodes from before the cycle's window (never an
/// instance the cycle gates on), a `share` of every batch.
#[derive(Debug, Clone, PartialEq)]
pub struct ReplaySpec {
    pub size: usize,
    pub share: f64,
    pub ewc: f64,
}

impl Default for ReplaySpec {
    fn default() -> Self {
        Self {
            size: 256,
            share: 0.25,
            ewc: 0.0,
        }
    }
}

impl ReplaySpec {
    /// Replay and EWC are terms of hone's own trainer's loss: TRL has none,
    /// so with `trainer.type = "trl"` replay is off, and asking for it is
    /// refused rather than silently dropped.
    fn for_trainer(field: &str, raw: RawReplay, trainer: &crate::trainer::TrainerSpec) -> Result<Self, ConfigError> {
        if !matches!(trainer, crate::trainer::TrainerSpec::Trl(_)) {
            return Self::from_raw(field, raw);
        }
        for (key, value) in [("share", raw.share), ("ewc", raw.ewc)] {
            if value.is_some_and(|v| v != 0.0) {
                return Err(ConfigError::at(
                    format!("{field}.replay.{key}"),
                    "replay and EWC are hone's own trainer's; with `trainer.type = \"trl\"` leave them out",
                ));
            }
        }
        Self::from_raw(
            field,
            RawReplay {
                share: Some(0.0),
                ..raw
            },
        )
    }

    fn from_raw(field: &str, raw: RawReplay) -> Result<Self, ConfigError> {
        let d = Self::default();
        let spec = Self {
            size: raw.size.unwrap_or(d.size),
            share: raw.share.unwrap_or(d.share),
            ewc: raw.ewc.unwrap_or(d.ewc),
        };
        if !(0.0..0.9).contains(&spec.share) {
            return Err(ConfigError::at(format!("{field}.replay.share"), "must be in [0, 0.9)"));
        }
        if !(spec.ewc.is_finite() && spec.ewc >= 0.0) {
            return Err(ConfigError::at(format!("{field}.replay.ewc"), "must be a number ≥ 0"));
        }
        Ok(spec)
    }
}

impl Default for LearnSpec {
    fn default() -> Self {
        Self {
            every_episodes: None,
            every_minutes: None,
            optimisers: Vec::new(),
            optimisers_per_cycle: usize::MAX,
            objective: vec![Objective::MaxReward, Objective::MinCost],
            dataset_size: 100,
            endpoint: None,
            concurrency: 4,
            gate: GateSpec {
                confidence: 0.95,
                tolerance: 0,
                reruns: 2,
                samples: 1,
                bounds: gate_only(default_bounds()),
            },
            monitor: MonitorSpec {
                window: 200,
                min_episodes: 20,
                confidence: 0.95,
                rollback: true,
                webhook: None,
                bounds: default_bounds(),
            },
            replay: ReplaySpec::default(),
            drift: DriftSpec::default(),
            shadow: None,
            flipped_cycles: 3,
            budget: crate::reflect::Budget::CYCLE,
            drop_from_training: Vec::new(),
            trainer: crate::trainer::TrainerSpec::Hone,
            upload: crate::fine_tune::UploadSpec::default(),
        }
    }
}

fn flags_from_raw(field: &str, names: Vec<String>) -> Result<Vec<String>, ConfigError> {
    let known = hone_types::BehaviourFlags::NAMES;
    for name in &names {
        if !known.contains(&name.as_str()) {
            return Err(ConfigError::at(
                field,
                format!("unknown behaviour `{name}` ({})", known.join(", ")),
            ));
        }
    }
    Ok(names)
}

fn confidence(field: &str, value: Option<f64>, default: f64) -> Result<f64, ConfigError> {
    match value {
        None => Ok(default),
        Some(c) => check_confidence(c).map_err(|why| ConfigError::at(field, why)),
    }
}

/// A confidence the gate or the monitors may ask for: strictly between 0.5
/// and 1 (for checks outside a config file, such as `hone demo`'s flags).
pub fn check_confidence(c: f64) -> Result<f64, String> {
    if c > 0.5 && c < 1.0 {
        Ok(c)
    } else {
        Err(format!("must be between 0.5 and 1 (exclusive), got {c}"))
    }
}

pub(crate) fn route(field: &str, raw: RawRouteRef, providers: &[&str]) -> Result<Route, ConfigError> {
    if !providers.contains(&raw.provider.as_str()) {
        return Err(ConfigError::at(
            format!("{field}.provider"),
            format!("`{}` is not a declared provider", raw.provider),
        ));
    }
    Ok(Route {
        provider: raw.provider,
        model: raw.model,
        adapter: None,
        memory: None,
        adapter_sha256: None,
    })
}

fn training(field: &str, raw: Option<RawTraining>, grpo: bool) -> Result<TrainingSpec, ConfigError> {
    let raw = raw.unwrap_or_default();
    if !grpo && (raw.groups.is_some() || raw.max_staleness.is_some()) {
        return Err(ConfigError::at(field, "`groups` and `max_staleness` are GRPO settings"));
    }
    let names = match raw.groups {
        None => vec!["rollouts".to_owned()],
        Some(RawGroups::One(name)) => vec![name],
        Some(RawGroups::Many(names)) => names,
    };
    let mut groups = Vec::new();
    for name in &names {
        let source = GroupSource::parse(name).ok_or_else(|| {
            ConfigError::at(
                format!("{field}.groups"),
                format!("unknown source `{name}` ({})", GroupSource::NAMES),
            )
        })?;
        if !groups.contains(&source) {
            groups.push(source);
        }
    }
    if groups.is_empty() {
        return Err(ConfigError::at(format!("{field}.groups"), "name at least one source"));
    }
    let spec = TrainingSpec {
        steps: raw.steps.unwrap_or(20),
        lr: raw.lr.unwrap_or(1e-3),
        rank: raw.rank.unwrap_or(8),
        min_examples: raw.min_examples.unwrap_or(4),
        group_size: raw.group_size.unwrap_or(4),
        groups,
        max_staleness: raw.max_staleness.unwrap_or(2),
    };
    if spec.steps == 0 || spec.rank == 0 || spec.group_size < 2 {
        return Err(ConfigError::at(field, "steps and rank must be ≥ 1, group_size ≥ 2"));
    }
    if !(spec.lr.is_finite() && spec.lr > 0.0) {
        return Err(ConfigError::at(format!("{field}.lr"), "must be a number > 0"));
    }
    Ok(spec)
}

impl LearnSpec {
    /// Every optimiser in the order cycle number `cycle` (from 1) tries them:
    /// with `optimisers_per_cycle` below their count, each cycle starts where
    /// the one before it would have stopped, so they take turns; the cycle
    /// stops once that many have proposed, and one with nothing to propose
    /// passes its turn to the next.
    pub fn turn(&self, cycle: u64) -> impl Iterator<Item = &OptimiserSpec> {
        let count = self.optimisers.len();
        let start = if self.takes_turns() {
            (cycle.saturating_sub(1) as usize % count) * self.optimisers_per_cycle % count
        } else {
            0
        };
        self.optimisers.iter().cycle().skip(start).take(count)
    }

    /// Whether fewer than all optimisers propose in a cycle.
    pub fn takes_turns(&self) -> bool {
        self.optimisers_per_cycle < self.optimisers.len()
    }

    /// Validates the raw table; `field` is `agents.NAME.learn`, `providers`
    /// the declared provider names (optimisers' routes must name one).
    pub fn from_raw(field: &str, raw: RawLearn, providers: &[&str]) -> Result<Self, ConfigError> {
        let d = Self::default();
        let RawLearn {
            every,
            optimisers,
            optimisers_per_cycle,
            objective,
            dataset_size,
            endpoint,
            concurrency,
            examples,
            memory,
            model,
            grpo,
            dpo,
            sft,
            prompt,
            playbook,
            tools,
            budget,
            gate,
            monitor,
            replay,
            drift,
            shadow,
            flipped_cycles,
            drop_from_training,
            trainer,
            allow_upload,
            upload,
            openai_sft,
            openai_dpo,
            openai_rft,
        } = raw;
        let upload =
            crate::fine_tune::UploadSpec::from_raw(field, allow_upload.unwrap_or(false), upload.unwrap_or_default())?;
        let trainer = crate::trainer::TrainerSpec::from_raw(field, trainer)?;
        let every = every.unwrap_or_default();
        for (name, v) in [("episodes", every.episodes), ("minutes", every.minutes)] {
            if v == Some(0) {
                return Err(ConfigError::at(format!("{field}.every.{name}"), "must be at least 1"));
            }
        }
        let tables = OptimiserTables {
            examples,
            memory,
            model,
            grpo,
            dpo,
            sft,
            openai_sft,
            openai_dpo,
            openai_rft,
            reflect: crate::reflect::ReflectTables {
                prompt,
                playbook,
                tools,
            },
        };
        let optimisers = optimisers_from_raw(field, &optimisers, tables, providers)?;
        if optimisers_per_cycle == Some(0) {
            return Err(ConfigError::at(
                format!("{field}.optimisers_per_cycle"),
                "must be at least 1 (leave it out for every optimiser in every cycle)",
            ));
        }
        let objective = objective_from_raw(field, &objective, d.objective)?;
        let dataset_size = dataset_size.unwrap_or(d.dataset_size);
        if dataset_size < 2 {
            return Err(ConfigError::at(format!("{field}.dataset_size"), "must be at least 2"));
        }
        let concurrency = concurrency.unwrap_or(d.concurrency);
        if concurrency == 0 {
            return Err(ConfigError::at(format!("{field}.concurrency"), "must be at least 1"));
        }
        if let Some(url) = &endpoint {
            if !(url.starts_with("http://") || url.starts_with("https://")) {
                return Err(ConfigError::at(
                    format!("{field}.endpoint"),
                    format!("`{url}` is not an http:// or https:// URL"),
                ));
            }
        }
        Ok(Self {
            every_episodes: every.episodes,
            every_minutes: every.minutes,
            optimisers,
            optimisers_per_cycle: optimisers_per_cycle.unwrap_or(d.optimisers_per_cycle),
            objective,
            dataset_size,
            endpoint,
            concurrency,
            gate: GateSpec::from_raw(field, gate.unwrap_or_default(), &d.gate)?,
            monitor: MonitorSpec::from_raw(field, monitor.unwrap_or_default(), &d.monitor)?,
            replay: ReplaySpec::for_trainer(field, replay.unwrap_or_default(), &trainer)?,
            drift: DriftSpec::from_raw(field, drift.unwrap_or_default())?,
            shadow: shadow.map(|raw| ShadowSpec::from_raw(field, raw)).transpose()?,
            flipped_cycles: flipped_cycles.unwrap_or(d.flipped_cycles),
            budget: crate::reflect::Budget::from_raw(&format!("{field}.budget"), budget, d.budget)?,
            drop_from_training: flags_from_raw(&format!("{field}.drop_from_training"), drop_from_training)?,
            trainer,
            upload,
        })
    }
}

/// The optimisers' own tables (`[agents.NAME.learn.sft]`, …), each taken
/// when `optimisers` names it; one left over is configured but not enabled.
struct OptimiserTables {
    examples: Option<RawExamples>,
    memory: Option<RawMemoryOptimiser>,
    model: Option<RawModelOptimiser>,
    grpo: Option<RawTraining>,
    dpo: Option<RawTraining>,
    sft: Option<RawTraining>,
    openai_sft: Option<crate::fine_tune::RawFineTune>,
    openai_dpo: Option<crate::fine_tune::RawFineTune>,
    openai_rft: Option<crate::fine_tune::RawFineTune>,
    reflect: crate::reflect::ReflectTables,
}

/// The optimisers `names` enables, in that order, each with its table.
fn optimisers_from_raw(
    field: &str,
    names: &[String],
    mut tables: OptimiserTables,
    providers: &[&str],
) -> Result<Vec<OptimiserSpec>, ConfigError> {
    let mut optimisers: Vec<OptimiserSpec> = Vec::new();
    let shared = tables.reflect.any_reflector();
    for (i, name) in names.iter().enumerate() {
        let ofield = format!("{field}.{name}");
        let spec = match name.as_str() {
            "examples" => examples(&ofield, tables.examples.take().unwrap_or_default(), providers)?,
            "memory" => memory(&ofield, tables.memory.take().unwrap_or_default())?,
            "model" => model(&ofield, tables.model.take().unwrap_or_default(), providers)?,
            "grpo" => OptimiserSpec::Grpo(training(&ofield, tables.grpo.take(), true)?),
            "dpo" => OptimiserSpec::Dpo(training(&ofield, tables.dpo.take(), false)?),
            "sft" => OptimiserSpec::Sft(training(&ofield, tables.sft.take(), false)?),
            "openai-sft" => OptimiserSpec::FineTune(crate::fine_tune::FineTuneSpec::from_raw(
                &ofield,
                crate::fine_tune::FineTuneMethod::Supervised,
                tables.openai_sft.take().unwrap_or_default(),
            )?),
            "openai-dpo" => OptimiserSpec::FineTune(crate::fine_tune::FineTuneSpec::from_raw(
                &ofield,
                crate::fine_tune::FineTuneMethod::Preference,
                tables.openai_dpo.take().unwrap_or_default(),
            )?),
            "openai-rft" => OptimiserSpec::FineTune(crate::fine_tune::FineTuneSpec::from_raw(
                &ofield,
                crate::fine_tune::FineTuneMethod::Reinforcement,
                tables.openai_rft.take().unwrap_or_default(),
            )?),
            "prompt" => OptimiserSpec::Prompt(crate::reflect::prompt(
                &ofield,
                tables.reflect.prompt.take().unwrap_or_default(),
                shared.clone(),
                providers,
            )?),
            "playbook" => OptimiserSpec::Playbook(crate::reflect::playbook(
                &ofield,
                tables.reflect.playbook.take().unwrap_or_default(),
                shared.clone(),
                providers,
            )?),
            "tools" => OptimiserSpec::Tools(crate::reflect::tools(
                &ofield,
                tables.reflect.tools.take().unwrap_or_default(),
                shared.clone(),
                providers,
            )?),
            other => {
                return Err(ConfigError::at(
                    format!("{field}.optimisers[{i}]"),
                    format!("unknown optimiser `{other}` ({})", OptimiserSpec::NAMES.join(", ")),
                ))
            }
        };
        if optimisers.iter().any(|o| o.name() == spec.name()) {
            return Err(ConfigError::at(
                format!("{field}.optimisers[{i}]"),
                format!("`{name}` is listed twice"),
            ));
        }
        optimisers.push(spec);
    }
    for (name, left) in [
        ("examples", tables.examples.is_some()),
        ("memory", tables.memory.is_some()),
        ("model", tables.model.is_some()),
        ("grpo", tables.grpo.is_some()),
        ("dpo", tables.dpo.is_some()),
        ("sft", tables.sft.is_some()),
        ("openai-sft", tables.openai_sft.is_some()),
        ("openai-dpo", tables.openai_dpo.is_some()),
        ("openai-rft", tables.openai_rft.is_some()),
        ("prompt", tables.reflect.prompt.is_some()),
        ("playbook", tables.reflect.playbook.is_some()),
        ("tools", tables.reflect.tools.is_some()),
    ] {
        if left {
            return Err(ConfigError::at(
                format!("{field}.{name}"),
                format!("configures `{name}`, which is not in `optimisers`"),
            ));
        }
    }
    Ok(optimisers)
}

/// The `examples` optimiser; `ofield` is `agents.NAME.learn.examples`.
fn examples(ofield: &str, e: RawExamples, providers: &[&str]) -> Result<OptimiserSpec, ConfigError> {
    let ks = e.k.unwrap_or_else(|| vec![2, 4]);
    if ks.is_empty() || ks.contains(&0) {
        return Err(ConfigError::at(
            format!("{ofield}.k"),
            "list the k values to try, each ≥ 1",
        ));
    }
    Ok(OptimiserSpec::Examples(ExamplesSpec {
        ks,
        min_reward: e.min_reward,
        embeddings: e
            .embeddings
            .map(|r| route(&format!("{ofield}.embeddings"), r, providers))
            .transpose()?,
        max_candidates: e.max_candidates.unwrap_or(4),
    }))
}

/// The `memory` optimiser; `ofield` is `agents.NAME.learn.memory`.
fn memory(ofield: &str, m: RawMemoryOptimiser) -> Result<OptimiserSpec, ConfigError> {
    let ks = m.k.unwrap_or_else(|| vec![16]);
    if ks.is_empty() || ks.contains(&0) {
        return Err(ConfigError::at(
            format!("{ofield}.k"),
            "list the k values to try, each ≥ 1",
        ));
    }
    let lambdas = m.lambda.unwrap_or_else(|| vec![0.25, 0.5]);
    if lambdas.is_empty() || lambdas.iter().any(|l| !(*l > 0.0 && *l <= 1.0)) {
        return Err(ConfigError::at(
            format!("{ofield}.lambda"),
            "list the λ values to try, each above 0 and at most 1",
        ));
    }
    let temperature = m.temperature.unwrap_or(1.0);
    if !(temperature > 0.0 && temperature.is_finite()) {
        return Err(ConfigError::at(format!("{ofield}.temperature"), "must be above 0"));
    }
    Ok(OptimiserSpec::Memory(MemorySpec {
        ks,
        lambdas,
        temperature,
        adaptive: m.adaptive.unwrap_or(false),
        min_reward: m.min_reward,
        max_candidates: m.max_candidates.unwrap_or(4),
    }))
}

/// The `model` optimiser; `ofield` is `agents.NAME.learn.model`.
fn model(ofield: &str, m: RawModelOptimiser, providers: &[&str]) -> Result<OptimiserSpec, ConfigError> {
    if m.models.is_empty() && m.temperatures.is_empty() && m.reasoning_efforts.is_empty() {
        return Err(ConfigError::at(
            ofield,
            "the model optimiser needs `models`, `temperatures` or `reasoning_efforts` to try",
        ));
    }
    if let Some(t) = m.temperatures.iter().find(|t| !(t.is_finite() && **t >= 0.0)) {
        return Err(ConfigError::at(
            format!("{ofield}.temperatures"),
            format!("{t} is not a temperature"),
        ));
    }
    Ok(OptimiserSpec::Model(ModelSpec {
        models: m
            .models
            .into_iter()
            .enumerate()
            .map(|(j, r)| route(&format!("{ofield}.models[{j}]"), r, providers))
            .collect::<Result<_, _>>()?,
        temperatures: m.temperatures,
        reasoning_efforts: m.reasoning_efforts,
        max_candidates: m.max_candidates.unwrap_or(4),
    }))
}

/// The objectives, `default` when none are listed; `max reward` comes first.
fn objective_from_raw(field: &str, raw: &[String], default: Vec<Objective>) -> Result<Vec<Objective>, ConfigError> {
    let objective = if raw.is_empty() {
        default
    } else {
        raw.iter()
            .enumerate()
            .map(|(i, o)| {
                Objective::parse(o).ok_or_else(|| {
                    ConfigError::at(
                        format!("{field}.objective[{i}]"),
                        format!("unknown objective `{o}` (max reward, min cost, min latency)"),
                    )
                })
            })
            .collect::<Result<Vec<_>, _>>()?
    };
    if objective.first() != Some(&Objective::MaxReward) {
        return Err(ConfigError::at(
            format!("{field}.objective"),
            "the first objective must be `max reward`",
        ));
    }
    Ok(objective)
}

impl GateSpec {
    /// `[agents.NAME.learn.gate]`; `field` is `agents.NAME.learn`, `d` the defaults.
    fn from_raw(field: &str, g: RawGate, d: &GateSpec) -> Result<Self, ConfigError> {
        Ok(GateSpec {
            confidence: confidence(&format!("{field}.gate.confidence"), g.confidence, d.confidence)?,
            tolerance: g.tolerance.unwrap_or(d.tolerance),
            reruns: g.reruns.unwrap_or(d.reruns),
            samples: match g.samples {
                Some(0) => return Err(ConfigError::at(format!("{field}.gate.samples"), "must be at least 1")),
                other => other.unwrap_or(d.samples),
            },
            bounds: gate_bounds(&format!("{field}.gate.bounds"), g.bounds)?,
        })
    }
}

impl MonitorSpec {
    /// `[agents.NAME.learn.monitor]`; `field` is `agents.NAME.learn`, `d` the defaults.
    fn from_raw(field: &str, m: RawMonitor, d: &MonitorSpec) -> Result<Self, ConfigError> {
        if let Some(url) = &m.webhook {
            if !(url.starts_with("http://") || url.starts_with("https://")) {
                return Err(ConfigError::at(
                    format!("{field}.monitor.webhook"),
                    "must be an http(s) URL",
                ));
            }
        }
        // Zero would decide on no episodes at all: refused, like every
        // other count that must be at least one.
        for (key, value) in [("window", m.window), ("min_episodes", m.min_episodes)] {
            if value == Some(0) {
                return Err(ConfigError::at(format!("{field}.monitor.{key}"), "must be at least 1"));
            }
        }
        Ok(MonitorSpec {
            window: m.window.unwrap_or(d.window),
            min_episodes: m.min_episodes.unwrap_or(d.min_episodes),
            confidence: confidence(&format!("{field}.monitor.confidence"), m.confidence, d.confidence)?,
            rollback: m.rollback.unwrap_or(true),
            webhook: m.webhook,
            bounds: bounds(&format!("{field}.monitor.bounds"), m.bounds)?,
        })
    }
}
