//! Checkpoints that resume exactly: the adapter (PEFT files), the AdamW
//! moments, and the trainer's counters and baselines. Data order and dropout
//! masks are functions of the seed and the step, so a resumed run takes the
//! very same steps as one that never stopped. Files are written to a
//! temporary name and renamed, and a checkpoint directory is complete before
//! it gets its final name.

use crate::loss::grpo::Baseline;
use crate::{Result, TrainError};
use candle_core::{Device, Tensor};
use serde::{Deserialize, Serialize};
use std::collections::HashMap;
use std::path::{Path, PathBuf};

/// `trainer_state.json`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TrainerState {
    /// Optimiser steps taken.
    pub step: usize,
    pub total_steps: usize,
    pub baseline: Baseline,
    pub seed: u64,
    /// Off-policy samples' logprobs under the starting policy, by (group, sample).
    #[serde(default)]
    pub proximal: Vec<((usize, usize), Vec<f32>)>,
}

pub fn write_atomic(path: &Path, bytes: &[u8]) -> Result<()> {
    let tmp = path.with_extension("tmp");
    std::fs::write(&tmp, bytes).map_err(|e| TrainError::io(&tmp, e))?;
    std::fs::rename(&tmp, path).map_err(|e| TrainError::io(path, e))
}

/// Writes `tensors` to `path` through a temporary file.
pub fn save_safetensors(tensors: &HashMap<String, Tensor>, path: &Path) -> Result<()> {
    let tmp = path.with_extension("safetensors.tmp");
    candle_core::safetensors::save(tensors, &tmp)?;
    std::fs::rename(&tmp, path).map_err(|e| TrainError::io(path, e))
}

/// Saves the optimiser moments (`m.N`, `v.N`).
pub fn save_moments(dir: &Path, m: &[Tensor], v: &[Tensor]) -> Result<()> {
    let mut tensors = HashMap::new();
    for (i, (m, v)) in m.iter().zip(v).enumerate() {
        tensors.insert(format!("m.{i}"), m.clone());
        tensors.insert(format!("v.{i}"), v.clone());
    }
    save_safetensors(&tensors, &dir.join("optimizer.safetensors"))
}

pub fn load_moments(dir: &Path, count: usize, device: &Device) -> Result<(Vec<Tensor>, Vec<Tensor>)> {
    let path = dir.join("optimizer.safetensors");
    let mut tensors = candle_core::safetensors::load(&path, device)?;
    let mut take = |name: String| {
        tensors
            .remove(&name)
            .ok_or_else(|| TrainError::Checkpoint(format!("{}: `{name}` is missing", path.display())))
    };
    let mut m = Vec::with_capacity(count);
    let mut v = Vec::with_capacity(count);
    for i in 0..count {
        m.push(take(format!("m.{i}"))?);
        v.push(take(format!("v.{i}"))?);
    }
    Ok((m, v))
}

pub fn save_state(dir: &Path, state: &TrainerState) -> Result<()> {
    let text = serde_json::to_string_pretty(state).map_err(|e| TrainError::Checkpoint(e.to_string()))?;
    write_atomic(&dir.join("trainer_state.json"), text.as_bytes())
}

pub fn load_state(dir: &Path) -> Result<TrainerState> {
    let path = dir.join("trainer_state.json");
    let text = std::fs::read_to_string(&path).map_err(|e| TrainError::io(&path, e))?;
    serde_json::from_str(&text).map_err(|e| TrainError::Checkpoint(format!("{}: {e}", path.display())))
}

/// `OUT/checkpoints/step-000042`.
pub fn checkpoint_dir(out: &Path, step: usize) -> PathBuf {
    out.join("checkpoints").join(format!("step-{step:06}"))
}

/// The newest complete checkpoint under `out`, if any.
pub fn latest(out: &Path) -> Option<PathBuf> {
    let entries = std::fs::read_dir(out.join("checkpoints")).ok()?;
    entries
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| {
            p.file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.starts_with("step-"))
                && p.join("trainer_state.json").is_file()
        })
        .max()
}

/// Keeps the newest `keep` checkpoints.
pub fn prune(out: &Path, keep: usize) -> Result<()> {
    let dir = out.join("checkpoints");
    let Ok(entries) = std::fs::read_dir(&dir) else {
        return Ok(());
    };
    let mut all: Vec<PathBuf> = entries
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| {
            p.file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.starts_with("step-"))
        })
        .collect();
    all.sort();
    let excess = all.len().saturating_sub(keep);
    for old in &all[..excess] {
        std::fs::remove_dir_all(old).map_err(|e| TrainError::io(old, e))?;
    }
    Ok(())
}
