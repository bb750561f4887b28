//! Where an artefact URL points: an object store client and the key prefix
//! inside it. `file:///dir` is a directory (a shared mount will do);
//! `s3://bucket/prefix` is S3 or any S3-compatible server, configured from
//! `[artefacts]` and the `AWS_*` environment.

use crate::error::{failed, ArtefactError, Result};
use hone_config::ArtefactsConfig;
use object_store::aws::AmazonS3Builder;
use object_store::local::LocalFileSystem;
use object_store::path::Path as Key;
use object_store::{ObjectStore, RetryConfig};
use std::sync::Arc;
use std::time::Duration;

/// How long one request to the object store is retried before it fails:
/// long enough to ride out a restart, short enough that a request waiting
/// on a fetch gets a clear error.
const RETRY_FOR: Duration = Duration::from_secs(30);

#[derive(Clone)]
pub struct Place {
    pub store: Arc<dyn ObjectStore>,
    pub prefix: Key,
    /// The URL, for messages.
    pub url: String,
}

impl std::fmt::Debug for Place {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Place").field("url", &self.url).finish()
    }
}

impl Place {
    /// The client for `url`; no request is made. A `file://` directory is
    /// created when `create` is set (publishing), else it must exist.
    pub fn open(url: &str, config: &ArtefactsConfig, create: bool) -> Result<Place> {
        hone_config::check_artefact_url("url", url).map_err(|e| ArtefactError::Failed(e.message))?;
        let url = url.trim_end_matches('/');
        if let Some(path) = url.strip_prefix("file://") {
            if create {
                std::fs::create_dir_all(path).map_err(|e| failed(format!("cannot create {path}"), e))?;
            }
            let store = LocalFileSystem::new_with_prefix(path).map_err(|e| failed(url, e))?;
            return Ok(Place {
                store: Arc::new(store),
                prefix: Key::default(),
                url: url.to_owned(),
            });
        }
        let rest = url.strip_prefix("s3://").unwrap_or(url);
        let (bucket, prefix) = rest.split_once('/').unwrap_or((rest, ""));
        let mut builder = AmazonS3Builder::from_env()
            .with_bucket_name(bucket)
            .with_retry(RetryConfig {
                retry_timeout: RETRY_FOR,
                ..RetryConfig::default()
            });
        if let Some(endpoint) = &config.endpoint {
            builder = builder.with_endpoint(endpoint);
        }
        if let Some(region) = &config.region {
            builder = builder.with_region(region);
        }
        if let Some(key) = &config.access_key_id {
            builder = builder.with_access_key_id(key);
        }
        if let Some(secret) = &config.secret_access_key {
            builder = builder.with_secret_access_key(secret);
        }
        if let Some(allow) = config.allow_http {
            builder = builder.with_allow_http(allow);
        }
        let store = builder.build().map_err(|e| failed(url, e))?;
        Ok(Place {
            store: Arc::new(store),
            prefix: Key::parse(prefix).map_err(|e| failed(url, e))?,
            url: url.to_owned(),
        })
    }

    /// The place `relative` (`/`-separated) below this one.
    pub fn child(&self, relative: &str) -> Place {
        Place {
            store: self.store.clone(),
            prefix: self.key(relative),
            url: format!("{}/{relative}", self.url),
        }
    }

    /// The key of `relative` below the prefix.
    pub fn key(&self, relative: &str) -> Key {
        relative
            .split('/')
            .filter(|s| !s.is_empty())
            .fold(self.prefix.clone(), |key, part| key.join(part))
    }
}
