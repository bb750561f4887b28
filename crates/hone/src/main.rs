//! The `hone` binary: parses the command line, sets up logging, runs the
//! command and turns its result into the exit code. The only place that
//! decides how the process ends; commands return an `ExitCode` or an error.
//!
//! Imports point one way: `main` → `cli` → `commands/*` → `context`/`output`.

mod cli;
mod commands;
mod context;
mod output;

use clap::Parser;
use std::io::Write;
use std::process::ExitCode;

fn main() -> ExitCode {
    let cli = cli::Cli::parse();
    // The demo tells its own story; the gateway's and engine's info lines
    // would drown it (HONE_LOG=info brings them back).
    let level = if matches!(cli.command, cli::Command::Demo(_)) {
        "warn"
    } else {
        "info"
    };
    init_logging(cli.log_format, level);
    match cli::run(cli.command) {
        Ok(code) => code,
        Err(e) => {
            let _ = writeln!(std::io::stderr(), "error: {e:#}");
            ExitCode::FAILURE
        }
    }
}

fn init_logging(format: cli::LogFormat, level: &str) {
    let filter = tracing_subscriber::EnvFilter::try_from_env("HONE_LOG")
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(level));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    match format {
        cli::LogFormat::Text => builder.init(),
        cli::LogFormat::Json => builder.json().init(),
    }
}
