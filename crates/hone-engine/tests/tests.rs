//! hone-engine's integration tests, one binary:
//! - `engine`: continuous batching across requests and adapters, streaming,
//!   stop strings, `n` samples, adapters loaded and unloaded at run time.
//! - `generate`: sampling is reproducible and its logprobs equal a
//!   teacher-forced forward of the same tokens; batched decoding equals
//!   decoding each row alone, and decoding in parts on threads samples what
//!   one batch samples.
//! - `layouts`: checkpoints as the installed transformers saves them, and
//!   every forward-changing config key read or refused
//!   (`tests/reference/config_keys.py`).
//! - `memory`: kNN-LM interpolation against numpy (`tests/reference/knn_lm.py`),
//!   λ = 0 exactly the model, one remembered episode reproduced greedily,
//!   mixed batches, the datastore file and its hash.
//! - `reference`: logits, LoRA and chat-template rendering against values
//!   that Hugging Face transformers and PEFT computed on the same tiny
//!   checkpoints (`tests/reference/make_reference.py`).
//! - `tokenizer_training`: a BPE tokenizer learned from a corpus keeps the
//!   byte and special ids, round-trips and compresses.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, clippy::print_stderr)]

mod engine;
mod generate;
mod layouts;
mod memory;
mod reference;
mod tokenizer_training;
