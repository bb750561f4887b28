//! Copying a whole store to another backend (`hone store migrate`): every
//! table, row by row in a fixed order, into an empty target, then counted
//! and hashed on both sides.
//!
//! The two schemas have the same tables and columns (the PostgreSQL one is
//! written to match), so a copy is a list of [`Table`]s whose columns carry
//! their kind; each backend reads a table into typed [`Cell`]s and writes
//! them back ([`Tables`], one file per backend). The content hash is taken
//! over the cells, so it is the same for the same data on either engine.

mod postgres;
mod sqlite;

use crate::StoreError;
use sha2::{Digest, Sha256};

/// What a column holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Text,
    Int,
    Real,
    Bool,
}

/// One value of a row.
#[derive(Debug, Clone, PartialEq)]
pub enum Cell {
    Null,
    Text(String),
    Int(i64),
    Real(f64),
    Bool(bool),
}

impl Cell {
    /// Bytes for the content hash: a tag, then the value.
    fn hash_into(&self, hasher: &mut Sha256) {
        match self {
            Cell::Null => hasher.update([0]),
            Cell::Text(t) => {
                hasher.update([1]);
                hasher.update((t.len() as u64).to_le_bytes());
                hasher.update(t.as_bytes());
            }
            Cell::Int(i) => {
                hasher.update([2]);
                hasher.update(i.to_le_bytes());
            }
            Cell::Real(r) => {
                hasher.update([3]);
                hasher.update(r.to_bits().to_le_bytes());
            }
            Cell::Bool(b) => hasher.update([4, u8::from(*b)]),
        }
    }
}

/// A table as both schemas have it.
#[derive(Debug)]
pub struct Table {
    pub name: &'static str,
    pub columns: &'static [(&'static str, Kind)],
    /// The order rows are copied and hashed in; `{insertion}` is the
    /// backend's insertion order (SQLite's rowid, PostgreSQL's `seq`).
    pub order: &'static str,
    /// A generated key column (copied as is; the target's counter is moved
    /// past it afterwards).
    pub identity: Option<&'static str>,
}

impl Table {
    pub(crate) fn column_list(&self) -> String {
        self.columns.iter().map(|(c, _)| *c).collect::<Vec<_>>().join(", ")
    }
}

use Kind::{Bool, Int, Real, Text};

/// Every table, parents before the rows that name them.
pub const TABLES: &[Table] = &[
    Table {
        name: "versions",
        columns: &[
            ("id", Text),
            ("agent", Text),
            ("label", Text),
            ("spec", Text),
            ("parent", Text),
            ("created_by", Text),
            ("created_at", Int),
        ],
        order: "id",
        identity: None,
    },
    Table {
        name: "episodes",
        columns: &[
            ("seq", Int),
            ("id", Text),
            ("agent", Text),
            ("started_at", Int),
            ("last_call_at", Int),
            ("call_count", Int),
        ],
        order: "seq",
        identity: Some("seq"),
    },
    Table {
        name: "calls",
        columns: &[
            ("id", Text),
            ("episode_id", Text),
            ("agent", Text),
            ("version_id", Text),
            ("started_at", Int),
            ("outcome", Text),
            ("stream", Bool),
            ("provider", Text),
            ("model", Text),
            ("prompt_tokens", Int),
            ("completion_tokens", Int),
            ("cost_usd", Real),
            ("latency_ms", Real),
            ("ttft_ms", Real),
            ("upstream_ms", Real),
            ("invalid_tool_call", Bool),
            ("clarifying_question", Bool),
            ("refusal", Bool),
            ("empty", Bool),
            ("truncated", Bool),
            ("record", Text),
        ],
        order: "id",
        identity: None,
    },
    Table {
        name: "signals",
        columns: &[
            ("id", Text),
            ("episode_id", Text),
            ("call_id", Text),
            ("name", Text),
            ("value", Text),
            ("source", Text),
            ("comment", Text),
            ("created_at", Int),
        ],
        order: "id",
        identity: None,
    },
    Table {
        name: "rewards",
        columns: &[
            ("episode_id", Text),
            ("agent", Text),
            ("spec_version", Text),
            ("value", Real),
            ("passed", Bool),
            ("record", Text),
            ("computed_at", Int),
            ("signals_seen", Int),
            ("stale", Bool),
        ],
        order: "episode_id, spec_version",
        identity: None,
    },
    Table {
        name: "datasets",
        columns: &[
            ("id", Text),
            ("name", Text),
            ("version", Int),
            ("agent", Text),
            ("builder", Text),
            ("params", Text),
            ("item_count", Int),
            ("content_hash", Text),
            ("created_at", Int),
        ],
        order: "id",
        identity: None,
    },
    Table {
        name: "dataset_items",
        columns: &[
            ("dataset_id", Text),
            ("idx", Int),
            ("instance_id", Text),
            ("item", Text),
        ],
        order: "dataset_id, idx",
        identity: None,
    },
    Table {
        name: "eval_runs",
        columns: &[
            ("id", Text),
            ("dataset_id", Text),
            ("agent", Text),
            ("version_id", Text),
            ("target", Text),
            ("created_at", Int),
            ("finished_at", Int),
        ],
        order: "id",
        identity: None,
    },
    Table {
        name: "eval_results",
        columns: &[
            ("run_id", Text),
            ("instance_id", Text),
            ("attempt", Int),
            ("result", Text),
        ],
        order: "run_id, instance_id, attempt",
        identity: None,
    },
    Table {
        name: "cycles",
        columns: &[
            ("id", Text),
            ("agent", Text),
            ("seq", Int),
            ("state", Text),
            ("record", Text),
            ("updated_at", Int),
        ],
        order: "id",
        identity: None,
    },
    Table {
        name: "candidates",
        columns: &[
            ("cycle_id", Text),
            ("version_id", Text),
            ("agent", Text),
            ("status", Text),
            ("record", Text),
            ("created_at", Int),
        ],
        order: "created_at, {insertion}",
        identity: None,
    },
    Table {
        name: "deployments",
        columns: &[("agent", Text), ("revision", Int), ("record", Text)],
        order: "agent",
        identity: None,
    },
    Table {
        name: "alerts",
        columns: &[
            ("id", Int),
            ("agent", Text),
            ("version_id", Text),
            ("at", Int),
            ("record", Text),
        ],
        order: "id",
        identity: Some("id"),
    },
    Table {
        name: "history",
        columns: &[
            ("id", Int),
            ("agent", Text),
            ("at", Int),
            ("kind", Text),
            ("record", Text),
        ],
        order: "id",
        identity: Some("id"),
    },
];

/// Row-level access to a store's tables, for copying.
pub trait Tables {
    /// Calls `visit` with every row of `table` in its copy order.
    fn read_rows(
        &self,
        table: &Table,
        visit: &mut dyn FnMut(Vec<Cell>) -> Result<(), StoreError>,
    ) -> Result<(), StoreError>;

    /// How many rows `table` has.
    fn count_rows(&self, table: &Table) -> Result<u64, StoreError>;

    /// Inserts rows as they are (generated keys included), in one transaction.
    fn write_rows(&self, table: &Table, rows: &[Vec<Cell>]) -> Result<(), StoreError>;

    /// Moves the table's key counter past the rows copied in.
    fn reset_identity(&self, table: &Table) -> Result<(), StoreError>;
}

/// A table's row count and content hash.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Summary {
    pub table: &'static str,
    pub rows: u64,
    pub sha256: String,
}

/// Counts and hashes every table of a store.
pub fn summarise(store: &dyn Tables) -> Result<Vec<Summary>, StoreError> {
    TABLES
        .iter()
        .map(|table| {
            let mut hasher = Sha256::new();
            let mut rows = 0u64;
            store.read_rows(table, &mut |row| {
                rows += 1;
                for cell in &row {
                    cell.hash_into(&mut hasher);
                }
                Ok(())
            })?;
            Ok(Summary {
                table: table.name,
                rows,
                sha256: hex::encode(hasher.finalize()),
            })
        })
        .collect()
}

/// Rows written per transaction.
const BATCH: usize = 500;

/// Copies every table of `from` into `to`, which must hold no rows yet;
/// `progress(table, rows copied, rows in the table)` is told as it goes.
/// Returns the source's summary and the target's, read back after the copy.
pub fn copy(
    from: &dyn Tables,
    to: &dyn Tables,
    progress: &mut dyn FnMut(&str, u64, u64),
) -> Result<(Vec<Summary>, Vec<Summary>), StoreError> {
    for table in TABLES {
        let rows = to.count_rows(table)?;
        if rows > 0 {
            return Err(StoreError::Corrupt(format!(
                "the target store is not empty (table `{}` has {rows} rows); migrate copies into an empty database",
                table.name
            )));
        }
    }
    for table in TABLES {
        let total = from.count_rows(table)?;
        let mut batch = Vec::with_capacity(BATCH);
        let mut copied = 0u64;
        from.read_rows(table, &mut |row| {
            batch.push(row);
            if batch.len() == BATCH {
                to.write_rows(table, &batch)?;
                copied += batch.len() as u64;
                batch.clear();
                progress(table.name, copied, total);
            }
            Ok(())
        })?;
        if !batch.is_empty() {
            to.write_rows(table, &batch)?;
            copied += batch.len() as u64;
        }
        progress(table.name, copied, total);
        if table.identity.is_some() {
            to.reset_identity(table)?;
        }
    }
    Ok((summarise(from)?, summarise(to)?))
}
