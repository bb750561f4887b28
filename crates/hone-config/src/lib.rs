//! hone's TOML config. Each section of the file has its own module holding
//! the section as written (`Raw*` structs with `deny_unknown_fields`, so a
//! typo is an error that names the key), its validated typed form, and the
//! conversion from one to the other: [`gateway`](GatewayConfig), [`store`](StoreConfig),
//! [`recorder`](RecorderConfig), [`artefacts`](ArtefactsConfig), [`providers`](ProviderConfig), [`agents`](AgentConfig)
//! with their [`reward`] and [`learn`] tables, [`metrics`](MetricConfig) and the
//! `[learn]` budget. [`load_str`] parses the file, expands `${ENV}` references
//! and converts the sections in turn into a [`Config`]; every error is a
//! [`ConfigError`] naming the key at fault.
//!
//! The binary runs with no config at all on [`DEFAULT_CONFIG`].

mod agents;
mod artefacts;
mod config;
mod env;
mod error;
pub mod fine_tune;
mod gateway;
pub mod learn;
mod load;
mod metrics;
mod providers;
mod recorder;
pub mod reflect;
pub mod reward;
mod store;
pub mod trainer;
mod warnings;

pub use agents::{AgentConfig, CanaryShare, ClearGain, DeclaredVersion, DeploymentConfig, PromotionRule};
pub use artefacts::{check_url as check_artefact_url, is_artefact_url, ArtefactsConfig, ARTEFACT_SCHEMES};
pub use config::Config;
pub use env::expand_env;
pub use error::{is_adapter_name, ConfigError};
pub use fine_tune::{FineTuneMethod, FineTuneSpec, UploadSpec};
pub use gateway::{ApiKeyConfig, GatewayConfig, DEFAULT_MAX_BODY_BYTES};
pub use learn::{
    check_confidence, Bound, Bounds, DeploymentPolicy, DriftSpec, ExamplesSpec, GateSpec, GroupSource, LearnBudget,
    LearnSpec, MemorySpec, ModelSpec, MonitorSpec, Objective, OptimiserSpec, ReplaySpec, ShadowSpec, TrainingSpec,
    MEAN_METRICS, RATE_METRICS,
};
pub use load::{load_file, load_str};
pub use metrics::MetricConfig;
pub use providers::{HttpEngine, LocalDType, LocalOptions, Price, ProviderConfig, ProviderKind};
pub use recorder::RecorderConfig;
pub use reflect::{Budget, PlaybookSpec, PromptSpec, ToolsSpec, REFLECTOR_AGENT};
pub use reward::{
    Aggregate, CriticKind, CriticSpec, JudgeMode, JudgeSpec, Penalties, RewardModelSpec, RewardSpec, SignalWeight,
    JUDGE_AGENT,
};
pub use store::{StoreBackend, StoreConfig, Synchronous, POSTGRES_POOL};
pub use trainer::{TrainerSpec, TrlSpec};

/// Whether `name` is an agent hone records its own model calls under (the
/// judge's, the reflector's), not one the user declared.
pub fn is_internal_agent(name: &str) -> bool {
    name == JUDGE_AGENT || name == REFLECTOR_AGENT
}

/// The config file as written, every section's raw form in one place (the
/// `[agents.NAME.reward]` and `[agents.NAME.learn]` tables' are in [`reward`]
/// and [`learn`]).
pub mod raw {
    pub use crate::agents::{
        RawAgent, RawDeployment, RawInlineProvider, RawMemory, RawProviderRef, RawRoute, RawVersion,
    };
    pub use crate::artefacts::RawArtefacts;
    pub use crate::config::RawConfig;
    pub use crate::gateway::{RawApiKey, RawGateway};
    pub use crate::metrics::RawMetric;
    pub use crate::providers::{RawHttpProvider, RawLocalProvider, RawPrice, RawProvider};
    pub use crate::recorder::RawRecorder;
    pub use crate::store::{RawSqlite, RawStore};
}

/// The config `hone serve` uses when given none: an agent `assistant` proxied
/// to an OpenAI-compatible upstream (`OPENAI_BASE_URL`, default OpenAI).
pub const DEFAULT_CONFIG: &str = include_str!("default.toml");
