//! hone's embedded engine: Llama and Qwen2 checkpoints in the Hugging Face
//! layout, run with candle, with LoRA adapters in the PEFT format.
//!
//! - [`config`]: `config.json` → [`ModelConfig`];
//! - [`weights`]: `*.safetensors` (single file or sharded with an index);
//! - [`model`]: the transformer forward, written with plain candle ops so
//!   the trainer's tests can differentiate through it (fused only where no
//!   gradient flows);
//! - [`generate`]: sampling with per-token logprobs, `n` samples per prompt;
//! - [`engine`]: the running engine — continuous batching, streaming,
//!   stop strings, resident adapters loaded and unloaded at run time;
//! - [`prefix_cache`]: prompt keys and values kept for later prompts that
//!   start the same way;
//! - [`swiglu`]: the MLP's activation and its gradient, one vectorised
//!   pass on the CPU; [`gemv`]: the few-row products of decoding;
//!   [`cpu_f32`]: the f32 elements both borrow from candle's storage;
//! - [`lora`]: PEFT adapters and the LoRA term of every projection;
//! - [`memory`]: kNN-LM — a datastore of (hidden state → next token) pairs
//!   and the next-token distribution interpolated with it;
//! - [`tokenizer`]: `tokenizer.json` and the chat template
//!   (`chat_template.jinja`, or in `tokenizer_config.json`), rendered with minijinja;
//! - [`device`]: `cpu` / `cuda` → a candle device;
//! - [`init`]: `hone model init`, tiny random checkpoints in the same layout;
//! - [`gguf`]: `hone model import`, a GGUF file turned into that layout;
//! - [`threads`]: the CPU thread count, fixed once per process.

pub mod config;
pub mod cpu_f32;
pub mod device;
pub mod engine;
pub mod gemv;
pub mod generate;
pub mod gguf;
pub mod init;
pub mod lora;
pub mod memory;
pub mod model;
pub mod names;
pub mod prefix_cache;
pub mod swiglu;
pub mod threads;
pub mod tokenizer;
pub mod weights;

pub use config::{Arch, ModelConfig, RopeScaling};
pub use engine::{AdapterInfo, Engine, EngineOptions, Event, Request};
pub use generate::{generate, generate_n, Finish, Generation, Sampling, Sequence};
pub use lora::{Adapter, LoraConfig};
pub use memory::{Datastore, KnnLm, Neighbour, EXACT_LIMIT};
pub use model::{KvCache, Model};
pub use prefix_cache::{PrefixCache, PrefixStats};
pub use tokenizer::{ChatTemplate, Tokenizer};

use std::path::Path;

/// Everything that can go wrong loading or running a model.
#[derive(Debug, thiserror::Error)]
pub enum EngineError {
    #[error("{path}: {source}")]
    Io { path: String, source: std::io::Error },
    #[error("model: {0}")]
    Model(String),
    #[error("tokenizer: {0}")]
    Tokenizer(String),
    #[error("chat template: {0}")]
    Template(String),
    #[error("adapter: {0}")]
    Adapter(String),
    #[error("device: {0}")]
    Device(String),
    #[error(transparent)]
    Candle(#[from] candle_core::Error),
}

impl EngineError {
    pub(crate) fn io(path: &Path, source: std::io::Error) -> Self {
        Self::Io {
            path: path.display().to_string(),
            source,
        }
    }
}

pub type Result<T, E = EngineError> = std::result::Result<T, E>;
