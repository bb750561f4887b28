//! `hone model init`: writes a randomly initialised checkpoint of a named
//! preset in the Hugging Face layout.

use anyhow::{Context, Result};
use hone_engine::init::{write_checkpoint, Preset};
use hone_engine::Arch;
use std::io::Write;
use std::path::Path;
use std::process::ExitCode;

pub fn init(arch: Arch, preset: &str, out: &Path, seed: u64) -> Result<ExitCode> {
    let preset = Preset::parse(preset).with_context(|| format!("unknown preset `{preset}` ({})", Preset::NAMES))?;
    write_checkpoint(arch, preset, seed, out)
        .with_context(|| format!("cannot write the checkpoint to {}", out.display()))?;
    writeln!(
        std::io::stdout(),
        "wrote a random {arch:?} checkpoint to {}",
        out.display()
    )?;
    Ok(ExitCode::SUCCESS)
}
