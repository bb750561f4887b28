//! [`Tables`] on PostgreSQL: rows are read through a cursor, written as
//! multi-row inserts that keep generated keys (`OVERRIDING SYSTEM VALUE`),
//! and identity counters are moved past the copied keys.

use super::{Cell, Kind, Table, Tables};
use crate::{PostgresStore, StoreError};
use tokio_postgres::types::ToSql;

/// A cell as a statement parameter, typed by its column even when null.
fn param(cell: &Cell, kind: Kind) -> Box<dyn ToSql + Sync + Send> {
    match (cell, kind) {
        (Cell::Text(t), _) => Box::new(t.clone()),
        (Cell::Int(i), _) => Box::new(*i),
        (Cell::Real(r), _) => Box::new(*r),
        (Cell::Bool(b), _) => Box::new(*b),
        (Cell::Null, Kind::Text) => Box::new(None::<String>),
        (Cell::Null, Kind::Int) => Box::new(None::<i64>),
        (Cell::Null, Kind::Real) => Box::new(None::<f64>),
        (Cell::Null, Kind::Bool) => Box::new(None::<bool>),
    }
}

fn cell(row: &tokio_postgres::Row, i: usize, kind: Kind) -> Result<Cell, tokio_postgres::Error> {
    Ok(match kind {
        Kind::Text => row.try_get::<_, Option<String>>(i)?.map_or(Cell::Null, Cell::Text),
        Kind::Int => row.try_get::<_, Option<i64>>(i)?.map_or(Cell::Null, Cell::Int),
        Kind::Real => row.try_get::<_, Option<f64>>(i)?.map_or(Cell::Null, Cell::Real),
        Kind::Bool => row.try_get::<_, Option<bool>>(i)?.map_or(Cell::Null, Cell::Bool),
    })
}

impl Tables for PostgresStore {
    fn read_rows(
        &self,
        table: &Table,
        visit: &mut dyn FnMut(Vec<Cell>) -> Result<(), StoreError>,
    ) -> Result<(), StoreError> {
        let sql = format!(
            "SELECT {} FROM {} ORDER BY {}",
            table.column_list(),
            table.name,
            table.order.replace("{insertion}", "seq")
        );
        self.run(async {
            let mut client = self.client().await?;
            let tx = client.build_transaction().read_only(true).start().await?;
            let stmt = tx.prepare(&sql).await?;
            let portal = tx.bind(&stmt, &[]).await?;
            loop {
                let rows = tx.query_portal(&portal, 1000).await?;
                if rows.is_empty() {
                    break;
                }
                for row in &rows {
                    let cells = table
                        .columns
                        .iter()
                        .enumerate()
                        .map(|(i, (_, kind))| cell(row, i, *kind))
                        .collect::<Result<Vec<_>, _>>()?;
                    visit(cells)?;
                }
            }
            tx.commit().await?;
            Ok(())
        })
    }

    fn count_rows(&self, table: &Table) -> Result<u64, StoreError> {
        self.run(async {
            let client = self.client().await?;
            let n: i64 = client
                .query_one(&format!("SELECT COUNT(*) FROM {}", table.name), &[])
                .await?
                .try_get(0)?;
            Ok(n.max(0) as u64)
        })
    }

    fn write_rows(&self, table: &Table, rows: &[Vec<Cell>]) -> Result<(), StoreError> {
        if rows.is_empty() {
            return Ok(());
        }
        let width = table.columns.len();
        let values: Vec<String> = (0..rows.len())
            .map(|r| {
                let cells: Vec<String> = (1..=width).map(|c| format!("${}", r * width + c)).collect();
                format!("({})", cells.join(", "))
            })
            .collect();
        let overriding = if table.identity.is_some() {
            " OVERRIDING SYSTEM VALUE"
        } else {
            ""
        };
        let sql = format!(
            "INSERT INTO {} ({}){overriding} VALUES {}",
            table.name,
            table.column_list(),
            values.join(", ")
        );
        let params: Vec<Box<dyn ToSql + Sync + Send>> = rows
            .iter()
            .flat_map(|row| {
                row.iter()
                    .zip(table.columns)
                    .map(|(cell, (_, kind))| param(cell, *kind))
            })
            .collect();
        let refs: Vec<&(dyn ToSql + Sync)> = params.iter().map(|p| &**p as &(dyn ToSql + Sync)).collect();
        self.run(async {
            let mut client = self.client().await?;
            let tx = client.transaction().await?;
            tx.execute(&sql, &refs).await?;
            tx.commit().await?;
            Ok(())
        })
    }

    fn reset_identity(&self, table: &Table) -> Result<(), StoreError> {
        let Some(column) = table.identity else {
            return Ok(());
        };
        let sql = format!(
            "SELECT setval(pg_get_serial_sequence('{t}', '{column}'), COALESCE(MAX({column}), 0) + 1, false) FROM {t}",
            t = table.name
        );
        self.run(async {
            let client = self.client().await?;
            client.query_one(&sql, &[]).await?;
            Ok(())
        })
    }
}
