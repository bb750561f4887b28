//! The `[artefacts]` table: where trained adapters are published so every
//! gateway replica (and a vLLM beside one) can fetch the adapter a version
//! names, and where checkpoints a route names by URL are cached.
//!
//! ```toml
//! [artefacts]
//! url = "s3://my-bucket/hone"    # or "file:///mnt/shared/hone"; default: none
//! endpoint = "${S3_ENDPOINT}"    # an S3-compatible server (MinIO, R2, Ceph)
//! region = "eu-west-1"
//! allow_http = false             # true for a plain-http endpoint
//! ```
//!
//! Without `url`, adapters stay in each local provider's `adapters_dir`
//! (a local directory: one machine, or a shared mount). Credentials come
//! from the standard `AWS_*` environment variables (`AWS_ACCESS_KEY_ID`,
//! `AWS_SECRET_ACCESS_KEY`, `AWS_SESSION_TOKEN`; `AWS_ENDPOINT`,
//! `AWS_REGION` and `AWS_ALLOW_HTTP` too, which the keys above override),
//! or from `access_key_id = "${MY_KEY_ID}"` and `secret_access_key =
//! "${MY_SECRET}"` here (write references, not the secrets; they are never
//! printed).

use crate::env::Env;
use crate::error::ConfigError;
use serde::Deserialize;
use std::path::{Path, PathBuf};

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawArtefacts {
    pub url: Option<String>,
    pub endpoint: Option<String>,
    pub region: Option<String>,
    pub allow_http: Option<bool>,
    pub access_key_id: Option<String>,
    pub secret_access_key: Option<String>,
}

/// The URL schemes artefacts may be addressed by.
pub const ARTEFACT_SCHEMES: [&str; 2] = ["file://", "s3://"];

#[derive(Clone, PartialEq, Eq)]
pub struct ArtefactsConfig {
    /// The shared store adapters are published to, without a trailing
    /// slash; `None`: adapters stay in the providers' `adapters_dir`.
    pub url: Option<String>,
    /// S3 settings for `s3://` URLs (the shared store's and any a route
    /// names); unset ones come from the `AWS_*` environment.
    pub endpoint: Option<String>,
    pub region: Option<String>,
    pub allow_http: Option<bool>,
    pub access_key_id: Option<String>,
    pub secret_access_key: Option<String>,
    /// Where checkpoints and adapters named by URL are fetched to:
    /// `<data_dir>/models`.
    pub cache_dir: PathBuf,
    /// Where kNN-LM datastores are kept, by content hash:
    /// `<data_dir>/memory/<hash>.safetensors`.
    pub memory_dir: PathBuf,
}

impl std::fmt::Debug for ArtefactsConfig {
    // The keys are secrets: never print them.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let hidden = |k: &Option<String>| k.as_ref().map(|_| "<redacted>");
        f.debug_struct("ArtefactsConfig")
            .field("url", &self.url)
            .field("endpoint", &self.endpoint)
            .field("region", &self.region)
            .field("allow_http", &self.allow_http)
            .field("access_key_id", &hidden(&self.access_key_id))
            .field("secret_access_key", &hidden(&self.secret_access_key))
            .field("cache_dir", &self.cache_dir)
            .field("memory_dir", &self.memory_dir)
            .finish()
    }
}

impl ArtefactsConfig {
    pub(crate) fn from_raw(raw: RawArtefacts, data_dir: &Path, env: &Env) -> Result<Self, ConfigError> {
        let url = match raw.url {
            None => None,
            Some(u) => {
                let url = env.expand("artefacts.url", &u)?;
                check_url("artefacts.url", &url)?;
                Some(url.trim_end_matches('/').to_owned())
            }
        };
        let endpoint = raw.endpoint.map(|e| env.expand("artefacts.endpoint", &e)).transpose()?;
        if let Some(e) = &endpoint {
            if !(e.starts_with("http://") || e.starts_with("https://")) {
                return Err(ConfigError::at(
                    "artefacts.endpoint",
                    "an S3 endpoint is an http:// or https:// URL (e.g. http://127.0.0.1:9000)",
                ));
            }
        }
        Ok(ArtefactsConfig {
            url,
            endpoint,
            region: raw.region.map(|r| env.expand("artefacts.region", &r)).transpose()?,
            allow_http: raw.allow_http,
            access_key_id: raw
                .access_key_id
                .map(|k| env.expand("artefacts.access_key_id", &k))
                .transpose()?,
            secret_access_key: raw
                .secret_access_key
                .map(|k| env.expand("artefacts.secret_access_key", &k))
                .transpose()?,
            cache_dir: default_cache_dir(data_dir),
            memory_dir: default_memory_dir(data_dir),
        })
    }
}

/// Whether `s` addresses an artefact by URL rather than naming a local
/// directory or a published adapter.
pub fn is_artefact_url(s: &str) -> bool {
    ARTEFACT_SCHEMES.iter().any(|scheme| s.starts_with(scheme))
}

/// Checks that `url` is one artefacts may be addressed by.
pub fn check_url(field: &str, url: &str) -> Result<(), ConfigError> {
    let rest = ARTEFACT_SCHEMES.iter().find_map(|scheme| url.strip_prefix(scheme));
    match rest {
        Some(r) if url.starts_with("file://") && !r.starts_with('/') => Err(ConfigError::at(
            field,
            format!("`{url}`: a file:// URL takes an absolute path (file:///srv/hone)"),
        )),
        Some(r) if r.trim_matches('/').is_empty() || (url.starts_with("s3://") && r.starts_with('/')) => {
            Err(ConfigError::at(field, format!("`{url}` names no bucket or directory")))
        }
        Some(_) => Ok(()),
        None => Err(ConfigError::at(
            field,
            format!("`{url}` is not an artefact URL: use s3://bucket/prefix or file:///absolute/path"),
        )),
    }
}

pub(crate) fn default_cache_dir(data_dir: &Path) -> PathBuf {
    data_dir.join("models")
}

pub(crate) fn default_memory_dir(data_dir: &Path) -> PathBuf {
    data_dir.join("memory")
}
