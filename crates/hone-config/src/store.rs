//! The `[store]` table: the database calls and episodes are written to.
//!
//! ```toml
//! [store]
//! type = "sqlite"
//! path = "./hone-data/hone.db"   # default: <data_dir>/hone.db
//! synchronous = "normal"         # or "full"
//! ```

use crate::env::Env;
use crate::error::ConfigError;
use serde::Deserialize;
use std::path::{Path, PathBuf};

#[derive(Debug, Deserialize)]
#[serde(tag = "type", rename_all = "lowercase")]
pub enum RawStore {
    Sqlite(RawSqlite),
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawSqlite {
    pub path: Option<String>,
    /// `normal` (survives a process crash) or `full` (also a power loss).
    pub synchronous: Option<String>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Synchronous {
    /// Committed data survives a process crash (`kill -9`).
    Normal,
    /// Committed data also survives a power loss (an fsync per commit batch).
    Full,
}

#[derive(Debug, Clone)]
pub struct StoreConfig {
    pub path: PathBuf,
    pub synchronous: Synchronous,
}

impl StoreConfig {
    /// Validates `[store]` (absent: SQLite at `<data_dir>/hone.db`).
    pub(crate) fn from_raw(raw: Option<RawStore>, data_dir: &Path, env: &Env) -> Result<Self, ConfigError> {
        Ok(match raw {
            None => StoreConfig {
                path: data_dir.join("hone.db"),
                synchronous: Synchronous::Normal,
            },
            Some(RawStore::Sqlite(s)) => StoreConfig {
                path: match s.path {
                    Some(p) => PathBuf::from(env.expand("store.path", &p)?),
                    None => data_dir.join("hone.db"),
                },
                synchronous: match s.synchronous.as_deref() {
                    None | Some("normal") => Synchronous::Normal,
                    Some("full") => Synchronous::Full,
                    Some(other) => {
                        return Err(ConfigError::at(
                            "store.synchronous",
                            format!("`{other}` is not one of `normal`, `full`"),
                        ))
                    }
                },
            },
        })
    }
}
