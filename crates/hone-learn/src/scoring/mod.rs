//! What an answer is worth: [`reward`] applies an agent's reward spec to an
//! episode (signals, [`critics`], a [`judge`], penalties that are never
//! skipped); [`reward_model`] says what the spec would say of an answer no
//! user saw, learned from the answers users did see; [`settled`] says when
//! a reward counts online.

pub mod critics;
pub mod judge;
pub mod reward;
pub mod reward_model;
pub mod settled;
