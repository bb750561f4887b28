//! hone's learning: turning recorded episodes into signal and proof.
//!
//! - [`reward`]: the agent's reward spec applied to an episode (signals,
//!   [`critics`], a [`judge`], penalties that are never skipped);
//!   [`reward_model`]: what the spec would say of an answer no user saw,
//!   learned from the answers users did see.
//! - [`dataset`]: snapshots built from traffic, exported for the trainer.
//! - [`eval`]: a version run over a dataset through the gateway (replay or
//!   the agent's endpoint), scored per instance; [`compare`]: two versions paired.
//!
//! - [`cycle`]: the learning cycle, a persisted state machine per agent:
//!   [`optimiser`]s propose candidates, the [`gate`] proves them, the
//!   [`front`] keeps the Pareto-optimal ones, [`deploy`] ships one as a
//!   canary; [`watch`] runs the online [`monitor`]s, promotes or rolls back;
//!   [`drift`] notices when traffic moves away from what was learned on.
//!
//! - [`reflect`]: what the reflective optimisers (`prompt`, `playbook`,
//!   `tools`) share — the reflection model, its evidence and budgets, the
//!   Pareto pool of prompts, the playbook's curator.
//!
//! Everything talks to models through the gateway ([`client`], [`ask`]), so
//! judge, reflection and evaluation calls are recorded like production ones.

pub mod ask;
pub mod client;
pub mod compare;
pub mod critics;
pub mod cycle;
pub mod dataset;
pub mod deploy;
pub mod drift;
pub mod episode;
pub mod error;
pub mod eval;
pub mod front;
pub mod gate;
pub mod judge;
pub mod memory;
pub mod monitor;
pub mod optimiser;
pub mod reward;
pub mod reward_model;
pub mod stats;
pub use cycle::{schedule, watch};
pub use error::LearnError;
