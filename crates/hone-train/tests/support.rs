//! Shared helpers: tiny checkpoints written by `hone model init`'s code.

use hone_engine::init::{write_checkpoint, Preset};
use hone_engine::Arch;
use std::path::PathBuf;

/// A tiny random checkpoint of `arch` (seed 0, as the reference script uses).
pub fn tiny(arch: Arch) -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("model");
    write_checkpoint(arch, Preset::Tiny, 0, &path).unwrap();
    (dir, path)
}

pub fn repo_root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..")
}
