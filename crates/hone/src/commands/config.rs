//! `hone config check FILE` (validate, exit 2 naming the bad field; warn
//! about settings that load but do not do what they seem to) and
//! `hone config default` (print the built-in config).

use anyhow::Result;
use std::io::Write;
use std::path::Path;
use std::process::ExitCode;

/// Exit code of `hone config check` on a config that does not load.
const INVALID_CONFIG: u8 = 2;

pub fn check(file: &Path) -> ExitCode {
    match hone_config::load_file(file) {
        Ok(config) => {
            let versions: usize = config.user_agents().map(|a| a.versions.len()).sum();
            let count = |n: usize, what: &str| format!("{n} {what}{}", if n == 1 { "" } else { "s" });
            let _ = writeln!(
                std::io::stdout(),
                "{}: ok ({}, {}, {})",
                file.display(),
                count(config.providers.len(), "provider"),
                count(config.user_agents().count(), "agent"),
                count(versions, "version")
            );
            for warning in config.warnings() {
                let _ = writeln!(std::io::stderr(), "warning: {warning}");
            }
            ExitCode::SUCCESS
        }
        Err(e) => {
            let _ = writeln!(std::io::stderr(), "error: {e}");
            ExitCode::from(INVALID_CONFIG)
        }
    }
}

pub fn print_default() -> Result<ExitCode> {
    std::io::stdout().write_all(hone_config::DEFAULT_CONFIG.as_bytes())?;
    Ok(ExitCode::SUCCESS)
}
