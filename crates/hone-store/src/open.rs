//! Opens the store a config's `[store]` table names — a SQLite file or a
//! PostgreSQL database — behind the store traits, so nothing above this
//! line knows which one it runs on.

use crate::{CycleStore, PostgresStore, SqliteStore, StoreError};
use hone_config::{StoreBackend, StoreConfig, Synchronous};
use std::sync::Arc;

/// How long a write waits for another writer (SQLite's lock; PostgreSQL
/// writers do not wait on each other this way).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Wait {
    /// The gateway: calls are waiting, so a write that cannot go soon is
    /// kept in the recorder's journal instead ([`SqliteStore::RECORDING`]).
    Recording,
    /// The learner, the CLI, the dashboard ([`SqliteStore::PATIENT`]).
    Patient,
}

/// Another handle on the store `opened` is (from `config`), waiting as `wait`
/// says: SQLite gets a connection of its own (its lock waits are per
/// connection); PostgreSQL shares the pool `opened` has — a
/// second pool would double every replica's connections for nothing.
pub fn open_beside(
    config: &StoreConfig,
    opened: &Arc<dyn CycleStore>,
    wait: Wait,
) -> Result<Arc<dyn CycleStore>, StoreError> {
    match config.backend {
        StoreBackend::Sqlite { .. } => open(config, wait),
        StoreBackend::Postgres { .. } => Ok(opened.clone()),
    }
}

pub fn open(config: &StoreConfig, wait: Wait) -> Result<Arc<dyn CycleStore>, StoreError> {
    Ok(match &config.backend {
        StoreBackend::Sqlite { path } => {
            let busy = match wait {
                Wait::Recording => SqliteStore::RECORDING,
                Wait::Patient => SqliteStore::PATIENT,
            };
            Arc::new(SqliteStore::open_with(
                path,
                config.synchronous == Synchronous::Full,
                busy,
            )?)
        }
        StoreBackend::Postgres { url, pool } => Arc::new(PostgresStore::connect(url, *pool)?),
    })
}
