//! What can go wrong while learning, by kind: the caller (the cycle, the
//! CLI, a test) can tell a store outage from a refused model call, a failed
//! training run, a config that lacks something, or stored state an earlier
//! step should have written. Messages are the ones users read; the kind is
//! for code.

use hone_store::StoreError;

#[derive(Debug, thiserror::Error)]
pub enum LearnError {
    /// The store could not be read or written.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// A model call through the gateway (or the gateway's admin API) failed.
    #[error("{0}")]
    Gateway(String),
    /// Training an adapter failed (data, tokenizer, weights, the trainer).
    #[error("{0}")]
    Training(String),
    /// The config lacks or misstates something learning needs.
    #[error("{0}")]
    Config(String),
    /// Stored state is not what this step expects (a missing dataset, a
    /// cycle detail an earlier step should have written).
    #[error("{0}")]
    State(String),
    /// A background task of the learner panicked or was cancelled.
    #[error("a learning task stopped: {0}")]
    Task(#[from] tokio::task::JoinError),
}

impl LearnError {
    pub fn gateway(message: impl Into<String>) -> Self {
        Self::Gateway(message.into())
    }

    pub fn training(message: impl Into<String>) -> Self {
        Self::Training(message.into())
    }

    pub fn config(message: impl Into<String>) -> Self {
        Self::Config(message.into())
    }

    pub fn state(message: impl Into<String>) -> Self {
        Self::State(message.into())
    }

    /// Whether the message contains `needle` (for callers that report it).
    pub fn contains(&self, needle: &str) -> bool {
        self.to_string().contains(needle)
    }
}

pub type Result<T, E = LearnError> = std::result::Result<T, E>;
