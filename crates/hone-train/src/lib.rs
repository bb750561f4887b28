//! hone's trainer: LoRA adapters for the engine's Llama/Qwen2 models,
//! trained with GRPO, DPO or SFT on recorded episodes and exported in the
//! PEFT format that the engine hot-swaps and Python `peft` loads.
//!
//! - [`policy`]: the training forward and a hand-written, LoRA-only backward;
//! - [`loss`]: GRPO (and its baseline mode), DPO, SFT, the KL estimator;
//! - [`optim`]: AdamW, clipping, warm-up + cosine/constant schedules;
//! - [`lora`]: the trainable parameters, PEFT save and load;
//! - [`data`]: the JSONL formats `hone train` reads;
//! - [`trainer`]: the loop — accumulation, replay, EWC, metrics;
//! - [`schedule`]: which examples each step trains on, and GRPO's
//!   advantages there, as data another trainer can follow;
//! - [`checkpoint`]: checkpoints that resume exactly;
//! - [`full`]: full-weight supervised training of small models with the
//!   policy's backward extended to every weight, for the base policies hone
//!   makes;
//! - [`parallel`]: a batch's parts (or any list's) on threads of their own.

pub mod checkpoint;
pub mod data;
pub mod full;
pub mod lora;
pub mod loss;
pub mod optim;
pub mod parallel;
pub mod policy;
pub mod schedule;
pub mod trainer;

pub use lora::{LoraParams, LoraSpec};
pub use policy::{Grads, Packed, Sequence};
pub use trainer::{Data, StepReport, TrainConfig, Trainer};

use std::path::Path;

/// Everything that can go wrong while training.
#[derive(Debug, thiserror::Error)]
pub enum TrainError {
    #[error("{path}: {source}")]
    Io { path: String, source: std::io::Error },
    #[error("{0}")]
    Data(String),
    #[error("{0}")]
    Config(String),
    #[error("checkpoint: {0}")]
    Checkpoint(String),
    #[error("stopped after step {0}, as asked")]
    Stopped(usize),
    #[error(transparent)]
    Engine(#[from] hone_engine::EngineError),
    #[error(transparent)]
    Candle(#[from] candle_core::Error),
}

impl TrainError {
    pub(crate) fn io(path: &Path, source: std::io::Error) -> Self {
        Self::Io {
            path: path.display().to_string(),
            source,
        }
    }
}

pub type Result<T, E = TrainError> = std::result::Result<T, E>;
