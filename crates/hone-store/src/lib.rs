//! hone's storage: the [`Store`] trait (one implementation per backend, one
//! file each), schema migrations, and the durable journal-first [`Recorder`]
//! that stands between the gateway and the store; [`LearnStore`] holds what
//! learning derives from episodes (rewards, datasets, evaluations) and
//! [`CycleStore`] what the learning cycle decides (cycles, candidates,
//! deployments, alerts, history).
//!
//! Stores persist what they are given; ids and timestamps are made by the
//! services above them.

pub mod copy;
mod cycle_store;
mod error;
pub mod files;
pub mod journal;
mod learn_store;
mod open;
mod postgres;
mod recorder;
mod rows;
mod sqlite;
mod store;

pub use cycle_store::{CandidateUpdate, CycleStore, Lead, Step, Success, WindowEpisode};
pub use error::StoreError;
pub use learn_store::{EpisodeFacts, EpisodeFilter, LearnStore};
pub use open::{open, open_beside, Wait};
pub use postgres::local::{execute_at, server_binaries, LocalPostgres, LocalPostgresError};
pub use postgres::{PostgresStore, DEFAULT_POOL as POSTGRES_POOL};
pub use recorder::{JournalState, Recorder, RecorderError, RecorderOptions, RecorderStats};
pub use rows::content_hash;
pub use sqlite::SqliteStore;
pub use store::Store;
