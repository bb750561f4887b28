//! The storage trait. Implementations are synchronous (SQLite is); async
//! callers use `spawn_blocking` or a multi-threaded runtime (PostgreSQL's
//! bridge is `PostgresStore::run`), and the recorder runs on its own thread.

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

    /// The stored id of `agent`'s episode that its client calls `id`: `id`
    /// itself when `agent` holds it, else `id@agent` when that is stored
    /// (another agent stored `id` first; see `rows::in_own_episode`).
    /// `None`: `agent` has no such episode.
    fn find_episode(&self, agent: &str, id: &EpisodeId) -> Result<Option<EpisodeId>, StoreError> {
        if self.episode_agent(id)?.as_deref() == Some(agent) {
            return Ok(Some(id.clone()));
        }
        let own = id.for_agent(agent);
        Ok((self.episode_agent(&own)?.as_deref() == Some(agent)).then_some(own))
    }

    /// Stores a signal; fails with [`StoreError::NotFound`] if its episode (or
    /// call) does not exist, writing nothing.
    fn insert_signal(&self, signal: &Signal) -> Result<(), StoreError>;

    fn episode(&self, id: &EpisodeId) -> Result<Option<EpisodeDetail>, StoreError>;

    /// `agent`'s episode that its client calls `id` ([`Store::find_episode`]).
    fn agent_episode(&self, agent: &str, id: &EpisodeId) -> Result<Option<EpisodeDetail>, StoreError> {
        match self.find_episode(agent, id)? {
            Some(stored) => self.episode(&stored),
            None => Ok(None),
        }
    }

    /// Episodes newest first, with their calls and signals.
    fn episodes(&self, query: &EpisodeQuery) -> Result<EpisodePage, StoreError>;

    /// How many calls are stored (for operations and tests).
    fn call_count(&self) -> Result<u64, StoreError>;
}
