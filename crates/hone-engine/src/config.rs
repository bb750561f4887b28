//! The model's `config.json`, as Hugging Face writes it for the Llama and
//! Qwen2 architectures, read into one [`ModelConfig`].

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
    rms_norm_eps: f64,
    rope_theta: Option<f64>,
    rope_scaling: Option<serde_json::Value>,
    max_position_embeddings: Option<usize>,
    tie_word_embeddings: Option<bool>,
    attention_bias: Option<bool>,
    mlp_bias: Option<bool>,
    eos_token_id: Option<serde_json::Value>,
    use_sliding_window: Option<bool>,
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
            rms_norm_eps: raw.rms_norm_eps,
            rope_theta: raw.rope_theta.unwrap_or(10_000.0),
            rope_scaling: raw.rope_scaling.as_ref().map(parse_rope_scaling).transpose()?.flatten(),
            max_position_embeddings: raw.max_position_embeddings.unwrap_or(4096),
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
            .ok_or_else(|| format!("rope_scaling.{key} is missing"))
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
            "rope_scaling type `{other}` is not supported (linear and llama3 are)"
        )),
    }
}
