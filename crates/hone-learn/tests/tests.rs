//! hone-learn's integration tests, one binary, on real parts: a real
//! gateway on loopback recording into a real SQLite file, in front of a fake
//! OpenAI-compatible upstream (the only fake: a hosted model) that speaks the
//! chat-completions wire format.
//! - `critics`: every critic on episodes recorded through the gateway.
//! - `judge`: absolute and relative (RULER) modes, malformed and partial JSON.
//! - `rewards`: penalties never skipped, spec versions, recompute.
//! - `datasets`: builders deterministic by seed, snapshots immutable, export/import.
//! - `eval`: replay and the agent-endpoint protocol; `compare` finds a seeded regression.
//! - `cycle`: the learning cycle's stories: gate, front, deploy, promote, roll back.
//! - `reflect`: the prompt, playbook and tools optimisers and their budgets.
//! - `stats`: the monitors' and gate's tests against scipy on fixed samples.
//! - `online`: simulated canaries: the false-promotion rate of the online
//!   test at every stopping time, across base rates and reward shapes.
//! - `reward_model`: the reward model's head and quality measures against an
//!   independent implementation, and the model trained in a cycle on the
//!   embedded engine's recorded tokens.
//! - `modules`: the crate's top-level modules import one another without a cycle.
//! - `rl`: `grpo` in a cycle on the embedded engine: exact tokens and sampler logprobs reach the trainer.
//! - `trl`: `sft`, `dpo` and `grpo` adapters trained by TRL from the same tokens, served by the engine.
//! - `fine_tune`: `openai-sft` against a fake of OpenAI's fine-tuning API: upload
//!   rules, budget, the job followed, resumed and cancelled, its model gated.
//! - `vllm`: a provider declared `engine = "vllm"` records exact tokens and
//!   logprobs; `grpo` trains a vLLM-served agent and vLLM loads the adapter.

// Test servers and load run detached for the life of a test; the test ends them.
#![allow(clippy::disallowed_methods)]
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::print_stdout,
    clippy::print_stderr
)]

mod critics;
mod cycle;
mod datasets;
mod eval;
mod fine_tune;
mod judge;
mod modules;
mod online;
mod reflect;
mod reward_model;
mod rewards;
mod rl;
mod stats;
mod support;
mod trl;
mod vllm;
