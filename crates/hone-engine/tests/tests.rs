//! hone-engine's integration tests, one binary:
//! - `reference`: logits, LoRA and chat-template rendering against values
//!   that Hugging Face transformers and PEFT computed on the same tiny
//!   checkpoints (`tests/reference/make_reference.py`).

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, clippy::print_stderr)]

mod reference;
