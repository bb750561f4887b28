//! hone-engine's integration tests, one binary:
//! - `generate`: sampling is reproducible and its logprobs equal a
//!   teacher-forced forward of the same tokens.
//! - `reference`: logits, LoRA and chat-template rendering against values
//!   that Hugging Face transformers and PEFT computed on the same tiny
//!   checkpoints (`tests/reference/make_reference.py`).

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, clippy::print_stderr)]

mod generate;
mod reference;
