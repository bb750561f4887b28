//! A GGUF file's key–value header, read by type, and the model it
//! describes: the shape and settings that become `config.json`.

use super::vocab::Vocab;
use crate::Arch;
use candle_core::quantized::gguf_file::{Content, Value};
use serde_json::json;
use std::collections::HashMap;

/// The header of one file.
pub struct Metadata<'a> {
    values: &'a HashMap<String, Value>,
}

impl<'a> Metadata<'a> {
    pub fn new(values: &'a HashMap<String, Value>) -> Self {
        Self { values }
    }

    fn get(&self, key: &str) -> Result<&'a Value, String> {
        self.values.get(key).ok_or_else(|| format!("`{key}` is missing"))
    }

    pub fn has(&self, key: &str) -> bool {
        self.values.contains_key(key)
    }

    pub fn string(&self, key: &str) -> Result<&'a str, String> {
        self.get(key)?
            .to_string()
            .map(String::as_str)
            .map_err(|_| format!("`{key}` is not a string"))
    }

    pub fn integer(&self, key: &str) -> Result<u64, String> {
        integer(self.get(key)?).ok_or_else(|| format!("`{key}` is not an integer"))
    }

    pub fn float(&self, key: &str) -> Result<f64, String> {
        match self.get(key)? {
            // The shortest decimal that is the same f32: `1e-5`, as the
            // checkpoint the file was made from said, not 9.9999997e-6.
            Value::F32(v) => v.to_string().parse().map_err(|_| format!("`{key}` is not a number")),
            Value::F64(v) => Ok(*v),
            other => integer(other)
                .map(|v| v as f64)
                .ok_or_else(|| format!("`{key}` is not a number")),
        }
    }

    pub fn boolean(&self, key: &str) -> Result<bool, String> {
        self.get(key)?
            .to_bool()
            .map_err(|_| format!("`{key}` is not a boolean"))
    }

    /// An array, each element read by `item`.
    fn array<T>(&self, key: &str, item: impl Fn(&'a Value) -> Option<T>, kind: &str) -> Result<Vec<T>, String> {
        let items = self
            .get(key)?
            .to_vec()
            .map_err(|_| format!("`{key}` is not an array"))?;
        items
            .iter()
            .map(|v| item(v).ok_or_else(|| format!("`{key}` holds a non-{kind}")))
            .collect()
    }

    pub fn strings(&self, key: &str) -> Result<Vec<&'a str>, String> {
        self.array(key, |v| v.to_string().ok().map(String::as_str), "string")
    }

    pub fn integers(&self, key: &str) -> Result<Vec<u64>, String> {
        self.array(key, integer, "integer")
    }

    /// The model the file holds, every setting that shapes its forward
    /// pass checked to be one the engine computes.
    pub fn model(&self, content: &Content) -> Result<ModelShape, String> {
        let name = self.string("general.architecture")?;
        let arch = match name {
            "llama" => Arch::Llama,
            "qwen2" => Arch::Qwen2,
            other => return Err(format!("architecture `{other}` is not converted (llama and qwen2 are)")),
        };
        let key = |k: &str| format!("{name}.{k}");
        for refused in [
            "expert_count",
            "attention.sliding_window",
            "rope.scaling.type",
            "attention.logit_softcapping",
        ] {
            if self.has(&key(refused)) && !(refused == "rope.scaling.type" && self.string(&key(refused)) == Ok("none"))
            {
                return Err(format!("`{}` is set: that model is not converted", key(refused)));
            }
        }
        if content.tensor_infos.contains_key("rope_freqs.weight") {
            return Err("`rope_freqs.weight` (Llama 3.1's RoPE scaling) is not converted".into());
        }
        let hidden = self.integer(&key("embedding_length"))? as usize;
        let heads = self.integer(&key("attention.head_count"))? as usize;
        let kv_heads = match self.has(&key("attention.head_count_kv")) {
            true => self.integer(&key("attention.head_count_kv"))? as usize,
            false => heads,
        };
        if heads == 0 || kv_heads == 0 || !heads.is_multiple_of(kv_heads) {
            return Err(format!(
                "{heads} attention heads are not a multiple of {kv_heads} key-value heads"
            ));
        }
        let head_dim = match self.has(&key("attention.key_length")) {
            true => self.integer(&key("attention.key_length"))? as usize,
            false => hidden / heads,
        };
        if self.has(&key("attention.value_length"))
            && self.integer(&key("attention.value_length"))? as usize != head_dim
        {
            return Err("the key and value head sizes differ: that model is not converted".into());
        }
        if self.has(&key("rope.dimension_count")) && self.integer(&key("rope.dimension_count"))? as usize != head_dim {
            return Err(format!(
                "RoPE turns {} of each head's {head_dim} dimensions: a partial rotary model is not converted",
                self.integer(&key("rope.dimension_count"))?
            ));
        }
        let embedding = content
            .tensor_infos
            .get("token_embd.weight")
            .ok_or("tensor `token_embd.weight` is missing")?;
        let vocab_size = embedding.shape.dims().first().copied().unwrap_or(0);
        Ok(ModelShape {
            arch,
            vocab_size,
            hidden_size: hidden,
            intermediate_size: self.integer(&key("feed_forward_length"))? as usize,
            layers: self.integer(&key("block_count"))? as usize,
            heads,
            kv_heads,
            head_dim,
            rms_norm_eps: self.float(&key("attention.layer_norm_rms_epsilon"))?,
            // llama.cpp's default base when a file gives none.
            rope_theta: match self.has(&key("rope.freq_base")) {
                true => self.float(&key("rope.freq_base"))?,
                false => 10_000.0,
            },
            context_length: self.integer(&key("context_length"))? as usize,
            tied: !content.tensor_infos.contains_key("output.weight"),
            attention_bias: content.tensor_infos.contains_key("blk.0.attn_q.bias"),
        })
    }
}

fn integer(value: &Value) -> Option<u64> {
    match value {
        Value::U8(v) => Some(u64::from(*v)),
        Value::U16(v) => Some(u64::from(*v)),
        Value::U32(v) => Some(u64::from(*v)),
        Value::U64(v) => Some(*v),
        Value::I8(v) => u64::try_from(*v).ok(),
        Value::I16(v) => u64::try_from(*v).ok(),
        Value::I32(v) => u64::try_from(*v).ok(),
        Value::I64(v) => u64::try_from(*v).ok(),
        _ => None,
    }
}

/// The shape and settings of the model a file holds.
#[derive(Debug, Clone)]
pub struct ModelShape {
    pub arch: Arch,
    pub vocab_size: usize,
    pub hidden_size: usize,
    pub intermediate_size: usize,
    pub layers: usize,
    pub heads: usize,
    pub kv_heads: usize,
    pub head_dim: usize,
    pub rms_norm_eps: f64,
    pub rope_theta: f64,
    pub context_length: usize,
    /// No `output.weight`: the output projection is the embedding.
    pub tied: bool,
    /// Biases on the attention projections (always on for Qwen2).
    pub attention_bias: bool,
}

impl ModelShape {
    /// `config.json` as transformers writes it for this architecture.
    pub fn config_json(&self, vocab: &Vocab) -> serde_json::Value {
        let mut config = json!({
            "architectures": [self.arch.hf_class()],
            "model_type": match self.arch { Arch::Llama => "llama", Arch::Qwen2 => "qwen2" },
            "vocab_size": self.vocab_size,
            "hidden_size": self.hidden_size,
            "intermediate_size": self.intermediate_size,
            "num_hidden_layers": self.layers,
            "num_attention_heads": self.heads,
            "num_key_value_heads": self.kv_heads,
            "head_dim": self.head_dim,
            "hidden_act": "silu",
            "rms_norm_eps": self.rms_norm_eps,
            "rope_theta": self.rope_theta,
            "max_position_embeddings": self.context_length,
            "tie_word_embeddings": self.tied,
            "bos_token_id": vocab.bos,
            "eos_token_id": vocab.eos,
            "torch_dtype": "float32",
        });
        if self.arch == Arch::Llama {
            config["attention_bias"] = json!(self.attention_bias);
            config["mlp_bias"] = json!(false);
        } else {
            config["use_sliding_window"] = json!(false);
        }
        config
    }
}
