//! A benchmark's output, printed and kept: what a benchmark writes goes to
//! stdout as it always did, and with `--out FILE` also into a result file —
//! the command, commit, date and machine ([`hone_console::Provenance`]),
//! the build's features, then every table it printed as data (its title,
//! column names, and rows whose numeric cells are numbers), and the lines
//! around them as notes.

use anyhow::{Context, Result};
use serde::Serialize;
use serde_json::Value;
use std::io::Write;
use std::path::PathBuf;

/// stdout, remembered for the result file.
pub struct Report {
    out: Option<PathBuf>,
    printed: Vec<u8>,
}

/// One printed table.
#[derive(Debug, Serialize, PartialEq)]
pub struct Table {
    /// The line printed just before the table.
    pub title: String,
    pub columns: Vec<String>,
    pub rows: Vec<Vec<Value>>,
}

#[derive(Debug, Serialize)]
struct ResultFile {
    #[serde(flatten)]
    produced_by: hone_console::Provenance,
    /// The cargo features of the build that change what runs (`cuda`).
    features: Vec<&'static str>,
    tables: Vec<Table>,
    notes: Vec<String>,
}

impl Report {
    /// Prints to stdout; writes the result file to `out` at [`Report::finish`].
    pub fn new(out: Option<PathBuf>) -> Self {
        Self {
            out,
            printed: Vec::new(),
        }
    }

    /// Writes the result file, if one was asked for, and says where.
    pub fn finish(self) -> Result<()> {
        let Some(path) = self.out else {
            return Ok(());
        };
        let text = String::from_utf8_lossy(&self.printed);
        let (tables, notes) = parse(&text);
        let command: Vec<String> = std::env::args().collect();
        let file = ResultFile {
            produced_by: hone_console::Provenance::now(&command),
            features: build_features(),
            tables,
            notes,
        };
        std::fs::write(&path, serde_json::to_string_pretty(&file)? + "\n")
            .with_context(|| format!("cannot write {}", path.display()))?;
        writeln!(std::io::stdout(), "\nwritten to {}", path.display())?;
        Ok(())
    }
}

impl Write for Report {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        std::io::stdout().write_all(buf)?;
        self.printed.extend_from_slice(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        std::io::stdout().flush()
    }
}

/// The cargo features this build was made with that change what a
/// benchmark runs on.
fn build_features() -> Vec<&'static str> {
    let mut features = Vec::new();
    if cfg!(feature = "cuda") {
        features.push("cuda");
    }
    features
}

/// A cell as data: a number when it reads as one (thousands separators
/// allowed), else its text.
fn cell(text: &str) -> Value {
    let plain = text.trim().replace(',', "");
    match plain.parse::<f64>() {
        Ok(n) if n.is_finite() => serde_json::json!(n),
        _ => Value::String(text.trim().to_owned()),
    }
}

fn cells(line: &str) -> Vec<&str> {
    let inner = line.trim().trim_start_matches('|').trim_end_matches('|');
    inner.split('|').map(str::trim).collect()
}

/// The markdown tables in `text` and the other non-empty lines.
fn parse(text: &str) -> (Vec<Table>, Vec<String>) {
    let lines: Vec<&str> = text.lines().collect();
    let (mut tables, mut notes) = (Vec::new(), Vec::new());
    let mut last_line = String::new();
    let mut i = 0;
    while i < lines.len() {
        let line = lines[i].trim();
        let separated = lines.get(i + 1).is_some_and(|next| next.trim().starts_with("|---"));
        if line.starts_with('|') && separated {
            let columns = cells(line).into_iter().map(str::to_owned).collect();
            let mut rows = Vec::new();
            i += 2;
            while let Some(row) = lines.get(i).filter(|l| l.trim().starts_with('|')) {
                rows.push(cells(row).into_iter().map(cell).collect());
                i += 1;
            }
            tables.push(Table {
                title: std::mem::take(&mut last_line),
                columns,
                rows,
            });
            continue;
        }
        if !line.is_empty() {
            if !last_line.is_empty() {
                notes.push(std::mem::take(&mut last_line));
            }
            last_line = line.to_owned();
        }
        i += 1;
    }
    if !last_line.is_empty() {
        notes.push(last_line);
    }
    (tables, notes)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn printed_tables_become_data_with_their_titles_and_the_rest_notes() {
        let printed = "matmul peak: 144.0 GFLOP/s\n\nprefill and decode (tok/s)\n| model | metric | hone | ratio |\n|---|---|---|---|\n| tiny | decode b1 | 17,120.5 | 28.34× |\n| 0.5b | prefill b8 | 87 | n/a |\ntarget: < 200 ms\n";
        let (tables, notes) = parse(printed);
        assert_eq!(
            tables,
            vec![Table {
                title: "prefill and decode (tok/s)".into(),
                columns: vec!["model".into(), "metric".into(), "hone".into(), "ratio".into()],
                rows: vec![
                    vec![json!("tiny"), json!("decode b1"), json!(17120.5), json!("28.34×")],
                    vec![json!("0.5b"), json!("prefill b8"), json!(87.0), json!("n/a")],
                ],
            }]
        );
        assert_eq!(notes, vec!["matmul peak: 144.0 GFLOP/s", "target: < 200 ms"]);
    }
}
