//! Running a benchmark's Python side: the script (embedded in the binary)
//! is written to a temporary file, run with the given interpreter and
//! arguments, and its last stdout line parsed as JSON.

use anyhow::{Context, Result};
use std::ffi::OsString;

pub fn run_json<T: serde::de::DeserializeOwned>(python: &str, script: &str, args: &[OsString]) -> Result<T> {
    let file = tempfile::Builder::new().suffix(".py").tempfile()?;
    std::fs::write(file.path(), script)?;
    let output = std::process::Command::new(python)
        .arg(file.path())
        .args(args)
        .output()
        .with_context(|| format!("cannot run `{python}`"))?;
    if !output.status.success() {
        anyhow::bail!(
            "the script failed: {}",
            String::from_utf8_lossy(&output.stderr)
                .lines()
                .last()
                .unwrap_or_default()
        );
    }
    let stdout = String::from_utf8_lossy(&output.stdout);
    let line = stdout.lines().last().unwrap_or_default();
    serde_json::from_str(line).with_context(|| format!("unexpected output: {line}"))
}
