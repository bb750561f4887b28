//! Shipping a version: [`deploy`] changes an agent's deployment (champion,
//! canaries, rollback) through the gateway; [`monitor`]s compare a canary
//! with its champion online.

pub mod deploy;
pub mod monitor;
