//! Hosted fine-tuning: the `openai-sft`, `openai-dpo` and `openai-rft` optimisers
//! (`[agents.NAME.learn.openai-sft]`, …), which train a hosted model
//! through its provider's fine-tuning API, and what an agent lets leave the
//! machine for it (`allow_upload`, `[agents.NAME.learn.upload]`).
//!
//! ```toml
//! [agents.support.learn]
//! optimisers = ["prompt", "openai-sft"]
//! allow_upload = true                       # episodes may be uploaded to the provider
//! [agents.support.learn.upload]
//! exclude_flags = ["refusal"]               # episodes showing these stay here
//! require_signals = ["thumbs_up"]           # only episodes a user signalled so
//! redact = ["email", "phone", "card", "(?i)order #\\d+"]
//! redact_command = ["python3", "scrub.py"]  # then your own program, JSONL in and out
//! [agents.support.learn.openai-sft]
//! n_epochs = 3
//! usd_per_mtok = 3.0                        # the host's training price
//! budget = { usd = 5.0 }
//! ```

use crate::error::ConfigError;
use crate::reflect::{Budget, RawBudget};
use serde::Deserialize;

/// Which of the host's fine-tuning methods an optimiser uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FineTuneMethod {
    /// `openai-sft`: chat examples (with tools) of the chosen episodes.
    Supervised,
    /// `openai-dpo`: preferred and non-preferred answers to one prompt.
    Preference,
    /// `openai-rft`: prompts with their references, graded by the host
    /// with graders made from the agent's reward spec.
    Reinforcement,
}

impl FineTuneMethod {
    /// The optimiser's name.
    pub fn name(self) -> &'static str {
        match self {
            FineTuneMethod::Supervised => "openai-sft",
            FineTuneMethod::Preference => "openai-dpo",
            FineTuneMethod::Reinforcement => "openai-rft",
        }
    }

    /// The method's `type` in the job's `method`.
    pub fn api_type(self) -> &'static str {
        match self {
            FineTuneMethod::Supervised => "supervised",
            FineTuneMethod::Preference => "dpo",
            FineTuneMethod::Reinforcement => "reinforcement",
        }
    }
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawFineTune {
    pub base_model: Option<String>,
    pub n_epochs: Option<u64>,
    pub learning_rate_multiplier: Option<f64>,
    pub batch_size: Option<u64>,
    pub beta: Option<f64>,
    pub seed: Option<u64>,
    pub min_examples: Option<usize>,
    pub validation_share: Option<f64>,
    pub usd_per_mtok: Option<f64>,
    pub budget: Option<RawBudget>,
    pub group_size: Option<usize>,
    pub reasoning_effort: Option<String>,
    pub poll_seconds: Option<f64>,
    pub time_limit_minutes: Option<u64>,
}

/// One hosted fine-tuning optimiser.
#[derive(Debug, Clone, PartialEq)]
pub struct FineTuneSpec {
    pub method: FineTuneMethod,
    /// The model to fine-tune (default: the champion's).
    pub base_model: Option<String>,
    /// Hyperparameters the host picks itself when unset ("auto").
    pub n_epochs: Option<u64>,
    pub learning_rate_multiplier: Option<f64>,
    pub batch_size: Option<u64>,
    /// `openai-dpo` only.
    pub beta: Option<f64>,
    pub seed: u64,
    /// Fewer training examples than this and nothing is uploaded.
    pub min_examples: usize,
    /// Share of the examples sent as the job's validation file.
    pub validation_share: f64,
    /// The host's price per million trained tokens, for the estimate
    /// before the job and the spend after it.
    pub usd_per_mtok: Option<f64>,
    pub budget: Budget,
    /// `openai-dpo`: champion rollouts per task, paired best over worst.
    pub group_size: usize,
    /// `openai-rft`: the reasoning effort the job samples with.
    pub reasoning_effort: Option<String>,
    pub poll_seconds: f64,
    pub time_limit_minutes: u64,
}

impl FineTuneSpec {
    /// Epochs assumed by the estimate when the host picks them.
    pub const ESTIMATED_EPOCHS: u64 = 3;

    pub fn from_raw(field: &str, method: FineTuneMethod, raw: RawFineTune) -> Result<Self, ConfigError> {
        let positive = |key: &str, v: Option<f64>| -> Result<(), ConfigError> {
            match v {
                Some(x) if !(x.is_finite() && x > 0.0) => {
                    Err(ConfigError::at(format!("{field}.{key}"), "must be a number > 0"))
                }
                _ => Ok(()),
            }
        };
        positive("learning_rate_multiplier", raw.learning_rate_multiplier)?;
        positive("beta", raw.beta)?;
        positive("poll_seconds", raw.poll_seconds)?;
        if let Some(p) = raw.usd_per_mtok {
            if !(p.is_finite() && p >= 0.0) {
                return Err(ConfigError::at(format!("{field}.usd_per_mtok"), "must be a number ≥ 0"));
            }
        }
        for (key, set) in [("beta", raw.beta.is_some()), ("group_size", raw.group_size.is_some())] {
            if set && method != FineTuneMethod::Preference {
                return Err(ConfigError::at(
                    format!("{field}.{key}"),
                    format!("only `openai-dpo` has a {key}"),
                ));
            }
        }
        if raw.reasoning_effort.is_some() && method != FineTuneMethod::Reinforcement {
            return Err(ConfigError::at(
                format!("{field}.reasoning_effort"),
                "only `openai-rft` has a reasoning_effort",
            ));
        }
        if let Some(effort) = &raw.reasoning_effort {
            if !["low", "medium", "high"].contains(&effort.as_str()) {
                return Err(ConfigError::at(
                    format!("{field}.reasoning_effort"),
                    "one of low, medium, high",
                ));
            }
        }
        if raw.group_size.is_some_and(|g| g < 2) {
            return Err(ConfigError::at(format!("{field}.group_size"), "must be ≥ 2"));
        }
        for (key, v) in [
            ("n_epochs", raw.n_epochs),
            ("batch_size", raw.batch_size),
            ("time_limit_minutes", raw.time_limit_minutes),
        ] {
            if v == Some(0) {
                return Err(ConfigError::at(format!("{field}.{key}"), "must be ≥ 1"));
            }
        }
        let validation_share = raw.validation_share.unwrap_or(0.2);
        if !(0.0..0.9).contains(&validation_share) {
            return Err(ConfigError::at(
                format!("{field}.validation_share"),
                "must be ≥ 0 and < 0.9",
            ));
        }
        Ok(Self {
            method,
            base_model: raw.base_model,
            n_epochs: raw.n_epochs,
            learning_rate_multiplier: raw.learning_rate_multiplier,
            batch_size: raw.batch_size,
            beta: raw.beta,
            seed: raw.seed.unwrap_or(42),
            // OpenAI refuses a training file of fewer than 10 examples.
            min_examples: raw.min_examples.unwrap_or(10),
            validation_share,
            usd_per_mtok: raw.usd_per_mtok,
            budget: Budget::from_raw(
                &format!("{field}.budget"),
                raw.budget,
                Budget {
                    calls: u64::MAX,
                    tokens: 10_000_000,
                    usd: 10.0,
                },
            )?,
            group_size: raw.group_size.unwrap_or(4),
            reasoning_effort: raw.reasoning_effort,
            poll_seconds: raw.poll_seconds.unwrap_or(30.0),
            time_limit_minutes: raw.time_limit_minutes.unwrap_or(1440),
        })
    }
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawUpload {
    #[serde(default)]
    pub require_signals: Vec<String>,
    #[serde(default)]
    pub exclude_flags: Vec<String>,
    #[serde(default)]
    pub redact: Vec<String>,
    #[serde(default)]
    pub redact_command: Vec<String>,
}

/// What may leave the machine for hosted fine-tuning.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct UploadSpec {
    /// `allow_upload`: nothing is uploaded without it.
    pub allowed: bool,
    /// Only episodes carrying one of these signals (empty: any).
    pub require_signals: Vec<String>,
    /// Episodes showing one of these behaviours stay here.
    pub exclude_flags: Vec<String>,
    /// What is replaced by `[REDACTED]` before upload: the built-in
    /// detectors (`email`, `phone`, `card`, `ip`) or regular expressions.
    pub redact: Vec<String>,
    /// A program (argv) every upload passes through after `redact`: the
    /// rows as JSONL on its stdin, the rows to upload on its stdout, one
    /// for one; empty: none.
    pub redact_command: Vec<String>,
}

impl UploadSpec {
    /// The built-in detectors `redact` may name.
    pub const DETECTORS: [&'static str; 4] = ["email", "phone", "card", "ip"];

    pub fn from_raw(field: &str, allowed: bool, raw: RawUpload) -> Result<Self, ConfigError> {
        let known = hone_types::BehaviourFlags::NAMES;
        for name in &raw.exclude_flags {
            if !known.contains(&name.as_str()) {
                return Err(ConfigError::at(
                    format!("{field}.upload.exclude_flags"),
                    format!("unknown behaviour `{name}` ({})", known.join(", ")),
                ));
            }
        }
        for pattern in &raw.redact {
            if !Self::DETECTORS.contains(&pattern.as_str()) {
                regex::Regex::new(pattern).map_err(|e| {
                    ConfigError::at(
                        format!("{field}.upload.redact"),
                        format!(
                            "`{pattern}` is neither a detector ({}) nor a regular expression: {e}",
                            Self::DETECTORS.join(", ")
                        ),
                    )
                })?;
            }
        }
        if raw.redact_command.first().is_some_and(|p| p.trim().is_empty()) {
            return Err(ConfigError::at(
                format!("{field}.upload.redact_command"),
                "name the program first: [\"python3\", \"scrub.py\"]",
            ));
        }
        Ok(Self {
            allowed,
            require_signals: raw.require_signals,
            exclude_flags: raw.exclude_flags,
            redact: raw.redact,
            redact_command: raw.redact_command,
        })
    }

    /// A program given as a relative path (`./scrub.sh`, `tools/scrub`)
    /// starts from the config file's directory; a bare name is looked up
    /// on `PATH`.
    pub(crate) fn anchor(&mut self, base_dir: &std::path::Path) {
        if let Some(program) = self.redact_command.first_mut() {
            let path = std::path::Path::new(program.as_str());
            if path.is_relative() && path.components().count() > 1 {
                *program = base_dir.join(path).display().to_string();
            }
        }
    }
}
