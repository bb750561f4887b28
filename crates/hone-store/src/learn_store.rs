//! Storage for learning: rewards, dataset snapshots and evaluation results.
//! A second small trait next to [`crate::Store`] so that the recording path
//! stays as narrow as it is.

use crate::{Store, StoreError};
use hone_types::{DatasetInfo, EpisodeId, EvalRunInfo, Instance, InstanceResult, RewardRecord, VersionId};

/// Which episodes a dataset builder looks at. Episodes recorded by
/// evaluation runs (ids starting with `eval.`) are never traffic.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct EpisodeFilter {
    pub agent: String,
    /// Only calls made by this version.
    pub version: Option<VersionId>,
    /// Unix ms, inclusive.
    pub since: Option<i64>,
    /// Unix ms, exclusive.
    pub until: Option<i64>,
    /// Only episodes that have a signal of this name.
    pub signal: Option<String>,
    /// The reward spec whose rewards to report in [`EpisodeFacts::reward`].
    pub spec_version: Option<String>,
}

/// What a builder needs to know about an episode, read from indexed columns
/// without parsing any call record.
#[derive(Debug, Clone, PartialEq)]
pub struct EpisodeFacts {
    pub id: EpisodeId,
    /// The version of its first call.
    pub version_id: String,
    pub started_at: i64,
    pub calls: u32,
    /// Some call did not end `ok`.
    pub any_error: bool,
    /// Some call was flagged (invalid tool call, clarifying question, refusal, empty, truncated).
    pub any_flag: bool,
    pub cost_usd: f64,
    /// `(value, passed)` under the filter's spec version, if computed.
    pub reward: Option<(f64, bool)>,
    /// A signal arrived after that reward was computed: it is to be re-scored.
    pub reward_stale: bool,
}

pub trait LearnStore: Store {
    /// Stores rewards, replacing earlier ones for the same episode and spec version.
    fn put_rewards(&self, rewards: &[RewardRecord]) -> Result<(), StoreError>;

    fn reward(&self, episode: &EpisodeId, spec_version: &str) -> Result<Option<RewardRecord>, StoreError>;

    /// How many episodes of the agent have a reward under the spec version, and their mean.
    fn reward_summary(&self, agent: &str, spec_version: &str) -> Result<(u64, Option<f64>), StoreError>;

    /// Calls `visit` for every episode matching the filter, oldest first,
    /// streaming (memory does not grow with the store).
    fn scan_episodes(
        &self,
        filter: &EpisodeFilter,
        visit: &mut dyn FnMut(EpisodeFacts) -> Result<(), StoreError>,
    ) -> Result<(), StoreError>;

    /// The last `n` episodes matching the filter that `keep` accepts, oldest
    /// first (memory bounded by `n`).
    fn last_episodes(
        &self,
        filter: &EpisodeFilter,
        n: usize,
        keep: &dyn Fn(&EpisodeFacts) -> bool,
    ) -> Result<Vec<EpisodeFacts>, StoreError> {
        let mut last = std::collections::VecDeque::new();
        if n == 0 {
            return Ok(Vec::new());
        }
        self.scan_episodes(filter, &mut |facts| {
            if keep(&facts) {
                if last.len() == n {
                    last.pop_front();
                }
                last.push_back(facts);
            }
            Ok(())
        })?;
        Ok(last.into())
    }

    /// Writes a new snapshot `name@N` (N one more than the latest) with its
    /// instances, in one transaction, and returns it.
    fn create_dataset(
        &self,
        name: &str,
        agent: &str,
        builder: &str,
        params: &serde_json::Value,
        items: &[Instance],
        created_at: i64,
    ) -> Result<DatasetInfo, StoreError>;

    /// Every snapshot, by name then version.
    fn datasets(&self) -> Result<Vec<DatasetInfo>, StoreError>;

    /// `name` (the latest version) or `name@N`.
    fn dataset(&self, name_or_id: &str) -> Result<Option<DatasetInfo>, StoreError>;

    fn dataset_items(&self, dataset_id: &str) -> Result<Vec<Instance>, StoreError>;

    /// Creates the run if it is new; an existing run is left as it is (resume).
    fn start_eval_run(&self, run: &EvalRunInfo) -> Result<EvalRunInfo, StoreError>;

    fn finish_eval_run(&self, run_id: &str, finished_at: i64) -> Result<(), StoreError>;

    fn eval_run(&self, run_id: &str) -> Result<Option<EvalRunInfo>, StoreError>;

    /// Evaluation runs newest first (of one agent, or all).
    fn eval_runs(&self, agent: Option<&str>, limit: usize) -> Result<Vec<EvalRunInfo>, StoreError>;

    fn put_eval_result(&self, run_id: &str, result: &InstanceResult) -> Result<(), StoreError>;

    /// Every result of the run, by instance then attempt.
    fn eval_results(&self, run_id: &str) -> Result<Vec<InstanceResult>, StoreError>;
}
