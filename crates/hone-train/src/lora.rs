//! The trainable LoRA parameters: one `(A, B)` pair per adapted projection,
//! initialised as PEFT does (A Kaiming-uniform, B zero, so training starts
//! from the base model), saved and loaded in PEFT's format so the engine's
//! hot-swap and Python `peft` read what the trainer writes.

use crate::{Result, TrainError};
use candle_core::{DType, Device, Tensor};
use hone_engine::lora::{peft_name, LoraConfig, LoraWeights, Module};
use hone_engine::{Adapter, Model};
use rand::{Rng, SeedableRng};
use serde::{Deserialize, Serialize};
use std::collections::HashMap;
use std::path::Path;

/// Shape of the adapter to train.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LoraSpec {
    pub rank: usize,
    pub alpha: f64,
    pub dropout: f64,
    pub targets: Vec<Module>,
    /// rsLoRA scaling (`alpha / √r`).
    pub rslora: bool,
}

impl Default for LoraSpec {
    fn default() -> Self {
        Self {
            rank: 16,
            alpha: 32.0,
            dropout: 0.05,
            targets: Module::ALL.to_vec(),
            rslora: false,
        }
    }
}

impl LoraSpec {
    pub fn scale(&self) -> f64 {
        self.peft_config(None).scale()
    }

    fn peft_config(&self, base: Option<&str>) -> LoraConfig {
        LoraConfig {
            r: self.rank,
            lora_alpha: self.alpha,
            target_modules: self.targets.iter().map(|m| m.name().to_owned()).collect(),
            use_rslora: self.rslora,
            lora_dropout: self.dropout,
            base_model_name_or_path: base.map(str::to_owned),
        }
    }
}

/// One adapted projection: `A` `[r, in]`, `B` `[out, r]`.
#[derive(Debug, Clone)]
pub struct LoraPair {
    pub layer: usize,
    pub module: Module,
    pub a: Tensor,
    pub b: Tensor,
}

/// Every trainable tensor of an adapter, in a fixed order (layer, module).
#[derive(Debug, Clone)]
pub struct LoraParams {
    pub spec: LoraSpec,
    pub scale: f64,
    pub pairs: Vec<LoraPair>,
    index: HashMap<(usize, Module), usize>,
}

impl LoraParams {
    /// A fresh adapter for `model`: `A ~ U(-1/√in, 1/√in)` (PEFT's
    /// Kaiming-uniform with a = √5), `B = 0`.
    pub fn init(model: &Model, spec: &LoraSpec, seed: u64) -> Result<Self> {
        if spec.rank == 0 {
            return Err(TrainError::Config("the LoRA rank must be > 0".into()));
        }
        if spec.targets.is_empty() {
            return Err(TrainError::Config("at least one target module is needed".into()));
        }
        if !(0.0..1.0).contains(&spec.dropout) {
            return Err(TrainError::Config(format!("dropout {} is not in [0, 1)", spec.dropout)));
        }
        let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
        let device = model.device();
        let mut pairs = Vec::new();
        for layer in 0..model.layers().len() {
            for &module in &spec.targets {
                let (out, inp) = model.layers()[layer].linear(module).weight.dims2()?;
                let bound = 1.0 / (inp as f32).sqrt();
                let a: Vec<f32> = (0..spec.rank * inp).map(|_| rng.random_range(-bound..bound)).collect();
                pairs.push(LoraPair {
                    layer,
                    module,
                    a: Tensor::from_vec(a, (spec.rank, inp), device)?,
                    b: Tensor::zeros((out, spec.rank), DType::F32, device)?,
                });
            }
        }
        Ok(Self::new(spec.clone(), pairs))
    }

    fn new(spec: LoraSpec, mut pairs: Vec<LoraPair>) -> Self {
        pairs.sort_by_key(|p| (p.layer, p.module));
        let index = pairs
            .iter()
            .enumerate()
            .map(|(i, p)| ((p.layer, p.module), i))
            .collect();
        Self {
            scale: spec.scale(),
            spec,
            pairs,
            index,
        }
    }

    /// Loads a PEFT adapter to continue training it.
    pub fn load(model: &Model, dir: &Path) -> Result<Self> {
        let adapter = Adapter::load(dir, DType::F32, model.device())?;
        model.check_adapter(&adapter)?;
        let c = &adapter.config;
        let mut targets: Vec<Module> = adapter.layers.keys().map(|(_, m)| *m).collect();
        targets.sort();
        targets.dedup();
        let spec = LoraSpec {
            rank: c.r,
            alpha: c.lora_alpha,
            dropout: c.lora_dropout,
            targets,
            rslora: c.use_rslora,
        };
        let pairs = adapter
            .layers
            .into_iter()
            .map(|((layer, module), w)| LoraPair {
                layer,
                module,
                a: w.a,
                b: w.b,
            })
            .collect();
        Ok(Self::new(spec, pairs))
    }

    pub fn get(&self, layer: usize, module: Module) -> Option<&LoraPair> {
        self.index.get(&(layer, module)).map(|i| &self.pairs[*i])
    }

    pub fn position(&self, layer: usize, module: Module) -> Option<usize> {
        self.index.get(&(layer, module)).copied()
    }

    /// Every tensor in order: `A₀, B₀, A₁, B₁, …`.
    pub fn tensors(&self) -> Vec<&Tensor> {
        self.pairs.iter().flat_map(|p| [&p.a, &p.b]).collect()
    }

    /// Replaces the tensors (same order as [`LoraParams::tensors`]).
    pub fn set_tensors(&mut self, tensors: Vec<Tensor>) -> Result<()> {
        if tensors.len() != 2 * self.pairs.len() {
            return Err(TrainError::Config("wrong number of LoRA tensors".into()));
        }
        let mut it = tensors.into_iter();
        for pair in &mut self.pairs {
            if let (Some(a), Some(b)) = (it.next(), it.next()) {
                pair.a = a;
                pair.b = b;
            }
        }
        Ok(())
    }

    /// Trainable parameter count.
    pub fn parameter_count(&self) -> usize {
        self.tensors().iter().map(|t| t.elem_count()).sum()
    }

    /// The adapter as the engine runs it.
    pub fn to_adapter(&self) -> Adapter {
        let layers = self
            .pairs
            .iter()
            .map(|p| {
                (
                    (p.layer, p.module),
                    LoraWeights {
                        a: p.a.clone(),
                        b: p.b.clone(),
                        scale: self.scale,
                    },
                )
            })
            .collect();
        Adapter {
            config: self.spec.peft_config(None),
            layers,
        }
    }

    /// The tensors under their PEFT names.
    pub fn named(&self) -> HashMap<String, Tensor> {
        self.pairs
            .iter()
            .flat_map(|p| {
                [
                    (peft_name(p.layer, p.module, 'A'), p.a.clone()),
                    (peft_name(p.layer, p.module, 'B'), p.b.clone()),
                ]
            })
            .collect()
    }

    /// Writes `adapter_config.json` and `adapter_model.safetensors` into
    /// `dir` (created), atomically per file.
    pub fn save_peft(&self, dir: &Path, base: &Path) -> Result<()> {
        std::fs::create_dir_all(dir).map_err(|e| TrainError::io(dir, e))?;
        let base = base.display().to_string();
        let mut config =
            serde_json::to_value(self.spec.peft_config(Some(&base))).map_err(|e| TrainError::Config(e.to_string()))?;
        if let Some(map) = config.as_object_mut() {
            // What `PeftModel.from_pretrained` needs beyond the engine's fields.
            map.insert("peft_type".into(), "LORA".into());
            map.insert("task_type".into(), "CAUSAL_LM".into());
            map.insert("bias".into(), "none".into());
            map.insert("fan_in_fan_out".into(), false.into());
            map.insert("inference_mode".into(), true.into());
            map.insert("init_lora_weights".into(), true.into());
        }
        let text = serde_json::to_string_pretty(&config).map_err(|e| TrainError::Config(e.to_string()))?;
        crate::checkpoint::write_atomic(&dir.join("adapter_config.json"), text.as_bytes())?;
        crate::checkpoint::save_safetensors(&self.named(), &dir.join("adapter_model.safetensors"))
    }

    /// The same parameters on another device (checkpoint loading).
    pub fn to_device(&self, device: &Device) -> Result<Self> {
        let mut copy = self.clone();
        for p in &mut copy.pairs {
            p.a = p.a.to_device(device)?;
            p.b = p.b.to_device(device)?;
        }
        Ok(copy)
    }
}
