//! What fetching or publishing an artefact can fail with.

#[derive(Debug, thiserror::Error)]
pub enum ArtefactError {
    /// Nothing is published at the address (or no shared store is configured).
    #[error("{0}")]
    NotFound(String),
    /// The address already holds different content: published artefacts
    /// are immutable, a name always means the same bytes.
    #[error("{0}")]
    Conflict(String),
    /// What arrived is not what the manifest promised (size or SHA-256).
    #[error("{0}")]
    Corrupt(String),
    /// A bad address, an unreachable store, a full disk.
    #[error("{0}")]
    Failed(String),
}

pub type Result<T, E = ArtefactError> = std::result::Result<T, E>;

/// `e` as a failure, said with what was being done.
pub(crate) fn failed(doing: impl std::fmt::Display, e: impl std::fmt::Display) -> ArtefactError {
    ArtefactError::Failed(format!("{doing}: {e}"))
}
