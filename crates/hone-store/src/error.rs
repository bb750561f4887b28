//! The store's error type.

/// What a store operation can fail with.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// The database cannot be reached or written right now (locked, full,
    /// gone); the recorder spools and retries on this.
    #[error("database unavailable: {0}")]
    Unavailable(String),
    /// The database refuses this data for what it holds (a value too large
    /// for it, a character it cannot store): trying again cannot help. The
    /// recorder sets such a call aside instead of retrying it.
    #[error("the database refuses the data: {0}")]
    Refused(String),
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
        match &e {
            // A value over the database's length limit, or a constraint
            // (a CHECK, a trigger) the row breaks: about the data, for good.
            rusqlite::Error::SqliteFailure(code, _)
                if matches!(
                    code.code,
                    rusqlite::ErrorCode::TooBig | rusqlite::ErrorCode::ConstraintViolation
                ) =>
            {
                StoreError::Refused(e.to_string())
            }
            _ => StoreError::Unavailable(e.to_string()),
        }
    }
}

impl From<serde_json::Error> for StoreError {
    fn from(e: serde_json::Error) -> Self {
        StoreError::Corrupt(e.to_string())
    }
}
