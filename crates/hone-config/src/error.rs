//! [`ConfigError`], the one error every section reports, naming the key at
//! fault (`agents.assistant.versions.v1.provider`), and the naming rule the
//! sections share for the keys they let users choose.

/// A config that cannot be used, and where.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error(
    "{}{}{message}",
    file.as_ref().map(|f| format!("{f}: ")).unwrap_or_default(),
    field.as_ref().map(|f| format!("`{f}`: ")).unwrap_or_default()
)]
pub struct ConfigError {
    /// The config file, when the config came from one.
    pub file: Option<String>,
    /// Dotted key path of the bad field, when one is to blame.
    pub field: Option<String>,
    pub message: String,
}

impl ConfigError {
    /// An error blamed on one key.
    pub fn at(field: impl Into<String>, message: impl Into<String>) -> Self {
        ConfigError {
            file: None,
            field: Some(field.into()),
            message: message.into(),
        }
    }
}

/// Whether `s` may name a provider, agent, version, adapter or metric:
/// letters, digits and `-_.`, at most 64 of them. Each section says in its
/// own words which name broke the rule.
pub(crate) fn is_name(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 64
        && s.chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
}

/// Whether `s` may name an adapter: a name that is also one safe path
/// segment (an adapter is the directory `<adapters_dir>/<name>`, and the
/// object-store prefix `adapters/<name>/`).
pub fn is_adapter_name(s: &str) -> bool {
    is_name(s) && !s.starts_with('.')
}
