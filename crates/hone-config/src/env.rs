//! `${VAR}` and `${VAR:-default}` references in config strings, and [`Env`],
//! what the sections need from outside the file while they convert: variable
//! values and the directory relative paths start from.

use crate::error::ConfigError;
use std::path::{Component, Path, PathBuf};

/// What loading needs from outside the config text.
pub(crate) struct Env<'a> {
    /// The config file's directory (anchors `system_file` paths).
    pub(crate) base_dir: &'a Path,
    /// Resolves `${VAR}` references.
    pub(crate) lookup: &'a dyn Fn(&str) -> Option<String>,
}

impl Env<'_> {
    /// `value` with its `${VAR}` references expanded; a failure is blamed on `field`.
    pub(crate) fn expand(&self, field: &str, value: &str) -> Result<String, ConfigError> {
        expand_env(value, self.lookup).map_err(|m| ConfigError::at(field, m))
    }

    /// A path-valued key: expanded, and when relative, started from the
    /// config file's directory (the built-in config's is the working
    /// directory), so one config names the same files wherever hone runs.
    pub(crate) fn path(&self, field: &str, value: &str) -> Result<PathBuf, ConfigError> {
        let expanded = PathBuf::from(self.expand(field, value)?);
        if expanded.is_absolute() {
            return Ok(expanded);
        }
        let mut anchored = self.base_dir.to_path_buf();
        anchored.extend(expanded.components().filter(|c| *c != Component::CurDir));
        Ok(if anchored.as_os_str().is_empty() {
            PathBuf::from(".")
        } else {
            anchored
        })
    }
}

/// Whether `s` can be the name of an environment variable (and so is not,
/// say, a secret pasted where its variable's name belongs).
pub(crate) fn is_env_name(s: &str) -> bool {
    !s.is_empty()
        && s.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
        && !s.starts_with(|c: char| c.is_ascii_digit())
}

/// Replaces every `${VAR}` / `${VAR:-default}` in `raw` using `lookup`.
/// `$$` stands for a literal `$`. Errors say which variable is missing.
pub fn expand_env(raw: &str, lookup: &dyn Fn(&str) -> Option<String>) -> Result<String, String> {
    if !raw.contains('$') {
        return Ok(raw.to_owned());
    }
    let mut out = String::with_capacity(raw.len());
    let mut rest = raw;
    while let Some(pos) = rest.find('$') {
        out.push_str(&rest[..pos]);
        let after = &rest[pos + 1..];
        if let Some(tail) = after.strip_prefix('$') {
            out.push('$');
            rest = tail;
        } else if let Some(body) = after.strip_prefix('{') {
            let end = body
                .find('}')
                .ok_or_else(|| format!("`${{` without a closing `}}` in `{raw}`"))?;
            let inner = &body[..end];
            let (name, default) = match inner.split_once(":-") {
                Some((name, default)) => (name, Some(default)),
                None => (inner, None),
            };
            if name.is_empty() || !name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') {
                return Err(format!("`${{{inner}}}` is not a valid environment variable reference"));
            }
            match (lookup(name).filter(|v| !v.is_empty()), default) {
                (Some(value), _) => out.push_str(&value),
                (None, Some(default)) => out.push_str(default),
                (None, None) => {
                    return Err(format!(
                        "environment variable `{name}` is not set (write `${{{name}:-default}}` to give a default)"
                    ))
                }
            }
            rest = &body[end + 1..];
        } else {
            out.push('$');
            rest = after;
        }
    }
    out.push_str(rest);
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lookup(name: &str) -> Option<String> {
        (name == "HOST").then(|| "example.org".to_owned())
    }

    #[test]
    fn expands_variables_defaults_and_escapes() {
        assert_eq!(
            expand_env("http://${HOST}/v1", &lookup).unwrap(),
            "http://example.org/v1"
        );
        assert_eq!(expand_env("${PORT:-8080}", &lookup).unwrap(), "8080");
        assert_eq!(expand_env("$$5 and $x", &lookup).unwrap(), "$5 and $x");
        assert!(expand_env("${PORT}", &lookup)
            .unwrap_err()
            .contains("`PORT` is not set"));
        assert!(expand_env("${HOST", &lookup).is_err());
        assert!(expand_env("${BAD NAME}", &lookup).is_err());
    }
}
