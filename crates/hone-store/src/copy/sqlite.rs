//! [`Tables`] on SQLite: booleans are stored as 0/1, the insertion order is
//! the rowid, and AUTOINCREMENT counters follow explicit keys by themselves.

use super::{Cell, Kind, Table, Tables};
use crate::sqlite::{lock, write_tx};
use crate::{SqliteStore, StoreError};
use rusqlite::types::{ToSqlOutput, Value};

impl rusqlite::ToSql for Cell {
    fn to_sql(&self) -> rusqlite::Result<ToSqlOutput<'_>> {
        Ok(ToSqlOutput::Owned(match self {
            Cell::Null => Value::Null,
            Cell::Text(t) => Value::Text(t.clone()),
            Cell::Int(i) => Value::Integer(*i),
            Cell::Real(r) => Value::Real(*r),
            Cell::Bool(b) => Value::Integer(i64::from(*b)),
        }))
    }
}

fn cell(row: &rusqlite::Row<'_>, i: usize, kind: Kind) -> rusqlite::Result<Cell> {
    Ok(match kind {
        Kind::Text => row.get::<_, Option<String>>(i)?.map_or(Cell::Null, Cell::Text),
        Kind::Int => row.get::<_, Option<i64>>(i)?.map_or(Cell::Null, Cell::Int),
        Kind::Real => row.get::<_, Option<f64>>(i)?.map_or(Cell::Null, Cell::Real),
        Kind::Bool => row.get::<_, Option<i64>>(i)?.map_or(Cell::Null, |b| Cell::Bool(b != 0)),
    })
}

impl Tables for SqliteStore {
    fn read_rows(
        &self,
        table: &Table,
        visit: &mut dyn FnMut(Vec<Cell>) -> Result<(), StoreError>,
    ) -> Result<(), StoreError> {
        let sql = format!(
            "SELECT {} FROM {} ORDER BY {}",
            table.column_list(),
            table.name,
            table.order.replace("{insertion}", "rowid")
        );
        self.with_reader(|conn| {
            let mut stmt = conn.prepare(&sql)?;
            let mut rows = stmt.query([])?;
            while let Some(row) = rows.next()? {
                let cells = table
                    .columns
                    .iter()
                    .enumerate()
                    .map(|(i, (_, kind))| cell(row, i, *kind))
                    .collect::<rusqlite::Result<Vec<_>>>()?;
                visit(cells)?;
            }
            Ok(())
        })
    }

    fn count_rows(&self, table: &Table) -> Result<u64, StoreError> {
        self.with_reader(|conn| {
            let n: i64 = conn.query_row(&format!("SELECT COUNT(*) FROM {}", table.name), [], |r| r.get(0))?;
            Ok(n.max(0) as u64)
        })
    }

    fn write_rows(&self, table: &Table, rows: &[Vec<Cell>]) -> Result<(), StoreError> {
        let placeholders = vec!["?"; table.columns.len()].join(", ");
        let sql = format!(
            "INSERT INTO {} ({}) VALUES ({placeholders})",
            table.name,
            table.column_list()
        );
        let mut conn = lock(&self.writer);
        let tx = write_tx(&mut conn)?;
        {
            let mut stmt = tx.prepare(&sql)?;
            for row in rows {
                stmt.execute(rusqlite::params_from_iter(row))?;
            }
        }
        tx.commit()?;
        Ok(())
    }

    fn reset_identity(&self, _table: &Table) -> Result<(), StoreError> {
        // AUTOINCREMENT keeps `sqlite_sequence` at the largest key inserted.
        Ok(())
    }
}
