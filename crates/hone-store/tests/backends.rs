//! The backends the store's stories run on: a SQLite file and a database on
//! a real PostgreSQL server (the test script's shared one, or a private one
//! started here). `backend_tests!` writes one test per story and backend, so
//! both run the same assertions, as atuin does for its databases.

use hone_store::{CycleStore, SqliteStore};
use hone_test_support::TestDatabase;
use std::sync::Arc;

pub struct Backend {
    pub name: &'static str,
    pub store: Arc<dyn CycleStore>,
    raw: Raw,
    /// Kept alive for the store: its directory, its database server.
    _dir: tempfile::TempDir,
    _database: Option<TestDatabase>,
}

enum Raw {
    Sqlite(std::path::PathBuf),
    Postgres(String),
}

impl Backend {
    pub fn sqlite() -> Backend {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("hone.db");
        Backend {
            name: "sqlite",
            store: Arc::new(SqliteStore::open(&path, false).unwrap()),
            raw: Raw::Sqlite(path),
            _dir: dir,
            _database: None,
        }
    }

    /// `None` (and a note on stderr) where PostgreSQL is not installed and
    /// `HONE_REQUIRE_POSTGRES` is not set.
    pub fn postgres() -> Option<Backend> {
        let dir = tempfile::tempdir().unwrap();
        let Some(database) = hone_test_support::test_database(&dir.path().join("pg")).unwrap() else {
            eprintln!("SKIPPED: PostgreSQL is not installed here (Debian's `postgresql`); the PostgreSQL half of this test did not run");
            return None;
        };
        let store = hone_test_support::connect(&database.url, 8).unwrap();
        Some(Backend {
            name: "postgres",
            store: Arc::new(store),
            raw: Raw::Postgres(database.url.clone()),
            _dir: dir,
            _database: Some(database),
        })
    }

    pub fn dir(&self) -> &std::path::Path {
        self._dir.path()
    }

    /// The PostgreSQL database's URL.
    pub fn url(&self) -> Option<&str> {
        self._database.as_ref().map(|d| d.url.as_str())
    }

    /// Another connection to the same database, as another process has.
    pub fn reopen(&self) -> Arc<dyn CycleStore> {
        match &self.raw {
            Raw::Sqlite(path) => Arc::new(SqliteStore::open(path, true).unwrap()),
            Raw::Postgres(url) => Arc::new(hone_test_support::connect(url, 4).unwrap()),
        }
    }

    /// Runs SQL directly, past the store (to show what the database refuses).
    pub fn raw(&self, sql: &str) -> Result<(), String> {
        match &self.raw {
            Raw::Sqlite(path) => rusqlite::Connection::open(path)
                .unwrap()
                .execute_batch(sql)
                .map_err(|e| e.to_string()),
            Raw::Postgres(url) => hone_store::execute_at(url, sql).map_err(|e| e.to_string()),
        }
    }
}

/// For each story function `f(&Backend)`, a test `sqlite::f` and a test
/// `postgres::f`.
#[macro_export]
macro_rules! backend_tests {
    ($($story:ident),+ $(,)?) => {
        mod sqlite {
            $(#[test]
            fn $story() {
                super::$story(&$crate::backends::Backend::sqlite());
            })+
        }
        mod postgres {
            $(#[test]
            fn $story() {
                if let Some(backend) = $crate::backends::Backend::postgres() {
                    super::$story(&backend);
                }
            })+
        }
    };
}
