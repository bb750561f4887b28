//! What learning stores about episodes: rewards (with the spec version that
//! produced them), dataset snapshots and their instances, and evaluation
//! results per instance (docs/ARCHITECTURE.md, "Concepts").

use crate::call::BehaviourFlags;
use crate::ids::{CallId, EpisodeId, VersionId};
use serde::{Deserialize, Serialize};
use serde_json::Value;

/// Where a part of a reward came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ComponentKind {
    Signal,
    Critic,
    Judge,
    Penalty,
    /// The reward model's prediction of the users' signals, for an answer
    /// no user saw.
    Model,
}

/// One weighted term of a reward.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RewardComponent {
    pub name: String,
    pub kind: ComponentKind,
    /// The raw value (a signal's value, a critic's score in [0, 1], or 1 for a penalty that applied).
    pub value: f64,
    pub weight: f64,
    /// True when no feedback existed and the spec's default was used.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub defaulted: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
}

/// The credit one call gets: its own critics' scores and penalties where they
/// can be assigned, else the episode's reward.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CallCredit {
    pub call_id: CallId,
    pub value: f64,
    /// True when the call had its own scores; false when it inherited the episode's reward.
    pub assigned: bool,
}

/// One episode's reward under one version of the agent's reward spec.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RewardRecord {
    pub episode_id: EpisodeId,
    pub agent: String,
    /// Hash of the reward spec that produced it.
    pub spec_version: String,
    pub value: f64,
    /// `value >= pass_threshold` of the spec.
    pub passed: bool,
    pub components: Vec<RewardComponent>,
    pub calls: Vec<CallCredit>,
    /// Parts that could not be computed (a judge that never answered in the
    /// asked format, a critic command that crashed): never turned into a score.
    pub failures: Vec<String>,
    pub computed_at: i64,
    /// How many of the episode's signals the scoring read: a signal stored
    /// later makes the reward stale, and the next reward step re-scores it.
    #[serde(default)]
    pub signals_seen: u32,
    /// Per call with shadow samples: the served answer and each shadow
    /// sample scored alike (critics, judge, penalties; no user signal, as
    /// no user saw the samples), served first.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub shadows: Vec<ShadowScores>,
}

impl RewardRecord {
    /// A call's credit: its own value where it was scored apart (its
    /// penalties, call-level signals or critic scores), else the episode's.
    pub fn credit(&self, call: CallId) -> f64 {
        self.calls
            .iter()
            .find(|c| c.call_id == call)
            .map_or(self.value, |c| c.value)
    }
}

/// One call's group: its served answer and its shadow samples, scored alike.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ShadowScores {
    pub call_id: CallId,
    /// `values[0]` the served answer, `values[k]` shadow sample `k − 1`.
    pub values: Vec<f64>,
}

/// One instance of a dataset: what to run, what a good answer is, and what
/// was recorded. Snapshots store instances whole, so a dataset never changes
/// when its source episodes do.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Instance {
    /// Stable within the dataset (the source episode id, or `import-N`).
    pub id: String,
    pub agent: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub episode_id: Option<EpisodeId>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub version_id: Option<VersionId>,
    /// The task as an agent endpoint receives it (`POST /run {"input": …}`):
    /// by default the first user message's text.
    pub input: Value,
    /// The first recorded chat request (`messages`, `tools`, …), replayed for
    /// single-call agents.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub request: Option<Value>,
    /// A good answer: a demonstration message, or a label (string / number).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reference: Option<Value>,
    /// The recorded conversation after the request: assistant messages (with
    /// tool calls) and tool results, in order.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub output: Vec<Value>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reward: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cost_usd: Option<f64>,
}

/// A dataset snapshot: `name@version`, immutable once written.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DatasetInfo {
    pub id: String,
    pub name: String,
    pub version: u32,
    pub agent: String,
    /// `regression`, `errors`, `traffic`, `cost` or `import`.
    pub builder: String,
    /// Filters, seed, size and what the builder saw (counts).
    pub params: Value,
    pub item_count: u64,
    /// SHA-256 over the instances' JSON, in order.
    pub content_hash: String,
    pub created_at: i64,
}

/// An evaluation run: one version over one dataset snapshot.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct EvalRunInfo {
    pub id: String,
    pub dataset_id: String,
    pub agent: String,
    pub version_id: VersionId,
    /// `replay` or the agent endpoint's URL.
    pub target: String,
    pub created_at: i64,
    pub finished_at: Option<i64>,
}

/// The outcome of running one instance once.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct InstanceResult {
    pub instance_id: String,
    /// 0 for the first run; further samples and re-runs (to tell flips from
    /// noise) count up.
    pub attempt: u32,
    /// The episode the run was recorded under.
    pub episode_id: EpisodeId,
    /// The reward under the agent's spec; `None` when the run failed.
    pub score: Option<f64>,
    pub passed: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    pub cost_usd: f64,
    pub latency_ms: f64,
    /// Any call of the run showed the behaviour.
    pub flags: BehaviourFlags,
    pub calls: u32,
    pub tool_calls: u32,
    /// Characters of the final answer.
    pub answer_chars: u64,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub failures: Vec<String>,
}
