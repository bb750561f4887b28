//! What hone's commands share at the terminal: a note on stderr, a line or
//! a table on stdout, a short timestamp, a progress bar, and the runtime a
//! command that talks to a gateway runs on. Results go to stdout and
//! everything else (progress, hints) to stderr, so that stdout can be piped.
//! Formatting that only one command needs stays in that command. Used by
//! the binary, the demo and the benchmarks, which print alike.

pub mod provenance;

pub use provenance::{Machine, Provenance};

use anyhow::Result;
use hone_types::time::format_rfc3339;
use std::io::Write;

/// A line on stderr: progress, hints, refusals. A closed stderr is ignored.
pub fn note(message: std::fmt::Arguments) {
    let _ = writeln!(std::io::stderr(), "{message}");
}

/// A line on stdout.
pub fn print_line(line: &str) -> Result<()> {
    writeln!(std::io::stdout(), "{line}")?;
    Ok(())
}

/// Left-aligned columns on stdout, widths from the content.
pub fn print_table(header: &[&str], rows: &[Vec<String>]) -> Result<()> {
    let mut widths: Vec<usize> = header.iter().map(|h| h.chars().count()).collect();
    for row in rows {
        for (w, cell) in widths.iter_mut().zip(row) {
            *w = (*w).max(cell.chars().count());
        }
    }
    let line = |cells: Vec<String>| {
        cells
            .iter()
            .zip(&widths)
            .map(|(c, w)| format!("{c:<w$}"))
            .collect::<Vec<_>>()
            .join("  ")
            .trim_end()
            .to_owned()
    };
    print_line(&line(header.iter().map(|h| h.to_string()).collect()))?;
    for row in rows {
        print_line(&line(row.clone()))?;
    }
    Ok(())
}

/// `2024-05-01T12:00:00`: unix milliseconds to the second, for tables.
pub fn short_time(ms: i64) -> String {
    format_rfc3339(ms).chars().take(19).collect()
}

/// `███░░░░` of `width` cells, `done` of `total` filled.
pub fn progress_bar(done: usize, total: usize, width: usize) -> String {
    let filled = (done * width).checked_div(total).unwrap_or(width).min(width);
    "█".repeat(filled) + &"░".repeat(width - filled)
}

/// The process's runtime, built on first use: commands run their async
/// work on it, and a PostgreSQL store opened by a command drives its
/// connections on it (`hone serve` builds its own, sized by
/// `gateway.threads`).
pub fn runtime() -> std::io::Result<&'static tokio::runtime::Runtime> {
    static RUNTIME: std::sync::OnceLock<tokio::runtime::Runtime> = std::sync::OnceLock::new();
    if let Some(runtime) = RUNTIME.get() {
        return Ok(runtime);
    }
    let built = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    Ok(RUNTIME.get_or_init(|| built))
}
