//! A GGUF file's tensors under their Hugging Face names, dequantised to
//! f32 by candle's GGML kernels (the same block formats llama.cpp writes).
//!
//! llama.cpp's converter permutes the rows of a Llama model's query and key
//! projections so that its RoPE rotates adjacent pairs; Hugging Face's Llama
//! rotates the two halves of each head. [`unpermute`] puts the rows back.
//! Qwen2 files are written unpermuted.

use super::metadata::ModelShape;
use crate::{Arch, EngineError, Result};
use candle_core::quantized::gguf_file::Content;
use candle_core::{Device, Tensor};
use std::collections::{BTreeMap, HashMap};

/// The dequantised tensors, and what they were stored as.
pub struct Dequantized {
    pub tensors: HashMap<String, Tensor>,
    pub stored_as: BTreeMap<String, usize>,
}

/// The Hugging Face name of a GGUF tensor, or `None` for a name the
/// engine's architectures do not have.
pub fn hf_name(gguf: &str) -> Option<String> {
    let global = match gguf {
        "token_embd.weight" => Some("model.embed_tokens.weight"),
        "output_norm.weight" => Some("model.norm.weight"),
        "output.weight" => Some("lm_head.weight"),
        _ => None,
    };
    if let Some(name) = global {
        return Some(name.to_owned());
    }
    let rest = gguf.strip_prefix("blk.")?;
    let (layer, rest) = rest.split_once('.')?;
    let layer: usize = layer.parse().ok()?;
    let (part, kind) = rest.rsplit_once('.')?;
    let module = match part {
        "attn_norm" => "input_layernorm",
        "ffn_norm" => "post_attention_layernorm",
        "attn_q" => "self_attn.q_proj",
        "attn_k" => "self_attn.k_proj",
        "attn_v" => "self_attn.v_proj",
        "attn_output" => "self_attn.o_proj",
        "ffn_gate" => "mlp.gate_proj",
        "ffn_up" => "mlp.up_proj",
        "ffn_down" => "mlp.down_proj",
        _ => return None,
    };
    matches!(kind, "weight" | "bias").then(|| format!("model.layers.{layer}.{module}.{kind}"))
}

/// Undoes llama.cpp's permutation of a query or key projection's rows
/// (weight `[heads·head_dim, in]` or bias `[heads·head_dim]`): within each
/// head, rows `0, 2, 4, …` then `1, 3, 5, …` become the two halves.
pub fn unpermute(tensor: &Tensor, heads: usize) -> Result<Tensor> {
    let dims = tensor.dims().to_vec();
    let rows = dims[0];
    let rest: usize = dims[1..].iter().product();
    let half = rows / heads / 2;
    Ok(tensor
        .reshape((heads, half, 2, rest))?
        .transpose(1, 2)?
        .contiguous()?
        .reshape(dims)?)
}

/// Reads and dequantises every tensor of `content`, refusing a name it
/// cannot place and a model missing one the engine needs.
pub fn dequantize<R: std::io::Read + std::io::Seek>(
    content: &Content,
    reader: &mut R,
    model: &ModelShape,
) -> Result<Dequantized> {
    let mut names: Vec<&String> = content.tensor_infos.keys().collect();
    names.sort();
    let mut tensors = HashMap::new();
    let mut stored_as = BTreeMap::new();
    for name in names {
        let hf = hf_name(name)
            .ok_or_else(|| EngineError::Model(format!("tensor `{name}` has no place in a {:?} model", model.arch)))?;
        let quantized = content.tensor(reader, name, &Device::Cpu)?;
        *stored_as.entry(format!("{:?}", quantized.dtype())).or_insert(0) += 1;
        let mut tensor = quantized.dequantize(&Device::Cpu)?;
        if model.arch == Arch::Llama {
            if name.starts_with("blk.") && name.contains(".attn_q.") {
                tensor = unpermute(&tensor, model.heads)?;
            } else if name.starts_with("blk.") && name.contains(".attn_k.") {
                tensor = unpermute(&tensor, model.kv_heads)?;
            }
        }
        tensors.insert(hf, tensor);
    }
    if model.arch == Arch::Qwen2 && !tensors.contains_key("model.layers.0.self_attn.q_proj.bias") {
        return Err(EngineError::Model(
            "a qwen2 model without attention biases is not converted".into(),
        ));
    }
    Ok(Dequantized { tensors, stored_as })
}

/// GGML's name for a tensor type number, for errors about the ones not
/// converted.
pub fn ggml_type_name(n: u32) -> &'static str {
    match n {
        0 => "F32",
        1 => "F16",
        2 => "Q4_0",
        3 => "Q4_1",
        6 => "Q5_0",
        7 => "Q5_1",
        8 => "Q8_0",
        9 => "Q8_1",
        10 => "Q2_K",
        11 => "Q3_K",
        12 => "Q4_K",
        13 => "Q5_K",
        14 => "Q6_K",
        15 => "Q8_K",
        16 => "IQ2_XXS",
        17 => "IQ2_XS",
        18 => "IQ3_XXS",
        19 => "IQ1_S",
        20 => "IQ4_NL",
        21 => "IQ3_S",
        22 => "IQ2_S",
        23 => "IQ4_XS",
        24 => "I8",
        25 => "I16",
        26 => "I32",
        27 => "I64",
        28 => "F64",
        29 => "IQ1_M",
        30 => "BF16",
        34 => "TQ1_0",
        35 => "TQ2_0",
        39 => "MXFP4",
        _ => "unknown",
    }
}
