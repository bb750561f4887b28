//! The Hugging Face names of a checkpoint's tensors: the one place that
//! spells them, for loading, initialising, adapters and training.

use crate::lora::Module;

pub const EMBEDDING: &str = "model.embed_tokens.weight";
pub const FINAL_NORM: &str = "model.norm.weight";
pub const LM_HEAD: &str = "lm_head.weight";

/// Layer `n`'s projection `module`, without its `.weight` / `.bias`:
/// `model.layers.3.mlp.up_proj`.
pub fn projection(n: usize, module: Module) -> String {
    format!("model.layers.{n}.{}.{}", module.block(), module.name())
}

/// Layer `n`'s RMSNorm before attention.
pub fn input_norm(n: usize) -> String {
    format!("model.layers.{n}.input_layernorm.weight")
}

/// Layer `n`'s RMSNorm before the MLP.
pub fn post_norm(n: usize) -> String {
    format!("model.layers.{n}.post_attention_layernorm.weight")
}
