//! The store's error type.

/// What a store operation can fail with.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// The database cannot be reached or written right now (locked, full,
    /// gone); the recorder spools and retries on this.
    #[error("database unavailable: {0}")]
    Unavailable(String),
    /// A referenced episode or call does not exist.
    #[error("{0}")]
    NotFound(String),
    /// Stored data that cannot be read back (a bug or a foreign writer).
    #[error("corrupt stored data: {0}")]
    Corrupt(String),
    #[error("cannot open the database at {path}: {message}")]
    Open { path: String, message: String },
}

impl From<rusqlite::Error> for StoreError {
    fn from(e: rusqlite::Error) -> Self {
        StoreError::Unavailable(e.to_string())
    }
}

impl From<serde_json::Error> for StoreError {
    fn from(e: serde_json::Error) -> Self {
        StoreError::Corrupt(e.to_string())
    }
}
