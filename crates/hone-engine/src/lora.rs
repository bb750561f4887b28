//! LoRA adapters in the PEFT format: `adapter_config.json` (`r`,
//! `lora_alpha`, `target_modules`, `use_rslora`) and
//! `adapter_model.safetensors` with PEFT's tensor names
//! (`base_model.model.model.layers.N.self_attn.q_proj.lora_A.weight`).
//!
//! The LoRA term is our own: `y = x·Wᵀ + b + s·(x·Aᵀ)·Bᵀ` with
//! `s = alpha / r` (or `alpha / √r` with rsLoRA), applied unmerged so several
//! adapters can share one copy of the base weights.

use crate::{EngineError, Result};
use candle_core::{DType, Device, Tensor};
use serde::{Deserialize, Serialize};
use std::collections::HashMap;
use std::path::Path;

/// The projections a LoRA adapter can target.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Module {
    QProj,
    KProj,
    VProj,
    OProj,
    GateProj,
    UpProj,
    DownProj,
}

impl Module {
    pub const ALL: [Module; 7] = [
        Module::QProj,
        Module::KProj,
        Module::VProj,
        Module::OProj,
        Module::GateProj,
        Module::UpProj,
        Module::DownProj,
    ];

    /// The module's name in Hugging Face checkpoints and PEFT configs.
    pub fn name(self) -> &'static str {
        match self {
            Module::QProj => "q_proj",
            Module::KProj => "k_proj",
            Module::VProj => "v_proj",
            Module::OProj => "o_proj",
            Module::GateProj => "gate_proj",
            Module::UpProj => "up_proj",
            Module::DownProj => "down_proj",
        }
    }

    /// The block it sits in (`self_attn` or `mlp`).
    pub fn block(self) -> &'static str {
        match self {
            Module::QProj | Module::KProj | Module::VProj | Module::OProj => "self_attn",
            Module::GateProj | Module::UpProj | Module::DownProj => "mlp",
        }
    }

    pub fn parse(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|m| m.name() == name)
    }
}

/// `adapter_config.json`, the fields the engine uses.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct LoraConfig {
    pub r: usize,
    pub lora_alpha: f64,
    pub target_modules: Vec<String>,
    #[serde(default)]
    pub use_rslora: bool,
    #[serde(default)]
    pub lora_dropout: f64,
    #[serde(default)]
    pub base_model_name_or_path: Option<String>,
}

impl LoraConfig {
    /// The factor on the LoRA term.
    pub fn scale(&self) -> f64 {
        if self.use_rslora {
            self.lora_alpha / (self.r as f64).sqrt()
        } else {
            self.lora_alpha / self.r as f64
        }
    }
}

/// One adapted projection: `A` is `[r, in]`, `B` is `[out, r]`.
#[derive(Debug, Clone)]
pub struct LoraWeights {
    pub a: Tensor,
    pub b: Tensor,
    pub scale: f64,
}

/// A loaded adapter: its config and the weights of every adapted projection.
#[derive(Debug, Clone)]
pub struct Adapter {
    pub config: LoraConfig,
    pub layers: HashMap<(usize, Module), LoraWeights>,
}

impl Adapter {
    pub fn get(&self, layer: usize, module: Module) -> Option<&LoraWeights> {
        self.layers.get(&(layer, module))
    }

    /// Loads a PEFT adapter directory onto `device` as `dtype`.
    pub fn load(dir: &Path, dtype: DType, device: &Device) -> Result<Self> {
        let config_path = dir.join("adapter_config.json");
        let text = std::fs::read_to_string(&config_path).map_err(|e| EngineError::io(&config_path, e))?;
        let config: LoraConfig =
            serde_json::from_str(&text).map_err(|e| EngineError::Adapter(format!("{}: {e}", config_path.display())))?;
        if config.r == 0 {
            return Err(EngineError::Adapter(format!(
                "{}: r must be > 0",
                config_path.display()
            )));
        }
        let weights_path = dir.join("adapter_model.safetensors");
        let tensors = candle_core::safetensors::load(&weights_path, device)
            .map_err(|e| EngineError::Adapter(format!("{}: {e}", weights_path.display())))?;
        let scale = config.scale();
        let mut parts: HashMap<(usize, Module), (Option<Tensor>, Option<Tensor>)> = HashMap::new();
        for (name, tensor) in tensors {
            let (layer, module, which) = parse_peft_name(&name).ok_or_else(|| {
                EngineError::Adapter(format!("{}: unexpected tensor `{name}`", weights_path.display()))
            })?;
            let entry = parts.entry((layer, module)).or_default();
            let tensor = tensor.to_dtype(dtype)?;
            if which == 'A' {
                entry.0 = Some(tensor);
            } else {
                entry.1 = Some(tensor);
            }
        }
        let mut layers = HashMap::new();
        for ((layer, module), pair) in parts {
            let (Some(a), Some(b)) = pair else {
                return Err(EngineError::Adapter(format!(
                    "layer {layer} {}: lora_A and lora_B must both be present",
                    module.name()
                )));
            };
            if a.dim(0)? != config.r || b.dim(1)? != config.r {
                return Err(EngineError::Adapter(format!(
                    "layer {layer} {}: shapes {:?} / {:?} do not match r = {}",
                    module.name(),
                    a.dims(),
                    b.dims(),
                    config.r
                )));
            }
            layers.insert((layer, module), LoraWeights { a, b, scale });
        }
        Ok(Self { config, layers })
    }
}

/// The PEFT name of one LoRA tensor.
pub fn peft_name(layer: usize, module: Module, which: char) -> String {
    format!(
        "{}{}.lora_{which}.weight",
        crate::names::PEFT_PREFIX,
        crate::names::projection(layer, module)
    )
}

/// `base_model.model.model.layers.3.mlp.up_proj.lora_B.weight` → (3, UpProj, 'B').
fn parse_peft_name(name: &str) -> Option<(usize, Module, char)> {
    let rest = name
        .strip_prefix(crate::names::PEFT_PREFIX)?
        .strip_prefix(crate::names::LAYER_PREFIX)?;
    let (layer, rest) = rest.split_once('.')?;
    let layer = layer.parse().ok()?;
    let mut parts = rest.split('.');
    let _block = parts.next()?;
    let module = Module::parse(parts.next()?)?;
    let which = match parts.next()? {
        "lora_A" => 'A',
        "lora_B" => 'B',
        _ => return None,
    };
    (parts.next()? == "weight" && parts.next().is_none()).then_some((layer, module, which))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn peft_names_round_trip() {
        for module in Module::ALL {
            for which in ['A', 'B'] {
                let name = peft_name(7, module, which);
                assert_eq!(parse_peft_name(&name), Some((7, module, which)), "{name}");
            }
        }
        assert_eq!(parse_peft_name("base_model.model.lm_head.weight"), None);
    }
}
