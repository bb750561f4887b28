//! The `hone` binary: parses the command line, sets up logging, runs the
//! command and turns its result into the exit code. The only place that
//! decides how the process ends; commands return an `ExitCode` or an error.
//!
//! Imports point one way: `main` → `cli` → `commands/*` → `context`; the
//! demo and the benchmarks are crates of their own (`hone-demo`,
//! `hone-bench`), and what commands print goes through `hone-console`.

mod cli;
mod commands;
mod context;
mod telemetry;

use clap::Parser;
use std::io::Write;
use std::process::ExitCode;

/// candle allocates a tensor per op; mimalloc makes the engine and trainer
/// ~10% faster than glibc's malloc (docs/ARCHITECTURE.md, "Performance").
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> ExitCode {
    let cli = cli::Cli::parse();
    // Before any thread starts (see the function); parsing starts none.
    hone_engine::threads::fix_thread_count_to(cli.command.threads_per_op());
    // A server's log is its output; every other command says what it does
    // itself, and the info lines of a gateway it starts in-process (or of
    // the engine) would drown that (HONE_LOG=info brings them back).
    let level = if matches!(cli.command, cli::Command::Serve { .. }) {
        "info"
    } else {
        "warn"
    };
    let _telemetry = init_logging(cli.log_format, level);
    // Entered for the whole process, so what a command opens outside its
    // async work (a PostgreSQL store's connections) is driven there.
    let _entered = match hone_console::runtime() {
        Ok(runtime) => runtime.enter(),
        Err(e) => {
            let _ = writeln!(std::io::stderr(), "error: cannot start the async runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    match cli::run(cli.command) {
        Ok(code) => code,
        Err(e) => {
            let _ = writeln!(std::io::stderr(), "error: {e:#}");
            ExitCode::FAILURE
        }
    }
}

/// Logs to stderr (text or JSON) and, when the OpenTelemetry variables ask
/// for it, spans over OTLP; the returned guard flushes them at exit.
fn init_logging(format: cli::LogFormat, level: &str) -> Option<telemetry::Telemetry> {
    use tracing_subscriber::layer::{Layer, SubscriberExt};
    use tracing_subscriber::util::SubscriberInitExt;
    let filter = tracing_subscriber::EnvFilter::try_from_env("HONE_LOG")
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(level));
    // Colour only for a terminal: a log file keeps no escape codes.
    let fmt = tracing_subscriber::fmt::layer()
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()));
    let fmt = match format {
        cli::LogFormat::Text => fmt.boxed(),
        cli::LogFormat::Json => fmt.json().boxed(),
    };
    let (otlp, guard, problem) = match telemetry::otlp_layer() {
        Ok(Some((layer, guard))) => (Some(layer), Some(guard), None),
        Ok(None) => (None, None, None),
        Err(e) => (None, None, Some(e)),
    };
    tracing_subscriber::registry().with(filter).with(fmt).with(otlp).init();
    if let Some(problem) = problem {
        tracing::warn!("{problem}; spans are not exported");
    }
    guard
}
