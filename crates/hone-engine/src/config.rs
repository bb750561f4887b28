//! The model's `config.json`, as Hugging Face writes it for the Llama and
//! Qwen2 architectures (transformers 4's keys and transformers 5's), read
//! into one [`ModelConfig`].
//!
//! Every key that changes transformers' forward pass for these
//! architectures is either read here or refused by name: `hidden_act`
//! other than `silu`, sliding-window attention, RoPE types the engine does
//! not compute, a partial rotary factor, and `quantization_config`. A
//! missing key takes transformers' own default for the architecture, never
//! another. `dtype` (`torch_dtype` before transformers 5) names the
//! precision the weights are stored in; the engine computes in its own
//! dtype whatever it says.

use crate::EngineError;
use serde::{Deserialize, Serialize};
use std::path::Path;

/// The architectures the engine runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Arch {
    Llama,
    Qwen2,
}

impl Arch {
    pub fn parse(name: &str) -> Option<Self> {
        match name {
            "llama" => Some(Self::Llama),
            "qwen2" => Some(Self::Qwen2),
            _ => None,
        }
    }

    /// The class name Hugging Face writes in `architectures`.
    pub fn hf_class(self) -> &'static str {
        match self {
            Self::Llama => "LlamaForCausalLM",
            Self::Qwen2 => "Qwen2ForCausalLM",
        }
    }
}

/// How RoPE frequencies are rescaled for long contexts.
#[derive(Debug, Clone, PartialEq)]
pub enum RopeScaling {
    /// Positions divided by `factor`.
    Linear { factor: f64 },
    /// Llama 3.1's frequency-dependent scaling.
    Llama3 {
        factor: f64,
        low_freq_factor: f64,
        high_freq_factor: f64,
        original_max_position_embeddings: f64,
    },
}

/// What the engine needs from `config.json`.
#[derive(Debug, Clone)]
pub struct ModelConfig {
    pub arch: Arch,
    pub vocab_size: usize,
    pub hidden_size: usize,
    pub intermediate_size: usize,
    pub num_hidden_layers: usize,
    pub num_attention_heads: usize,
    pub num_key_value_heads: usize,
    pub head_dim: usize,
    pub rms_norm_eps: f64,
    pub rope_theta: f64,
    pub rope_scaling: Option<RopeScaling>,
    pub max_position_embeddings: usize,
    pub tie_word_embeddings: bool,
    /// Bias on the q, k and v projections (always on for Qwen2).
    pub qkv_bias: bool,
    /// Bias on the o projection (Llama's `attention_bias` covers all four).
    pub o_bias: bool,
    pub mlp_bias: bool,
    pub eos_token_ids: Vec<u32>,
}

#[derive(Deserialize)]
struct RawConfig {
    model_type: Option<String>,
    #[serde(default)]
    architectures: Vec<String>,
    vocab_size: usize,
    hidden_size: usize,
    intermediate_size: usize,
    num_hidden_layers: usize,
    num_attention_heads: usize,
    num_key_value_heads: Option<usize>,
    head_dim: Option<usize>,
    rms_norm_eps: Option<f64>,
    rope_theta: Option<f64>,
    rope_scaling: Option<serde_json::Value>,
    /// transformers 5: `rope_theta` and the scaling in one object.
    rope_parameters: Option<serde_json::Value>,
    partial_rotary_factor: Option<f64>,
    max_position_embeddings: Option<usize>,
    tie_word_embeddings: Option<bool>,
    attention_bias: Option<bool>,
    mlp_bias: Option<bool>,
    eos_token_id: Option<serde_json::Value>,
    hidden_act: Option<String>,
    use_sliding_window: Option<bool>,
    /// transformers 5 (Qwen2): each layer's attention kind.
    layer_types: Option<Vec<String>>,
    quantization_config: Option<serde_json::Value>,
    dtype: Option<String>,
    torch_dtype: Option<String>,
}

impl ModelConfig {
    pub fn from_file(path: &Path) -> Result<Self, EngineError> {
        let text = std::fs::read_to_string(path).map_err(|e| EngineError::io(path, e))?;
        Self::from_json(&text).map_err(|e| EngineError::Model(format!("{}: {e}", path.display())))
    }

    pub fn from_json(text: &str) -> Result<Self, String> {
        let raw: RawConfig = serde_json::from_str(text).map_err(|e| e.to_string())?;
        let arch = raw
            .model_type
            .as_deref()
            .and_then(Arch::parse)
            .or_else(|| {
                raw.architectures.iter().find_map(|a| match a.as_str() {
                    "LlamaForCausalLM" => Some(Arch::Llama),
                    "Qwen2ForCausalLM" => Some(Arch::Qwen2),
                    _ => None,
                })
            })
            .ok_or_else(|| {
                format!(
                    "model_type {:?} / architectures {:?} is not supported (llama and qwen2 are)",
                    raw.model_type, raw.architectures
                )
            })?;
        if raw.use_sliding_window == Some(true) {
            return Err("use_sliding_window = true is not supported".into());
        }
        if let Some(kinds) = &raw.layer_types {
            if let Some(other) = kinds.iter().find(|k| k.as_str() != "full_attention") {
                return Err(format!(
                    "layer_types holds `{other}`: only full_attention layers are supported"
                ));
            }
        }
        let act = raw.hidden_act.as_deref().unwrap_or("silu");
        if act != "silu" {
            return Err(format!("hidden_act `{act}` is not supported (silu is)"));
        }
        if raw.quantization_config.is_some() {
            return Err(
                "quantization_config: quantized checkpoints are not loaded; dequantize it first \
                 (a GGUF file: `hone model import`)"
                    .into(),
            );
        }
        if let Some(factor) = raw.partial_rotary_factor.filter(|f| *f != 1.0) {
            return Err(format!("partial_rotary_factor {factor} is not supported (1.0 is)"));
        }
        for dtype in [&raw.dtype, &raw.torch_dtype].into_iter().flatten() {
            if !matches!(dtype.as_str(), "float32" | "float16" | "bfloat16") {
                return Err(format!(
                    "dtype `{dtype}` is not supported (float32, float16 and bfloat16 are)"
                ));
            }
        }
        let rope = Rope::of(&raw)?;
        let heads = raw.num_attention_heads;
        let kv_heads = raw.num_key_value_heads.unwrap_or(heads);
        if heads == 0 || kv_heads == 0 || !heads.is_multiple_of(kv_heads) {
            return Err(format!(
                "num_attention_heads ({heads}) must be a multiple of num_key_value_heads ({kv_heads})"
            ));
        }
        let head_dim = raw.head_dim.unwrap_or(raw.hidden_size / heads);
        if !head_dim.is_multiple_of(2) {
            return Err(format!("head_dim ({head_dim}) must be even for RoPE"));
        }
        let attention_bias = raw.attention_bias.unwrap_or(false);
        let eos_token_ids = raw.eos_token_id.as_ref().map(token_ids).unwrap_or_default();
        Ok(Self {
            arch,
            vocab_size: raw.vocab_size,
            hidden_size: raw.hidden_size,
            intermediate_size: raw.intermediate_size,
            num_hidden_layers: raw.num_hidden_layers,
            num_attention_heads: heads,
            num_key_value_heads: kv_heads,
            head_dim,
            // transformers' defaults for both architectures.
            rms_norm_eps: raw.rms_norm_eps.unwrap_or(1e-6),
            rope_theta: rope.theta,
            rope_scaling: rope.scaling,
            max_position_embeddings: raw.max_position_embeddings.unwrap_or(match arch {
                Arch::Llama => 2048,
                Arch::Qwen2 => 32768,
            }),
            tie_word_embeddings: raw.tie_word_embeddings.unwrap_or(false),
            qkv_bias: arch == Arch::Qwen2 || attention_bias,
            o_bias: arch == Arch::Llama && attention_bias,
            mlp_bias: arch == Arch::Llama && raw.mlp_bias.unwrap_or(false),
            eos_token_ids,
        })
    }
}

/// A token id field that holds one id or a list (`eos_token_id`).
pub fn token_ids(value: &serde_json::Value) -> Vec<u32> {
    match value {
        serde_json::Value::Number(n) => n.as_u64().map(|n| vec![n as u32]).unwrap_or_default(),
        serde_json::Value::Array(items) => items.iter().filter_map(|v| v.as_u64()).map(|n| n as u32).collect(),
        _ => Vec::new(),
    }
}

/// The RoPE base and scaling, from `rope_parameters` (transformers 5) or
/// `rope_theta` and `rope_scaling` (before it).
struct Rope {
    theta: f64,
    scaling: Option<RopeScaling>,
}

impl Rope {
    /// transformers' default base when none is given.
    const DEFAULT_THETA: f64 = 10_000.0;

    fn of(raw: &RawConfig) -> Result<Self, String> {
        let parameters = raw.rope_parameters.as_ref().filter(|v| !v.is_null());
        let Some(parameters) = parameters else {
            return Ok(Self {
                theta: raw.rope_theta.unwrap_or(Self::DEFAULT_THETA),
                scaling: raw.rope_scaling.as_ref().map(parse_rope_scaling).transpose()?.flatten(),
            });
        };
        if !parameters.is_object() || parameters.get("rope_theta").is_some_and(|t| !t.is_number()) {
            return Err(format!(
                "rope_parameters {parameters} is not supported: one object with a numeric rope_theta is"
            ));
        }
        if parameters
            .as_object()
            .is_some_and(|o| o.values().any(serde_json::Value::is_object))
        {
            return Err("rope_parameters per layer type is not supported".into());
        }
        let theta = parameters.get("rope_theta").and_then(serde_json::Value::as_f64);
        if let (Some(a), Some(b)) = (theta, raw.rope_theta) {
            if a != b {
                return Err(format!("rope_theta {b} and rope_parameters.rope_theta {a} disagree"));
            }
        }
        if raw.rope_scaling.as_ref().is_some_and(|s| !s.is_null()) {
            return Err("rope_scaling and rope_parameters are both given; keep one".into());
        }
        Ok(Self {
            theta: theta.or(raw.rope_theta).unwrap_or(Self::DEFAULT_THETA),
            scaling: parse_rope_scaling(parameters)?,
        })
    }
}

fn parse_rope_scaling(value: &serde_json::Value) -> Result<Option<RopeScaling>, String> {
    if value.is_null() {
        return Ok(None);
    }
    let kind = value
        .get("rope_type")
        .or_else(|| value.get("type"))
        .and_then(|v| v.as_str())
        .unwrap_or("default");
    let number = |key: &str| {
        value
            .get(key)
            .and_then(serde_json::Value::as_f64)
            .ok_or_else(|| format!("rope {kind} scaling: `{key}` is missing"))
    };
    match kind {
        "default" => Ok(None),
        "linear" => Ok(Some(RopeScaling::Linear {
            factor: number("factor")?,
        })),
        "llama3" => Ok(Some(RopeScaling::Llama3 {
            factor: number("factor")?,
            low_freq_factor: number("low_freq_factor")?,
            high_freq_factor: number("high_freq_factor")?,
            original_max_position_embeddings: number("original_max_position_embeddings")?,
        })),
        other => Err(format!(
            "rope_type `{other}` is not supported (default, linear and llama3 are)"
        )),
    }
}
