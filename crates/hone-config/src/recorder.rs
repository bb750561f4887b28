//! The `[recorder]` table: how recorded calls are batched into the store.
//!
//! ```toml
//! [recorder]
//! max_batch = 512
//! store_retry_ms = 1000   # also accepted as `spool_retry_ms`
//! ```

use crate::error::ConfigError;
use serde::Deserialize;
use std::time::Duration;

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawRecorder {
    pub max_batch: Option<usize>,
    #[serde(alias = "spool_retry_ms")]
    pub store_retry_ms: Option<u64>,
}

#[derive(Debug, Clone)]
pub struct RecorderConfig {
    /// Most calls written in one transaction.
    pub max_batch: usize,
    /// How often an unavailable database is retried (calls wait in the journal).
    pub store_retry: Duration,
}

impl RecorderConfig {
    /// Validates `[recorder]`.
    pub(crate) fn from_raw(raw: RawRecorder) -> Result<Self, ConfigError> {
        Ok(RecorderConfig {
            max_batch: match raw.max_batch {
                Some(0) => return Err(ConfigError::at("recorder.max_batch", "must be at least 1")),
                Some(n) => n,
                None => 512,
            },
            store_retry: Duration::from_millis(raw.store_retry_ms.unwrap_or(1000)),
        })
    }
}
