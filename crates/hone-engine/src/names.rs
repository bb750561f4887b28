//! The Hugging Face names of a checkpoint's tensors: the one place that
//! spells them, for loading, initialising, adapters and training.

use crate::lora::Module;

pub const EMBEDDING: &str = "model.embed_tokens.weight";
pub const FINAL_NORM: &str = "model.norm.weight";
pub const LM_HEAD: &str = "lm_head.weight";
/// What every layer's tensors start with, before the layer's index.
pub const LAYER_PREFIX: &str = "model.layers.";

/// What PEFT puts before a projection's name in an adapter's tensors.
pub const PEFT_PREFIX: &str = "base_model.model.";

/// Whether `name` is a rotary table some checkpoints store (`…rotary_emb.inv_freq`):
/// computed from the config instead, never a weight.
pub fn is_rotary_table(name: &str) -> bool {
    name.contains("rotary_emb")
}

/// Layer `n`'s projection `module`, without its `.weight` / `.bias`:
/// `model.layers.3.mlp.up_proj`.
pub fn projection(n: usize, module: Module) -> String {
    format!("{LAYER_PREFIX}{n}.{}.{}", module.block(), module.name())
}

/// Layer `n`'s RMSNorm before attention.
pub fn input_norm(n: usize) -> String {
    format!("{LAYER_PREFIX}{n}.input_layernorm.weight")
}

/// Layer `n`'s RMSNorm before the MLP.
pub fn post_norm(n: usize) -> String {
    format!("{LAYER_PREFIX}{n}.post_attention_layernorm.weight")
}
