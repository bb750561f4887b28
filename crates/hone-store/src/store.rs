//! The storage trait. Implementations are synchronous (SQLite is); async
//! callers use `spawn_blocking` and the recorder runs on its own thread.

use crate::StoreError;
use hone_types::{
    CallId, CallRecord, EpisodeDetail, EpisodeId, EpisodePage, EpisodeQuery, Signal, VersionId, VersionRecord,
};

pub trait Store: Send + Sync + 'static {
    /// Writes calls in one transaction, updating their episodes. Idempotent:
    /// a call already stored is skipped (spool replays rely on it). Returns how
    /// many calls were new.
    fn write_calls(&self, calls: &[CallRecord]) -> Result<usize, StoreError>;

    /// Stores versions that are not stored yet; existing ids are left as they are.
    fn upsert_versions(&self, versions: &[VersionRecord]) -> Result<(), StoreError>;

    fn version(&self, id: &VersionId) -> Result<Option<VersionRecord>, StoreError>;

    /// Every stored version, oldest first, optionally of one agent.
    fn versions(&self, agent: Option<&str>) -> Result<Vec<VersionRecord>, StoreError>;

    fn call(&self, id: CallId) -> Result<Option<CallRecord>, StoreError>;

    /// The agent an episode belongs to, or `None` if it does not exist.
    fn episode_agent(&self, id: &EpisodeId) -> Result<Option<String>, StoreError>;

    /// Stores a signal; fails with [`StoreError::NotFound`] if its episode (or
    /// call) does not exist, writing nothing.
    fn insert_signal(&self, signal: &Signal) -> Result<(), StoreError>;

    fn episode(&self, id: &EpisodeId) -> Result<Option<EpisodeDetail>, StoreError>;

    /// Episodes newest first, with their calls and signals.
    fn episodes(&self, query: &EpisodeQuery) -> Result<EpisodePage, StoreError>;

    /// How many calls are stored (for operations and tests).
    fn call_count(&self) -> Result<u64, StoreError>;
}
