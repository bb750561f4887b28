//! hone's learning: turning recorded episodes into signal and proof. Its
//! modules are grouped by role, each group using only those above it:
//!
//! - base: [`client`] and [`ask`] (every model call goes through the
//!   gateway, so judge, reflection and evaluation calls are recorded like
//!   production ones), [`episode`] (reading an episode), [`stats`], [`error`];
//! - [`scoring`]: what an answer is worth — the reward spec, critics, the
//!   judge, and the reward model for answers no user saw;
//! - [`data`]: what was seen — datasets built from traffic, the kNN-LM
//!   datastore, drift of traffic away from what was learned on;
//! - [`release`]: shipping a version — deployments, canaries, the online
//!   monitors;
//! - [`search`]: finding a better version — the optimisers propose
//!   candidates, [`search::eval`] runs them, [`search::compare`] pairs them,
//!   the [`search::gate`] proves them and the [`search::front`] keeps the
//!   Pareto-optimal ones; [`search::flipped`] mines the cases they disagree on;
//! - [`cycle`]: the learning cycle, a persisted state machine per agent that
//!   runs all of the above; [`watch`] promotes or rolls back a canary, and
//!   [`schedule`] decides when a cycle is due.

pub mod ask;
pub mod client;
pub mod cycle;
pub mod data;
pub mod episode;
pub mod error;
pub mod release;
pub mod scoring;
pub mod search;
pub mod stats;
pub use cycle::{schedule, watch};
pub use error::LearnError;
