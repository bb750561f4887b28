//! hone-train's integration tests, one binary:
//! - `reference`: losses and LoRA gradients against PyTorch autograd through
//!   transformers + PEFT (`tests/reference/make_train_reference.py`);
//! - `trainer`: every LoRA tensor gets a gradient, exact resume, PEFT export
//!   round trip, replay and EWC;
//! - `learning`: GRPO raises a tiny model's reward on a verifiable task;
//! - `data`: the JSONL formats and their errors.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, clippy::print_stdout)]

mod reference;
mod support;
