//! Critics: programmatic checks of an episode, one file each behind the
//! [`Critic`] trait. A critic returns a score in [0, 1] (per call where it
//! can say which call earned it), or a failure that is recorded as such and
//! never turned into a score.

mod command;
mod exact;
mod json_schema;
mod numeric;
mod regex;
mod tool_calls;

pub use command::CommandCritic;
pub use exact::ExactCritic;
pub use json_schema::JsonSchemaCritic;
pub use numeric::NumericCritic;
pub use regex::RegexCritic;
pub use tool_calls::ToolCallsCritic;

use hone_config::{CriticKind, CriticSpec};
use hone_types::{CallId, EpisodeDetail};
use serde_json::Value;
use std::time::Duration;

/// What a critic looks at.
#[derive(Debug, Clone, Copy)]
pub struct CriticInput<'a> {
    pub episode: &'a EpisodeDetail,
    /// A good answer to compare with (a demonstration signal or a dataset label).
    pub reference: Option<&'a Value>,
}

#[derive(Debug, Clone, PartialEq)]
pub struct CriticScore {
    /// In [0, 1].
    pub score: f64,
    /// Scores of individual calls, where the critic can assign them.
    pub per_call: Vec<(CallId, f64)>,
    pub reason: Option<String>,
}

impl CriticScore {
    pub fn pass(pass: bool, reason: impl Into<String>) -> Self {
        Self {
            score: if pass { 1.0 } else { 0.0 },
            per_call: Vec::new(),
            reason: Some(reason.into()),
        }
    }
}

/// Why a critic could not score (no reference to compare with, a command
/// that crashed): recorded as a failure, never as a score.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct CriticFailure(pub String);

pub trait Critic: Send + Sync {
    fn name(&self) -> &str;
    fn score(&self, input: CriticInput<'_>) -> Result<CriticScore, CriticFailure>;
}

/// Builds the critic a config entry describes.
pub fn from_spec(spec: &CriticSpec) -> Result<Box<dyn Critic>, String> {
    let name = spec.name.clone();
    Ok(match &spec.kind {
        CriticKind::ToolCalls => Box::new(ToolCallsCritic { name }),
        CriticKind::JsonSchema { schema } => Box::new(JsonSchemaCritic::new(name, schema)?),
        CriticKind::Regex { pattern } => Box::new(RegexCritic::new(name, pattern)?),
        CriticKind::Exact { case_sensitive } => Box::new(ExactCritic {
            name,
            case_sensitive: *case_sensitive,
        }),
        CriticKind::Numeric { tolerance } => Box::new(NumericCritic {
            name,
            tolerance: *tolerance,
        }),
        CriticKind::Command { argv, timeout_ms } => Box::new(CommandCritic {
            name,
            argv: argv.clone(),
            timeout: Duration::from_millis(*timeout_ms),
        }),
    })
}

/// The reference as text, or the failure of a critic that needs one.
fn reference_text(input: CriticInput<'_>, critic: &str) -> Result<String, CriticFailure> {
    let reference = input
        .reference
        .ok_or_else(|| CriticFailure(format!("`{critic}` compares with a reference and the episode has none")))?;
    crate::episode::reference_text(reference)
        .ok_or_else(|| CriticFailure(format!("`{critic}`: the reference {reference} has no text")))
}
