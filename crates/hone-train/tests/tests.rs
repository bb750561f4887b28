//! hone-train's integration tests, one binary:
//! - `reference`: losses and LoRA gradients against PyTorch autograd through
//!   transformers + PEFT (`tests/reference/make_train_reference.py`);
//! - `trainer`: every LoRA tensor gets a gradient, the dropout path against
//!   finite differences, exact resume, PEFT export read back by the engine,
//!   replay and EWC, the baseline mode;
//! - `learning`: GRPO raises a tiny model's reward on a verifiable task;
//! - `data`: the JSONL formats and their errors;
//! - `full`: full-weight training (the written gradients against candle's
//!   autograd and finite differences; a random tiny model learns to copy on
//!   held-out prompts).

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, clippy::print_stdout)]

mod data;
mod full;
mod learning;
mod reference;
mod support;
mod trainer;
