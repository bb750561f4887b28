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
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct EpisodePage {
    pub episodes: Vec<EpisodeDetail>,
    pub next_cursor: Option<String>,
}
