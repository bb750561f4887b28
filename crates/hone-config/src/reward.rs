//! The `[agents.NAME.reward]` table: how signals, critics, a judge and
//! penalties combine into one reward per episode (docs/ARCHITECTURE.md, "Concepts").
//! Raw form, validation and the typed [`RewardSpec`] live together here.
//!
//! ```toml
//! [agents.support.reward]
//! aggregate = "mean"                 # over an episode's calls: mean | min | max | sum | last
//! pass_threshold = 0.5               # reward >= this counts as passed
//! reference_signal = "gold"          # demonstration / label signal the critics compare with
//! signals = { resolved = 1.0, rating = { weight = 0.5, default = 0.5 } }
//! penalties = { invalid_tool_call = -1.0, empty = -1.0, refusal = -1.0, clarifying_question = -0.2 }
//! [agents.support.reward.critics.valid_args]
//! type = "tool_calls"
//! weight = 0.5
//! [agents.support.reward.judge]
//! mode = "relative"
//! provider = "openai"
//! model = "gpt-4o"
//! rubric = "Did the agent resolve the customer's problem?"
//! [agents.support.reward.model]          # a reward model learned from users' signals
//! min_episodes = 40                      # episodes users reacted to before it is trained
//! min_auc = 0.75                         # its held-out quality below which it is not used
//! ```

use crate::error::ConfigError;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawReward {
    pub aggregate: Option<String>,
    pub pass_threshold: Option<f64>,
    pub reference_signal: Option<String>,
    #[serde(default)]
    pub signals: BTreeMap<String, RawSignalWeight>,
    #[serde(default)]
    pub penalties: RawPenalties,
    #[serde(default)]
    pub critics: BTreeMap<String, RawCritic>,
    pub judge: Option<RawJudge>,
    pub model: Option<RawRewardModel>,
    /// `[low, high]`: the range every episode's reward lies in, for the
    /// online test (default: from the spec's weights and penalties).
    pub range: Option<[f64; 2]>,
    /// Seconds after an episode starts that its users may still react in
    /// (default 600): until then an unheard episode is not counted online.
    pub wait_seconds: Option<f64>,
}

/// `[agents.NAME.reward.model]`.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawRewardModel {
    pub min_episodes: Option<usize>,
    pub min_auc: Option<f64>,
    pub held_out: Option<f64>,
    pub window: Option<usize>,
    pub rubrics: Option<Vec<String>>,
    pub judge_calls: Option<usize>,
}

#[derive(Debug, Deserialize)]
#[serde(untagged)]
pub enum RawSignalWeight {
    Weight(f64),
    Full(RawSignalWeightFull),
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawSignalWeightFull {
    pub weight: f64,
    /// Value used when the episode has no such feedback (default 0).
    pub default: Option<f64>,
    /// What an episode whose users said nothing counts as once the wait
    /// is over: `"skip"` (left out of the online test and monitors) or a
    /// value (the same as `default`).
    pub no_signal: Option<RawNoSignal>,
}

/// `no_signal = "skip"` or `no_signal = VALUE`.
#[derive(Debug, Deserialize)]
#[serde(untagged)]
pub enum RawNoSignal {
    Value(f64),
    Word(String),
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawPenalties {
    pub invalid_tool_call: Option<f64>,
    pub empty: Option<f64>,
    pub refusal: Option<f64>,
    pub clarifying_question: Option<f64>,
    /// Only penalise a clarifying question when the request offered tools (the task needed action). Default true.
    pub clarifying_question_only_with_tools: Option<bool>,
    /// A call whose providers all failed.
    pub error: Option<f64>,
    pub truncated: Option<f64>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawCritic {
    #[serde(rename = "type")]
    pub kind: String,
    pub weight: Option<f64>,
    /// `json_schema`: the schema the answer must match.
    pub schema: Option<serde_json::Value>,
    /// `regex`: the pattern the answer must match.
    pub pattern: Option<String>,
    /// `exact`: compare case-sensitively (default false).
    pub case_sensitive: Option<bool>,
    /// `numeric`: largest accepted absolute difference (default 1e-6).
    pub tolerance: Option<f64>,
    /// `command`: program and arguments (no shell).
    pub command: Option<Vec<String>>,
    pub timeout_ms: Option<u64>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawJudge {
    pub mode: String,
    pub provider: String,
    pub model: String,
    pub rubric: Option<String>,
    pub weight: Option<f64>,
    pub retries: Option<u32>,
}

/// How per-call values combine into one episode value.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Aggregate {
    Mean,
    Min,
    Max,
    Sum,
    Last,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct SignalWeight {
    pub name: String,
    pub weight: f64,
    pub default: f64,
    /// `no_signal = "skip"`: an episode without this signal once the wait
    /// is over is left out of the online test and the monitors (it changes
    /// no stored reward, so it is not part of the spec's version).
    #[serde(skip)]
    pub skip_when_silent: bool,
}

/// Added to the reward (they are negative) whenever an episode shows the
/// behaviour. They are never skipped: a broken episode is scored, not dropped.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Penalties {
    pub invalid_tool_call: f64,
    pub empty: f64,
    pub refusal: f64,
    pub clarifying_question: f64,
    pub clarifying_question_only_with_tools: bool,
    pub error: f64,
    pub truncated: f64,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum CriticKind {
    ToolCalls,
    JsonSchema { schema: serde_json::Value },
    Regex { pattern: String },
    Exact { case_sensitive: bool },
    Numeric { tolerance: f64 },
    Command { argv: Vec<String>, timeout_ms: u64 },
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct CriticSpec {
    pub name: String,
    pub weight: f64,
    #[serde(flatten)]
    pub kind: CriticKind,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum JudgeMode {
    /// Score one episode against the rubric.
    Absolute,
    /// Rank a group of episodes with the same goal against each other (RULER).
    Relative,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct JudgeSpec {
    pub mode: JudgeMode,
    pub provider: String,
    pub model: String,
    pub rubric: String,
    pub weight: f64,
    pub retries: u32,
}

/// The name of the agent the judge's own calls are recorded under.
pub const JUDGE_AGENT: &str = "hone-judge";

pub const DEFAULT_RUBRIC: &str = "Score how well the assistant accomplished the user's task: correct, complete, \
and without needless questions. 1 is a perfect answer, 0 is useless or harmful.";

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RewardSpec {
    pub aggregate: Aggregate,
    pub pass_threshold: f64,
    pub reference_signal: Option<String>,
    pub signals: Vec<SignalWeight>,
    pub penalties: Penalties,
    pub critics: Vec<CriticSpec>,
    pub judge: Option<JudgeSpec>,
    /// A reward model learned from the users' signals this spec weighs. It
    /// changes no stored reward, so it is not part of the spec's version.
    #[serde(skip)]
    pub model: Option<RewardModelSpec>,
    /// The declared range of a reward (`range`), for the online test.
    #[serde(skip)]
    pub declared_range: Option<(f64, f64)>,
    /// How long after an episode starts its users may still react (ms).
    #[serde(skip)]
    pub wait_ms: i64,
}

/// `[agents.NAME.reward.model]`: a reward model trained every cycle on the
/// agent's production episodes that users reacted to, predicting whether
/// the spec would pass an answer, its quality measured on episodes it was
/// not trained on.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RewardModelSpec {
    /// Episodes users reacted to (within `window`) before it is trained.
    pub min_episodes: usize,
    /// Held-out AUC below which nothing uses it.
    pub min_auc: f64,
    /// Share of those episodes held out to measure it (by a hash of the
    /// episode id, so an episode is never on both sides).
    pub held_out: f64,
    /// The most recent episodes users reacted to that it learns from.
    pub window: usize,
    /// For an agent on a hosted model, where the judge is the reward
    /// model: the rubrics it chooses from (empty: the judge's own).
    pub rubrics: Vec<String>,
    /// The most judge calls one cycle makes to score episodes for it.
    pub judge_calls: usize,
}

impl Default for RewardModelSpec {
    fn default() -> Self {
        Self {
            min_episodes: 40,
            min_auc: 0.75,
            held_out: 0.25,
            window: 400,
            rubrics: Vec::new(),
            judge_calls: 200,
        }
    }
}

impl RewardModelSpec {
    fn from_raw(field: &str, raw: RawRewardModel) -> Result<Self, ConfigError> {
        let d = Self::default();
        let min_auc = raw.min_auc.unwrap_or(d.min_auc);
        if !(0.5..=1.0).contains(&min_auc) {
            return Err(ConfigError::at(
                format!("{field}.min_auc"),
                format!("must be between 0.5 (chance) and 1, got {min_auc}"),
            ));
        }
        let held_out = raw.held_out.unwrap_or(d.held_out);
        if !(held_out > 0.0 && held_out < 1.0) {
            return Err(ConfigError::at(
                format!("{field}.held_out"),
                format!("must be a share between 0 and 1 (exclusive), got {held_out}"),
            ));
        }
        let min_episodes = raw.min_episodes.unwrap_or(d.min_episodes);
        if min_episodes < 8 {
            return Err(ConfigError::at(
                format!("{field}.min_episodes"),
                format!("must be at least 8 (some to learn from, some to measure on), got {min_episodes}"),
            ));
        }
        let window = raw.window.unwrap_or(d.window);
        if window < min_episodes {
            return Err(ConfigError::at(
                format!("{field}.window"),
                format!("must be at least min_episodes ({min_episodes}), got {window}"),
            ));
        }
        let rubrics = raw.rubrics.unwrap_or_default();
        if rubrics.iter().any(|r| r.trim().is_empty()) {
            return Err(ConfigError::at(
                format!("{field}.rubrics"),
                "a rubric must say something",
            ));
        }
        let judge_calls = raw.judge_calls.unwrap_or(d.judge_calls);
        if judge_calls == 0 {
            return Err(ConfigError::at(
                format!("{field}.judge_calls"),
                "must be at least 1 (leave `rubrics` out of a model the judge does not read)",
            ));
        }
        Ok(Self {
            min_episodes,
            min_auc,
            held_out,
            window,
            rubrics,
            judge_calls,
        })
    }
}

impl Default for RewardSpec {
    fn default() -> Self {
        Self {
            aggregate: Aggregate::Mean,
            pass_threshold: 0.5,
            reference_signal: None,
            signals: Vec::new(),
            penalties: Penalties {
                invalid_tool_call: -1.0,
                empty: -1.0,
                refusal: -1.0,
                clarifying_question: 0.0,
                clarifying_question_only_with_tools: true,
                error: -1.0,
                truncated: 0.0,
            },
            critics: Vec::new(),
            judge: None,
            model: None,
            declared_range: None,
            wait_ms: Self::WAIT_MS,
        }
    }
}

fn finite(field: &str, value: f64) -> Result<f64, ConfigError> {
    if value.is_finite() {
        Ok(value)
    } else {
        Err(ConfigError::at(field, "must be a finite number"))
    }
}

fn penalty(field: &str, value: Option<f64>, default: f64) -> Result<f64, ConfigError> {
    match value {
        None => Ok(default),
        Some(v) if v.is_finite() && v <= 0.0 => Ok(v),
        Some(v) => Err(ConfigError::at(
            field,
            format!("a penalty is subtracted: give 0 or a negative number, got {v}"),
        )),
    }
}

impl RewardSpec {
    /// Validates the raw table; `field` is `agents.NAME.reward`, `providers`
    /// the declared provider names (a judge must name one).
    pub fn from_raw(field: &str, raw: RawReward, providers: &[&str]) -> Result<Self, ConfigError> {
        let d = Self::default();
        let aggregate = aggregate(field, raw.aggregate.as_deref())?;
        let pass_threshold = finite(
            &format!("{field}.pass_threshold"),
            raw.pass_threshold.unwrap_or(d.pass_threshold),
        )?;
        let signals = signals(field, raw.signals)?;
        let penalties = penalties(&format!("{field}.penalties"), raw.penalties, &d.penalties)?;
        let mut critics = Vec::new();
        for (name, c) in raw.critics {
            let cfield = format!("{field}.critics.{name}");
            critics.push(CriticSpec {
                weight: finite(&format!("{cfield}.weight"), c.weight.unwrap_or(1.0))?,
                kind: critic_kind(&cfield, c)?,
                name,
            });
        }
        let judge = raw
            .judge
            .map(|j| judge(&format!("{field}.judge"), j, providers))
            .transpose()?;
        let model = raw
            .model
            .map(|m| RewardModelSpec::from_raw(&format!("{field}.model"), m))
            .transpose()?;
        if model.as_ref().is_some_and(|m| !m.rubrics.is_empty()) && judge.is_none() {
            return Err(ConfigError::at(
                format!("{field}.model.rubrics"),
                "are read by the reward's judge, and it has none: add [agents.NAME.reward.judge]",
            ));
        }
        if model.is_some() && signals.is_empty() {
            return Err(ConfigError::at(
                format!("{field}.model"),
                "learns from the users' signals the spec weighs, and it weighs none: add `signals`",
            ));
        }
        let declared_range = match raw.range {
            None => None,
            Some([low, high]) if low.is_finite() && high.is_finite() && low < high => Some((low, high)),
            Some([low, high]) => {
                return Err(ConfigError::at(
                    format!("{field}.range"),
                    format!("must be [low, high] with finite low < high, got [{low}, {high}]"),
                ))
            }
        };
        let wait_ms = match raw.wait_seconds {
            None => d.wait_ms,
            Some(s) if s.is_finite() && s >= 0.0 => (s * 1000.0).round() as i64,
            Some(s) => {
                return Err(ConfigError::at(
                    format!("{field}.wait_seconds"),
                    format!("must be 0 or more seconds, got {s}"),
                ))
            }
        };
        Ok(Self {
            aggregate,
            pass_threshold,
            reference_signal: raw.reference_signal,
            signals,
            penalties,
            critics,
            judge,
            model,
            declared_range,
            wait_ms,
        })
    }

    /// How long users may take to react when the spec does not say: ten minutes.
    pub const WAIT_MS: i64 = 600_000;

    /// The range every reward lies in, for the online test: the declared
    /// `range`, or the spec's own bounds, taking each signal's value (and
    /// each critic's and the judge's score) in [0, 1] or at its default,
    /// and every penalty as possibly shown at once. A reward outside it
    /// enters the test at the nearer end.
    pub fn range(&self) -> (f64, f64) {
        if let Some(range) = self.declared_range {
            return range;
        }
        let weighs_something = !self.signals.is_empty() || !self.critics.is_empty() || self.judge.is_some();
        let mut low = 0.0;
        let mut high = if weighs_something { 0.0 } else { 1.0 };
        let mut add = |weight: f64, from: f64, to: f64| {
            let (a, b) = (weight * from, weight * to);
            low += a.min(b);
            high += a.max(b);
        };
        for s in &self.signals {
            add(s.weight, s.default.min(0.0), s.default.max(1.0));
        }
        for c in &self.critics {
            add(c.weight, 0.0, 1.0);
        }
        if let Some(j) = &self.judge {
            add(j.weight, 0.0, 1.0);
        }
        let p = &self.penalties;
        low += p.invalid_tool_call + p.empty + p.refusal + p.clarifying_question + p.error + p.truncated;
        if high <= low {
            high = low + 1.0;
        }
        (low, high)
    }

    /// A short content hash: rewards are stored under it, so a changed spec
    /// is visible and old rewards are never mistaken for new ones.
    pub fn version(&self) -> String {
        use sha2::Digest;
        let json = serde_json::to_string(self).unwrap_or_default();
        hex::encode(sha2::Sha256::digest(json.as_bytes()))[..12].to_owned()
    }
}

fn aggregate(field: &str, raw: Option<&str>) -> Result<Aggregate, ConfigError> {
    Ok(match raw {
        None | Some("mean") => Aggregate::Mean,
        Some("min") => Aggregate::Min,
        Some("max") => Aggregate::Max,
        Some("sum") => Aggregate::Sum,
        Some("last") => Aggregate::Last,
        Some(other) => {
            return Err(ConfigError::at(
                format!("{field}.aggregate"),
                format!("`{other}` is not one of `mean`, `min`, `max`, `sum`, `last`"),
            ))
        }
    })
}

fn signals(field: &str, raw: BTreeMap<String, RawSignalWeight>) -> Result<Vec<SignalWeight>, ConfigError> {
    let mut signals = Vec::new();
    for (name, w) in raw {
        let sfield = format!("{field}.signals.{name}");
        let (weight, default, skip_when_silent) = match w {
            RawSignalWeight::Weight(w) => (w, 0.0, false),
            RawSignalWeight::Full(f) => {
                let (default, skip) = match (f.default, f.no_signal) {
                    (Some(_), Some(_)) => {
                        return Err(ConfigError::at(
                            format!("{sfield}.no_signal"),
                            "says what `default` says: give one of them",
                        ))
                    }
                    (default, None) => (default.unwrap_or(0.0), false),
                    (None, Some(RawNoSignal::Value(v))) => (v, false),
                    (None, Some(RawNoSignal::Word(w))) if w == "skip" => (0.0, true),
                    (None, Some(RawNoSignal::Word(w))) => {
                        return Err(ConfigError::at(
                            format!("{sfield}.no_signal"),
                            format!("must be \"skip\" or a number, got \"{w}\""),
                        ))
                    }
                };
                (f.weight, default, skip)
            }
        };
        signals.push(SignalWeight {
            name,
            weight: finite(&sfield, weight)?,
            default: finite(&sfield, default)?,
            skip_when_silent,
        });
    }
    Ok(signals)
}

/// `pfield` is `agents.NAME.reward.penalties`; `d` the defaults.
fn penalties(pfield: &str, p: RawPenalties, d: &Penalties) -> Result<Penalties, ConfigError> {
    Ok(Penalties {
        invalid_tool_call: penalty(
            &format!("{pfield}.invalid_tool_call"),
            p.invalid_tool_call,
            d.invalid_tool_call,
        )?,
        empty: penalty(&format!("{pfield}.empty"), p.empty, d.empty)?,
        refusal: penalty(&format!("{pfield}.refusal"), p.refusal, d.refusal)?,
        clarifying_question: penalty(
            &format!("{pfield}.clarifying_question"),
            p.clarifying_question,
            d.clarifying_question,
        )?,
        clarifying_question_only_with_tools: p.clarifying_question_only_with_tools.unwrap_or(true),
        error: penalty(&format!("{pfield}.error"), p.error, d.error)?,
        truncated: penalty(&format!("{pfield}.truncated"), p.truncated, d.truncated)?,
    })
}

/// `jfield` is `agents.NAME.reward.judge`.
fn judge(jfield: &str, j: RawJudge, providers: &[&str]) -> Result<JudgeSpec, ConfigError> {
    let mode = match j.mode.as_str() {
        "absolute" => JudgeMode::Absolute,
        "relative" => JudgeMode::Relative,
        other => {
            return Err(ConfigError::at(
                format!("{jfield}.mode"),
                format!("`{other}` is not one of `absolute`, `relative`"),
            ))
        }
    };
    if !providers.contains(&j.provider.as_str()) {
        return Err(ConfigError::at(
            format!("{jfield}.provider"),
            format!("no provider named `{}` is declared under [providers]", j.provider),
        ));
    }
    Ok(JudgeSpec {
        mode,
        provider: j.provider,
        model: j.model,
        rubric: j.rubric.unwrap_or_else(|| DEFAULT_RUBRIC.to_owned()),
        weight: finite(&format!("{jfield}.weight"), j.weight.unwrap_or(1.0))?,
        retries: j.retries.unwrap_or(2),
    })
}

fn critic_kind(field: &str, c: RawCritic) -> Result<CriticKind, ConfigError> {
    let needs = |what: &str| ConfigError::at(field, format!("a `{}` critic needs `{what}`", c.kind));
    Ok(match c.kind.as_str() {
        "tool_calls" => CriticKind::ToolCalls,
        "json_schema" => CriticKind::JsonSchema {
            schema: c.schema.clone().ok_or_else(|| needs("schema"))?,
        },
        "regex" => CriticKind::Regex {
            pattern: c.pattern.clone().ok_or_else(|| needs("pattern"))?,
        },
        "exact" => CriticKind::Exact {
            case_sensitive: c.case_sensitive.unwrap_or(false),
        },
        "numeric" => CriticKind::Numeric {
            tolerance: finite(&format!("{field}.tolerance"), c.tolerance.unwrap_or(1e-6))?.abs(),
        },
        "command" => {
            let argv = c
                .command
                .clone()
                .ok_or_else(|| needs("command = [\"program\", \"arg\", …]"))?;
            if argv.is_empty() || argv[0].is_empty() {
                return Err(ConfigError::at(format!("{field}.command"), "names no program"));
            }
            CriticKind::Command {
                argv,
                timeout_ms: c.timeout_ms.unwrap_or(10_000),
            }
        }
        other => {
            return Err(ConfigError::at(
                format!("{field}.type"),
                format!("`{other}` is not one of `tool_calls`, `json_schema`, `regex`, `exact`, `numeric`, `command`"),
            ))
        }
    })
}
