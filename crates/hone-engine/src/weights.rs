//! Reads a checkpoint's tensors: `model.safetensors`, or the shards listed in
//! `model.safetensors.index.json`, converted to the engine's dtype.

use crate::{EngineError, Result};
use candle_core::{DType, Device, Tensor};
use std::collections::{BTreeSet, HashMap};
use std::path::{Path, PathBuf};

/// All tensors of a checkpoint by their Hugging Face names.
#[derive(Debug)]
pub struct Weights {
    tensors: HashMap<String, Tensor>,
    source: PathBuf,
}

impl Weights {
    /// Loads every tensor in `dir` onto `device` as `dtype`.
    pub fn load(dir: &Path, dtype: DType, device: &Device) -> Result<Self> {
        let mut tensors = HashMap::new();
        for file in safetensors_files(dir)? {
            let loaded = candle_core::safetensors::load(&file, device)
                .map_err(|e| EngineError::Model(format!("{}: {e}", file.display())))?;
            for (name, tensor) in loaded {
                let tensor = if tensor.dtype() == dtype {
                    tensor
                } else {
                    tensor.to_dtype(dtype)?
                };
                tensors.insert(name, tensor);
            }
        }
        Ok(Self {
            tensors,
            source: dir.to_owned(),
        })
    }

    /// Tensors already in memory by their Hugging Face names (a model whose
    /// weights are being trained); `source` names them in errors.
    pub fn from_tensors(tensors: HashMap<String, Tensor>, source: &Path) -> Self {
        Self {
            tensors,
            source: source.to_owned(),
        }
    }

    /// Every tensor by name (for training all of them).
    pub fn into_tensors(self) -> HashMap<String, Tensor> {
        self.tensors
    }

    /// Removes and returns a tensor, checking its shape.
    pub fn take(&mut self, name: &str, shape: &[usize]) -> Result<Tensor> {
        let tensor = self
            .tensors
            .remove(name)
            .ok_or_else(|| EngineError::Model(format!("{}: tensor `{name}` is missing", self.source.display())))?;
        if tensor.dims() != shape {
            return Err(EngineError::Model(format!(
                "{}: tensor `{name}` has shape {:?}, expected {shape:?}",
                self.source.display(),
                tensor.dims()
            )));
        }
        Ok(tensor)
    }

    pub fn take_optional(&mut self, name: &str, shape: &[usize]) -> Result<Option<Tensor>> {
        if self.tensors.contains_key(name) {
            self.take(name, shape).map(Some)
        } else {
            Ok(None)
        }
    }

    /// Names not taken by the model (reported, so a mismatched checkpoint is noticed).
    pub fn remaining(&self) -> Vec<&str> {
        let mut names: Vec<&str> = self.tensors.keys().map(String::as_str).collect();
        names.sort_unstable();
        names
    }
}

/// The safetensors files of a checkpoint directory.
fn safetensors_files(dir: &Path) -> Result<Vec<PathBuf>> {
    let index = dir.join("model.safetensors.index.json");
    if index.exists() {
        let text = std::fs::read_to_string(&index).map_err(|e| EngineError::io(&index, e))?;
        let json: serde_json::Value =
            serde_json::from_str(&text).map_err(|e| EngineError::Model(format!("{}: {e}", index.display())))?;
        let map = json
            .get("weight_map")
            .and_then(|m| m.as_object())
            .ok_or_else(|| EngineError::Model(format!("{}: no `weight_map`", index.display())))?;
        let files: BTreeSet<&str> = map.values().filter_map(|v| v.as_str()).collect();
        return Ok(files.into_iter().map(|f| dir.join(f)).collect());
    }
    let single = dir.join("model.safetensors");
    if single.exists() {
        return Ok(vec![single]);
    }
    Err(EngineError::Model(format!(
        "{}: neither model.safetensors nor model.safetensors.index.json is there",
        dir.display()
    )))
}
