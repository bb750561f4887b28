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
    /// Training an adapter, building a datastore or saving a learned model
    /// failed: `what` was being done; `source` (the trainer's, the engine's,
    /// the artefact store's or the file system's own error) says why.
    #[error("{what}")]
    Training {
        what: String,
        #[source]
        source: BoxError,
    },
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

    /// For `map_err`: the error, kept as the source, of doing `what`.
    pub fn training<E: Into<BoxError>>(what: impl Into<String>) -> impl FnOnce(E) -> Self {
        let what = what.into();
        move |e| Self::Training { what, source: e.into() }
    }

    pub fn config(message: impl Into<String>) -> Self {
        Self::Config(message.into())
    }

    pub fn state(message: impl Into<String>) -> Self {
        Self::State(message.into())
    }

    /// Whether the report contains `needle` (for callers that report it).
    pub fn contains(&self, needle: &str) -> bool {
        self.report().contains(needle)
    }

    /// The error and its causes, outermost first, on one line: what the
    /// cycle's log and history say.
    pub fn report(&self) -> String {
        let mut text = self.to_string();
        let mut cause = std::error::Error::source(self);
        while let Some(error) = cause {
            let line = error.to_string();
            // A transparent variant's source is the error it shows.
            if !text.ends_with(&line) {
                text.push_str(": ");
                text.push_str(&line);
            }
            cause = error.source();
        }
        text
    }
}

pub type Result<T, E = LearnError> = std::result::Result<T, E>;

/// Any error kept as a cause.
pub type BoxError = Box<dyn std::error::Error + Send + Sync>;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_training_error_keeps_its_cause_as_a_typed_source_and_reports_it() {
        let io = std::io::Error::new(std::io::ErrorKind::StorageFull, "no space left on device");
        let error = Err::<(), _>(io)
            .map_err(LearnError::training("writing data.jsonl"))
            .unwrap_err();
        assert_eq!(error.to_string(), "writing data.jsonl");
        let source = std::error::Error::source(&error).expect("the cause is kept");
        let io = source
            .downcast_ref::<std::io::Error>()
            .expect("as the io::Error it was");
        assert_eq!(io.kind(), std::io::ErrorKind::StorageFull);
        assert_eq!(error.report(), "writing data.jsonl: no space left on device");
        assert!(error.contains("no space left"));
    }
}
