//! A fresh PostgreSQL database per test: on the server the test script
//! started for the whole run (`HONE_TEST_POSTGRES`), else on a private
//! throwaway server (`hone_store::LocalPostgres`) in the test's directory.

use hone_store::{execute_at, LocalPostgres, LocalPostgresError};
use std::path::Path;

/// A fresh, empty database for one test.
#[derive(Debug)]
pub struct TestDatabase {
    pub url: String,
    /// The private server it lives on, when no shared one was named.
    pub server: Option<LocalPostgres>,
}

/// A new database for a test: on the server whose admin URL
/// `HONE_TEST_POSTGRES` names (the test script starts one for the whole
/// run), else on a private server created in `dir`. `Ok(None)` when
/// PostgreSQL is not installed here — an error instead when
/// `HONE_REQUIRE_POSTGRES` is set, so CI never skips silently.
pub fn test_database(dir: &Path) -> Result<Option<TestDatabase>, LocalPostgresError> {
    let name = format!("hone_test_{}", unique_suffix());
    if let Ok(admin) = std::env::var("HONE_TEST_POSTGRES") {
        execute_at(&admin, &format!("CREATE DATABASE \"{name}\""))?;
        let mut config: tokio_postgres::Config =
            admin
                .parse()
                .map_err(|e: tokio_postgres::Error| LocalPostgresError::Failed {
                    what: "bad HONE_TEST_POSTGRES".to_owned(),
                    message: e.to_string(),
                })?;
        config.dbname(&name);
        return Ok(Some(TestDatabase {
            url: config_url(&config),
            server: None,
        }));
    }
    match LocalPostgres::create(dir) {
        Ok(server) => Ok(Some(TestDatabase {
            url: server.create_database(&name)?,
            server: Some(server),
        })),
        Err(LocalPostgresError::NotInstalled) if std::env::var_os("HONE_REQUIRE_POSTGRES").is_none() => Ok(None),
        Err(e) => Err(e),
    }
}

/// The runtime that drives the connections of the PostgreSQL stores a
/// synchronous test opens (enter it around `PostgresStore::connect`); it
/// lives as long as the test process.
pub fn runtime() -> &'static tokio::runtime::Runtime {
    hone_console::runtime().expect("a tokio runtime for the tests' PostgreSQL stores")
}

/// `PostgresStore::connect` for a test: its connections driven by the
/// runtime the test runs in, or by [`runtime`] when it runs in none.
pub fn connect(url: &str, pool: usize) -> Result<hone_store::PostgresStore, hone_store::StoreError> {
    let _entered = tokio::runtime::Handle::try_current()
        .is_err()
        .then(|| runtime().enter());
    hone_store::PostgresStore::connect(url, pool)
}

/// A name no other test picks: this process, the time, and a counter.
fn unique_suffix() -> String {
    static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    format!("{}_{}_{n}", std::process::id(), hone_types::time::now_ms())
}

/// A URL for a parsed config (the test servers need no password).
fn config_url(config: &tokio_postgres::Config) -> String {
    let host = match config.get_hosts().first() {
        Some(tokio_postgres::config::Host::Tcp(h)) => h.clone(),
        _ => "127.0.0.1".to_owned(),
    };
    let port = config.get_ports().first().copied().unwrap_or(5432);
    format!(
        "postgres://{}@{host}:{port}/{}",
        config.get_user().unwrap_or("postgres"),
        config.get_dbname().unwrap_or("postgres")
    )
}
