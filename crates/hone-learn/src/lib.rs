//! hone's learning: turning recorded episodes into signal and proof.
//!
//! - [`reward`]: the agent's reward spec applied to an episode (signals,
//!   [`critics`], a [`judge`], penalties that are never skipped).
//! - [`dataset`]: snapshots built from traffic, exported for the trainer.
//! - [`eval`]: a version run over a dataset through the gateway (replay or
//!   the agent's endpoint), scored per instance; [`compare`]: two versions paired.
//!
//! Everything talks to models through the gateway ([`client`]), so judge and
//! evaluation calls are recorded like production ones.

pub mod client;
pub mod compare;
pub mod critics;
pub mod dataset;
pub mod episode;
pub mod eval;
pub mod judge;
pub mod reward;
pub mod stats;
