//! `hone store migrate --from URL --to URL`: copies a whole store to another
//! database — SQLite to PostgreSQL when a team outgrows one machine, or
//! back — into an empty target, then compares every table's row count and
//! content hash on both sides and fails when anything differs.
//!
//! URLs: `sqlite://PATH` (`sqlite:///abs/path` or `sqlite://relative`) and
//! `postgres://user:password@host:port/database`.

use anyhow::{bail, Context, Result};
use clap::Subcommand;
use hone_console::{note, print_table};
use hone_store::copy::{copy, Tables};
use hone_store::{PostgresStore, SqliteStore, POSTGRES_POOL};
use std::process::ExitCode;

#[derive(Debug, Subcommand)]
pub enum StoreCommand {
    /// Copy every table of one store into an empty other one and check the copy.
    Migrate {
        /// The store to copy: sqlite://PATH or postgres://…
        #[arg(long)]
        from: String,
        /// The empty store to copy into: postgres://… or sqlite://PATH
        #[arg(long)]
        to: String,
    },
}

/// A store named by URL, with the row access copying needs.
enum Opened {
    Sqlite(SqliteStore),
    Postgres(PostgresStore),
}

impl Opened {
    fn tables(&self) -> &dyn Tables {
        match self {
            Opened::Sqlite(s) => s,
            Opened::Postgres(p) => p,
        }
    }
}

fn open(url: &str, flag: &str) -> Result<(Opened, String)> {
    if let Some(path) = url.strip_prefix("sqlite://") {
        if path.is_empty() {
            bail!("{flag}: `sqlite://` needs a path (sqlite:///abs/hone.db or sqlite://hone-data/hone.db)");
        }
        let store = SqliteStore::open(std::path::Path::new(path), false)
            .with_context(|| format!("{flag}: cannot open the SQLite store at {path}"))?;
        Ok((Opened::Sqlite(store), format!("sqlite://{path}")))
    } else if url.starts_with("postgres://") || url.starts_with("postgresql://") {
        let store = PostgresStore::connect(url, POSTGRES_POOL.min(4))
            .with_context(|| format!("{flag}: cannot open the PostgreSQL store"))?;
        let shown = store.url().to_owned();
        Ok((Opened::Postgres(store), shown))
    } else {
        bail!("{flag}: `{url}` is not a store URL (sqlite://PATH or postgres://user:password@host:port/database)")
    }
}

pub fn run(command: StoreCommand) -> Result<ExitCode> {
    let StoreCommand::Migrate { from, to } = command;
    let (source, source_name) = open(&from, "--from")?;
    if let Some(path) = to.strip_prefix("sqlite://") {
        if std::path::Path::new(path).exists() && from.strip_prefix("sqlite://") == Some(path) {
            bail!("--to is the same SQLite file as --from");
        }
    }
    let (target, target_name) = open(&to, "--to")?;
    note(format_args!("copying {source_name} → {target_name}"));
    let started = std::time::Instant::now();
    let (before, after) = copy(source.tables(), target.tables(), &mut |table, copied, total| {
        if copied == total || copied % 50_000 == 0 {
            note(format_args!("  {table}: {copied}/{total} rows"));
        }
    })
    .context("the copy stopped; the target holds part of the store (drop and re-create it before trying again)")?;
    let mut rows = Vec::new();
    let mut differs = Vec::new();
    for (a, b) in before.iter().zip(&after) {
        let same = a == b;
        if !same {
            differs.push(a.table);
        }
        rows.push(vec![
            a.table.to_owned(),
            a.rows.to_string(),
            b.rows.to_string(),
            a.sha256[..16].to_owned(),
            b.sha256[..16].to_owned(),
            if same { "ok" } else { "DIFFERS" }.to_owned(),
        ]);
    }
    print_table(
        &["TABLE", "ROWS FROM", "ROWS TO", "SHA-256 FROM", "SHA-256 TO", ""],
        &rows,
    )?;
    let total: u64 = before.iter().map(|s| s.rows).sum();
    if differs.is_empty() {
        note(format_args!(
            "copied {total} rows in {} tables in {:.1}s; every count and content hash matches",
            before.len(),
            started.elapsed().as_secs_f64()
        ));
        Ok(ExitCode::SUCCESS)
    } else {
        bail!("the copy differs from the source in: {}", differs.join(", "))
    }
}
