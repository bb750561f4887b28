//! The `[metrics.NAME]` tables: the feedback signals clients may report.
//!
//! ```toml
//! [metrics.resolved]
//! type = "boolean"     # boolean | float | text | demonstration
//! level = "episode"    # call | episode
//! ```

use crate::error::{is_name, ConfigError};
use hone_types::{MetricLevel, MetricType};
use serde::Deserialize;
use std::collections::BTreeMap;

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawMetric {
    #[serde(rename = "type")]
    pub kind: MetricType,
    pub level: MetricLevel,
    pub description: Option<String>,
}

#[derive(Debug, Clone)]
pub struct MetricConfig {
    pub name: String,
    pub kind: MetricType,
    pub level: MetricLevel,
    pub description: Option<String>,
}

/// Validates every `[metrics.NAME]`.
pub(crate) fn from_raw(raw: BTreeMap<String, RawMetric>) -> Result<BTreeMap<String, MetricConfig>, ConfigError> {
    raw.into_iter()
        .map(|(name, m)| {
            if !is_name(&name) {
                return Err(ConfigError::at(
                    format!("metrics.{name}"),
                    "metric names use letters, digits and `-_.`",
                ));
            }
            Ok((
                name.clone(),
                MetricConfig {
                    name,
                    kind: m.kind,
                    level: m.level,
                    description: m.description,
                },
            ))
        })
        .collect()
}
