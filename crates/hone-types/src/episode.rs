//! Episodes as the API returns them: a summary for listings and the full
//! detail with calls and signals.

use crate::call::CallRecord;
use crate::ids::EpisodeId;
use crate::signal::Signal;
use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct EpisodeSummary {
    pub id: EpisodeId,
    pub agent: String,
    pub started_at: i64,
    pub last_call_at: i64,
    pub call_count: u64,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct EpisodeDetail {
    #[serde(flatten)]
    pub summary: EpisodeSummary,
    pub calls: Vec<CallRecord>,
    pub signals: Vec<Signal>,
}

/// Filters and paging for listing episodes, newest first.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct EpisodeQuery {
    pub agents: Option<Vec<String>>,
    pub since: Option<i64>,
    pub until: Option<i64>,
    pub limit: u32,
    /// Opaque position returned as `next_cursor` by the previous page.
    pub cursor: Option<i64>,
    /// Only episodes with a call served by this version.
    pub version: Option<crate::VersionId>,
    /// Only episodes with a call that raised this behaviour flag (one of
    /// `BehaviourFlags::NAMES`; another name matches nothing).
    pub flag: Option<String>,
    /// Only episodes with a signal of this name.
    pub signal: Option<String>,
    /// Only episodes whose reward under a spec lies in a range.
    pub reward: Option<RewardRange>,
    /// Leave out the evaluation episodes learning cycles make.
    pub production_only: bool,
}

/// Rewards from `min` to `max` (inclusive) under spec `spec_version`.
#[derive(Debug, Clone, PartialEq)]
pub struct RewardRange {
    pub spec_version: String,
    pub min: f64,
    pub max: f64,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct EpisodePage {
    pub episodes: Vec<EpisodeDetail>,
    pub next_cursor: Option<String>,
}
