//! The `[store]` table: the database calls and episodes are written to.
//!
//! ```toml
//! [store]
//! type = "sqlite"
//! path = "./hone-data/hone.db"   # default: <data_dir>/hone.db
//! synchronous = "normal"         # or "full"
//! ```
//!
//! or, for several gateway replicas and a learner sharing one database:
//!
//! ```toml
//! store = { type = "postgres", url = "${DATABASE_URL}", pool = 16 }
//! ```
//!
//! TLS is set in the URL as for libpq (`?sslmode=require&sslrootcert=…`;
//! see `hone_store`'s `postgres/tls.rs`).
//!
//! `synchronous` applies to both: with `full`, every commit (SQLite's, and
//! the recorder's journal in front of either database) is fsynced, so it
//! also survives a power loss.

use crate::env::Env;
use crate::error::ConfigError;
use serde::Deserialize;
use std::path::{Path, PathBuf};

#[derive(Debug, Deserialize)]
#[serde(tag = "type", rename_all = "lowercase")]
pub enum RawStore {
    Sqlite(RawSqlite),
    Postgres(RawPostgres),
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawSqlite {
    pub path: Option<String>,
    /// `normal` (survives a process crash) or `full` (also a power loss).
    pub synchronous: Option<String>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawPostgres {
    /// `postgres://user:password@host:port/database`; `${VAR}` is expanded.
    pub url: String,
    /// Connections each process keeps (default 16).
    pub pool: Option<usize>,
    /// How durably the recorder's journal commits (see the module docs).
    pub synchronous: Option<String>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Synchronous {
    /// Committed data survives a process crash (`kill -9`).
    Normal,
    /// Committed data also survives a power loss (an fsync per commit batch).
    Full,
}

/// Where the store lives.
#[derive(Clone, PartialEq, Eq)]
pub enum StoreBackend {
    /// One file, one machine.
    Sqlite { path: PathBuf },
    /// One database shared by every gateway replica and the learner.
    Postgres { url: String, pool: usize },
}

impl std::fmt::Debug for StoreBackend {
    // The URL may hold a password: never print it.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            StoreBackend::Sqlite { path } => f.debug_struct("Sqlite").field("path", path).finish(),
            StoreBackend::Postgres { pool, .. } => f
                .debug_struct("Postgres")
                .field("url", &"<redacted>")
                .field("pool", pool)
                .finish(),
        }
    }
}

/// The default size of a PostgreSQL connection pool.
pub const POSTGRES_POOL: usize = 16;

#[derive(Debug, Clone)]
pub struct StoreConfig {
    pub backend: StoreBackend,
    pub synchronous: Synchronous,
}

impl StoreConfig {
    /// The SQLite file, when the store is one.
    pub fn sqlite_path(&self) -> Option<&Path> {
        match &self.backend {
            StoreBackend::Sqlite { path } => Some(path),
            StoreBackend::Postgres { .. } => None,
        }
    }

    /// Whether other processes (gateway replicas) write this store too.
    pub fn shared(&self) -> bool {
        matches!(self.backend, StoreBackend::Postgres { .. })
    }

    /// Validates `[store]` (absent: SQLite at `<data_dir>/hone.db`).
    pub(crate) fn from_raw(raw: Option<RawStore>, data_dir: &Path, env: &Env) -> Result<Self, ConfigError> {
        Ok(match raw {
            None => StoreConfig {
                backend: StoreBackend::Sqlite {
                    path: data_dir.join("hone.db"),
                },
                synchronous: Synchronous::Normal,
            },
            Some(RawStore::Sqlite(s)) => StoreConfig {
                backend: StoreBackend::Sqlite {
                    path: match s.path {
                        Some(p) => env.path("store.path", &p)?,
                        None => data_dir.join("hone.db"),
                    },
                },
                synchronous: synchronous(s.synchronous.as_deref())?,
            },
            Some(RawStore::Postgres(p)) => {
                let url = env.expand("store.url", &p.url)?;
                if !(url.starts_with("postgres://") || url.starts_with("postgresql://")) {
                    return Err(ConfigError::at(
                        "store.url",
                        "a PostgreSQL URL starts with `postgres://` or `postgresql://` (postgres://user:password@host:5432/database)",
                    ));
                }
                let pool = p.pool.unwrap_or(POSTGRES_POOL);
                if pool == 0 {
                    return Err(ConfigError::at("store.pool", "must be at least 1"));
                }
                StoreConfig {
                    backend: StoreBackend::Postgres { url, pool },
                    synchronous: synchronous(p.synchronous.as_deref())?,
                }
            }
        })
    }
}

fn synchronous(raw: Option<&str>) -> Result<Synchronous, ConfigError> {
    match raw {
        None | Some("normal") => Ok(Synchronous::Normal),
        Some("full") => Ok(Synchronous::Full),
        Some(other) => Err(ConfigError::at(
            "store.synchronous",
            format!("`{other}` is not one of `normal`, `full`"),
        )),
    }
}
