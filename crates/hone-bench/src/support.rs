//! What `hone bench engine` and `hone bench train` share: a random
//! checkpoint of a named preset, a figure's spread over runs, the Python side (the script, embedded in the
//! binary, written to a temporary file, run with the given interpreter, its
//! last stdout line parsed as JSON).

use anyhow::{Context, Result};
use hone_engine::init::{write_checkpoint, Preset};
use hone_engine::Arch;
use std::ffi::OsString;

/// A random Qwen2 checkpoint of preset `name` in a temporary directory.
pub fn random_checkpoint(name: &str) -> Result<tempfile::TempDir> {
    let preset = Preset::parse(name).with_context(|| format!("unknown preset `{name}` ({})", Preset::NAMES))?;
    let dir = tempfile::tempdir()?;
    hone_console::note(format_args!("[{name}] writing a random Qwen2 checkpoint …"));
    write_checkpoint(Arch::Qwen2, preset, 0, dir.path())?;
    Ok(dir)
}

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

/// Creates `dir` if needed and lets other users pass through it (mode 0711:
/// search, not list) — what a PostgreSQL server running as `postgres`
/// needs to reach its data under it.
pub fn let_others_through(dir: &std::path::Path) -> Result<()> {
    use std::os::unix::fs::PermissionsExt;
    std::fs::create_dir_all(dir)?;
    let mut permissions = std::fs::metadata(dir)?.permissions();
    permissions.set_mode(permissions.mode() | 0o011);
    std::fs::set_permissions(dir, permissions)?;
    Ok(())
}

/// One figure over the runs: median, least and most.
#[derive(Debug, Clone, Copy)]
pub struct Spread {
    pub median: f64,
    pub min: f64,
    pub max: f64,
}

impl Spread {
    pub fn of(values: impl Iterator<Item = f64>) -> Self {
        let values: Vec<f64> = values.collect();
        Self {
            median: hone_learn::stats::median(&values).unwrap_or(f64::NAN),
            min: values.iter().copied().fold(f64::INFINITY, f64::min),
            max: values.iter().copied().fold(f64::NEG_INFINITY, f64::max),
        }
    }

    /// The range over the runs, "85.1–88.2" ("–" for one run).
    pub fn range(self) -> String {
        if self.min == self.max {
            "–".to_owned()
        } else {
            format!("{:.1}–{:.1}", self.min, self.max)
        }
    }

    /// The median as a ratio, "1.02×".
    pub fn times(self) -> String {
        format!("{:.2}×", self.median)
    }

    /// The range of a ratio over the runs, "0.95–1.10×" ("–" for one run).
    pub fn times_range(self) -> String {
        if self.min == self.max {
            "–".to_owned()
        } else {
            format!("{:.2}–{:.2}×", self.min, self.max)
        }
    }
}
