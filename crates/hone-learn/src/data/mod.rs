//! What was seen: [`dataset`] snapshots built from traffic (and exported
//! for trainers), the kNN-LM datastore built from successful episodes
//! ([`memory`]), and [`drift`], which notices traffic moving away from what
//! was learned on.

pub mod dataset;
pub mod drift;
pub mod memory;
