//! hone's TOML config, loaded in two phases: [`raw`] structs that mirror the
//! file (`deny_unknown_fields`, so a typo is an error that names the key), then
//! [`load`] which expands `${ENV}` references, reads prompt files, checks the
//! rules across fields and produces the typed [`Config`].
//!
//! The binary runs with no config at all on [`DEFAULT_CONFIG`].

mod env;
pub mod learn;
mod load;
pub mod raw;
pub mod reward;
mod typed;

pub use env::expand_env;
pub use learn::{
    Bounds, DeploymentPolicy, ExamplesSpec, GateSpec, LearnBudget, LearnSpec, ModelSpec, MonitorSpec, Objective,
    OptimiserSpec, TrainingSpec, MEAN_METRICS, RATE_METRICS,
};
pub use load::{load_file, load_str, ConfigError};
pub use reward::{
    Aggregate, CriticKind, CriticSpec, JudgeMode, JudgeSpec, Penalties, RewardSpec, SignalWeight, JUDGE_AGENT,
};
pub use typed::*;

/// The config `hone serve` uses when given none: an agent `assistant` proxied
/// to an OpenAI-compatible upstream (`OPENAI_BASE_URL`, default OpenAI).
pub const DEFAULT_CONFIG: &str = include_str!("default.toml");
